"""Agora's HTTP routes: start agents with memory, follow, refresh and stop them; render messages.

`POST /v1/agents` takes Agora's join body, adds memory (and our labels) to it, starts the
agent and follows it; with `memory_llm` the agent's LLM is also pointed at this service's
custom-LLM endpoint, which recalls every turn and forwards to the caller's own LLM.
`POST /v1/render/openai-messages` turns a custom-LLM request's messages into plain OpenAI
messages.
"""

from __future__ import annotations

import copy
import logging
import secrets
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NamedTuple

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.config import JsonDict

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import LlmRoute
from agent_memory.core.limits import MAX_PERSONA_CHARS, MAX_TOKENS, MIN_TOKENS
from agent_memory.core.secrets import hash_key
from agent_memory.core.styles import DEFAULT_STYLE, STYLES
from agent_memory.errors import AgoraError, Conflict, InvalidField
from agent_memory.memory.service import Memory
from agent_memory.platforms.agora.custom_llm import AgoraMessage, RenderOptions, to_openai_messages
from agent_memory.platforms.agora.events import session_event
from agent_memory.platforms.agora.keys import AGORA, REFRESHER
from agent_memory.platforms.agora.payloads import AgentJoined
from agent_memory.settings import Settings
from agent_memory.web import answers as a
from agent_memory.web.declare import BODY_ERRORS, Route, Routes
from agent_memory.web.http import json_response, read_model, validation_message
from agent_memory.web.schemas import WHOLE

log = logging.getLogger(__name__)

SystemMessages = list[dict[str, Any]]


# The documented example of a start (the OpenAPI document's, which the contract run sends).
START_EXAMPLE: JsonDict = {
    "user_id": "u-alice",
    "character_id": "luna",
    "join": {
        "name": "luna-alice",
        "properties": {
            "channel": "alice-luna-1103",
            "token": "<RTC token>",
            "agent_rtc_uid": "0",
            "remote_rtc_uids": ["*"],
            "llm": {"url": "https://llm.example/v1/chat/completions", "system_messages": []},
        },
    },
}


class StartBody(BaseModel):
    """`POST /v1/agents`: whose memory, how much of it, and Agora's join body."""

    model_config = ConfigDict(strict=True, json_schema_extra={"examples": [START_EXAMPLE]})
    user_id: str = Field(min_length=1, max_length=256)
    character_id: str = Field(min_length=1, max_length=256)
    persona: str | None = Field(None, max_length=MAX_PERSONA_CHARS)
    max_tokens: Annotated[int, Field(ge=MIN_TOKENS, le=MAX_TOKENS), WHOLE] | None = None
    # Point the agent's llm.url at this service's custom-LLM endpoint (memory in every turn).
    memory_llm: bool = False
    join: dict[str, Any] = Field(description="Agora's join body: name, properties, …")


class WatchBody(BaseModel):
    """`POST /v1/sessions/{agent_id}/watch`: follow an agent started elsewhere."""

    model_config = ConfigDict(
        strict=True,
        json_schema_extra={
            "examples": [{"user_id": "u-alice", "character_id": "luna", "system_messages": []}],
            # Both user_id and character_id, or neither (null counts as not given).
            "anyOf": [
                {
                    "required": ["user_id", "character_id"],
                    "properties": {"user_id": {"type": "string"}, "character_id": {"type": "string"}},
                },
                {"properties": {"user_id": {"type": "null"}, "character_id": {"type": "null"}}},
            ],
        },
    )
    user_id: str | None = Field(None, min_length=1, max_length=256)
    character_id: str | None = Field(None, min_length=1, max_length=256)
    # The agent's own system messages; given (even []), refreshes may replace the list.
    system_messages: SystemMessages | None = None
    persona: str | None = Field(None, max_length=MAX_PERSONA_CHARS)
    max_tokens: Annotated[int, Field(ge=MIN_TOKENS, le=MAX_TOKENS), WHOLE] | None = None
    # The agent's llm.style: the shape refreshed memory is sent in.
    style: Literal["openai", "gemini", "anthropic"] | None = None
    # The agent's llm.max_history (Agora's default when not given): a refresh leaves out what it holds.
    max_history: Annotated[int, Field(ge=1, le=1024), WHOLE] | None = None


