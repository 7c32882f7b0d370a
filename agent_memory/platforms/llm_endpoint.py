"""A custom-LLM endpoint over per-turn memory, shared by every platform whose agent calls an
OpenAI-compatible chat completions URL (Agora, Vapi, ElevenLabs).

Each request is authorised by its bearer (`AGENT_MEMORY_LLM_TOKEN`, or a per-agent key minted
by `POST /v1/agents`), read by its platform's `Adapter` (whose memory, which call, the
platform's own fields), gets the memories recalled for its latest user turn as one system
message (memory/per_turn.py: within a deadline), is forwarded without the platform's fields and
relayed back as it streams (upstream/sse.py), and its turns are recorded into the call's
session. A platform adds an adapter and its routes; no recall or recording code of its own.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.core.domain import LlmRoute
from agent_memory.core.events import TOOL_CALL, TOOL_RESULT, IncomingMessage
from agent_memory.core.jsonutil import dumps
from agent_memory.core.secrets import hash_key
from agent_memory.errors import InvalidField, InvalidJSON, StoreUnavailable
from agent_memory.memory.live_calls import BRIEF_PAIRS_HELD, ProxyStats
from agent_memory.memory.per_turn import Item, PerTurn, Turn, text_of
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.upstream import HttpUpstream, Target, Upstream
from agent_memory.upstream.sse import Outgoing, Relay, Reply, openai_error
from agent_memory.web import answers as a
from agent_memory.web.declare import OWN_BEARER, UPSTREAM_ERRORS, Route
from agent_memory.web.http import read_json_body
from agent_memory.web.keys import METRICS, SETTINGS

log = logging.getLogger(__name__)

DEFAULT_UPSTREAM = "https://api.openai.com/v1"
# What our own `llm.params` (or a platform's metadata) add at the top level: never the model's.
OUR_PARAMS = ("user_id", "character_id", "agent_id")
TURN_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose memory a request is, and the call its turns are recorded into."""

    # None: an unidentified call (relayed without memory; its turns recorded unlabelled).
    user_id: str | None
    character_id: str
    # The session the call's turns go to (None: not recorded).
    session: str | None
    # What tells this call's requests from other calls' (None: nothing does).
    run: str | None

    @classmethod
    def in_call(
        cls, user_id: str | None, character_id: str, session: str | None, route: LlmRoute | None
    ) -> Caller:
        """A caller whose requests are told apart by their call's session, else by their route's key."""
        run = session or (route.key_hash if route is not None else None)
        return cls(user_id, character_id, session, run)


@dataclass(frozen=True, slots=True)
class Refused:
    """A request the endpoint cannot serve: a 400 saying what to fix."""

    message: str
    param: str | None = None


class Adapter(Protocol):
    """What a platform's custom-LLM route knows: its fields, its identity rules, its rendering."""

    # What the 401 tells the platform's user to send as the bearer key.
    key_advice: str
    # Top-level body fields that are the platform's (or ours), not the model's.
    platform_fields: frozenset[str]
    # Why a request with no session was not recorded (the X-Agent-Memory-Recorded header).
    unrecorded: str

    def caller(self, body: dict[str, Any], route: LlmRoute | None) -> Caller | Refused:
        """Whose memory this is, and the call's session."""
        ...

    def render(self, messages: list[Any], known: list[Any] | None = None) -> list[dict[str, Any]]:
        """The messages as the model gets them (InvalidField: a message to fix); `known` holds
        what the platform read of each message in the call's last request (None where new), and
        takes what it reads of the rest, for the call's next request."""
        ...

    # Where the platform takes the app's ids (named in the warning about an unidentified call).
    ids_field: str | None

    def item(self, message: Any) -> Item:
        """One message of the request as a transcript item (None: not conversation; text: why
        it could not be read)."""
        ...


class OpenAIChat:
    """What an adapter whose platform sends plain OpenAI chat messages (Vapi, ElevenLabs) does
    with them: renders them as sent and reads them with `chat_item`."""

    def render(self, messages: list[Any], known: list[Any] | None = None) -> list[dict[str, Any]]:
        return plain_messages(messages)

    def item(self, message: Any) -> Item:
        return chat_item(message)


class ChatRequest(BaseModel):
    """What a platform's custom-LLM route takes (for the document): OpenAI's chat completion
    request, with the platform's own fields beside it. The endpoint reads it itself."""

    model_config = ConfigDict(extra="allow")
    messages: list[dict[str, Any]] = Field(description="the conversation: role and content each")
    stream: Any = Field(None, description="true: answer server-sent events as the upstream streams them")


def as_object(value: Any) -> Mapping[str, Any]:
    """A JSON object a platform sent beside the OpenAI fields, or an empty one when it sent another value."""
    return value if isinstance(value, Mapping) else {}


