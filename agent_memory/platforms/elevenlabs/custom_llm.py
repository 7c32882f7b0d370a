"""ElevenLabs' custom LLM (an agent's LLM set to "Custom LLM"): the shared per-turn endpoint at
`POST /v1/elevenlabs/chat/completions` (the agent's server URL is `<service>/v1/elevenlabs`;
ElevenLabs appends `/chat/completions`).

ElevenLabs sends an OpenAI chat completion request with `user_id` (the end user named when the
conversation started) and, with "Custom LLM extra body" on, `elevenlabs_extra_body`: whatever
the app passed as `custom_llm_extra_body` when it started the conversation
(fixtures/elevenlabs/custom_llm/). ElevenLabs puts no conversation id in the request, so the
app passes it there: `conversation_id` (or `system__conversation_id`, also inside a
`dynamic_variables` object); the session is then `elevenlabs:<conversation id>`, as the
post-call webhook's, and the turns recorded here and the transcript merge. Without it the turns
are not recorded (recall still works). Whose memory (docs/identity.md): `user_id`/`character_id`
in the extra body (or its `dynamic_variables`), else the top-level `user_id`, else the per-agent
key's pair, else the caller's number (`system__caller_id`) when AGENT_MEMORY_PHONE_IDENTITY is
on; the character is the explicit one, else the agent's id (`agent_id`, `system__agent_id`).
The bearer key is the agent's custom-LLM API key secret: AGENT_MEMORY_LLM_TOKEN, or a per-agent key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web
from pydantic import ConfigDict

from agent_memory.core.domain import LlmRoute
from agent_memory.memory.service import Memory
from agent_memory.platforms.calls import call_identity, session_key
from agent_memory.platforms.llm_endpoint import (
    OUR_PARAMS,
    Caller,
    ChatRequest,
    OpenAIChat,
    Refused,
    as_object,
    completion_route,
)
from agent_memory.settings import Settings
from agent_memory.web.declare import Route
from agent_memory.web.keys import SETTINGS

PLATFORM = "elevenlabs"
EXTRA_BODY = "elevenlabs_extra_body"


def _first(places: Sequence[Mapping[str, Any]], *keys: str) -> Any:
    """The first value given under any of `keys`, in the order of `places`."""
    for place in places:
        for key in keys:
            value = place.get(key)
            if value not in (None, ""):
                return value
    return None


class ElevenLabsChatRequest(ChatRequest):
    """A chat completion request as ElevenLabs sends it: OpenAI's fields, `user_id`, the extra body."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "messages": [{"role": "user", "content": "What did I tell you about my sister?"}],
                    "model": "gpt-4o",
                    "temperature": 0.7,
                    "max_tokens": 5000,
                    "stream": True,
                    "user_id": "u-alice",
                    EXTRA_BODY: {"conversation_id": "conv_01jxyz", "character_id": "luna"},
                }
            ]
        },
    )


class ElevenLabsAdapter(OpenAIChat):
    """What the shared endpoint needs to know of ElevenLabs' requests."""

    key_advice = (
        "store AGENT_MEMORY_LLM_TOKEN (or a key POST /v1/agents minted) as the custom LLM's "
        "API key secret in the agent's settings: ElevenLabs sends it as the bearer"
    )
    ids_field: str | None = EXTRA_BODY
    platform_fields = frozenset((EXTRA_BODY, *OUR_PARAMS))
    unrecorded = "no conversation_id in elevenlabs_extra_body (pass it in custom_llm_extra_body)"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def caller(self, body: dict[str, Any], route: LlmRoute | None) -> Caller | Refused:
        extra = as_object(body.get(EXTRA_BODY))
        places = (extra, as_object(extra.get("dynamic_variables")))
        user_id = _first(places, "user_id")
        character_id = _first(places, "character_id") if user_id is not None else None
        if user_id is None and body.get("user_id") not in (None, ""):
            user_id, character_id = body.get("user_id"), _first(places, "character_id")
        if user_id is None and route is not None:
            user_id, character_id = route.user_id, route.character_id
        identity = call_identity(
            self.settings,
            user_id=user_id,
            character_id=character_id,
            phone=_text(_first(places, "system__caller_id", "caller_id")),
            agent_id=_first(places, "agent_id", "system__agent_id"),
        )
        conversation = _text(_first(places, "conversation_id", "system__conversation_id"))
        session = session_key(PLATFORM, conversation) if conversation else None
        return Caller.in_call(identity.user_id, identity.character_id, session, route)


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def custom_llm_routes(app: web.Application, memory: Memory) -> list[Route]:
    """ElevenLabs' custom-LLM route, declared (web/declare.py), over the app's shared endpoint parts."""
    return [
        completion_route(
            "elevenlabs",
            "ElevenLabs' custom LLM: recall for the turn, forward upstream, record into the conversation",
            ElevenLabsChatRequest,
            app,
            memory,
            ElevenLabsAdapter(app[SETTINGS]),
        )
    ]
