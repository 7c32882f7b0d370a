"""Each HTTP route declared once: from its `Route`, the router, the gate and the document.

A `Route` holds what there is to know of an operation: method and path, the scope a key needs,
the body and query it reads, its answer's model, the errors it may answer, how it is
described. `add_routes` registers the handlers and keeps the declarations on the app, where
the gate (web/auth.py) reads the scope a route needs and web/openapi.py builds the document.
A module of routes declares them with a `Routes` table; a platform adds its own through its
`install()`. No table is kept beside them.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Final, Literal

from aiohttp import web
from pydantic import BaseModel

from agent_memory.core.domain import KeyScope
from agent_memory.core.limits import MAX_CHANNEL_BYTES, MAX_MS, MAX_QUERY_CHARS, MAX_TOKENS, MIN_TOKENS

# A route that checks a bearer of its own (the custom-LLM endpoint: Agora's llm.api_key).
OWN_BEARER: Final = "own bearer"
Needs = KeyScope | Literal["own bearer"]
Auth = Literal["token", "llm", "signature", "elevenlabs_signature", "none"]
Handler = Callable[..., Any]
# A path parameter as the document describes it: its JSON schema, what it means, an example.
PathParam = tuple[dict[str, Any], str, Any]


@dataclass(frozen=True, slots=True)
class Param:
    """A query parameter: its JSON schema (bounds included) and what it means."""

    name: str
    schema: dict[str, Any]
    description: str
    required: bool = False
    example: Any = None


@dataclass(frozen=True, slots=True)
class Route:
    """One operation of the API: how it is served, who may call it, and how it is described."""

    method: str
    # As the router takes it: `{name:regex}` where a parameter holds slashes.
    path: str
    summary: str
    tag: str
    # The answer's model; None for a text answer of media type `text`.
    answer: Any
    # The scope a key needs; None where the gate does not decide (no token, or a check of its own).
    scope: Needs | None = None
    operation_id: str = ""
    status: int = 200
    body: type[BaseModel] | None = None
    query: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    auth: Auth = "token"
    description: str | None = None
    # Other answers than JSON (the custom-LLM endpoint streams server-sent events).
    streams: bool = False
    text: str | None = None
    extra_answers: dict[int, Any] = field(default_factory=dict)
    # Reads a body it has no model for (the webhook checks its signature over the bytes first).
    reads_body: bool = False
    # Its own path parameters (schema, description, example) beside the shared PATH_PARAMS.
    path_params: dict[str, PathParam] = field(default_factory=dict)
    handler: Handler | None = field(default=None, compare=False)

    @property
    def canonical(self) -> str:
        """The path as the router names it and the document lists it (no regex)."""
        return _canonical(self.path)

    def path_param(self, name: str) -> PathParam:
        """How the document describes a parameter of the path: the route's own, or the shared one."""
        if name in self.path_params:
            return self.path_params[name]
        if name in PATH_PARAMS:
            return PATH_PARAMS[name]
        raise ValueError(f"{self.method} {self.path}: describe {{{name}}} in path_params (or PATH_PARAMS)")


_REGEX = re.compile(r"{(\w+):[^}]*}")
_PATH_NAME = re.compile(r"{(\w+)}")


# Each app (each test's) serves every declared path: rewritten once per process, not per app.
@cache
def _canonical(path: str) -> str:
    """The path with its parameters' patterns taken out."""
    return _REGEX.sub(r"{\1}", path)


@cache
def _served(path: str) -> str:
    """A plain {name} is any run of characters but "/": aiohttp's default also refuses "{" and
    "}", so a user id holding them (stored by a webhook) could be neither read nor forgotten."""
    return _PATH_NAME.sub(r"{\1:[^/]+}", path)


class Routes:
    """A module's (or a class's) route declarations, made with its decorators."""

    def __init__(self) -> None:
        self.declared: list[Route] = []

    def __iter__(self) -> Iterator[Route]:
        return iter(self.declared)

    def route(
        self, method: str, path: str, summary: str, tag: str, answer: Any, **spec: Any
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated handler as `method path` (its name is the operation's id)."""

        def declare(handler: Handler) -> Handler:
            operation_id = spec.pop("operation_id", handler.__name__)
            self.declared.append(
                Route(method, path, summary, tag, answer, operation_id=operation_id, handler=handler, **spec)
            )
            return handler

        return declare

    def get(
        self, path: str, summary: str, tag: str, answer: Any, **spec: Any
    ) -> Callable[[Handler], Handler]:
        return self.route("GET", path, summary, tag, answer, **spec)

    def post(
        self, path: str, summary: str, tag: str, answer: Any, **spec: Any
    ) -> Callable[[Handler], Handler]:
        return self.route("POST", path, summary, tag, answer, **spec)

    def patch(
        self, path: str, summary: str, tag: str, answer: Any, **spec: Any
    ) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path, summary, tag, answer, **spec)

    def delete(
        self, path: str, summary: str, tag: str, answer: Any, **spec: Any
    ) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, summary, tag, answer, **spec)

    def bound(self, owner: object) -> list[Route]:
        """The routes of methods declared in a class, their handlers bound to `owner`."""
        return [
            replace(route, handler=types.MethodType(route.handler, owner))
            for route in self.declared
            if route.handler is not None
        ]