# A Studio pipeline join (top-level `pipeline_id`) takes its LLM settings from the saved
# pipeline, and `properties` fields override them (Agora's agent SDKs, "AI Studio pipeline IDs").
PIPELINE_KEEPS_ITS_PROMPT = (
    "the join names a pipeline_id and carries no properties.llm.system_messages: the Studio "
    "pipeline's own system messages are unknown here and an llm.system_messages list would "
    "replace them, so memory was not injected and refreshes are off for this agent. To inject "
    "memory, give properties.llm.system_messages (the pipeline's prompt and anything else); "
    "memory is added after them."
)


# The custom-LLM endpoint, under AGENT_MEMORY_PUBLIC_URL; Agora posts every turn here.
LLM_PATH = "/v1/llm/chat/completions"
# Agora's range of llm.max_history (AGORA.md; its default, 32, is the memory's default window).
MAX_HISTORY_RANGE = 1024
# What `api_key` holds in an llm block printed for people: the secret is never printed unasked.
TOKEN_PLACEHOLDER = "<AGENT_MEMORY_LLM_TOKEN>"
NO_PUBLIC_URL = (
    "memory_llm needs AGENT_MEMORY_PUBLIC_URL: the address at which Agora reaches this service "
    "(e.g. https://memory.example.com); the agent's llm.url is set to it + " + LLM_PATH
)
CHAT_COMPLETIONS = "/chat/completions"


class MemoryPlan(NamedTuple):
    """Whether memory goes into a join body, in which style, and if not, why not."""

    inject: bool
    style: str
    reason: str | None


def _object(value: Any, where: str) -> dict[str, Any]:
    """`value` if it is an object (absent counts as empty), else a 422 naming `where`."""
    if not isinstance(value if value is not None else {}, dict):
        raise InvalidField(f"{where} must be an object")
    return value or {}


def style_of_llm(llm: Mapping[str, Any]) -> str:
    """The style an Agora join body's `llm` block asks for; 422 for one memory cannot take.

    Agora's join reference lists `llm.style` as `openai` (the default), `gemini`, `anthropic`
    and `dify`; it documents no `system_messages` shape for `dify`, and nothing ties the style
    to `llm.vendor` or the URL, so the style is read from `llm.style` alone.
    """
    value = llm.get("style")
    if value is None:
        return DEFAULT_STYLE
    style = value.strip().lower() if isinstance(value, str) else value
    if style not in STYLES:
        raise InvalidField(
            f"join.properties.llm.style {value!r} is not one the service can put memory in "
            f"({', '.join(STYLES)}); Agora documents no system_messages shape for it. Start "
            "such an agent yourself and follow it with POST /v1/sessions/{agent_id}/watch"
        )
    return style


def plan_memory(join: dict[str, Any]) -> MemoryPlan:
    """Check the join body's shape and decide whether and how memory goes into it."""
    properties = _object(join.get("properties"), "join.properties")
    _object(properties.get("labels"), "join.properties.labels")
    llm = _object(properties.get("llm"), "join.properties.llm")
    own = llm.get("system_messages")
    if own is not None and (not isinstance(own, list) or not all(isinstance(m, dict) for m in own)):
        raise InvalidField("join.properties.llm.system_messages must be a list of message objects")
    style = style_of_llm(llm)
    if join.get("pipeline_id") and own is None:
        return MemoryPlan(False, style, PIPELINE_KEEPS_ITS_PROMPT)
    return MemoryPlan(True, style, None)


def max_history_of(join: dict[str, Any]) -> int | None:
    """The join's `llm.max_history` (the messages the agent keeps itself); None: Agora's default."""
    value = ((join.get("properties") or {}).get("llm") or {}).get("max_history")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HISTORY_RANGE:
        raise InvalidField(
            f"join.properties.llm.max_history must be a whole number from 1 to {MAX_HISTORY_RANGE} "
            f"(Agora's range), not {value!r}"
        )
    return value