def plain_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """OpenAI chat messages as sent (each an object with a role), for the model."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidField(f"messages[{index}] must be an object with a role (an OpenAI chat message)")
    return messages


def chat_item(message: Any) -> Item:
    """A plain OpenAI chat message as transcript items: the user's and the assistant's words,
    and the model's tool calls and their results as their own kinds (as a platform's webhook
    keeps them, so the call's report merges into them).

    System messages are the agent's prompt, not conversation.
    """
    if not isinstance(message, Mapping):
        return None
    role = message.get("role")
    if role == "tool":
        tool = {key: message[key] for key in ("tool_call_id", "name") if isinstance(message.get(key), str)}
        return IncomingMessage("tool", text_of(message.get("content")), kind=TOOL_RESULT, tool=tool)
    if role not in TURN_ROLES:
        return None
    text = text_of(message.get("content"))
    said = IncomingMessage(role=role, content=text) if text.strip() else None
    calls = message.get("tool_calls") if role == "assistant" else None
    if not isinstance(calls, list) or not calls:
        return said
    # The words said with the calls, then the calls (a platform's report lists them so).
    called = IncomingMessage("assistant", "", kind=TOOL_CALL, tool={"tool_calls": calls})
    return (said, called) if said is not None else called


@dataclass(slots=True)
class Call:
    """One request, as the endpoint understood it."""

    body: dict[str, Any]
    turn: Turn
    route: LlmRoute | None
    stream: bool


class Keys:
    """The endpoint's bearer keys: the service's LLM token, or a per-agent key's route."""

    def __init__(self, memory: Memory, settings: Settings) -> None:
        self.memory = memory
        self.settings = settings
        # Per-agent keys found in the database, by hash: while it is down, a live call whose key
        # was found before goes on (without memory) instead of failing.
        self._routes: dict[str, LlmRoute] = {}

    async def authorise(self, request: web.Request) -> LlmRoute | bool | None:
        """The key's route (None: the LLM token), or False for a missing or wrong key."""
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            return False
        token = self.settings.llm_token
        if token and hmac.compare_digest(key.encode(), token.encode()):
            return None
        try:
            route = await self.memory.keys.llm_route(key)
        except StoreUnavailable:
            route = self._routes.get(hash_key(key))
            if route is None:
                raise
            return route
        if route is None:
            return False
        if len(self._routes) >= BRIEF_PAIRS_HELD:
            self._routes.clear()
        self._routes[route.key_hash] = route
        return route


class Parts:
    """What every custom-LLM route of one service shares: counters, per-turn memory, the relay, keys."""

    def __init__(self, memory: Memory, settings: Settings, upstream: Upstream | None = None) -> None:
        self.memory = memory
        self.settings = settings
        self.stats = ProxyStats()
        self.turns = PerTurn(memory, settings, self.stats)
        self.relay = Relay(
            upstream
            or HttpUpstream(
                connect_timeout_s=settings.upstream_connect_timeout_s,
                first_byte_timeout_s=settings.upstream_first_byte_timeout_s,
            ),
            self.stats,
        )
        self.keys = Keys(memory, settings)

    async def close(self) -> None:
        await self.relay.disconnects.stop()
        await self.turns.close()
        await self.relay.upstream.close()


PARTS = web.AppKey("llm_parts", Parts)


def shared_parts(app: web.Application, memory: Memory) -> Parts:
    """The app's one `Parts`, made (with its counters reported and closed at shutdown) on first use."""
    if PARTS in app:
        return app[PARTS]
    parts = app[PARTS] = Parts(memory, app[SETTINGS])
    if (metrics := app.get(METRICS)) is not None:
        metrics.add_reported("llm_proxy", "What the custom-LLM endpoint did", parts.stats.report)

    async def close_parts(app: web.Application) -> AsyncIterator[None]:
        """Record the held replies and close the upstream's connections at shutdown."""
        yield
        await parts.close()

    app.cleanup_ctx.append(close_parts)
    return parts


