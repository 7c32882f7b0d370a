"""Agora NCS callbacks: verify the raw bytes, parse the envelope, commit, then answer 200."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from aiohttp import web
from pydantic import ConfigDict

from agent_memory.core.events import Outcome, OutcomeStatus, RawEvent, SessionEvent
from agent_memory.errors import BadSignature, NotConfigured
from agent_memory.logs import RateLimitedLog
from agent_memory.metrics import Metrics
from agent_memory.platforms.agora.events import parse_callback
from agent_memory.platforms.agora.payloads import PAYLOAD_MODELS
from agent_memory.platforms.agora.signatures import verify_agora
from agent_memory.settings import Settings
from agent_memory.web.address import client_address
from agent_memory.web.answers import Answer
from agent_memory.web.declare import Route
from agent_memory.web.http import read_body, rejection

log = logging.getLogger(__name__)

# Records the raw callback and applies what it means; returns once that is durable.
Accept = Callable[[RawEvent, SessionEvent | Outcome], Awaitable[Outcome]]
# Event types counted under their own label; any other number a sender makes up is `other`.
KNOWN_TYPES = {event_type: str(event_type) for event_type in PAYLOAD_MODELS}


class WebhookAnswer(Answer):
    """What Agora's notification service is answered once a callback is committed."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "code": 0,
                    "message": "ok",
                    "noticeId": "2000001428:4330:107",
                    "status": "done",
                    "new_messages": 2,
                }
            ]
        }
    )
    # Agora reads only the 200; its wire name, noticeId, says which callback this answers.
    code: Literal[0]
    message: Literal["ok"]
    noticeId: str
    status: OutcomeStatus
    new_messages: int


class AgoraReceiver:
    """The `POST /webhooks/agora` handler."""

    def __init__(self, settings: Settings, accept: Accept, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.accept = accept
        self.metrics = metrics
        # Someone probing or a secret that no longer matches: worth a WARNING, once a minute
        # per address, not once per callback.
        self.bad_signatures = RateLimitedLog(log)

    def route(self) -> Route:
        """`POST /webhooks/agora`, declared (web/declare.py) for the app to serve."""
        return Route(
            "POST",
            "/webhooks/agora",
            "Agora's notification callbacks (signed)",
            "webhooks",
            WebhookAnswer,
            operation_id="agora_webhook",
            errors=(400, 401, 413, 422, 503),
            auth="signature",
            reads_body=True,
            description="Agora's NCS posts agent events here, signed with AGORA_WEBHOOK_SECRET "
            "(Agora-Signature-V2: hex HMAC-SHA256 of the body).",
            handler=self.handle,
        )

    async def handle(self, request: web.Request) -> web.Response:
        """Verify, parse and map the callback here (off the writer thread), then commit it."""
        event_type = "unknown"
        try:
            body = await self.verified_body(request)
            raw, event = parse_callback(
                body, time.time_ns() // 1_000_000, follow=self.settings.agora_configured
            )
            event_type = KNOWN_TYPES.get(raw.event_type, "other")
            outcome = await self.accept(raw, event)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.callback(event_type, rejection(exc))
            if isinstance(exc, BadSignature):
                peer = client_address(request, self.settings.trusted_proxies)
                self.bad_signatures.warning(peer, "callback from %s refused: %s", peer, exc.message)
            raise
        if self.metrics is not None:
            self.metrics.callback(event_type, outcome.status)
        if log.isEnabledFor(logging.INFO):  # its arguments are not built for nothing on every callback
            log.info(
                "callback %s type %s agent %s: %s%s",
                raw.event_id,
                raw.event_type,
                outcome.agent_id or "-",
                outcome.status,
                f" (+{outcome.new_messages} messages)" if outcome.new_messages else "",
            )
        # WebhookAnswer's fields, written out: every value is of its type already, and building
        # and dumping the model on every callback cost more than the rest of the answer.
        answer: dict[str, object] = {
            "code": 0,
            "message": "ok",
            "noticeId": raw.event_id,
            "status": outcome.status,
            "new_messages": outcome.new_messages,
        }
        return web.json_response(answer)

    async def verified_body(self, request: web.Request) -> bytes:
        """The raw body, within the size and time allowed and signed with the webhook secret."""
        body = await read_body(request)
        secret = self.settings.webhook_secret
        if secret:
            verify_agora(secret, body, request.headers)
        elif not self.settings.insecure_webhooks:
            raise NotConfigured(
                "AGORA_WEBHOOK_SECRET is not set, so callbacks cannot be verified and are refused: "
                "set it to the secret of your notification configuration in Agora's console, or "
                "start with --insecure-dev-webhooks for local testing only"
            )
        return body
