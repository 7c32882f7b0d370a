"""`POST /webhooks/elevenlabs` (post-call webhooks) and `POST /webhooks/elevenlabs/initiation`."""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from aiohttp import web
from pydantic import ConfigDict, Field, ValidationError

from agent_memory.core.events import OutcomeStatus
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import (
    BadSignature,
    InvalidField,
    InvalidJSON,
    NotConfigured,
)
from agent_memory.logs import RateLimitedLog
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.calls import CallIdentity, call_identity, start_memory, store_transcript
from agent_memory.platforms.elevenlabs.payloads import (
    AUDIO,
    KNOWN_TYPES,
    TRANSCRIPTION,
    Envelope,
    InitiationRequest,
)
from agent_memory.platforms.elevenlabs.signatures import HEADER, SETTING, verify
from agent_memory.platforms.elevenlabs.transcripts import PLATFORM, conversation_transcript, read_conversation
from agent_memory.settings import Settings
from agent_memory.web.address import client_address
from agent_memory.web.answers import Answer
from agent_memory.web.auth import GATE
from agent_memory.web.declare import Route
from agent_memory.web.http import read_body, read_model, rejection, validation_message

log = logging.getLogger(__name__)

# The variable the agent's prompt names (`{{memory}}`) and the initiation answer fills.
MEMORY_VARIABLE = "memory"
# Where a prompt template takes the memory (AGENT_MEMORY_ELEVENLABS_PROMPT).
MEMORY_SLOT = "{memory}"
NOT_CONFIGURED = (
    f"{SETTING} is not set, so ElevenLabs' post-call webhooks cannot be verified and are refused: set "
    "it to the HMAC secret ElevenLabs showed when the webhook was created (Agents platform settings, "
    "Post-call webhook), or start with --insecure-dev-webhooks for local testing only"
)


