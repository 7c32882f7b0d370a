"""`POST /webhooks/retell`: Retell's call events and its inbound-call webhook, verified on the raw bytes.

One URL serves both of Retell's settings: the agent's (or account's) webhook, whose call_ended and
call_analyzed carry the transcript, and a phone number's inbound webhook, whose `call_inbound` is
answered with the caller's memory as the dynamic variable `memory` (`{{memory}}` in the prompt).
"""

from __future__ import annotations

import logging
from typing import Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from agent_memory.core.clock import now_ms
from agent_memory.errors import BadSignature, NotConfigured
from agent_memory.logs import RateLimitedLog, pair_ref
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.calls import call_identity, start_memory, store_transcript
from agent_memory.platforms.retell.events import PLATFORM, call_transcript
from agent_memory.platforms.retell.payloads import (
    ACKNOWLEDGED,
    KNOWN_EVENTS,
    STARTED,
    TRANSCRIPT_EVENTS,
    CallInbound,
    Envelope,
    RetellCall,
    read_envelope,
)
from agent_memory.platforms.retell.signatures import verify_retell
from agent_memory.settings import Settings
from agent_memory.web.address import client_address
from agent_memory.web.answers import Answer, Omitted
from agent_memory.web.declare import Route
from agent_memory.web.http import read_body, rejection

log = logging.getLogger(__name__)

# At most this many unknown event names are remembered as already logged.
MAX_UNKNOWN: Final = 64


class InboundVariables(BaseModel):
    """What the inbound call starts with: its dynamic variables (strings, as Retell requires)."""

    model_config = ConfigDict(extra="forbid")
    dynamic_variables: dict[str, str]


