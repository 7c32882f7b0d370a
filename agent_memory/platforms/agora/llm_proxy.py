"""Agora's custom LLM (`llm.vendor = "custom"`): the shared endpoint with Agora's fields and rendering.

`POST /v1/llm/chat/completions` (and `/v1/llm/<route>/chat/completions`, so `llm.url` can carry
routing) is an OpenAI Chat Completions endpoint (platforms/llm_endpoint.py: keys, per-turn
recall, relay, recording). What is Agora's is here: the pair is named by top-level
`user_id`/`character_id` from `llm.params`, else by the key's route; the messages are rendered
plain for the model (Agora's extended fields folded into the content); the session recorded into
is the route's agent, else a top-level `agent_id` param, and with neither nothing is recorded
(Agora's request names no agent, and a made-up session would double the callbacks' one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from agent_memory.core.domain import LlmRoute
from agent_memory.core.jsonutil import dumps
from agent_memory.memory.live_calls import ProxyStats
from agent_memory.memory.per_turn import Item
from agent_memory.memory.service import Memory
from agent_memory.platforms.agora.custom_llm import to_openai_messages
from agent_memory.platforms.agora.events import LABELS_FIELD, incoming
from agent_memory.platforms.agora.payloads import MemoryMessage
from agent_memory.platforms.llm_endpoint import OUR_PARAMS, Caller, LlmEndpoint, Parts, Refused

# What Agora adds at the body's top level: none of it is the model's.
AGORA_FIELDS = ("turn_id", "timestamp", "interruptable")
PARAMS_ADVICE = (
    'say whose memory this is: put "user_id" and "character_id" in the agent\'s llm.params '
    "(Agora sends them at the top level of every request), or start the agent through "
    "POST /v1/agents with memory_llm, whose key names the pair"
)


class AgoraAdapter:
    """What the endpoint needs to know of Agora's requests."""

    key_advice = "send llm.api_key = AGENT_MEMORY_LLM_TOKEN, or the key POST /v1/agents minted for the agent"
    platform_fields = frozenset((*AGORA_FIELDS, *OUR_PARAMS))
    unrecorded = "no agent run named (route key or agent_id param)"
    ids_field: str | None = LABELS_FIELD

    def __init__(self, default_character: str) -> None:
        self.default_character = default_character

    def caller(self, body: dict[str, Any], route: LlmRoute | None) -> Caller | Refused:
        user_id, character_id = body.get("user_id"), body.get("character_id")
        if isinstance(user_id, str | int) and str(user_id).strip():
            user_id = str(user_id).strip()
            given = str(character_id).strip() if isinstance(character_id, str | int) else ""
            character_id = given or self.default_character
        elif route is not None:
            user_id, character_id = route.user_id, route.character_id
        else:
            return Refused(f"no user for this request: {PARAMS_ADVICE}", "user_id")
        agent_id = route.agent_id if route is not None and route.agent_id else body.get("agent_id")
        agent_id = str(agent_id) if isinstance(agent_id, str | int) and str(agent_id) else None
        run = agent_id or (route.key_hash if route is not None else None)
        return Caller(user_id, character_id, agent_id, run)

    def render(self, messages: list[Any], known: list[Any] | None = None) -> list[dict[str, Any]]:
        return to_openai_messages(messages, known=known)

    def item(self, message: Any) -> Item:
        """A short-term-memory message read as a 103's messages are."""
        if not isinstance(message, Mapping) or message.get("role") == "system":
            return None  # the agent's system_messages are not conversation
        try:
            return incoming(MemoryMessage.model_validate(message))
        except ValidationError as exc:
            return str(exc.errors()[0]["msg"])


class LlmProxy:
    """Agora's custom-LLM endpoint of one service."""

    def __init__(self, memory: Memory, parts: Parts) -> None:
        self.memory = memory
        self.parts = parts
        self.endpoint = LlmEndpoint(parts, AgoraAdapter(parts.settings.default_character))

    @property
    def stats(self) -> ProxyStats:
        return self.parts.stats

    async def complete(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/llm[/<route>]/chat/completions."""
        return await self.endpoint.complete(request)

    async def report(self, request: web.Request) -> web.Response:
        """The endpoint's counters (GET /v1/llm/stats, behind the API token)."""
        body = {"llm_proxy": self.stats.report(), "warming": self.memory.reading.warming.report()}
        return web.json_response(body, dumps=dumps)
