"""A fake upstream LLM on loopback that streams chat completion chunks as scripted.

    async with FakeUpstreamLLM() as fake:
        fake.script(Script(words=["Hel", "lo"], delay_s=0.01))
        settings = Settings(upstream_base_url=fake.base_url, ...)

Each request takes the next script (default: "Hello there." in three chunks). A script can add
tool calls, a `chat.completion.custom_metadata` first chunk, a usage chunk, a mid-stream error,
an HTTP error status (429 with Retry-After), hang, or send raw bytes cut anywhere. Every request body is kept in
`fake.requests`; `fake.disconnects` records each stream whose client went away, and when.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Script:
    """One answer."""

    words: list[str] = field(default_factory=lambda: ["Hello", " there", "."])
    delay_s: float = 0.0
    status: int = 200
    retry_after: str | None = None
    tool_calls: bool = False
    custom_metadata: bool = False
    usage: bool = False
    # Send this many words, then an error event, then stop.
    error_after: int | None = None
    # Answer nothing at all (headers never come), or stop sending after the first chunk.
    hang: bool = False
    hang_after_first: bool = False
    # Send exactly these bytes instead, one write each, `delay_s` apart (events split or joined).
    raw: list[bytes] | None = None
    # Wait this long after the finish chunk before `[DONE]`, or after `[DONE]` before the
    # stream's end (an upstream slow to close: the caller may leave first).
    pause_before_done_s: float = 0.0
    pause_after_done_s: float = 0.0


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


@dataclass
class Disconnect:
    """A stream whose client went away: when (perf_counter) and after how many chunks."""

    at: float
    chunks_sent: int


class FakeUpstreamLLM:
    """The fake server; `base_url` ends in /v1."""

    def __init__(self) -> None:
        self.scripts: deque[Script] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnects: list[Disconnect] = []
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    def script(self, *scripts: Script) -> None:
        self.scripts.extend(scripts)

    async def __aenter__(self) -> FakeUpstreamLLM:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        # Cancel a handler at once when its client goes away: that is what is measured.
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        script = self.scripts.popleft() if self.scripts else Script()
        if script.hang:
            await asyncio.sleep(3600)
        if script.status >= 400:
            headers = {"Retry-After": script.retry_after} if script.retry_after else {}
            error = {"error": {"message": f"fake upstream says {script.status}", "type": "rate_limit_error",
                               "param": None, "code": str(script.status)}}  # fmt: skip
            return web.json_response(error, status=script.status, headers=headers)
        if not body.get("stream"):
            text = "".join(script.words)
            return web.json_response({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "fake-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            })  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sent = 0
        if script.raw is not None:
            for part in script.raw:
                await response.write(part)
                await asyncio.sleep(script.delay_s)
            await response.write_eof()
            return response
        try:
            if script.custom_metadata:
                await response.write(
                    sse({"object": "chat.completion.custom_metadata", "metadata": {"k": "v"}})
                )
            await response.write(sse(chunk({"role": "assistant", "content": ""})))
            for index, word in enumerate(script.words):
                if script.error_after is not None and index == script.error_after:
                    await response.write(
                        sse({"error": {"message": "fake upstream broke", "type": "server_error"}})
                    )
                    return response
                if script.delay_s:
                    await asyncio.sleep(script.delay_s)
                await response.write(sse(chunk({"content": word})))
                sent += 1
                if script.hang_after_first:
                    await asyncio.sleep(3600)
            if script.tool_calls:
                call = {"index": 0, "id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
                await response.write(sse(chunk({"tool_calls": [call]})))
            await response.write(sse(chunk({}, "tool_calls" if script.tool_calls else "stop")))
            if script.usage:
                usage = {**chunk({}), "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3,
                                                               "total_tokens": 8}}  # fmt: skip
                await response.write(sse(usage))
            if script.pause_before_done_s:
                await asyncio.sleep(script.pause_before_done_s)
            await response.write(sse("[DONE]"))
            if script.pause_after_done_s:
                await asyncio.sleep(script.pause_after_done_s)
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnects.append(Disconnect(time.perf_counter(), sent))
            raise
        return response
