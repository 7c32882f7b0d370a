"""The OpenAPI document: every route described, every example valid, the real answers conforming.

The fuzzed run against the live server is tests/contract.py (in .ci/run after pytest).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from conftest import TOKEN, condense, live, load_conversations
from fakes.agora_server import FakeAgora
from fakes.upstream_llm import FakeUpstreamLLM, Script
from pydantic import ValidationError

from agent_memory.platforms.agora.routes import WatchBody
from agent_memory.settings import Settings
from agent_memory.web.app import create_app
from agent_memory.web.declare import PATH_PARAMS, Route, declared_routes
from agent_memory.web.docs import ASSETS
from agent_memory.web.openapi import document

# What the app serves besides the API itself: the document, its page and the page's files.
NOT_DESCRIBED = {("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/docs/assets/{name}")}
METHOD_ORDER = {"GET": 0, "POST": 1, "PATCH": 2, "DELETE": 3}
PAIR_PATH = "/v1/users/{user_id}/characters/{character_id}"


@cache
def declared() -> tuple[Route, ...]:
    """Every route the app declares (its store is made, never opened: no file is touched)."""
    app = create_app(Settings(db_path=Path("never-opened.db"), api_token=TOKEN, metrics=True))
    return tuple(declared_routes(app))


@cache
def app_document() -> dict[str, Any]:
    """The document of those routes, as /openapi.json serves it."""
    return document(declared())


def served(settings: Settings) -> set[tuple[str, str]]:
    """(method, path) of every route the app registers (HEAD goes with its GET)."""
    app = create_app(settings)
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }


def validator(schema: dict[str, Any]) -> Any:
    """A validator of `schema`, whose $refs point into the document's components."""
    return jsonschema_rs.validator_for({**schema, "components": app_document()["components"]})


