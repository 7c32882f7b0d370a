"""Vapi's custom LLM (`model.provider = "custom-llm"`): the shared per-turn endpoint at
`POST /v1/vapi/chat/completions` (Vapi's `model.url` is `<service>/v1/vapi`; it appends
`/chat/completions`).

Vapi sends an OpenAI chat completion request and, with `metadataSendMode` `variable` (its
default) or `destructured`, the `call`, `customer` and `phoneNumber` objects and the assistant's
`metadata` beside it (fixtures/vapi/custom_llm/). The session is the call (`vapi:<call.id>`, as
the webhook's), so the turns recorded here and the end-of-call report merge. Whose memory
(docs/identity.md): the call's own ids as the webhook reads them (`call.metadata`, its
`assistantOverrides`), else the request's `metadata` or top level (`destructured`), else the
per-agent key's pair, else the customer's number on a phone call when AGENT_MEMORY_PHONE_IDENTITY
is on; else the call is unidentified: answered without memory, its turns kept under the session's own pair.
The bearer key is Vapi's custom-llm credential: AGENT_MEMORY_LLM_TOKEN, or a per-agent key.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from agent_memory.platforms.vapi.events import identity_from
from agent_memory.settings import Settings
from agent_memory.web.declare import Route
from agent_memory.web.keys import SETTINGS

PLATFORM = "vapi"
# What Vapi adds at the top level beside the OpenAI fields: none of it is the model's.
VAPI_FIELDS = ("call", "customer", "phoneNumber", "metadata", "org", "credentials")


def call_id(body: Mapping[str, Any]) -> str | None:
    """The call's id: `call.id` (Vapi's Call object), or `call.callId` (seen in older requests)."""
    call = as_object(body.get("call"))
    for key in ("id", "callId"):
        value = call.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def request_ids(settings: Settings, body: Mapping[str, Any]) -> tuple[Any, Any]:
    """The app's ids given beside the call (the request's `metadata`, or its top level)."""
    for place in (as_object(body.get("metadata")), body):
        if place.get(settings.label_user_key) not in (None, ""):
            return place.get(settings.label_user_key), place.get(settings.label_character_key)
    return None, None


class VapiChatRequest(ChatRequest):
    """A chat completion request as Vapi sends it: OpenAI's fields, and its call beside them."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": "Please transfer my call."}],
                    "temperature": 0.7,
                    "stream": True,
                    "call": {"id": "8f3c2b1e-5a4d-4c3b-9e2f-1a0b9c8d7e6f", "type": "webCall"},
                    "metadata": {"user_id": "u-alice", "character_id": "luna"},
                }
            ]
        },
    )


class VapiAdapter(OpenAIChat):
    """What the shared endpoint needs to know of Vapi's requests."""

    key_advice = (
        "give the assistant's custom-llm credential the key AGENT_MEMORY_LLM_TOKEN (Vapi sends it "
        "as the bearer), or a key POST /v1/agents minted"
    )
    ids_field: str | None = "call.metadata"
    platform_fields = frozenset((*VAPI_FIELDS, *OUR_PARAMS))
    unrecorded = "no call.id in the request (the model's metadataSendMode must not be off)"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def caller(self, body: dict[str, Any], route: LlmRoute | None) -> Caller | Refused:
        # The call's own ids and number are read as the webhook reads them (events.identity_from:
        # a web call's number names no one), so live turns and the end-of-call report meet.
        identity = identity_from(self.settings, body.get("call"), body.get("customer"))
        if identity.via != "ids":
            user_id, character_id = request_ids(self.settings, body)
            if user_id in (None, "") and route is not None:
                user_id, character_id = route.user_id, route.character_id
            if user_id not in (None, ""):
                identity = call_identity(self.settings, user_id=user_id, character_id=character_id)
        found = call_id(body)
        session = session_key(PLATFORM, found) if found else None
        return Caller.in_call(identity.user_id, identity.character_id, session, route)


def custom_llm_routes(app: web.Application, memory: Memory) -> list[Route]:
    """Vapi's custom-LLM route, declared (web/declare.py), over the app's shared endpoint parts."""
    return [
        completion_route(
            "vapi",
            "Vapi's custom LLM: recall for the turn, forward upstream, record into the call",
            VapiChatRequest,
            app,
            memory,
            VapiAdapter(app[SETTINGS]),
        )
    ]
