"""The OpenAPI 3.1 document of the HTTP API, built from one route table and the pydantic models.

`ROUTES` lists every route the app serves: method, path, summary, the request body's model, the
answer's model, the query parameters with their bounds, and the errors it may answer. Schemas
come from the models the routes validate with (web/schemas.py, the Agora routes) and the
documented answers (web/answers.py); tests/test_openapi.py checks that the table and the app's
router agree, and tests/contract.py fuzzes the live server against the document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final, Literal

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from agent_memory import __version__
from agent_memory.core.facts import MAX_FACT_CHARS
from agent_memory.memory.retention import PurgeReport
from agent_memory.platforms.agora.custom_llm import ChatCompletionRequest
from agent_memory.platforms.agora.routes import RenderBody, StartBody, WatchBody
from agent_memory.platforms.agora.webhook import WebhookAnswer
from agent_memory.web import answers as a
from agent_memory.web.auth import ROUTE_SCOPES
from agent_memory.web.schemas import (
    MAX_CHANNEL_BYTES,
    MAX_MS,
    MAX_PERSONA_CHARS,
    MAX_QUERY_CHARS,
    BindBody,
    FactBody,
    FactPatch,
    KeyBody,
)

REF: Final = "#/components/schemas/{model}"
Auth = Literal["token", "llm", "signature", "none"]
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
# What the custom-LLM endpoint relays from the upstream LLM, besides its own refusals.
UPSTREAM_ERRORS: Final = (429, 500, 502, 503, 504)


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
    """One operation of the API, as the document describes it."""

    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    # The answer's model; None for a text answer of media type `text`.
    answer: Any
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


def _limit(default: int, high: int) -> Param:
    return Param(
        "limit", {"type": "integer", "minimum": 1, "maximum": high, "default": default}, "at most this many"
    )


def _tokens(description: str, default: int | None = None) -> Param:
    schema: dict[str, Any] = {"type": "integer", "minimum": 50, "maximum": 200_000}
    if default is not None:
        schema["default"] = default
    return Param("max_tokens", schema, description)


# What a question is: required, not blank, not too long.
# Text in a path or query holds no NUL (web/http.py nul_middleware).
NO_NUL: Final = "^[^\u0000]*$"
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

# Path parameters, by name: every route that has one shares its description.
PATH_PARAMS: Final[dict[str, tuple[dict[str, Any], str, Any]]] = {
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
    "fact_id": ({"type": "integer", "minimum": 1, "maximum": 10**18 - 1}, "a fact's id", 1),
    "key_id": ({"type": "integer", "minimum": 1, "maximum": 10**18 - 1}, "a key's id", 1),
    "job_id": ({"type": "integer", "minimum": 1, "maximum": 10**18 - 1}, "a job's id", 1),
    "route": ({"type": "string", "minLength": 1}, "free routing text the agent's llm.url carries", "prod"),
}

PAIR: Final = "/v1/users/{user_id}/characters/{character_id}"
READ_ERRORS: Final = (422,)
BODY_ERRORS: Final = (400, 413, 422)
AGORA_ERRORS: Final = (404, 409, 429, 502, 503)

ROUTES: Final[tuple[Route, ...]] = (
    Route(
        "GET",
        "/healthz",
        "healthz",
        "Is the service up and its database reachable",
        "service",
        a.Health,
        errors=(503,),
        auth="none",
    ),
    # the pair's memory
    Route(
        "GET",
        PAIR + "/system-messages",
        "system_messages",
        "The pair's memory as system_messages",
        "memory",
        a.SystemMessagesAnswer,
        errors=(400, 422),
        query=(
            _tokens("the token budget (default AGENT_MEMORY_MAX_TOKENS)"),
            Param(
                "persona",
                {"type": "string", "maxLength": MAX_PERSONA_CHARS},
                "the character's persona, put first",
            ),
            Param(
                "style",
                {"type": "string", "enum": ["openai", "gemini", "anthropic"], "default": "openai"},
                "the agent's llm.style: the shape of the messages",
            ),
            Param("exclude_agent_id", {"type": "string"}, "leave out this running call's own turns"),
            Param(
                "query",
                {"type": "string", "maxLength": MAX_QUERY_CHARS},
                "what the call is about: memories recalled for it are included",
                example="wedding",
            ),
        ),
        description="Facts, the rolling summary, recalled memories and the latest turns, within max_tokens, "
        "shaped for the agent's llm.style: what an agent's join body carries.",
    ),
    Route(
        "GET",
        PAIR + "/recall",
        "recall",
        "Memories recalled for a question",
        "memory",
        a.RecallAnswer,
        errors=READ_ERRORS,
        query=(
            Param("q", Q_SCHEMA, "the question, or what was just said", required=True, example="cat"),
            _tokens("the token budget of the memories", 500),
            Param(
                "scope",
                {"type": "string", "enum": ["pair", "user"], "default": "pair"},
                "user: the user's memories with every character",
            ),
        ),
    ),
    Route(
        "GET",
        PAIR + "/messages",
        "messages",
        "The pair's latest messages, oldest first",
        "memory",
        a.MessagesAnswer,
        errors=READ_ERRORS,
        query=(_limit(100, 1000),),
    ),
    Route("GET", PAIR + "/summary", "summary", "The pair's rolling summary", "memory", a.SummaryAnswer),
    Route("GET", PAIR + "/facts", "list_facts", "The facts remembered for the pair", "memory", a.FactsAnswer),
    Route(
        "POST",
        PAIR + "/facts",
        "add_fact",
        "Remember a fact (pinned)",
        "memory",
        a.FactAdded,
        status=201,
        body=FactBody,
        errors=BODY_ERRORS,
        extra_answers={200: a.FactAdded},
        description=f"At most {MAX_FACT_CHARS} characters, with a letter, number or symbol among them. "
        "201 when new, 200 when already held (a near-duplicate: the same words but for case, punctuation, "
        "a state's date or saying 'the user'). A new value of what holds one at a time (where the user "
        "lives, their job, name, a favourite…) supersedes the fact holding the old one: 201, same id, the "
        "old text kept in its history.",
    ),
    Route(
        "PATCH",
        "/v1/facts/{fact_id}",
        "edit_fact",
        "Change a fact by hand",
        "memory",
        a.FactEdited,
        body=FactPatch,
        errors=(*BODY_ERRORS, 404, 409),
        description="text and/or pinned. The old text is kept in the fact's history. A new text is said by "
        "hand, so the fact becomes pinned unless pinned is given; 409 when another fact already says it.",
    ),
    Route(
        "GET",
        "/v1/facts/{fact_id}/history",
        "fact_history",
        "Every text a fact had",
        "memory",
        a.FactHistoryAnswer,
        errors=(404, 422),
        description="Oldest first, each with when it held (valid_from, valid_to) and why it stopped: edited, "
        "updated by the model, superseded by a newer fact about the same subject, or ended. A fact that "
        "ended is no longer current but its history stays until the fact is deleted or its user forgotten.",
    ),
    Route(
        "DELETE",
        "/v1/facts/{fact_id}",
        "delete_fact",
        "Forget one fact",
        "memory",
        a.FactDeleted,
        errors=(404, 422),
    ),
    Route(
        "POST",
        PAIR + "/condense",
        "condense",
        "Condense the pair's memory now",
        "memory",
        a.CondenseAnswer,
        status=202,
    ),
    Route(
        "DELETE",
        PAIR,
        "forget_pair",
        "Forget everything held about a user with one character",
        "memory",
        a.ForgetAnswer,
    ),
    Route(
        "DELETE",
        "/v1/users/{user_id}",
        "forget_user",
        "Forget everything held about a user",
        "memory",
        a.ForgetAnswer,
    ),
    # sessions, channels and jobs
    Route(
        "GET",
        "/v1/sessions/{agent_id}",
        "get_session",
        "An agent run's session",
        "sessions",
        a.SessionAnswer,
        errors=(404,),
    ),
    Route(
        "POST",
        "/v1/sessions/{agent_id}/bind",
        "bind_session",
        "Tie an agent run to a pair",
        "sessions",
        a.SessionAnswer,
        body=BindBody,
        errors=BODY_ERRORS,
    ),
    Route(
        "POST",
        "/v1/channels/{channel}/bind",
        "bind_channel",
        "Tie a channel to a pair",
        "channels",
        a.ChannelBound,
        body=BindBody,
        errors=BODY_ERRORS,
        description="Later calls there, and the channel's unidentified ones, go to the pair.",
    ),
    Route(
        "GET",
        "/v1/channels/{channel}/bind",
        "get_channel_binding",
        "Which pair a channel is bound to",
        "channels",
        a.ChannelBindingAnswer,
        errors=(404, 422),
    ),
    Route(
        "DELETE",
        "/v1/channels/{channel}/bind",
        "unbind_channel",
        "Remove a channel's binding",
        "channels",
        a.ChannelUnbound,
        errors=(404, 422),
    ),
    Route(
        "GET",
        "/v1/jobs",
        "list_jobs",
        "Background jobs",
        "jobs",
        a.JobsAnswer,
        errors=READ_ERRORS,
        query=(
            Param(
                "status",
                {"type": "string", "enum": ["pending", "running", "dead"]},
                "only jobs in this status",
            ),
            _limit(100, 1000),
        ),
    ),
    Route(
        "POST",
        "/v1/jobs/{job_id}/retry",
        "retry_job",
        "Run a job again now",
        "jobs",
        a.JobAnswer,
        errors=(404, 409, 422),
    ),
    # insights
    Route(
        "GET",
        "/v1/users/{user_id}/search",
        "search",
        "Search a user's messages, facts and summaries",
        "insights",
        a.UserSearchAnswer,
        errors=READ_ERRORS,
        query=(
            Param(
                "q",
                Q_SCHEMA,
                "one word (or CJK run) as a substring; several ranked like recall",
                required=True,
                example="cat",
            ),
            CHARACTER_FILTER,
            Param(
                "kinds",
                {"type": "array", "items": {"type": "string", "enum": ["message", "fact", "summary"]}},
                "what to search (comma-separated; default all)",
            ),
            _limit(20, 100),
        ),
    ),
    Route(
        "GET",
        "/v1/search/mentions",
        "mentions",
        "Which users said something, how often, first and last",
        "insights",
        a.MentionsAnswer,
        errors=READ_ERRORS,
        query=(
            Param("q", Q_SCHEMA, "the phrase", required=True, example="cat"),
            Param(
                "role",
                {"type": "string", "enum": ["user", "assistant", "any"], "default": "user"},
                "whose messages count",
            ),
            CHARACTER_FILTER,
            _limit(100, 1000),
        ),
    ),
    Route(
        "GET",
        "/v1/users/{user_id}/stats",
        "user_stats",
        "A user's sessions, messages, talk time and rates",
        "insights",
        a.UserStats,
        errors=(404,),
    ),
    Route(
        "GET",
        "/v1/characters/{character_id}/stats",
        "character_stats",
        "A character's users, sessions, rates and latencies",
        "insights",
        a.CharacterStats,
        errors=(404, 422),
        query=WINDOW,
    ),
    Route(
        "GET",
        "/v1/stats",
        "overall_stats",
        "The whole service: latencies, failed and partial callbacks",
        "insights",
        a.OverallStats,
        errors=READ_ERRORS,
        query=WINDOW,
    ),
    Route(
        "GET",
        "/v1/users/{user_id}/export",
        "export",
        "Everything held about a user, as one document",
        "insights",
        a.Export,
        errors=(404,),
    ),
    Route("POST", "/v1/admin/purge", "purge", "Apply retention now", "insights", PurgeReport),
    # keys and metrics
    Route(
        "POST",
        "/v1/keys",
        "create_key",
        "Make a key of a scope: answered once, stored by its hash",
        "keys",
        a.KeyCreated,
        status=201,
        body=KeyBody,
        errors=BODY_ERRORS,
    ),
    Route(
        "GET",
        "/v1/keys",
        "list_keys",
        "Every key, revoked ones too (never a key itself)",
        "keys",
        a.KeysAnswer,
    ),
    Route(
        "DELETE",
        "/v1/keys/{key_id}",
        "revoke_key",
        "Revoke a key for good",
        "keys",
        a.KeyRevoked,
        errors=(404, 422),
    ),
    Route(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics (the bearer token unless AGENT_MEMORY_METRICS_PUBLIC=1)",
        "service",
        None,
        # An admin key's route like /v1's (web/metrics.py), refused in text as it answers.
        errors=(403, 429),
        text="text/plain",
    ),
    # Agora
    Route(
        "POST",
        "/v1/agents",
        "start_agent",
        "Start an Agora agent with memory, and follow it",
        "agents",
        a.AgentStarted,
        status=201,
        body=StartBody,
        errors=(*BODY_ERRORS, *AGORA_ERRORS),
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/refresh",
        "refresh_agent",
        "Push the pair's memory into a running agent",
        "agents",
        a.AgentRefreshed,
        errors=AGORA_ERRORS,
    ),
    Route(
        "POST",
        "/v1/agents/{agent_id}/leave",
        "leave_agent",
        "Stop an agent through Agora",
        "agents",
        a.AgentLeft,
        errors=AGORA_ERRORS,
    ),
    Route(
        "POST",
        "/v1/sessions/{agent_id}/watch",
        "watch_session",
        "Follow an agent started elsewhere",
        "agents",
        a.Watching,
        status=201,
        body=WatchBody,
        errors=(*BODY_ERRORS, 409, *AGORA_ERRORS),
        extra_answers={200: a.Watching},
    ),
    Route(
        "DELETE",
        "/v1/sessions/{agent_id}/watch",
        "unwatch_session",
        "Stop following an agent",
        "agents",
        a.Unwatched,
    ),
    Route(
        "POST",
        "/v1/render/openai-messages",
        "render_messages",
        "A custom-LLM request's messages as plain OpenAI messages",
        "agents",
        a.Rendered,
        body=RenderBody,
        errors=BODY_ERRORS,
    ),
    Route(
        "POST",
        "/v1/llm/chat/completions",
        "chat_completions",
        "Agora's custom LLM: recall for the turn, forward upstream, record",
        "custom LLM",
        a.ChatCompletion,
        body=ChatCompletionRequest,
        errors=(400, 401, 413, *UPSTREAM_ERRORS),
        auth="llm",
        streams=True,
    ),
    Route(
        "POST",
        "/v1/llm/{route}/chat/completions",
        "chat_completions_routed",
        "The custom LLM, with routing text in its URL",
        "custom LLM",
        a.ChatCompletion,
        body=ChatCompletionRequest,
        errors=(400, 401, 413, *UPSTREAM_ERRORS),
        auth="llm",
        streams=True,
    ),
    Route(
        "GET", "/v1/llm/stats", "llm_stats", "The custom-LLM endpoint's counters", "custom LLM", a.LlmStats
    ),
    Route(
        "POST",
        "/webhooks/agora",
        "agora_webhook",
        "Agora's notification callbacks (signed)",
        "webhooks",
        WebhookAnswer,
        errors=(400, 401, 413, 422, 503),
        auth="signature",
        reads_body=True,
        description="Agora's NCS posts agent events here, signed with AGORA_WEBHOOK_SECRET "
        "(Agora-Signature-V2: hex HMAC-SHA256 of the body).",
    ),
)

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
    for name in path_names(route.path):
        schema, description, example = PATH_PARAMS[name]
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
    scope = ROUTE_SCOPES.get((route.method, route.path)) if route.auth == "token" else None
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
        # A body whose every field is optional may be left out: it reads as {}.
        required = bool(route.body.model_json_schema().get("required"))
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
        for key in ("examples", "example"):
            if key in schema:
                return schema[key][0] if key == "examples" else schema[key]
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        branches = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
        if branches:  # the first branch that holds something
            chosen = next((branch for branch in branches if not admits_null(branch)), branches[0])
            return self.of(chosen, name, depth)
        kind = schema.get("type")
        named = NAMED_EXAMPLES.get(name or "")
        if named is not None and _fits(named, schema):
            return named
        if kind == "object" or "properties" in schema:
            return self._object(schema, depth)
        if kind == "array":
            items = schema.get("items")
            return [self.of(items, None, depth + 1)] if items and depth < 8 else []
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

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        if depth > 8:
            return {}
        return {key: self.of(value, key, depth + 1) for key, value in properties.items()}


def _schemas() -> tuple[dict[Any, dict[str, Any]], dict[str, Any]]:
    """Every model's schema under components/schemas, and a $ref to each by its type."""
    answers = {route.answer for route in ROUTES if route.answer is not None} | {
        answer for route in ROUTES for answer in route.extra_answers.values()
    }
    answers |= {a.ErrorAnswer, a.OpenAIErrorAnswer}
    bodies = {route.body for route in ROUTES if route.body is not None}
    inputs = [(kind, "serialization", TypeAdapter(kind)) for kind in answers]
    inputs += [(kind, "validation", TypeAdapter(kind)) for kind in bodies]
    found, definitions = TypeAdapter.json_schemas(
        inputs,  # type: ignore[arg-type]
        ref_template=REF,
        schema_generator=DocumentSchema,
    )
    refs = {kind: schema for (kind, _mode), schema in found.items()}
    return refs, dict(sorted(definitions.get("$defs", {}).items()))  # a stable document


@cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (built once)."""
    refs, schemas = _schemas()
    examples = Examples(schemas)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs, examples)
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