def examples(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every example in the document: (where, the schema it must satisfy, the example)."""
    if isinstance(node, dict):
        schema = node.get("schema")
        if isinstance(schema, dict) and "example" in node:  # a parameter's, or a media type's
            yield where, schema, node["example"]
        if "examples" in node and isinstance(node["examples"], list):  # a schema's own
            for example in node["examples"]:
                yield where, node, example
        for key, value in node.items():
            yield from examples(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from examples(value, f"{where}/{index}")


def test_every_route_is_described(make_settings: Any) -> None:
    described = {(route.method, route.canonical) for route in declared()}
    # The console's pages (/console) are HTML for people, not operations of the JSON API.
    routes = {
        route for route in served(make_settings()) if not route[1].startswith("/console")
    } - NOT_DESCRIBED
    assert routes - described == set(), "routes the OpenAPI document lacks (declare them: web/declare.py)"
    assert described - routes == set(), "routes the document describes that the app does not serve"
    assert len({route.operation_id for route in declared()}) == len(declared())


def test_the_document_is_openapi_31_with_every_operation_complete() -> None:
    doc = app_document()
    assert doc["openapi"] == "3.1.0"
    for route in declared():
        operation = doc["paths"][route.canonical][route.method.lower()]
        assert str(route.status) in operation["responses"], route.operation_id
        params = {param["name"] for param in operation["parameters"] if param["in"] == "path"}
        assert params == set(re.findall(r"{(\w+)}", route.canonical)), route.operation_id
        if route.auth == "token" and route.path.startswith("/v1/"):
            # The scope a key needs (web/auth.py) is in the security requirement.
            assert operation["security"] == [{"token": [route.scope]}]
            assert {"401", "403", "429"} <= set(operation["responses"]), route.operation_id
    bounded = doc["paths"]["/v1/users/{user_id}/search"]["get"]["parameters"]
    limit = next(param for param in bounded if param["name"] == "limit")
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}
    assert doc["components"]["securitySchemes"]["token"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["token"]["description"],
    }
    error = doc["components"]["schemas"]["ErrorAnswer"]
    assert error["required"] == ["error"] and error["additionalProperties"] is False


def test_every_example_validates_against_its_schema() -> None:
    doc = app_document()
    found = list(examples(doc))
    # Path parameters, questions, every request body and the main answers carry one.
    assert len(found) >= 45
    for route in declared():
        if route.body is not None:
            assert doc["components"]["schemas"][route.body.__name__]["examples"], route.operation_id
    wrong = [
        f"{where}: {error.message}"
        for where, schema, example in found
        for error in validator(schema).iter_errors(example)
    ]
    assert wrong == []
    # And the validation bites: an example that breaks its schema is caught.
    bind = app_document()["components"]["schemas"]["BindBody"]
    assert not validator(bind).is_valid({"user_id": "", "character_id": "luna"})


@pytest.mark.slow  # the whole document through the validator (contract-like)
async def test_the_served_document_passes_openapi_spec_validator(service: Any) -> None:
    """What CI validates: the document as the live service serves it (`default: null` on a field
    that cannot be null, from SkipJsonSchema[None], made it fail with 9 errors)."""
    # Imported here: the validator takes ~0.4 s to import, for this slow-tier test alone.
    from openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator

    async with service.session.get(f"{service.url}/openapi.json") as resp:
        served = await resp.json()
    problems = [
        f"{'/'.join(map(str, error.path))}: {error.message}"
        for error in OpenAPIV31SpecValidator(served).iter_errors()
    ]
    assert problems == []


def test_every_success_answer_carries_an_example() -> None:
    doc = app_document()
    missing = [
        f"{method.upper()} {path} {status} {media}"
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        for status, answer in operation["responses"].items()
        if status.startswith("2")
        for media, content in answer["content"].items()
        if "example" not in content or content["example"] in ({}, [], None)
    ]
    assert missing == []
    # Built from the models: a user id reads like one, a time like one, a nested model filled in.
    messages = doc["paths"][PAIR_PATH + "/messages"]["get"]["responses"]["200"]["content"]["application/json"]
    (message,) = messages["example"]["messages"]
    assert (
        messages["example"]["user_id"] == "u-alice"
        and message["ts_ms"] > 10**12
        and message["kind"] == "turn"
    )


def test_the_statuses_the_service_answers_are_documented() -> None:
    doc = app_document()

    def statuses(method: str, path: str) -> dict[str, Any]:
        return dict(doc["paths"][path][method.lower()]["responses"])

    for route in declared():
        answers = statuses(route.method, route.canonical)
        if route.auth == "token" and route.path.startswith("/v1/"):
            assert "503" in answers, route.operation_id  # store_unavailable: the gate reads keys too
        if route.body is not None or route.operation_id == "agora_webhook":
            assert {"400", "408", "413"} <= set(answers), route.operation_id
    for path in ("/v1/llm/chat/completions", "/v1/llm/{route}/chat/completions"):
        assert {"429", "500", "502", "503", "504"} <= set(statuses("POST", path))
    metrics = statuses("GET", "/metrics")
    for status in ("401", "403", "429"):
        assert list(metrics[status]["content"]) == ["text/plain"], status


async def test_real_refusals_are_documented_with_the_media_type_answered(start_service: Any) -> None:
    """Statuses the service answered that the document lacked: each is produced here, for real."""
    doc = app_document()
    async with FakeUpstreamLLM() as upstream:
        service = await start_service(
            llm_token="llm-key", upstream_base_url=upstream.base_url, upstream_first_byte_timeout_s=0.2,
            max_body_bytes=1024,
        )  # fmt: skip
        chat = {"messages": [{"role": "user", "content": "hi"}], "user_id": "u", "model": "m"}
        llm = {"Authorization": "Bearer llm-key"}
        admin = {"Authorization": f"Bearer {TOKEN}"}
        upstream.script(Script(status=429, retry_after="3"), Script(status=500), Script(hang=True))
        calls: list[tuple[str, str, str, dict[str, Any]]] = [
            ("POST", "/v1/llm/chat/completions", "/v1/llm/chat/completions", {"json": chat, "headers": llm}),
            ("POST", "/v1/llm/chat/completions", "/v1/llm/chat/completions", {"json": chat, "headers": llm}),
            ("POST", "/v1/llm/chat/completions", "/v1/llm/chat/completions", {"json": chat, "headers": llm}),
            ("GET", "/metrics", "/metrics", {}),
            ("POST", PAIR_PATH + "/facts", "/v1/users/u/characters/c/facts", {"data": b"{", "headers": admin}),
            ("POST", PAIR_PATH + "/facts", "/v1/users/u/characters/c/facts", {"json": {"text": "x" * 2000}, "headers": admin}),
        ]  # fmt: skip
        seen = []
        for method, template, path, kwargs in calls:
            async with service.session.request(method, service.url + path, **kwargs) as resp:
                documented = doc["paths"][template][method.lower()]["responses"]
                assert str(resp.status) in documented, (template, resp.status, await resp.text())
                assert resp.content_type in documented[str(resp.status)]["content"], (template, resp.status)
                seen.append(resp.status)
    assert seen == [429, 500, 504, 401, 400, 413]


def test_a_changed_shape_fails_its_schema() -> None:
    """The answers forbid what they do not list: a field added to a shape must be documented."""
    session = app_document()["components"]["schemas"]["SessionAnswer"]
    example = {
        "session": {
            "agent_id": "a", "user_id": "u", "character_id": "c", "identity_source": "labels",
            "channel": None, "name": None, "status": "running", "stop_reason": None, "start_ms": 1,
            "stop_ms": None, "rtc_uid": None, "message_count": 0, "gap_count": 0, "error_count": 0,
            "token_warning_ms": None, "turn_count": None, "token_expiring": False,
            "turns_truncated": False, "labels": {},
        }
    }  # fmt: skip
    assert validator(session).is_valid(example)
    assert not validator(session).is_valid({"session": {**example["session"], "new_field": 1}})
    assert not validator(session).is_valid({"session": {**example["session"], "status": "paused"}})


def example_request(route: Route) -> tuple[str, dict[str, str], Any]:
    """The route's path, query and body filled with the document's examples."""
    path = re.sub(r"{(\w+)}", lambda match: str(PATH_PARAMS[match[1]][2]), route.canonical)
    query = {param.name: str(param.example) for param in route.query if param.example is not None}
    body = None
    if route.body is not None:
        body = route.body.model_json_schema()["examples"][0]
    return path, query, body


@pytest.mark.slow  # every route against its examples (contract-like)
@pytest.mark.postgres
async def test_every_route_answers_its_examples_as_documented(start_service: Any) -> None:
    """Each route called with the document's examples answers a documented status and shape
    (on both backends: each builds its own statistics and search answers)."""
    async with FakeAgora() as fake:
        service = await live(start_service, fake, public_url="https://memory.example")
        await load_conversations(service, "en_luna_companion")  # u-alice and luna
        await condense(service)
        doc = app_document()
        answered: dict[str, int] = {}
        # Reads first, then writes; forgetting last (it takes the bindings made before it).
        order = sorted(
            declared(), key=lambda r: (METHOD_ORDER[r.method], r.operation_id.startswith("forget"))
        )
        for route in order:
            path, query, body = example_request(route)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with service.session.request(
                route.method, service.url + path, params=query, json=body, headers=headers
            ) as resp:
                text = await resp.text()
                documented = doc["paths"][route.canonical][route.method.lower()]["responses"]
                assert str(resp.status) in documented, (route.operation_id, resp.status, text)
                assert resp.headers["X-Request-Id"]
                content = documented[str(resp.status)]["content"]
                assert resp.content_type in content, (route.operation_id, resp.content_type)
                if resp.content_type == "application/json":
                    schema = content["application/json"]["schema"]
                    errors = [error.message for error in validator(schema).iter_errors(await resp.json())]
                    assert errors == [], (route.operation_id, errors, text[:500])
                answered[route.operation_id] = resp.status
    # What the examples cannot reach answers its documented error; everything else succeeds.
    expected_errors = {
        "retry_job": 404,  # job 1 ran and is gone
        "chat_completions": 401,  # AGENT_MEMORY_LLM_TOKEN is not set
        "chat_completions_routed": 401,
        "vapi_chat_completions": 401,
        "elevenlabs_chat_completions": 401,
        "agora_webhook": 401,  # not signed
        "elevenlabs_webhook": 503,  # AGENT_MEMORY_ELEVENLABS_SECRET is not set
        "retell_webhook": 503,  # AGENT_MEMORY_RETELL_API_KEY is not set
        "vapi_webhook": 503,  # AGENT_MEMORY_VAPI_SECRET is not set
        "refresh_agent": 409,  # the example agent was not started through this service
        "leave_agent": 404,  # nor running at the fake Agora
        "get_channel_binding": 404,  # only bound later, by POST
    }
    failed = {name: status for name, status in answered.items() if status >= 300}
    assert failed == expected_errors


async def test_document_and_docs_page_are_served_without_a_key(service: Any) -> None:
    async with service.session.get(f"{service.url}/openapi.json") as resp:
        assert resp.status == 200
        assert await resp.json() == app_document()
    async with service.session.get(f"{service.url}/docs") as resp:
        assert resp.status == 200 and resp.content_type == "text/html"
        page = await resp.text()
    # Nothing from another host: the page and its files come from this service.
    assert "http://" not in page and "https://" not in page
    for name in ASSETS:
        assert f"docs/assets/{name}" in page
        async with service.session.get(f"{service.url}/docs/assets/{name}") as resp:
            assert resp.status == 200, name
            assert len(await resp.read()) > 500
    async with service.session.get(f"{service.url}/docs/assets/swagger-ui-bundle.js") as resp:
        bundle = await resp.text()
    # Swagger UI 5 renders OpenAPI 3.1 (4.x refuses it).
    assert resp.content_type in ("application/javascript", "text/javascript") and "SwaggerUIBundle" in bundle
    async with service.session.get(f"{service.url}/docs/assets/..%2Fcore.py") as resp:
        assert resp.status == 404
    async with service.session.get(f"{service.url}/docs/assets/swagger-editor.js") as resp:
        assert resp.status == 404


@pytest.mark.parametrize("path", ["/openapi.json", "/docs"])
async def test_document_routes_answer_head_and_refuse_post(service: Any, path: str) -> None:
    async with service.session.head(f"{service.url}{path}") as resp:
        assert resp.status == 200
    async with service.session.post(f"{service.url}{path}") as resp:
        assert resp.status == 405
        assert "GET" in resp.headers.get("Allow", "")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        # A NUL in a mentions query reached SQLite's full-text parser: a 500 (the fuzzer's find).
        ("GET", "/v1/search/mentions?q=a%00b", {}, 400, "bad_request"),
        ("GET", "/v1/users/u%00/characters/luna/messages", {}, 400, "bad_request"),
        ("POST", "/v1/users/u/characters/luna/facts", {"json": {"text": "a\x00b"}}, 422, "invalid_field"),
        # What the document calls an integer, and nothing else: int() took "", "+5" and "٥".
        ("GET", "/v1/jobs?limit=", {}, 422, "invalid_field"),
        ("GET", "/v1/jobs?limit=%2B5", {}, 422, "invalid_field"),
        ("GET", "/v1/jobs?limit=%D9%A5", {}, 422, "invalid_field"),
        ("GET", "/v1/stats?since_ms=", {}, 422, "invalid_field"),
        # Exactly what the document lists: "" and "OpenAI" were taken for the default style.
        ("GET", "/v1/users/u/characters/luna/system-messages?style=", {}, 400, "bad_request"),
        ("GET", "/v1/users/u/characters/luna/system-messages?style=OpenAI", {}, 400, "bad_request"),
        ("GET", "/v1/jobs?status=", {}, 422, "invalid_field"),
        # JSON's own types, as documented: pydantic's lax mode took 0 for false and "300" for 300.
        ("POST", "/v1/sessions/a1/watch", {"json": {"max_tokens": "300"}}, 422, "invalid_field"),
        (
            "POST",
            "/v1/render/openai-messages",
            {"json": {"messages": [], "options": {"drop_empty": 0}}},
            422,
            "invalid_field",
        ),
    ],
)
async def test_what_the_fuzzer_found_is_refused_with_a_sentence(
    service: Any, method: str, path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    got, body = await service.api(method, path, **kwargs)
    assert (got, body["error"]["code"]) == (status, code), body
    assert any(word in body["error"]["message"] for word in ("NUL", "integer", "one of", "boolean")), body
    # And the same parameters, well formed, are answered.
    assert (await service.api("GET", "/v1/jobs?limit=5"))[0] == 200


async def test_agoras_conflict_is_the_callers_409_not_a_bad_gateway(start_service: Any) -> None:
    async with FakeAgora() as fake:
        service = await live(start_service, fake)
        body = {"user_id": "u-alice", "character_id": "luna", "join": {"name": "twice", "properties": {}}}
        assert (await service.api("POST", "/v1/agents", json=body))[0] == 201
        status, answer = await service.api("POST", "/v1/agents", json=body)
    assert status == 409 and answer["error"]["code"] == "agora_conflict"
    assert "already running" in answer["error"]["message"]


def test_integer_fields_read_numbers_as_json_schema_does() -> None:
    """100.0 is an integer to JSON Schema (and so to the fuzzer); "100" and true are not."""
    assert WatchBody.model_validate({"max_tokens": 100.0}).max_tokens == 100
    for wrong in ("100", True, 100.5, 49):
        with pytest.raises(ValidationError):
            WatchBody.model_validate({"max_tokens": wrong})