class Upstream(NamedTuple):
    """The caller's own LLM, from a join body's `llm` block: where the endpoint forwards to."""

    base_url: str | None
    api_key: str | None
    model: str | None
    params: dict[str, Any]


def memory_llm_url(base: str) -> str:
    """The custom-LLM endpoint's URL under a public base URL (a full endpoint URL is kept)."""
    base = base.strip().rstrip("/")
    return base if base.endswith(CHAT_COMPLETIONS) else base + LLM_PATH


def custom_llm_block(
    url: str, api_key: str, user_id: str, character_id: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `llm` fields that make Agora call the endpoint at `url` for this pair.

    Agora merges `llm.params` into each request's top level: that is how the endpoint learns
    whose memory to recall and record.
    """
    return {
        "vendor": "custom",
        "url": url,
        "api_key": api_key,
        "params": {**(params or {}), "user_id": user_id, "character_id": character_id},
    }


def _text(llm: Mapping[str, Any], key: str) -> str | None:
    """`llm[key]` if it is a non-empty string; absent or empty is None, anything else a 422."""
    value = llm.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidField(f"join.properties.llm.{key} must be a string")
    return value


def upstream_of(join: dict[str, Any], plan: MemoryPlan, public_url: str | None) -> Upstream:
    """The upstream the endpoint will forward the agent's turns to; 422 when it cannot be wired.

    The endpoint speaks OpenAI Chat Completions, so only the `openai` style can go through it.
    A Studio pipeline keeps its LLM in the pipeline, unknown here: such a join must name its
    LLM in `properties.llm.url`. Without a url, the server's own upstream
    (AGENT_MEMORY_UPSTREAM_BASE_URL) is used.
    """
    if not public_url:
        raise InvalidField(NO_PUBLIC_URL)
    if plan.style != DEFAULT_STYLE:
        raise InvalidField(
            f"memory_llm forwards OpenAI Chat Completions; join.properties.llm.style {plan.style!r} "
            "cannot go through it (leave memory_llm out, or use an OpenAI-compatible LLM)"
        )
    llm = _object(_object(join.get("properties"), "join.properties").get("llm"), "join.properties.llm")
    url = _text(llm, "url")
    if join.get("pipeline_id") and url is None:
        raise InvalidField(
            "memory_llm with a pipeline_id needs join.properties.llm.url (and api_key, params.model): "
            "the Studio pipeline's LLM is unknown here, and the endpoint must know where to forward"
        )
    params = _object(llm.get("params"), "join.properties.llm.params")
    model = params.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidField("join.properties.llm.params.model must be a string")
    base_url = None
    if url is not None:
        if url.strip().startswith(public_url.strip().rstrip("/") + "/v1/llm/"):
            raise InvalidField(
                "join.properties.llm.url already points at this service's custom-LLM endpoint; with "
                "memory_llm give your own LLM's url: the endpoint forwards to it"
            )
        base_url = url.strip().rstrip("/").removesuffix(CHAT_COMPLETIONS)
    return Upstream(base_url, _text(llm, "api_key"), model, dict(params))


def with_memory(
    join: dict[str, Any],
    labels: dict[str, str],
    memory: SystemMessages | None,
    llm_fields: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], SystemMessages | None]:
    """Agora's join body with our labels added and memory after the caller's system messages.

    `llm_fields` (such as `custom_llm_block`'s) replace those of the join's `llm` block. With
    `memory` None the system messages are left exactly as given (absent stays absent); the
    second value, the caller's own system messages, is then None: refreshes are impossible.
    """
    body = copy.deepcopy(join)
    properties = body.setdefault("properties", {})
    properties["labels"] = {**(properties.get("labels") or {}), **labels}
    if llm_fields is not None:
        properties["llm"] = {**(properties.get("llm") or {}), **copy.deepcopy(dict(llm_fields))}
    if memory is None:
        return body, None
    llm = properties.setdefault("llm", {})
    own = list(llm.get("system_messages") or [])
    llm["system_messages"] = own + memory
    return body, own


class RenderBody(BaseModel):
    """`POST /v1/render/openai-messages`: a custom-LLM request's messages and how to render them."""

    model_config = ConfigDict(
        strict=True,
        json_schema_extra={
            "examples": [{"messages": [{"role": "user", "content": "What did I say my cat's name was?"}]}]
        },
    )
    messages: list[AgoraMessage] = Field(max_length=5000)
    options: RenderOptions = Field(default_factory=RenderOptions)


# The routes' declarations (web/declare.py): `install` serves them, bound to an AgentRoutes.
ROUTES = Routes()
AGORA_ERRORS = (404, 409, 429, 502, 503)


class AgentRoutes:
    """The handlers of Agora's routes, over the `Memory` that `install` gives them."""

    def __init__(self, memory: Memory, settings: Settings) -> None:
        self.memory = memory
        self.settings = settings

    def table(self) -> list[Route]:
        """The routes, to add to the app."""
        return ROUTES.bound(self)

    @ROUTES.post(
        "/v1/agents",
        "Start an Agora agent with memory, and follow it",
        "agents",
        a.AgentStarted,
        scope="write",
        status=201,
        body=StartBody,
        errors=(*BODY_ERRORS, *AGORA_ERRORS),
    )
    async def start_agent(self, request: web.Request) -> web.Response:
        """Start an agent through Agora with the pair's memory in its system messages, and follow it."""
        memory = self.memory
        settings = self.settings
        body = await read_model(request, StartBody)
        plan = plan_memory(body.join)
        max_history = max_history_of(body.join)
        upstream = upstream_of(body.join, plan, settings.public_url) if body.memory_llm else None
        max_tokens = body.max_tokens or settings.context_max_tokens
        # The call is starting: its first question should find the pair's index in memory.
        memory.reading.warm(body.user_id, body.character_id)
        context = None
        if plan.inject:
            context = await memory.reading.system_messages(
                body.user_id,
                body.character_id,
                max_tokens=max_tokens,
                persona=body.persona,
                style=plan.style,
            )
        labels = {
            settings.label_user_key: body.user_id,
            settings.label_character_key: body.character_id,
        }
        llm: dict[str, Any] | None = None
        key_hash = None
        if upstream is not None:
            assert settings.public_url is not None  # upstream_of refused the join without it
            key = secrets.token_urlsafe(32)
            key_hash = hash_key(key)
            route = LlmRoute(
                key_hash=key_hash,
                agent_id=None,
                user_id=body.user_id,
                character_id=body.character_id,
                upstream_base_url=upstream.base_url,
                upstream_api_key=upstream.api_key,
                upstream_model=upstream.model,
                upstream_params=upstream.params,
                created_ms=now_ms(),
            )
            # Stored before the join: Agora may call the endpoint as soon as the agent is up.
            await memory.keys.add_llm_route(route)
            url = memory_llm_url(settings.public_url)
            llm = custom_llm_block(url, key, body.user_id, body.character_id, upstream.params)
        join, own = with_memory(body.join, labels, context.system_messages if context else None, llm)
        try:
            answer = await request.app[AGORA].join(join)
        except Exception:
            if key_hash is not None:
                await memory.keys.drop_llm_route(key_hash)  # no agent will ever call with that key
            raise
        if not answer.get("agent_id"):
            raise AgoraError(
                "Agora join answered 200 without an agent_id; the agent may be running unfollowed",
                http_status=200,
                detail=str(answer)[:200],
            )
        agent_id = str(answer["agent_id"])
        if key_hash is not None:
            await memory.keys.tie_llm_route(key_hash, agent_id)
        properties = join["properties"]
        joined = AgentJoined.model_validate(
            {
                "agent_id": agent_id,
                "channel": properties.get("channel"),
                "name": join.get("name"),
                "labels": properties["labels"],
                "start_ts": answer.get("create_ts"),
            }
        )
        following = await memory.follows.follow(
            agent_id,
            origin="join",
            user_id=body.user_id,
            character_id=body.character_id,
            base_system_messages=own,
            persona=body.persona,
            max_tokens=max_tokens,
            style=plan.style,
            event=session_event(joined),
            max_history=max_history,
        )
        # The start event always yields a session; the check narrows the type.
        assert following.session is not None
        session = following.session
        if not plan.inject:
            log.info("agent %s started from a pipeline without memory: %s", agent_id, plan.reason)
        return json_response(
            {
                "agent_id": agent_id,
                "agora": answer,
                "session": a.SessionOut.of(session).model_dump(mode="json"),
                "system_messages": (properties.get("llm") or {}).get("system_messages"),
                "memory": {
                    "injected": plan.inject,
                    "style": plan.style,
                    "reason": plan.reason,
                    # The key stays between this service and Agora: never in an answer.
                    **({"llm": {"url": llm["url"], "custom": True}} if llm else {}),
                },
                "memory_tokens": context.tokens if context else 0,
                "included": context.included if context else {},
            },
            status=201,
        )

    @ROUTES.post(
        "/v1/agents/{agent_id}/refresh",
        "Push the pair's memory into a running agent",
        "agents",
        a.AgentRefreshed,
        scope="write",
        errors=AGORA_ERRORS,
    )
    async def refresh_agent(self, request: web.Request) -> web.Response:
        """Push the agent's memory into it now, even if unchanged."""
        agent_id = request.match_info["agent_id"]
        messages = await request.app[REFRESHER].push(agent_id, force=True)
        return json_response({"agent_id": agent_id, "system_messages": messages})

    @ROUTES.post(
        "/v1/agents/{agent_id}/leave",
        "Stop an agent through Agora",
        "agents",
        a.AgentLeft,
        scope="write",
        errors=AGORA_ERRORS,
    )
    async def leave_agent(self, request: web.Request) -> web.Response:
        """Ask Agora to stop the agent."""
        agent_id = request.match_info["agent_id"]
        answer = await request.app[AGORA].leave(agent_id)
        # Following ends with the 102/103 or the 404 that comes after a leave.
        return json_response({"agent_id": agent_id, "agora": answer})

    @ROUTES.post(
        "/v1/sessions/{agent_id}/watch",
        "Follow an agent started elsewhere",
        "agents",
        a.Watching,
        scope="write",
        status=201,
        body=WatchBody,
        errors=(*BODY_ERRORS, 409, *AGORA_ERRORS),
        extra_answers={200: a.Watching},
    )
    async def watch_session(self, request: web.Request) -> web.Response:
        """Follow an agent started elsewhere; with its system messages, refresh it too."""
        agent_id = request.match_info["agent_id"]
        body = await read_model(request, WatchBody)
        following = await self.memory.follows.follow(
            agent_id,
            origin="manual",
            user_id=body.user_id,
            character_id=body.character_id,
            base_system_messages=body.system_messages,
            persona=body.persona,
            max_tokens=body.max_tokens,
            style=body.style,
            max_history=body.max_history,
        )
        watch = following.watch
        created = following.result == "created"
        if watch is None:
            raise Conflict(f"agent {agent_id} has already stopped; there is nothing to follow")
        return json_response(
            {
                "agent_id": agent_id,
                "following": watch.status == "watching",
                "created": created,
                "refresh_enabled": watch.refreshes,
            },
            status=201 if created else 200,
        )

    @ROUTES.delete(
        "/v1/sessions/{agent_id}/watch", "Stop following an agent", "agents", a.Unwatched, scope="write"
    )
    async def unwatch_session(self, request: web.Request) -> web.Response:
        """Stop following an agent."""
        agent_id = request.match_info["agent_id"]
        stopped = await self.memory.follows.unfollow(agent_id, "stopped by request")
        return json_response({"agent_id": agent_id, "stopped": stopped})

    @ROUTES.post(
        "/v1/render/openai-messages",
        "A custom-LLM request's messages as plain OpenAI messages",
        "agents",
        a.Rendered,
        scope="read",
        body=RenderBody,
        errors=BODY_ERRORS,
    )
    async def render_messages(self, request: web.Request) -> web.Response:
        """A custom-LLM request's messages as OpenAI messages: system, tool and image parts kept."""
        body = await read_model(request, RenderBody)
        try:
            messages = to_openai_messages(body.messages, body.options)
        except ValidationError as exc:
            raise InvalidField(f"messages: {validation_message(exc)}") from None
        return json_response({"messages": messages})
