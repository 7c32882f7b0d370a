"""The OpenAPI 3.1 document of the HTTP API, built from the app's route declarations and models.

Each route the app serves is declared once (web/declare.py): method, path, scope, summary, the
request body's model, the answer's model, the query parameters with their bounds, and the
errors it may answer. Schemas come from those models; tests/contract.py fuzzes the live
server against the document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from agent_memory import __version__
from agent_memory.web import answers as a
from agent_memory.web.declare import Route

REF: Final = "#/components/schemas/{model}"
JSON: Final = "application/json"

ERRORS: Final[dict[int, str]] = {
    400: "the body is not JSON or not an object, a parameter is malformed, or text holds a NUL",
    401: "missing or wrong credentials",
    403: "the key's scope does not reach this route",
    404: "no such record, or nothing is held",
    408: "the body did not arrive in time: a stalled upload is dropped",
    409: "the request does not fit the current state",
    413: "the body is over AGENT_MEMORY_MAX_BODY_BYTES",
    422: "a value is out of range or of the wrong type (the message names it)",
    429: "slow down (Retry-After): too many wrong keys from this address, or Agora or the upstream LLM asks it",
    500: "the upstream LLM failed (its answer relayed)",
    502: "Agora's REST API or the upstream LLM answered with an error, or not at all",
    503: "the database is unreachable (store_unavailable), a feature needs a setting that is not set, "
    "or the upstream LLM is unavailable",
    504: "the upstream LLM did not answer in time (AGENT_MEMORY_UPSTREAM_FIRST_BYTE_TIMEOUT_S)",
}
# Text in a path or query holds no NUL (web/http.py nul_middleware).
NO_NUL: Final = "^[^\u0000]*$"

SECURITY_SCHEMES: Final = {
    "token": {
        "type": "http",
        "scheme": "bearer",
        "description": "AGENT_MEMORY_API_TOKEN (every /v1 route but the custom LLM's)",
    },
    "llm": {
        "type": "http",
        "scheme": "bearer",
        "description": "AGENT_MEMORY_LLM_TOKEN, or the key POST /v1/agents minted for the agent",
    },
    "signature": {
        "type": "apiKey",
        "in": "header",
        "name": "Agora-Signature-V2",
        "description": "hex HMAC-SHA256 of the body with AGORA_WEBHOOK_SECRET",
    },
    "elevenlabs_signature": {
        "type": "apiKey",
        "in": "header",
        "name": "ElevenLabs-Signature",
        "description": 't=<unix s>,v0=<hex HMAC-SHA256 of "t.body"> with AGENT_MEMORY_ELEVENLABS_SECRET',
    },
}

# Each server-sent event of a streamed completion (the upstream's chunks, passed on).
SSE_EVENT: Final = {
    "type": "object",
    "properties": {"data": {"type": "string", "description": "a chat.completion.chunk as JSON, or [DONE]"}},
}
REQUEST_ID: Final = {
    "description": "the request's id (the one sent in X-Request-Id, or a new one), also in the service log",
    "schema": {"type": "string"},
}
_PATH_PARAM = re.compile(r"{(\w+)}")


def path_names(path: str) -> list[str]:
    """The names of a path's parameters, in order."""
    return _PATH_PARAM.findall(path)