# The app's declared routes, in the order they were added, and the scope of each by (method, path).
DECLARED: Final = web.AppKey("declared_routes", list[Route])
SCOPES: Final = web.AppKey("route_scopes", dict[tuple[str, str], Needs])


def add_routes(app: web.Application, routes: Iterable[Route]) -> None:
    """Serve each route's handler, and keep its declaration for the gate and the document."""
    declared = app.setdefault(DECLARED, [])
    scopes = app.setdefault(SCOPES, {})
    for route in routes:
        if route.handler is None:
            raise ValueError(f"{route.method} {route.path} has no handler")
        for name in _PATH_NAME.findall(route.canonical):
            route.path_param(name)  # refused at startup, not when the document is built
        path = _served(route.path)
        if route.method == "GET":
            app.router.add_get(path, route.handler)
        else:
            app.router.add_route(route.method, path, route.handler)
        declared.append(route)
        if route.scope is not None:
            scopes[route.method, route.canonical] = route.scope


def declared_routes(app: web.Application) -> list[Route]:
    """Every route the app declared (the document's operations)."""
    if DECLARED not in app:
        return []
    declared: list[Route] = app[DECLARED]
    return declared.copy()


# Parameters several routes share.


def limit_param(default: int, high: int) -> Param:
    """`limit`: at most this many, 1..high."""
    return Param(
        "limit", {"type": "integer", "minimum": 1, "maximum": high, "default": default}, "at most this many"
    )


def tokens_param(description: str, default: int | None = None) -> Param:
    """`max_tokens`: a token budget within the API's bounds."""
    schema: dict[str, Any] = {"type": "integer", "minimum": MIN_TOKENS, "maximum": MAX_TOKENS}
    if default is not None:
        schema["default"] = default
    return Param("max_tokens", schema, description)


# What a question is: not blank (a character that is neither a space nor NUL), not too long.
Q_SCHEMA: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUERY_CHARS,
    "pattern": "^[^\u0000]*[^\\s\u0000][^\u0000]*$",
}
MS_SCHEMA: Final = {"type": "integer", "minimum": 0, "maximum": MAX_MS}
WINDOW: Final = (
    Param("since_ms", MS_SCHEMA, "only what happened at or after this time (epoch ms); before until_ms"),
    Param("until_ms", MS_SCHEMA, "only what happened before this time (epoch ms)"),
)
CHARACTER_FILTER: Final = Param("character_id", {"type": "string"}, "only this character's")
ID_SCHEMA: Final = {"type": "integer", "minimum": 1, "maximum": 10**18 - 1}

# Path parameters, by name: every route that has one shares its description.
PATH_PARAMS: Final[dict[str, PathParam]] = {
    "user_id": ({"type": "string", "minLength": 1}, "the app's id of the user", "u-alice"),
    "character_id": ({"type": "string", "minLength": 1}, "the app's id of the character", "luna"),
    "agent_id": (
        {"type": "string", "minLength": 1},
        "Agora's id of the agent run",
        "366YCNGT3TP2WA6A62BUEAWSB",
    ),
    "channel": (
        {"type": "string", "minLength": 1, "maxLength": MAX_CHANNEL_BYTES},
        f"an RTC channel name: at most {MAX_CHANNEL_BYTES} bytes of UTF-8 (Agora's limit)",
        "alice-luna-1103",
    ),
    "fact_id": (ID_SCHEMA, "a fact's id", 1),
    "key_id": (ID_SCHEMA, "a key's id", 1),
    "job_id": (ID_SCHEMA, "a job's id", 1),
    "route": ({"type": "string", "minLength": 1}, "free routing text the agent's llm.url carries", "prod"),
}

PAIR: Final = "/v1/users/{user_id}/characters/{character_id}"
READ_ERRORS: Final = (422,)
BODY_ERRORS: Final = (400, 413, 422)
# What the custom-LLM endpoint relays from the upstream LLM, besides its own refusals.
UPSTREAM_ERRORS: Final = (429, 500, 502, 503, 504)
