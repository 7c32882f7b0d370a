"""HTTP to the service: bearer auth, JSON, error answers as `ApiError`, retries on 429 and 503.

A retry waits by the one `Backoff` policy and honours the server's `Retry-After` (read by the
one `retry_after_s`); a wait longer than `max_wait_s` is left to the caller, who gets the
`ApiError` with its `retry_after` at once.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from agent_memory import __version__
from agent_memory.core.clock import Backoff, retry_after_s
from agent_memory.errors import ApiError, NotConfigured
from agent_memory.logs import REQUEST_ID_HEADER

if TYPE_CHECKING:  # imported on the first request: the CLI's local commands never load aiohttp
    import aiohttp
    from yarl import URL

# Half a second, then about 1, 2, 4 s: a restarting server or a busy database is back by then.
DEFAULT_BACKOFF = Backoff(base_s=0.5, cap_s=8.0, jitter=0.5)
RETRIED_STATUSES = frozenset({429, 503})
UNREACHABLE = "unreachable"
# A missing setting stays missing; a refused connection fails fast (a wrong URL is the usual cause).
NOT_RETRIED_CODES = frozenset({NotConfigured.code, UNREACHABLE})

Params = Mapping[str, str | int | None]


def path(*segments: str | int) -> str:
    """`/v1/users/a%2Fb`: each segment quoted whole, so an id may hold `/`, `?` or spaces."""
    return "".join("/" + quote(str(segment), safe="") for segment in segments)


class Transport:
    """One service's base URL and key, over one aiohttp session (opened on first use)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff: Backoff = DEFAULT_BACKOFF,
        max_wait_s: float = 60.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"the service URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff = backoff
        self.max_wait_s = max_wait_s
        self.headers = {"User-Agent": f"agent-memory-client/{__version__}", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.rng = random.Random()
        self.session: aiohttp.ClientSession | None = None

    async def request(
        self, method: str, route: str, *, params: Params | None = None, body: Any = None
    ) -> Any:
        """The JSON answer of `method route`, retried on 429/503; any other error raises ApiError."""
        from yarl import URL

        url = URL(self.base_url + route, encoded=True)
        query = {name: str(value) for name, value in (params or {}).items() if value is not None}
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self.attempt(method, url, query, body)
            except ApiError as error:
                if not self.retried(error, attempt):
                    raise
                delay = self.backoff.delay_s(attempt, self.rng, error.retry_after)
            await asyncio.sleep(delay)

    def retried(self, error: ApiError, attempt: int) -> bool:
        """Whether `error` is worth another try: the server said later, and not too much later."""
        if error.status not in RETRIED_STATUSES or error.code in NOT_RETRIED_CODES:
            return False
        if error.retry_after is not None and error.retry_after > self.max_wait_s:
            return False
        return attempt <= self.retries

    async def attempt(self, method: str, url: URL, query: dict[str, str], body: Any) -> Any:
        """One request: its JSON answer, or the ApiError it meant."""
        import aiohttp

        try:
            # Bytes are a JSON document sent as they are (an export being imported).
            sent: dict[str, Any] = (
                {"data": body, "headers": {**self.headers, "Content-Type": "application/json"}}
                if isinstance(body, bytes)
                else {"json": body, "headers": self.headers}
            )
            async with self.open().request(method, url, params=query or None, **sent) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise answered_error(response, raw)
                return json.loads(raw) if raw else None
        except TimeoutError:
            raise ApiError(
                504, "timeout", f"no answer from {self.base_url} within {self.timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise ApiError(503, UNREACHABLE, f"cannot reach {self.base_url}: {exc}") from None
        except ValueError as exc:  # a 2xx that is not JSON: not this service
            raise ApiError(
                502, "bad_answer", f"{self.base_url} answered something that is not JSON: {exc}"
            ) from None

    def open(self) -> aiohttp.ClientSession:
        """The session, opened inside the running event loop on first use."""
        import aiohttp

        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None


def answered_error(response: aiohttp.ClientResponse, raw: bytes) -> ApiError:
    """The service's `{"error": {"code", "message"}}` as an ApiError (or what a proxy said instead)."""
    code, message = "http_error", raw.decode(errors="replace").strip()[:300] or (response.reason or "")
    try:
        detail = json.loads(raw)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        pass
    return ApiError(
        response.status,
        code,
        message,
        request_id=response.headers.get(REQUEST_ID_HEADER),
        retry_after=retry_after_s(response.headers),
    )
