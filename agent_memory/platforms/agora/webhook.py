"""Agora NCS callbacks: verify the raw bytes, parse the envelope, commit, then answer 200."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import ValidationError

from agent_memory.errors import InvalidJSON, NotConfigured, PayloadTooLarge
from agent_memory.memory.ingest import Outcome
from agent_memory.platforms.agora.payloads import Envelope
from agent_memory.settings import Settings

from agent_memory.platforms.agora.signatures import verify_agora

log = logging.getLogger(__name__)

# Commits the raw callback and what it implies; returns once that is durable.
Accept = Callable[[Envelope, str, int], Awaitable[Outcome]]


def parse_envelope(body: bytes) -> tuple[Envelope, str]:
    """The envelope and the body as text, or InvalidJSON saying what is wrong."""
    try:
        text = body.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise InvalidJSON(f"the body is not UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidJSON("the body must be a JSON object (an NCS envelope)")
    try:
        return Envelope.model_validate(data), text
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) for err in exc.errors())
        raise InvalidJSON(f"not an NCS envelope: missing or invalid {fields}") from None


class AgoraReceiver:
    """The `POST /webhooks/agora` handler."""

    def __init__(self, settings: Settings, accept: Accept) -> None:
        self.settings = settings
        self.accept = accept

    async def handle(self, request: web.Request) -> web.Response:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise PayloadTooLarge(
                f"the body is {request.content_length} bytes, over the {limit} allowed "
                "(AGENT_MEMORY_MAX_BODY_BYTES)"
            )
        body = await request.read()
        secret = self.settings.webhook_secret
        if secret:
            verify_agora(secret, body, request.headers)
        elif not self.settings.insecure_webhooks:
            raise NotConfigured(
                "AGORA_WEBHOOK_SECRET is not set, so callbacks cannot be verified and are refused: "
                "set it to the secret of your notification configuration in Agora's console, or "
                "start with --insecure-dev-webhooks for local testing only"
            )
        envelope, text = parse_envelope(body)
        outcome = await self.accept(envelope, text, time.time_ns() // 1_000_000)
        log.info(
            "callback %s type %s agent %s: %s%s",
            envelope.noticeId, envelope.eventType, outcome.agent_id or "-", outcome.status,
            f" (+{outcome.new_messages} messages)" if outcome.new_messages else "",
        )  # fmt: skip
        return web.json_response(
            {
                "code": 0,
                "message": "ok",
                "noticeId": envelope.noticeId,
                "status": outcome.status,
                "new_messages": outcome.new_messages,
            }
        )
