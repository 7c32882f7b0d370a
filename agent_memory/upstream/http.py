"""The upstream LLM over aiohttp: raw bytes in, raw server-sent events out, nothing re-encoded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import aiohttp

from agent_memory.upstream.base import Target, UpstreamFailed


def event_end(data: bytes) -> int:
    """Where the last whole server-sent event in `data` ends (0: none does yet).

    An event ends at a blank line; upstreams send \\n, a few \\r\\n.
    """
    if data.endswith(b"\n\n"):  # nearly every read: one or more whole events
        return len(data)
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


class HttpAnswer:
    """One upstream answer, read as it arrives.

    The read deadline is one timer per stream, re-armed only when it fires: a per-read
    `asyncio.timeout` would schedule and cancel a timer for every chunk of every stream.
    """

    def __init__(self, response: aiohttp.ClientResponse, read_timeout_s: float) -> None:
        self.response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers
        self.read_timeout_s = read_timeout_s
        self._last_read = 0.0
        self._stall_timer: asyncio.TimerHandle | None = None

    def _stalled(self) -> UpstreamFailed:
        return UpstreamFailed(504, f"the upstream LLM sent nothing for {self.read_timeout_s:g} s")

    def _check_stall(self) -> None:
        due = self._last_read + self.read_timeout_s
        loop = asyncio.get_running_loop()
        if loop.time() < due:  # read since the timer was set: wait out the rest
            self._stall_timer = loop.call_at(due, self._check_stall)
            return
        self._stall_timer = None
        # Wakes the read waiting on the silent upstream with the error.
        self.response.content.set_exception(self._stalled())

    async def events(self) -> AsyncIterator[bytes]:
        content = self.response.content
        loop = asyncio.get_running_loop()
        self._last_read = loop.time()
        self._stall_timer = loop.call_later(self.read_timeout_s, self._check_stall)
        pending = b""
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                self._last_read = loop.time()
                if pending:
                    chunk, pending = pending + chunk, b""
                cut = event_end(chunk)
                if cut < len(chunk):
                    chunk, pending = chunk[:cut], chunk[cut:]
                if chunk:
                    yield chunk
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(502, f"the upstream LLM stream broke: {exc or type(exc).__name__}") from None
        finally:
            if self._stall_timer is not None:
                self._stall_timer.cancel()
                self._stall_timer = None
        if pending.strip():
            yield pending + b"\n\n"

    async def body(self) -> bytes:
        try:
            async with asyncio.timeout(self.read_timeout_s):
                return await self.response.read()
        except TimeoutError:
            raise self._stalled() from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(502, f"the upstream LLM answer broke: {exc or type(exc).__name__}") from None

    def close(self) -> None:
        if self._stall_timer is not None:  # a stream left before its end
            self._stall_timer.cancel()
            self._stall_timer = None
        self.response.close()


class HttpUpstream:
    """Chat completions over one pooled aiohttp session."""

    def __init__(self, *, connect_timeout_s: float, first_byte_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No total timeout: a streamed answer lasts as long as the model speaks.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s)
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            # No cookie jar: one caller's upstream cookies must not ride on another's requests.
            self._session = aiohttp.ClientSession(
                timeout=timeout,
                connector=connector,
                auto_decompress=True,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def open(self, target: Target, body: bytes) -> HttpAnswer:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        try:
            async with asyncio.timeout(self.first_byte_timeout_s):
                response = await self._client().post(target.url, data=body, headers=headers)
        except TimeoutError:
            raise UpstreamFailed(
                504, f"the upstream LLM did not answer within {self.first_byte_timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(
                502, f"the upstream LLM at {target.url} is unreachable: {exc or type(exc).__name__}"
            ) from None
        return HttpAnswer(response, self.first_byte_timeout_s)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