def _text(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema, a string one refusing NUL unless its own pattern already does."""
    if schema.get("type") == "string" and "pattern" not in schema:
        return {**schema, "pattern": NO_NUL}
    return schema


def _parameters(route: Route) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in path_names(route.canonical):
        schema, description, example = route.path_param(name)
        schema = _text(schema)
        params.append(
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": schema,
                "description": description,
                "example": example,
            }
        )
    for param in route.query:
        spec: dict[str, Any] = {
            "name": param.name,
            "in": "query",
            "required": param.required,
            "schema": _text(param.schema),
            "description": param.description,
        }
        if param.schema.get("type") == "array":
            spec |= {"style": "form", "explode": False}
        if param.example is not None:
            spec["example"] = param.example
        params.append(spec)
    return params


# Examples of what the text answers hold.
TEXT_EXAMPLES: Final = {
    "text/plain": "# HELP agent_memory_callbacks_total Agora callbacks by event type and outcome\n"
    "# TYPE agent_memory_callbacks_total counter\n"
    'agent_memory_callbacks_total{event_type="103",outcome="done"} 12.0\n',
}
TEXT_ERROR_EXAMPLE: Final = "unauthorized: missing bearer token: send 'Authorization: Bearer <key>'"
SSE_EXAMPLE: Final = {"data": "[DONE]"}


def _media(schema: dict[str, Any], example: Any) -> dict[str, Any]:
    return {"schema": schema, "example": example}


def _content(route: Route, refs: dict[Any, dict[str, Any]], examples: Examples) -> dict[str, Any]:
    if route.answer is None:
        media = route.text or "text/plain"
        return {media: _media({"type": "string"}, TEXT_EXAMPLES[media])}
    content: dict[str, Any] = {JSON: _media(refs[route.answer], examples.of(refs[route.answer]))}
    if route.streams:
        content["text/event-stream"] = _media(SSE_EVENT, SSE_EXAMPLE)
    return content


def _answer(description: str, content: dict[str, Any]) -> dict[str, Any]:
    header = {"$ref": "#/components/headers/RequestId"}
    return {"description": description, "headers": {"X-Request-Id": header}, "content": content}


def _errors(route: Route, scope: str | None) -> list[int]:
    """Every error status the route can answer, whichever part of the service answers it."""
    errors = set(route.errors)
    if route.auth != "none":
        errors.add(401)
    errors.add(400)  # a NUL character in the path or query (web/http.py nul_middleware)
    if scope is not None:
        errors |= {403, 429}  # a key of too low a scope; too many wrong keys from one address
    if route.auth == "token" and route.path.startswith("/v1/"):
        # The gate itself reads a scoped key from the database: any /v1 route can find it down.
        errors.add(503)
    if route.body is not None or route.reads_body:
        # Bad JSON; too large; too slow to arrive (web/http.py, the app's body limits).
        errors |= {400, 408, 413}
    return sorted(errors)


def _operation(route: Route, refs: dict[Any, dict[str, Any]], examples: Examples) -> dict[str, Any]:
    answers = {str(route.status): _answer(route.summary, _content(route, refs, examples))}
    for status, answer in route.extra_answers.items():
        answers[str(status)] = _answer(route.summary, {JSON: _media(refs[answer], examples.of(refs[answer]))})
    scope = route.scope if route.auth == "token" else None
    error: dict[str, Any] = refs[a.ErrorAnswer]
    if route.auth == "llm":
        # The endpoint answers OpenAI's shape; what the app refuses before it (413, a NUL), ours.
        error = {"anyOf": [refs[a.OpenAIErrorAnswer], error]}
    for status in _errors(route, scope):
        if route.text is not None:  # a text route refuses in text too (web/metrics.py)
            content = {"text/plain": _media({"type": "string"}, TEXT_ERROR_EXAMPLE)}
        else:
            content = {JSON: {"schema": error}}
        answers[str(status)] = _answer(ERRORS[status], content)
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": _parameters(route),
        "responses": answers,
        "security": [] if route.auth == "none" else [{route.auth: [scope] if scope else []}],
    }
    notes = [route.description] if route.description else []
    if scope is not None:
        notes.append(f"Needs a key of scope `{scope}` or above (the admin token has every scope).")
    if notes:
        operation["description"] = " ".join(notes)
    if route.body is not None:
        # A body whose every field is optional may be left out (it reads as {}), unless it must
        # say something (minProperties: PATCH's text or pinned).
        schema = route.body.model_json_schema()
        required = bool(schema.get("required") or schema.get("minProperties"))
        operation["requestBody"] = {"required": required, "content": {JSON: {"schema": refs[route.body]}}}
    return operation


def admits_null(schema: JsonSchemaValue) -> bool:
    """Whether null satisfies `schema` (a $ref names a model or an enum: never null here)."""
    if "type" in schema:
        kinds = schema["type"]
        return kinds == "null" or (isinstance(kinds, list) and "null" in kinds)
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema:
        return None in schema["enum"]
    if "anyOf" in schema or "oneOf" in schema:
        branches: list[JsonSchemaValue] = schema.get("anyOf") or schema.get("oneOf") or []
        return any(admits_null(branch) for branch in branches)
    if "allOf" in schema:
        return all(admits_null(branch) for branch in schema["allOf"])
    return "$ref" not in schema  # no constraint at all: anything, null too


class DocumentSchema(GenerateJsonSchema):
    """Pydantic's schemas, but a default the field's own schema refuses is left out.

    A key that an answer leaves out rather than sends as null (answers.py `Omitted`:
    `X | SkipJsonSchema[None] = None`) has None as its Python default, and no null in its
    schema: `default: null` there contradicts the schema (openapi-spec-validator refuses it).
    Absent is what the field not being required already says.
    """

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = super().default_schema(schema)
        if "default" in json_schema and json_schema["default"] is None and not admits_null(json_schema):
            del json_schema["default"]
        return json_schema


# Values for fields by name, where the name says more than the type (a user's id, a time);
# taken where the value fits the field's schema (a free object, a list of strings, a string).
NAMED_EXAMPLES: Final[dict[str, Any]] = {
    "user_id": "u-alice",
    "character_id": "luna",
    "agent_id": "366YCNGT3TP2WA6A62BUEAWSB",
    "session": "366YCNGT3TP2WA6A62BUEAWSB",
    "channel": "alice-luna-1103",
    "rtc_uid": "1001",
    "q": "cat",
    "terms": ["cat"],
    "characters": ["luna"],
    "moved_sessions": ["366YCNGT3TP2WA6A62BUEAWSB"],
    "role": "user",
    "speaker": "user",
    "source": "history",
    "text": "The user has a cat named Miso",
    "content": "My cat Miso knocked over the plant again.",
    "snippet": "My [cat] Miso knocked over the plant again.",
    "at": "2026-11-03T14:16:00Z",
    "name": "dashboard",
    "model": "gpt-4o-mini",
    "version": "0.1.0",
    "format": "agent-memory-export/1",
    "key": "amk_3q2v7x9Jk1bW8eYpR0sT5uLm",
    "note": "the key is shown once and not shown again: keep it now",
    "stop_reason": "left",
    "last_error": "the LLM answered 503",
    "labels": {"user_id": "u-alice", "character_id": "luna"},
    "system_messages": [{"role": "system", "content": "What you remember about this user: a cat named Miso"}],
    "messages": [{"role": "user", "content": "How is Miso?"}],
    "deleted": {"messages": 42, "facts": 3, "summaries": 1},
    "counts": {"sessions": 2, "messages": 42, "facts": 3, "summaries": 1},
    "llm_proxy": {"requests": 12, "recall_misses": 0, "first_turn_recalls": 3, "first_turn_misses": 0},
    "warming": {"pairs_warmed": 3, "warm_errors": 0},
    "included": {"persona": False, "facts": 1, "summary": True, "messages": 4},
}
TIME_MS: Final = 1_793_736_960_000


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a named example fits a schema that says no more than its type (no model, no bounds)."""
    kind = schema.get("type")
    if kind == "string":
        return isinstance(value, str) and "pattern" not in schema and len(value) >= schema.get("minLength", 0)
    if kind == "object":
        return isinstance(value, dict) and "properties" not in schema and "additionalProperties" in schema
    if kind == "array":
        items = schema.get("items", {})
        return isinstance(value, list) and all(_fits(item, items) for item in value)
    return False


# What a schema says its example is, in the order taken.
_GIVEN: Final = frozenset(("examples", "example", "const", "enum"))


def _given(schema: dict[str, Any]) -> Any:
    """The example a schema gives: its own examples, its constant, or its first choice."""
    if "examples" in schema:
        return schema["examples"][0]
    if "example" in schema:
        return schema["example"]
    if "const" in schema:
        return schema["const"]
    return schema["enum"][0]


def _scalar(schema: dict[str, Any], name: str | None) -> Any:
    """An example of a string, number or boolean within the schema's bounds (a time for *_ms)."""
    kind = schema.get("type")
    if kind == "string":
        return "string".ljust(schema.get("minLength", 0), "x")[: schema.get("maxLength", 6)]
    if kind == "integer":
        if name is not None and name.endswith("_ms"):
            return TIME_MS
        return max(schema.get("minimum", 1), 1) if schema.get("maximum", 1) >= 1 else schema["maximum"]
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return False
    return None  # null, or anything


class Examples:
    """An example of any schema of the document, built from the schema itself.

    A model's own example (`json_schema_extra` examples, as on ErrorAnswer) is taken as it is;
    any other object is built field by field: a field's own examples, then its name's
    (NAMED_EXAMPLES, times in epoch ms), then its type and bounds. So each answer model has an
    example without one kept by hand per route, and a field added to a model appears in it.
    """

    def __init__(self, components: dict[str, Any]) -> None:
        self.components = components

    def of(self, schema: dict[str, Any], name: str | None = None, depth: int = 0) -> Any:
        """An example of `schema` (for a property called `name`)."""
        if "$ref" in schema:
            target = self.components[schema["$ref"].rsplit("/", 1)[1]]
            return self.of(target, name, depth + 1)
        if _GIVEN.intersection(schema):
            return _given(schema)
        branches = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
        if branches:  # the first branch that holds something
            chosen = next((branch for branch in branches if not admits_null(branch)), branches[0])
            return self.of(chosen, name, depth)
        named = NAMED_EXAMPLES.get(name or "")
        if named is not None and _fits(named, schema):
            return named
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            return self._object(schema, depth)
        if kind == "array":
            items = schema.get("items")
            return [self.of(items, None, depth + 1)] if items and depth < 8 else []
        return _scalar(schema, name)

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        if depth > 8:
            return {}
        return {key: self.of(value, key, depth + 1) for key, value in properties.items()}


def _schemas(routes: Sequence[Route]) -> tuple[dict[Any, dict[str, Any]], dict[str, Any]]:
    """Every model's schema under components/schemas, and a $ref to each by its type."""
    answers = {route.answer for route in routes if route.answer is not None} | {
        answer for route in routes for answer in route.extra_answers.values()
    }
    answers |= {a.ErrorAnswer, a.OpenAIErrorAnswer}
    bodies = {route.body for route in routes if route.body is not None}
    inputs = [(kind, "serialization", TypeAdapter(kind)) for kind in answers]
    inputs += [(kind, "validation", TypeAdapter(kind)) for kind in bodies]
    found, definitions = TypeAdapter.json_schemas(
        inputs,  # type: ignore[arg-type]
        ref_template=REF,
        schema_generator=DocumentSchema,
    )
    refs = {kind: schema for (kind, _mode), schema in found.items()}
    return refs, dict(sorted(definitions.get("$defs", {}).items()))  # a stable document


def document(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of these routes (an app's: web/docs.py builds it once)."""
    refs, schemas = _schemas(routes)
    examples = Examples(schemas)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.canonical, {})[route.method.lower()] = _operation(route, refs, examples)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agent-memory",
            "version": __version__,
            "description": "Long-term memory for real-time voice agents on Agora's Conversational AI "
            'Engine. Every error answers {"error": {"code", "message"}}; every answer carries '
            "X-Request-Id.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": SECURITY_SCHEMES,
            "headers": {"RequestId": REQUEST_ID},
        },
    }