class RetellAnswer(Answer):
    """The answer to a Retell webhook: `call_inbound` for the inbound-call webhook (Retell reads
    only that), else what became of the event (Retell reads only the 2xx)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"call_inbound": {"dynamic_variables": {"memory": "Summary of earlier conversations: ..."}}},
                {
                    "event": "call_ended",
                    "call_id": "Jabr9TXYYJHfvl6Syypi88rdAHYHmcq6",
                    "status": "done",
                    "new_messages": 7,
                },
            ]
        }
    )
    call_inbound: InboundVariables | Omitted = None
    event: str | Omitted = None
    call_id: str | Omitted = None
    # done, duplicate, partial, ignored, failed (transcripts); noted (call_started); ignored (others).
    status: str | Omitted = None
    new_messages: int | Omitted = None


class RetellReceiver:
    """The `POST /webhooks/retell` handler."""

    def __init__(self, memory: Memory, settings: Settings, metrics: Metrics | None) -> None:
        self.memory = memory
        self.settings = settings
        self.metrics = metrics
        self.bad_signatures = RateLimitedLog(log)
        self.unknown_logged: set[str] = set()

    def route(self) -> Route:
        """`POST /webhooks/retell`, declared (web/declare.py) for the app to serve."""
        return Route(
            "POST",
            "/webhooks/retell",
            "Retell's call webhooks and inbound-call webhook (signed)",
            "webhooks",
            RetellAnswer,
            operation_id="retell_webhook",
            errors=(400, 401, 408, 413, 422, 503),
            auth="signature",
            reads_body=True,
            description="Retell posts call events here (call_ended and call_analyzed carry the transcript) "
            "and, as a number's inbound webhook, call_inbound, answered with "
            "call_inbound.dynamic_variables.memory. Signed with AGENT_MEMORY_RETELL_API_KEY: "
            "x-retell-signature: v=<ms>,d=<hex HMAC-SHA256 of the raw body followed by <ms>>.",
            handler=self.handle,
        )

    async def handle(self, request: web.Request) -> web.Response:
        """Verify and read the webhook here (off the writer thread), then apply or answer it."""
        label = f"{PLATFORM}:unknown"
        try:
            body = await self.verified_body(request)
            envelope = read_envelope(body)
            label = f"{PLATFORM}:{envelope.event if envelope.event in KNOWN_EVENTS else 'other'}"
            answer, outcome = await self.apply(envelope, body)
        except Exception as exc:
            self.count(label, rejection(exc))
            if isinstance(exc, BadSignature):
                peer = client_address(request, self.settings.trusted_proxies)
                self.bad_signatures.warning(peer, "Retell webhook from %s refused: %s", peer, exc.message)
            raise
        self.count(label, outcome)
        return web.json_response(answer.model_dump(exclude_none=True))

    async def verified_body(self, request: web.Request) -> bytes:
        """The raw body, within the size and time allowed and signed with the Retell API key."""
        body = await read_body(request)
        api_key = self.settings.retell_api_key
        if api_key:
            verify_retell(api_key, body, request.headers, now_ms())
        elif not self.settings.insecure_webhooks:
            raise NotConfigured(
                "AGENT_MEMORY_RETELL_API_KEY is not set, so Retell webhooks cannot be verified and are "
                "refused: set it to the Retell API key that has the webhook badge (Retell's dashboard, "
                "API Keys), or start with --insecure-dev-webhooks for local testing only"
            )
        return body

    async def apply(self, envelope: Envelope, body: bytes) -> tuple[RetellAnswer, str]:
        """What the event means for memory, and the answer it gets."""
        event = envelope.event
        if envelope.call_inbound is not None:
            return await self.inbound(envelope.call_inbound)
        call = envelope.call
        if call is not None and event in TRANSCRIPT_EVENTS:
            return await self.transcript(event, call, body)
        if call is not None and event == STARTED:
            log.info("Retell call %s started", call.call_id)
            return RetellAnswer(event=event, call_id=call.call_id, status="noted", new_messages=0), "noted"
        if (
            event not in ACKNOWLEDGED
            and event not in self.unknown_logged
            and len(self.unknown_logged) < MAX_UNKNOWN
        ):
            self.unknown_logged.add(event)
            log.warning("Retell event %.40r is not one memory reads: acknowledged, not used", event)
        return RetellAnswer(event=event, status="ignored", new_messages=0), "ignored"

    async def transcript(self, event: str, call: RetellCall, body: bytes) -> tuple[RetellAnswer, str]:
        """Store the call's transcript under its session (`retell:<call_id>`): a redelivery is a duplicate."""
        transcript = call_transcript(self.settings, event, call)
        outcome = await store_transcript(
            self.memory, self.settings, transcript, body=body.decode("utf-8", "replace"), received_ms=now_ms()
        )
        log.info(
            "Retell %s of call %s: %s%s",
            event,
            call.call_id,
            outcome.status,
            f" (+{outcome.new_messages} messages)" if outcome.new_messages else "",
        )
        answer = RetellAnswer(
            event=event, call_id=call.call_id, status=outcome.status, new_messages=outcome.new_messages
        )
        return answer, outcome.status

    async def inbound(self, inbound: CallInbound) -> tuple[RetellAnswer, str]:
        """The memory an inbound call starts with: the caller's, when phone identity is on."""
        identity = call_identity(self.settings, phone=inbound.from_number, agent_id=inbound.agent_id)
        text = await start_memory(self.memory, identity)
        if identity.known:
            assert identity.user_id is not None
            log.info(
                "Retell inbound call for %s: %d characters of memory",
                pair_ref(identity.user_id, identity.character_id),
                len(text),
            )
            outcome = "answered"
        else:
            log.info(
                "Retell inbound call answered without memory: the caller is unidentified "
                "(AGENT_MEMORY_PHONE_IDENTITY is off, or the number is not E.164)"
            )
            outcome = "unidentified"
        # Always set, so that `{{memory}}` in the prompt never stays as written.
        return RetellAnswer(call_inbound=InboundVariables(dynamic_variables={"memory": text})), outcome

    def count(self, label: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.callback(label, outcome)
