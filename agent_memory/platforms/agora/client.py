"""The one client of Agora's Conversational AI REST API: auth, typed errors, retry with backoff."""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from agent_memory.core.clock import Backoff, retry_after_s
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import (
    AgoraConflict,
    AgoraError,
    AgoraNotFound,
    AgoraRateLimited,
    AgoraServerError,
    InvalidJSON,
    NotConfigured,
)
from agent_memory.platforms.agora.payloads import HistoryResponse
from agent_memory.settings import Settings

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
# A server may ask for a long pause; a poller must not hang on one agent for minutes.
RETRY_AFTER_CAP_S = 30.0
# Full jitter: many agents polled at once must not retry in step. A 429's Retry-After is
# obeyed as given (capped): Agora says when it takes requests again.
BACKOFF = Backoff(
    BACKOFF_BASE_S, BACKOFF_CAP_S, jitter=1.0, retry_after_cap_s=RETRY_AFTER_CAP_S, retry_after_mode="exact"
)
DETAIL_MAX_CHARS = 200

Sleep = Callable[[float], Awaitable[object]]


class AgoraClient:
    """Calls `/v2/projects/{appid}/…` on Agora's REST API over the app's shared session."""

    def __init__(
        self,
        settings: Settings,
        session: aiohttp.ClientSession,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        """Keep the settings and the shared session; nothing is checked until the first call."""
        self._settings = settings
        self._session = session
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._timeout = aiohttp.ClientTimeout(total=settings.agora_timeout_s)
        self._max_retries = settings.agora_max_retries
        app_id = quote(settings.agora_app_id or "", safe="")
        self.base_url = f"{settings.agora_api_base.rstrip('/')}/v2/projects/{app_id}"

    @property
    def configured(self) -> bool:
        """True when an app id and either customer id+secret or a token are set."""
        return self._settings.agora_configured

    def _authorization(self) -> str:
        """The Authorization header value, or NotConfigured naming the missing variables."""
        s = self._settings
        if not s.agora_app_id:
            raise NotConfigured("Agora REST API is not configured: set AGORA_APP_ID")
        if s.agora_customer_id and s.agora_customer_secret:
            pair = f"{s.agora_customer_id}:{s.agora_customer_secret}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        if s.agora_token:
            return f"agora token={s.agora_token}"
        raise NotConfigured(
            "Agora REST API is not configured: set AGORA_CUSTOMER_ID and AGORA_CUSTOMER_SECRET,"
            " or AGORA_TOKEN"
        )

    async def history(self, agent_id: str) -> HistoryResponse:
        """GET the running agent's short-term memory; AgoraNotFound once it has stopped."""
        what = f"history for agent {agent_id}"
        data = await self._call("GET", f"{_agent_path(agent_id)}/history", what)
        try:
            return HistoryResponse.model_validate(data)
        except ValidationError as exc:
            raise AgoraError(
                f"Agora {what} failed: unexpected answer: {exc.error_count()} invalid fields",
                http_status=200,
                detail=str(exc)[:DETAIL_MAX_CHARS],
            ) from exc

    async def join(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /join to start an agent; answers {"agent_id", "create_ts", "status"}."""
        return await self._call("POST", "/join", "join", body)

    async def update(self, agent_id: str, properties: dict[str, Any]) -> dict[str, Any]:
        """POST /agents/{agent_id}/update with {"properties": properties}."""
        return await self._call(
            "POST",
            f"{_agent_path(agent_id)}/update",
            f"update for agent {agent_id}",
            {"properties": properties},
        )

    async def update_system_messages(
        self, agent_id: str, system_messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Replace the running agent's system messages; Agora wants the whole list every time."""
        return await self.update(agent_id, {"llm": {"system_messages": list(system_messages)}})

    async def leave(self, agent_id: str) -> dict[str, Any]:
        """POST /agents/{agent_id}/leave; the agent stops asynchronously (102/103 follow).

        Agora documents the 200 answer's body as empty; whatever a 2xx carries, the agent is
        stopping, so a body that is not a JSON object (``, `""`, `null`) answers {}.
        """
        path = f"{_agent_path(agent_id)}/leave"
        return await self._call("POST", path, f"leave for agent {agent_id}", body_optional=True)

    async def query(self, agent_id: str) -> dict[str, Any]:
        """GET /agents/{agent_id}: the agent's status."""
        return await self._call("GET", _agent_path(agent_id), f"query for agent {agent_id}")

    async def _call(
        self,
        method: str,
        path: str,
        what: str,
        body: dict[str, Any] | None = None,
        *,
        body_optional: bool = False,
    ) -> dict[str, Any]:
        """Send one logical request, retrying 429, 5xx, timeouts and connection errors.

        With `body_optional` a 2xx answer whose body is not a JSON object counts as {}.
        """
        headers = {"Authorization": self._authorization(), "Accept": "application/json"}
        url = self.base_url + path
        attempt = 0
        while True:
            attempt += 1
            prefix = f"Agora {what} failed" + (f" after {attempt} attempts" if attempt > 1 else "")
            try:
                async with self._session.request(
                    method,
                    url,
                    json=body,
                    headers=headers,
                    timeout=self._timeout,
                    raise_for_status=False,  # the app's shared session may have it on
                ) as resp:
                    text = await resp.text(errors="replace")
                    if resp.status < 400:
                        return _parse_ok(text, prefix, resp.status, body_optional=body_optional)
                    error = _error_from_response(resp.status, resp.reason, resp.headers, text, prefix)
                    outcome = str(resp.status)
            except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
                timeout = self._settings.agora_timeout_s
                error = AgoraServerError(f"{prefix}: no answer within {timeout:g}s")
                error.__cause__ = exc
                outcome = "timeout"
            except aiohttp.ClientError as exc:
                error = AgoraServerError(f"{prefix}: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                outcome = type(exc).__name__
            retryable = isinstance(error, AgoraRateLimited | AgoraServerError)
            if not retryable or attempt > self._max_retries:
                raise error
            delay = self._delay(attempt, error)
            log.warning(
                "Agora %s: %s, retry %d/%d in %.2fs",
                what,
                outcome,
                attempt,
                self._max_retries,
                delay,
            )
            await self._sleep(delay)

    def _delay(self, attempt: int, error: AgoraError) -> float:
        """Retry-After when given (capped), else exponential backoff with full jitter."""
        retry_after = error.retry_after if isinstance(error, AgoraRateLimited) else None
        return BACKOFF.delay_s(attempt, self._rng, retry_after)


def _agent_path(agent_id: str) -> str:
    """`/agents/{agent_id}` with the id quoted, since ids come from webhooks and callers."""
    if not agent_id:
        raise ValueError("agent_id must not be empty")
    return f"/agents/{quote(agent_id, safe='')}"


def _parse_ok(text: str, prefix: str, status: int, *, body_optional: bool = False) -> dict[str, Any]:
    """A 2xx body as a JSON object; an empty body is {}, and so is any non-object when optional."""
    if not text.strip():
        return {}
    try:
        data = read_json(text)  # what Agora says is kept: the one reader makes it storable
    except InvalidJSON:
        data = None
    if not isinstance(data, dict) and body_optional:
        return {}
    if not isinstance(data, dict):
        raise AgoraError(
            f"{prefix}: {status} answer is not a JSON object",
            http_status=status,
            detail=text[:DETAIL_MAX_CHARS],
        )
    return data


def _error_from_response(
    status: int, phrase: str | None, headers: Mapping[str, str], text: str, prefix: str
) -> AgoraError:
    """The typed error for a 4xx/5xx answer, from Agora's {"detail", "reason"} or any text."""
    detail: str | None = None
    reason: str | None = None
    try:
        data = read_json(text)
    except InvalidJSON:
        data = None
    if isinstance(data, dict):
        if data.get("detail") is not None:
            detail = str(data["detail"])[:DETAIL_MAX_CHARS]
        if data.get("reason") is not None:
            reason = str(data["reason"])
    if detail is None:
        detail = text.strip()[:DETAIL_MAX_CHARS] or None
    head = f"{status} {reason}" if reason else str(status)
    tail = detail or phrase or ""
    message = f"{prefix}: {head}" + (f": {tail}" if tail else "")
    fields: dict[str, Any] = {"http_status": status, "detail": detail, "reason": reason}
    if status == 404:
        return AgoraNotFound(message, **fields)
    if status == 409:
        return AgoraConflict(message, **fields)
    if status == 429:
        return AgoraRateLimited(message, retry_after=retry_after_s(headers), **fields)
    if status >= 500:
        return AgoraServerError(message, **fields)
    return AgoraError(message, **fields)
