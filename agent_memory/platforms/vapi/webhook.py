"""`POST /webhooks/vapi`: Vapi's server messages, verified over the raw bytes, then acted on.

- `assistant-request` (an inbound call, before an assistant is chosen): answered with the
  assistant of AGENT_MEMORY_VAPI_ASSISTANT_ID (or the transient AGENT_MEMORY_VAPI_ASSISTANT) and
  the caller's memory in `assistantOverrides.variableValues.memory` (`{{memory}}` in its prompts);
  a transient assistant also gets it in its model's system message.
- `end-of-call-report`: the call's transcript, stored under the caller's pair in the session
  `vapi:<call id>` (platforms/calls.py); a redelivery is a duplicate.
- `status-update`: `in-progress` opens the call's session, `ended` closes it (why it ended is
  kept); the other statuses are acknowledged.
- any other type (transcript, speech-update, conversation-update, hang…): acknowledged, logged
  once per type, not kept.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import Any, Literal

from aiohttp import web
from pydantic import ConfigDict

from agent_memory.core.events import Outcome, OutcomeStatus
from agent_memory.errors import BadSignature, NotConfigured
from agent_memory.logs import RateLimitedLog
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.calls import JOIN, CallIdentity, start_memory
from agent_memory.platforms.vapi.events import (
    PLATFORM,
    RECORDED_TYPES,
    identity_of,
    read_message,
    recorded_message,
    required_call_id,
)
from agent_memory.platforms.vapi.payloads import ASSISTANT_REQUEST, USED_TYPES, ServerMessage
from agent_memory.platforms.vapi.signatures import verify_vapi
from agent_memory.settings import Settings
from agent_memory.web.address import client_address
from agent_memory.web.answers import Answer, Object, Omitted
from agent_memory.web.declare import Route
from agent_memory.web.http import json_response, read_body, rejection

log = logging.getLogger(__name__)

# The variable an assistant's prompts name to receive the caller's memory: `{{memory}}`.
MEMORY_VARIABLE = "memory"
# How long the memory of an assistant-request may take: Vapi drops a call whose answer takes
# 7.5 s end to end (docs.vapi.ai/server-url/events), network included.
MEMORY_TIMEOUT_S = 4.0
# How many unused message types are remembered as logged: Vapi has a few dozen; a sender that
# makes up more is not logged for them.
MAX_UNUSED_TYPES = 256


class AssistantVariables(Answer):
    """`assistantOverrides` of the answer: the call's template variables."""

    variableValues: dict[str, str]


class AssistantAnswer(Answer):
    """What an `assistant-request` is answered (Vapi's AssistantRequestMessageResponse): a saved
    assistant (`assistantId`) or a transient one (`assistant`), with the caller's memory in
    `variableValues.memory`, and their ids, so that the call's later messages name them."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "assistantId": "5b0a4a08-133c-4146-9315-0984f8c6be80",
                    "assistantOverrides": {
                        "variableValues": {
                            "memory": "What you remember about the user:\n- Has a dog called Biscuit",
                            "user_id": "tel:+14155550123",
                            "character_id": "default",
                        }
                    },
                }
            ]
        }
    )
    assistantId: str | Omitted = None
    assistant: Object | Omitted = None
    assistantOverrides: AssistantVariables


class VapiAck(Answer):
    """What every other server message is answered once it is handled (Vapi reads only the 200)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "end-of-call-report",
                    "call_id": "8e2d4c1a-5b7f-4e0a-9c3d-2f1b6a7e9d40",
                    "status": "done",
                    "new_messages": 4,
                }
            ]
        }
    )
    type: str
    call_id: str | None
    # `ignored` for a type or status that is not used (nothing is kept of it).
    status: OutcomeStatus
    new_messages: int