class LlmEndpoint:
    """One platform's custom-LLM route over the shared parts."""

    def __init__(self, parts: Parts, adapter: Adapter) -> None:
        self.parts = parts
        self.adapter = adapter
        self.settings = parts.settings
        self.stats = parts.stats
        self.turns = parts.turns

    async def complete(self, request: web.Request) -> web.StreamResponse:
        """POST …/chat/completions."""
        self.stats.requests += 1
        route = await self.parts.keys.authorise(request)
        if route is False:
            self.stats.unauthorized += 1
            return openai_error(
                401,
                f"missing or wrong bearer key: {self.adapter.key_advice}",
                kind="invalid_request_error",
                code="invalid_api_key",
            )
        call = await self._read(request, route if isinstance(route, LlmRoute) else None)
        if isinstance(call, web.Response):
            return call
        turn = call.turn
        self.turns.started(turn)
        # A brief pair is recalled at once, right here: as a task it would first wait its turn
        # on the loop, behind every stream with a chunk ready. Another pair is recalled on a
        # reader thread while this one renders the messages.
        brief = self.turns.is_brief(turn)
        found = await self.turns.recall(turn, brief=True) if brief else None
        recalling = None if brief else asyncio.ensure_future(self.turns.recall(turn, brief=False))
        try:
            messages = self.adapter.render(call.body["messages"], self.turns.known_reads(turn))
        except InvalidField as exc:
            if recalling is not None:
                recalling.cancel()
            return self._bad(exc.message, "messages")
        if recalling is not None:
            found = await recalling
        messages, injected = self.turns.inject(found, messages)
        return await self._forward(request, call, turn, messages, injected)

    async def _forward(
        self, request: web.Request, call: Call, turn: Turn, messages: list[Any], injected: int
    ) -> web.StreamResponse:
        headers = {"X-Agent-Memory-Memories": str(injected)}
        if turn.session is None:
            headers["X-Agent-Memory-Recorded"] = f"no: {self.adapter.unrecorded}"
        reply = Reply()
        out = Outgoing(
            self._target(call.route),
            dumps(self._forwarded(call, messages)).encode(),
            headers,
            stream=call.stream,
            keep=turn.session is not None,
            # Once the request is on its way (while the model thinks), not between caller and model.
            sent=lambda: self._record(turn),
        )
        try:
            return await self.parts.relay.answer(request, out, reply)
        finally:
            self._replied(turn, reply)

    def _record(self, turn: Turn) -> None:
        self.turns.record(turn, self.turns.window(turn, self.adapter.item, self.adapter.ids_field))

    def _replied(self, turn: Turn, reply: Reply) -> None:
        text = reply.text if turn.window is not None else ""
        if reply.interrupted:
            log.info("custom LLM: the client went away (%d characters recorded); upstream closed", len(text))
        self.turns.reply(turn, text, interrupted=reply.interrupted, said_ms=reply.said_ms)

    def _forwarded(self, call: Call, messages: list[Any]) -> dict[str, Any]:
        """The body the model gets: plain messages, memory before the conversation, platform fields out."""
        dropped = self.adapter.platform_fields
        body = {k: v for k, v in call.body.items() if k not in dropped}
        route = call.route
        for key, value in (route.upstream_params if route is not None else {}).items():
            if key not in dropped:
                body.setdefault(key, value)
        model = (route.upstream_model if route is not None else None) or self.settings.upstream_model
        if model:
            body["model"] = model
        body["messages"] = messages
        return body

    def _target(self, route: LlmRoute | None) -> Target:
        settings = self.settings
        if route is not None and route.upstream_base_url:
            return Target(route.upstream_base_url, route.upstream_api_key)
        return Target(
            settings.upstream_base_url or settings.openai_base_url or DEFAULT_UPSTREAM,
            settings.upstream_api_key or settings.openai_api_key,
        )

    def _bad(self, message: str, param: str | None = None) -> web.Response:
        self.stats.bad_requests += 1
        return openai_error(400, message, kind="invalid_request_error", param=param)

    async def _read(self, request: web.Request, route: LlmRoute | None) -> Call | web.Response:
        try:
            body = await read_json_body(request)
        except InvalidJSON as exc:
            return self._bad(exc.message)
        if not isinstance(body, dict):
            return self._bad("the body must be a JSON object (an OpenAI chat completion request)")
        if not isinstance(body.get("messages"), list):
            return self._bad("messages must be a list of chat messages", "messages")
        caller = self.adapter.caller(body, route)
        if isinstance(caller, Refused):
            return self._bad(caller.message, caller.param)
        turn = Turn(caller.user_id, caller.character_id, caller.session, caller.run, body["messages"])
        return Call(body, turn, route, body.get("stream") is True)


def completion_route(
    platform: str, summary: str, body: type[BaseModel], app: web.Application, memory: Memory, adapter: Adapter
) -> Route:
    """A platform's custom-LLM route, `POST /v1/<platform>/chat/completions`, declared
    (web/declare.py) over the app's shared endpoint parts."""
    endpoint = LlmEndpoint(shared_parts(app, memory), adapter)
    return Route(
        "POST",
        f"/v1/{platform}/chat/completions",
        summary,
        "custom LLM",
        a.ChatCompletion,
        scope=OWN_BEARER,
        operation_id=f"{platform}_chat_completions",
        body=body,
        errors=(400, 401, 413, *UPSTREAM_ERRORS),
        auth="llm",
        streams=True,
        handler=endpoint.complete,
    )