class PostCallAnswer(Answer):
    """What ElevenLabs is answered once a post-call webhook is handled (it reads only the 200)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "post_call_transcription",
                    "conversation_id": "abc",
                    "status": "done",
                    "new_messages": 3,
                }
            ]
        }
    )
    type: str
    conversation_id: str | None
    # ignored: acknowledged and not kept (audio, call initiation failures, types this service
    # does not read).
    status: OutcomeStatus
    new_messages: int


class InitiationAnswer(Answer):
    """The conversation-initiation client data a call starts with (the Twilio personalization page)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "conversation_initiation_client_data",
                    "dynamic_variables": {
                        "memory": "Summary of earlier calls: the caller's dog Biscuit turned nine."
                    },
                }
            ]
        }
    )
    type: Literal["conversation_initiation_client_data"]
    # Every variable the agent's prompt names must be here or ElevenLabs fails the call: `memory`
    # always is (empty for a caller nobody knows).
    dynamic_variables: dict[str, str]
    # Only with AGENT_MEMORY_ELEVENLABS_PROMPT: `{"agent": {"prompt": {"prompt": ...}}}`.
    conversation_config_override: dict[str, Any] | None = Field(None)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what it is instead."""
    value = read_json(body)
    if not isinstance(value, dict):
        raise InvalidJSON(f"the body must be a JSON object (got {type(value).__name__})")
    return value


class ElevenLabsReceiver:
    """The ElevenLabs routes: the post-call webhook and the conversation-initiation webhook."""

    def __init__(self, memory: Memory, settings: Settings, metrics: Metrics | None) -> None:
        self.memory = memory
        self.settings = settings
        self.metrics = metrics
        self.bad_signatures = RateLimitedLog(log)
        # Each type this service does not keep is logged once (any unknown type counts as one).
        self.unknown_types: set[str] = set()
        self.notes = RateLimitedLog(log, every_s=300.0)

    def routes(self) -> list[Route]:
        """Both routes, declared (web/declare.py)."""
        post_call = Route(
            "POST",
            "/webhooks/elevenlabs",
            "ElevenLabs' post-call webhooks (signed)",
            "webhooks",
            PostCallAnswer,
            operation_id="elevenlabs_webhook",
            errors=(400, 401, 408, 413, 422, 503),
            auth="elevenlabs_signature",
            reads_body=True,
            description=(
                f"ElevenLabs Agents posts `post_call_transcription` here when a conversation ends, signed "
                f'with {SETTING} ({HEADER}: `t=<unix s>,v0=<hex HMAC-SHA256 of "t.body">`, at most '
                "30 min old). The transcript is kept under the conversation's session "
                "(`elevenlabs:<conversation_id>`); `post_call_audio`, `call_initiation_failure` and "
                "other types are acknowledged and not kept. See webhooks/elevenlabs.md."
            ),
            handler=self.post_call,
        )
        initiation = Route(
            "POST",
            "/webhooks/elevenlabs/initiation",
            "ElevenLabs' conversation-initiation webhook: the caller's memory at call start",
            "webhooks",
            InitiationAnswer,
            scope="read",
            operation_id="elevenlabs_initiation",
            errors=(400, 401, 403, 408, 413, 422, 429, 503),
            body=InitiationRequest,
            description=(
                "ElevenLabs calls this when an inbound phone call starts (`caller_id`, `agent_id`, "
                "`called_number`, `call_sid`). Answers `dynamic_variables.memory` for the agent's "
                "`{{memory}}`: the caller's memory with the agent as character (by number only with "
                "AGENT_MEMORY_PHONE_IDENTITY=1; empty otherwise). Authenticated like /v1: send "
                "`Authorization: Bearer <key>` (a `read` key) as a secret header from ElevenLabs' "
                "webhook settings."
            ),
            handler=self.initiation,
        )
        return [post_call, initiation]

    async def post_call(self, request: web.Request) -> web.Response:
        """Verify the raw body, read its type, keep a transcript; acknowledge everything else."""
        event_type = "unknown"
        metrics = self.metrics
        try:
            body = await self.verified_body(request)
            envelope = self.envelope(body)
            event_type = envelope.type
            answer = await self.apply(envelope, body)
        except Exception as exc:
            if metrics is not None:
                metrics.callback(counted(event_type), rejection(exc))
            if isinstance(exc, BadSignature):
                peer = client_address(request, self.settings.trusted_proxies)
                self.bad_signatures.warning(peer, "ElevenLabs webhook from %s refused: %s", peer, exc.message)
            raise
        if metrics is not None:
            metrics.callback(counted(event_type), answer.status)
        return web.json_response(answer.model_dump())

    async def verified_body(self, request: web.Request) -> bytes:
        """The raw body, within the size and time allowed, signed with the webhook's secret."""
        body = await read_body(request)
        secret = self.settings.elevenlabs_secret
        if secret:
            verify(secret, body, request.headers.get(HEADER))
        elif not self.settings.insecure_webhooks:
            raise NotConfigured(NOT_CONFIGURED)
        return body

    @staticmethod
    def envelope(body: bytes) -> Envelope:
        """`{"type", "event_timestamp", "data"}`, or a 4xx naming what is wrong."""
        try:
            return Envelope.model_validate(parse_json_object(body))
        except ValidationError as exc:
            raise InvalidField(validation_message(exc)) from None

    async def apply(self, envelope: Envelope, body: bytes) -> PostCallAnswer:
        """Keep a transcription's turns; acknowledge (and never keep) every other type."""
        data = envelope.data or {}
        conversation_id = data.get("conversation_id")
        if envelope.type != TRANSCRIPTION:
            self.acknowledged(envelope.type)
            return PostCallAnswer(
                type=envelope.type,
                conversation_id=conversation_id if isinstance(conversation_id, str) else None,
                status="ignored",
                new_messages=0,
            )
        conversation = read_conversation(envelope.data)
        transcript = conversation_transcript(self.settings, conversation)
        outcome = await store_transcript(
            self.memory,
            self.settings,
            transcript,
            body=body.decode("utf-8"),
            received_ms=time.time_ns() // 1_000_000,
        )
        log.info(
            "ElevenLabs %s %s: %s%s",
            TRANSCRIPTION,
            conversation.conversation_id,
            outcome.status,
            f" (+{outcome.new_messages} messages)" if outcome.new_messages else "",
        )
        return PostCallAnswer(
            type=TRANSCRIPTION,
            conversation_id=conversation.conversation_id,
            status=outcome.status,
            new_messages=outcome.new_messages,
        )

    def acknowledged(self, event_type: str) -> None:
        """Log an event type this service does not keep, once per type for the process's life."""
        key = event_type if event_type in KNOWN_TYPES else "other"
        if key in self.unknown_types:
            return
        self.unknown_types.add(key)
        if event_type == AUDIO:
            log.info("ElevenLabs %s acknowledged and not kept: it is the call's audio", AUDIO)
        elif key == "other":
            log.info(
                "ElevenLabs webhook type %r acknowledged and not kept: only %s is read "
                "(this line is logged once for unknown types)",
                event_type[:80],
                TRANSCRIPTION,
            )
        else:
            log.info("ElevenLabs %s acknowledged and not kept", event_type)

    async def initiation(self, request: web.Request) -> web.Response:
        """The caller's memory for the agent's `{{memory}}` (and the prompt, when one is set)."""
        # Outside /v1, so the gate's middleware does not see it: admitted here, the same way.
        await request.app[GATE].admit(request)
        call = await read_model(request, InitiationRequest)
        agent = None if call.agent_id is None else str(call.agent_id)
        identity = call_identity(self.settings, phone=call.caller_id, agent_id=agent)
        memory = await start_memory(self.memory, identity)
        if not identity.known:
            self.unidentified(identity)
        answer = InitiationAnswer(
            type="conversation_initiation_client_data",
            dynamic_variables={MEMORY_VARIABLE: memory},
        )
        template = self.settings.elevenlabs_prompt
        if template:
            prompt = template.replace(MEMORY_SLOT, memory)
            answer.conversation_config_override = {"agent": {"prompt": {"prompt": prompt}}}
        return web.json_response(answer.model_dump(exclude_none=True))

    def unidentified(self, identity: CallIdentity) -> None:
        """Say (at most every 5 minutes) why a call starts with no memory; never the number."""
        why = (
            "no caller_id in E.164 form"
            if self.settings.phone_identity
            else "AGENT_MEMORY_PHONE_IDENTITY is off, so a caller's number names no user"
        )
        self.notes.warning(
            "initiation",
            "ElevenLabs call start for agent %s: the caller is not identified (%s); memory is empty",
            identity.character_id,
            why,
        )


def counted(event_type: str) -> str:
    """The bounded label an event type is counted under."""
    return f"{PLATFORM}:{event_type if event_type in KNOWN_TYPES else 'other'}"