class VapiReceiver:
    """The `POST /webhooks/vapi` handler."""

    def __init__(self, memory: Memory, settings: Settings, metrics: Metrics | None) -> None:
        self.memory = memory
        self.settings = settings
        self.metrics = metrics
        # Someone probing, or a secret that no longer matches: a WARNING once a minute per address.
        self.bad_signatures = RateLimitedLog(log)
        # The message types Vapi sent that are not used: each logged once.
        self.unused_types: set[str] = set()

    def route(self) -> Route:
        """`POST /webhooks/vapi`, declared (web/declare.py) for the app to serve."""
        return Route(
            "POST",
            "/webhooks/vapi",
            "Vapi's server messages (signed)",
            "webhooks",
            AssistantAnswer | VapiAck,
            operation_id="vapi_webhook",
            errors=(400, 401, 413, 422, 503),
            auth="signature",
            reads_body=True,
            description="Vapi posts its server messages here with the credential of the server URL: "
            "X-Vapi-Secret (or Authorization: Bearer) equal to AGENT_MEMORY_VAPI_SECRET, or an HMAC "
            "credential's x-signature (HMAC-SHA256 of '{x-timestamp}.{body}'). An assistant-request is "
            "answered with the assistant and the caller's memory; the others with an acknowledgement.",
            handler=self.handle,
        )

    async def handle(self, request: web.Request) -> web.Response:
        """Verify and read the message, act on it by type, answer."""
        counted = "unknown"
        try:
            body = await self.verified_body(request)
            message, text = read_message(body)
            counted = message.type if message.type in USED_TYPES else "other"
            if message.type == ASSISTANT_REQUEST:
                answer: AssistantAnswer | VapiAck = await self.assistant_request(message)
            else:
                answer = await self.acknowledge(message, text)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.callback(f"{PLATFORM}:{counted}", rejection(exc))
            if isinstance(exc, BadSignature):
                peer = client_address(request, self.settings.trusted_proxies)
                self.bad_signatures.warning(peer, "Vapi message from %s refused: %s", peer, exc.message)
            raise
        if self.metrics is not None:
            status = answer.status if isinstance(answer, VapiAck) else "done"
            self.metrics.callback(f"{PLATFORM}:{counted}", status)
        return json_response(answer)

    async def verified_body(self, request: web.Request) -> bytes:
        """The raw body, within the size and time allowed, with Vapi's secret or signature."""
        body = await read_body(request)
        secret = self.settings.vapi_secret
        if secret:
            verify_vapi(secret, body, request.headers, time.time_ns() // 1_000_000)
        elif not self.settings.insecure_webhooks:
            raise NotConfigured(
                "AGENT_MEMORY_VAPI_SECRET is not set, so Vapi's messages cannot be verified and are "
                "refused: set it to the secret of the credential on your Vapi server URL, or start "
                "with --insecure-dev-webhooks for local testing only"
            )
        return body

    async def assistant_request(self, message: ServerMessage) -> AssistantAnswer:
        """The assistant an inbound call starts with, and the caller's memory in it."""
        settings = self.settings
        if not (settings.vapi_assistant_id or settings.vapi_assistant):
            raise NotConfigured(
                "an assistant-request needs the assistant to answer with: set "
                "AGENT_MEMORY_VAPI_ASSISTANT_ID to a saved assistant's id (with {{memory}} in its "
                "prompt), or AGENT_MEMORY_VAPI_ASSISTANT to a transient assistant's JSON"
            )
        identity = identity_of(settings, message)
        memory = await self.start_memory(identity, message)
        variables = {MEMORY_VARIABLE: memory}
        if identity.user_id is not None:
            # Named in the call's later messages (call.assistantOverrides): its end-of-call-report
            # and per-turn requests then say whose call it is however the caller was known.
            variables[settings.label_user_key] = identity.user_id
            variables[settings.label_character_key] = identity.character_id
        log.info(
            "assistant-request for call %s: %s, %d characters of memory",
            message.call.id if message.call is not None else "-",
            _identified(identity),
            len(memory),
        )
        overrides = AssistantVariables(variableValues=variables)
        if settings.vapi_assistant_id:
            return AssistantAnswer(assistantId=settings.vapi_assistant_id, assistantOverrides=overrides)
        assert settings.vapi_assistant is not None
        assistant = with_memory(settings.vapi_assistant, memory)
        return AssistantAnswer(assistant=assistant, assistantOverrides=overrides)

    async def start_memory(self, identity: CallIdentity, message: ServerMessage) -> str:
        """The caller's memory, or none when it cannot be read in time: Vapi waits 7.5 s for the
        whole answer and then drops the call, so the call starts without memory instead."""
        try:
            async with asyncio.timeout(MEMORY_TIMEOUT_S):
                return await start_memory(self.memory, identity)
        except Exception as exc:
            log.warning(
                "assistant-request for call %s: the caller's memory could not be read (%s); the "
                "call starts without it",
                message.call.id if message.call is not None else "-",
                f"took over {MEMORY_TIMEOUT_S:g} s" if isinstance(exc, TimeoutError) else type(exc).__name__,
            )
            return ""

    async def acknowledge(self, message: ServerMessage, text: str) -> VapiAck:
        """Store what a report or a status says, and acknowledge any other message."""
        if message.type in RECORDED_TYPES:
            call_id = required_call_id(message)
            recorded = recorded_message(self.settings, message, text, time.time_ns() // 1_000_000)
            if recorded is None:
                log.info("Vapi %s of call %s: nothing to keep", message.type, call_id)
                return VapiAck(type=message.type, call_id=call_id, status="ignored", new_messages=0)
            return self.acked(message, call_id, await self.memory.accept_event(*recorded))
        if message.type not in self.unused_types and len(self.unused_types) < MAX_UNUSED_TYPES:
            self.unused_types.add(message.type)
            log.info(
                "Vapi message type %r is acknowledged and not used (this is logged once per type): "
                "leave it out of the assistant's serverMessages to spare the requests",
                message.type[:80],
            )
        call = message.call
        return VapiAck(type=message.type, call_id=call.id if call else None, status="ignored", new_messages=0)

    @staticmethod
    def acked(message: ServerMessage, call_id: str, outcome: Outcome) -> VapiAck:
        log.info(
            "Vapi %s of call %s: %s%s",
            message.type,
            call_id,
            outcome.status,
            f" (+{outcome.new_messages} messages)" if outcome.new_messages else "",
        )
        return VapiAck(
            type=message.type, call_id=call_id, status=outcome.status, new_messages=outcome.new_messages
        )


def with_memory(assistant: dict[str, Any], memory: str) -> dict[str, Any]:
    """A transient assistant with the memory in its model's system message.

    A system message that names `{{memory}}` already receives it (the variable); otherwise the
    memory is added after the first system message's text, or as a system message of its own
    before the others. Without memory the assistant is answered as configured.
    """
    answered = copy.deepcopy(assistant)
    if not memory:
        return answered
    model = answered.get("model")
    if not isinstance(model, dict):
        return answered
    messages = model.get("messages")
    if not isinstance(messages, list):
        messages = model["messages"] = []
    system = next(
        (item for item in messages if isinstance(item, dict) and item.get("role") == "system"), None
    )
    if system is None:
        messages.insert(0, {"role": "system", "content": memory})
        return answered
    content = system.get("content")
    if isinstance(content, str) and "{{" + MEMORY_VARIABLE + "}}" in content.replace(" ", ""):
        return answered
    system["content"] = f"{content}{JOIN}{memory}" if isinstance(content, str) and content else memory
    return answered


def _identified(
    identity: CallIdentity,
) -> Literal["identified by ids", "identified by phone", "unidentified"]:
    if identity.via == "ids":
        return "identified by ids"
    if identity.via == "phone":
        return "identified by phone"
    return "unidentified"
