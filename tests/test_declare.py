"""Each route declared once (web/declare.py): one declaration is served, gated and documented.

A platform adds its routes through its `install()` the same way; the CLI's reading commands are
written once over `MemoryApi`, which the in-process service and the HTTP client both implement.
"""

from __future__ import annotations

import inspect
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from conftest import TOKEN, Service, assert_error

from agent_memory.cli.api import LocalApi, MemoryApi
from agent_memory.client import AsyncMemoryClient
from agent_memory.web import answers as a
from agent_memory.web.app import create_app
from agent_memory.web.declare import Route, add_routes
from agent_memory.web.http import json_response


async def probe(request: web.Request) -> web.Response:
    """A route a new platform might add."""
    return json_response(a.FactDeleted(deleted=int(request.match_info["n"])))


async def test_a_route_declared_once_is_served_gated_and_documented(make_settings: Any) -> None:
    settings = make_settings()
    app = create_app(settings)
    number = ({"type": "integer", "minimum": 0}, "a number", 7)
    declared = Route(
        "GET",
        "/v1/probe/{n:[0-9]+}",
        "A probe",
        "probe",
        a.FactDeleted,
        scope="write",
        handler=probe,
        path_params={"n": number},
    )
    add_routes(app, [declared])  # what a platform's install() does
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            service = Service(server, session, settings)
            status, answer = await service.api("GET", "/v1/probe/7")
            assert (status, answer) == (200, {"deleted": 7})
            status, made = await service.api("POST", "/v1/keys", json={"scope": "read"})
            assert status == 201
            status, answer = await service.api("GET", "/v1/probe/7", token=made["key"])
            assert "needs a key of scope write" in assert_error(status, answer, 403, "forbidden")
            status, document = await service.api("GET", "/openapi.json", token=TOKEN)
            assert status == 200, document
            operation = document["paths"]["/v1/probe/{n}"]["get"]
            assert operation["security"] == [{"token": ["write"]}]
            assert operation["parameters"][0] == {
                "name": "n",
                "in": "path",
                "required": True,
                "schema": number[0],
                "description": "a number",
                "example": 7,
            }
            assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/FactDeleted"
            }
    finally:
        await server.close()


def test_a_path_parameter_left_undescribed_is_refused_at_startup(make_settings: Any) -> None:
    app = create_app(make_settings())
    with pytest.raises(ValueError, match=r"describe \{n\} in path_params"):
        add_routes(app, [Route("GET", "/v1/probe/{n}", "A probe", "probe", a.FactDeleted, handler=probe)])


def test_local_and_remote_commands_are_one_api() -> None:
    """The CLI's in-process API and the HTTP client answer every MemoryApi call alike."""
    asked = {name for name, value in vars(MemoryApi).items() if inspect.iscoroutinefunction(value)}
    assert {"recall", "system_messages", "facts", "forget", "search", "export"} <= asked
    for name in asked:
        wanted = inspect.signature(getattr(MemoryApi, name))
        for implementation in (LocalApi, AsyncMemoryClient):
            given = inspect.signature(getattr(implementation, name))
            assert list(given.parameters) == list(wanted.parameters), (implementation, name)
            assert given.return_annotation == wanted.return_annotation, (implementation, name)
