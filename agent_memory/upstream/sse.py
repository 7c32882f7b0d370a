"""Relaying an upstream chat completion to the caller: server-sent events passed through as they
arrive, an error in OpenAI's shape, and a caller that goes away closing the upstream at once.

Nothing here knows whose memory a request is or what is recorded: the relay keeps what the
upstream answered (`Reply`) for whoever records it, and reads it only when asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from agent_memory.core.clock import now_ms
from agent_memory.core.jsonutil import dumps
from agent_memory.upstream.base import Target, Upstream, UpstreamFailed

log = logging.getLogger(__name__)

# How often open streams are checked for a client that went away (well inside 100 ms).
DISCONNECT_POLL_S = 0.05
# An event that ends the answer: a finish reason (not null), or the stream's `[DONE]`.
_ANSWER_END = re.compile(rb'"finish_reason"\s*:\s*"|data:\s*\[DONE\]')
_EVENT_END = re.compile(rb"\r?\n\r?\n")


def openai_error(
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """An error in OpenAI's shape (what the SDKs and the voice platforms read)."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(status=status, body=dumps(body), content_type="application/json", headers=headers)


def event_spans(block: bytes) -> Iterator[tuple[int, int]]:
    """Where each whole server-sent event in `block` starts and ends (its blank line included)."""
    start = 0
    for end in _EVENT_END.finditer(block):
        yield start, end.end()
        start = end.end()


def event_chunks(event: bytes) -> Iterator[Any]:
    """The JSON of each `data:` line of one event (`[DONE]` and what does not parse left out)."""
    for line in event.splitlines():
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def first_error(block: bytes) -> tuple[int, int, dict[str, Any]] | None:
    """The first event of `block` that carries an error: where it starts and ends, and its chunk."""
    for start, end in event_spans(block):
        for chunk in event_chunks(block[start:end]):
            if isinstance(chunk, dict) and chunk.get("error") is not None:
                return start, end, chunk
    return None


def streamed_text(blocks: Sequence[bytes]) -> str:
    """The content of the first choice across a streamed answer's events."""
    parts: list[str] = []
    for line in b"".join(blocks).splitlines():
        # A chunk without content (role, finish, usage, tool calls) is not decoded at all.
        if not line.startswith(b"data:") or b'"content"' not in line:
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if (
                isinstance(delta, dict)
                and choice.get("index", 0) == 0
                and isinstance(delta.get("content"), str)
            ):
                parts.append(delta["content"])
    return "".join(parts)


@dataclass(slots=True)
class Reply:
    """What the upstream answered so far. A stream's blocks are kept as they pass and read once,
    when the reply is recorded: not event by event on the way to the caller."""

    blocks: list[bytes] = field(default_factory=list)
    answer: str = ""  # a whole (not streamed) answer's content
    interrupted: bool = False
    # The upstream's last chunk (its finish, `[DONE]`, or the end of its stream) was relayed:
    # a caller that leaves now (Agora's engine closes right after `[DONE]`) heard it all.
    relayed_all: bool = False
    # When the caller got its first token (or the whole answer): when the agent began to say it.
    said_ms: int | None = None

    def read_body(self, body: bytes) -> None:
        try:
            answer = json.loads(body)
            content = answer["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return
        if isinstance(content, str):
            self.answer = content

    @property
    def text(self) -> str:
        return streamed_text(self.blocks) if self.blocks else self.answer


class EventStream(web.StreamResponse):
    """A stream of server-sent events whose headers go out with its first event, in one write."""

    # aiohttp sends a StreamResponse's headers at `prepare()`, in a write of their own (a
    # `Response` buffers them, as this does): with the first chunk instead, the caller is
    # woken once, not twice, on the way to its first token (a tenth to half a millisecond
    # under load, bench/llm_proxy.py). Were aiohttp to drop the attribute, headers would
    # just go out at once again.
    _send_headers_immediately = False


class Disconnects:
    """Watches open streams and cancels the handler of one whose client went away.

    aiohttp does not cancel a handler when its client disconnects; a stream waiting on the
    upstream would notice only at its next write. One task checks all open streams.
    """

    def __init__(self, every_s: float = DISCONNECT_POLL_S) -> None:
        self.every_s = every_s
        self._open: dict[asyncio.Task[Any], web.Request] = {}
        self._gone: set[asyncio.Task[Any]] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, request: web.Request) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert task is not None
        self._open[task] = request
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return task

    def unwatch(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching; True if the client went away."""
        self._open.pop(task, None)
        if task in self._gone:
            self._gone.discard(task)
            return True
        return False

    async def _run(self) -> None:
        while self._open:
            await asyncio.sleep(self.every_s)
            for task, request in list(self._open.items()):
                transport = request.transport
                if transport is None or transport.is_closing():
                    del self._open[task]
                    self._gone.add(task)
                    task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class RelayCounts(Protocol):
    """The counters a relay adds to."""

    streamed: int
    upstream_errors: int
    cancelled: int  # the client went away mid-answer


@dataclass(slots=True)
class Outgoing:
    """One request on its way upstream: where to, its body, the caller's extra headers."""

    target: Target
    body: bytes
    headers: dict[str, str]
    stream: bool
    # Whether the reply is kept (to be recorded): else nothing of it is held on the way.
    keep: bool
    # Called once the request is on its way (while the model thinks), failed or not.
    sent: Callable[[], None] = lambda: None


class Relay:
    """Sends a chat completion upstream and passes its answer to the caller as it arrives."""

    def __init__(self, upstream: Upstream, counts: RelayCounts) -> None:
        self.upstream = upstream
        self.counts = counts
        self.disconnects = Disconnects()

    async def close(self) -> None:
        await self.disconnects.stop()
        await self.upstream.close()

    async def answer(self, request: web.Request, out: Outgoing, reply: Reply) -> web.StreamResponse:
        """The upstream's answer to `out`, relayed; a caller that leaves cancels it and marks
        `reply` interrupted (unless it had all of it already)."""
        task = self.disconnects.watch(request)
        try:
            return await self._relay(request, out, reply)
        except asyncio.CancelledError:
            # Cancelled by the watch, or by aiohttp itself when it runs with handler_cancellation.
            transport = request.transport
            if self.disconnects.unwatch(task) or transport is None or transport.is_closing():
                self._went_away(reply)
            raise
        except ConnectionResetError:
            # A write found the client gone before the watch did.
            self._went_away(reply)
            raise asyncio.CancelledError() from None
        finally:
            self.disconnects.unwatch(task)

    def _went_away(self, reply: Reply) -> None:
        if reply.relayed_all:
            return  # it left after the answer's end: nothing was cut short
        reply.interrupted = True
        self.counts.cancelled += 1

    async def _relay(self, request: web.Request, out: Outgoing, reply: Reply) -> web.StreamResponse:
        try:
            answer = await self.upstream.open(out.target, out.body)
        except UpstreamFailed as exc:
            self.counts.upstream_errors += 1
            log.warning("custom LLM: %s", exc.message)
            return openai_error(exc.status, exc.message, kind="upstream_error", code="upstream_unavailable")
        finally:
            out.sent()
        try:
            content_type = answer.headers.get("Content-Type", "")
            if answer.status >= 400:
                body = await answer.body()
                return self._upstream_error(answer.status, body, answer.headers, out.headers)
            if not out.stream or "text/event-stream" not in content_type:
                body = await answer.body()
                if out.keep:
                    reply.read_body(body)
                    reply.said_ms = now_ms()
                return web.Response(
                    status=answer.status,
                    body=body,
                    headers=out.headers,
                    content_type=content_type.split(";")[0] or "application/json",
                )
            return await self._stream(request, answer.events(), reply, out.headers, keep=out.keep)
        except UpstreamFailed as exc:
            self.counts.upstream_errors += 1
            return openai_error(exc.status, exc.message, kind="upstream_error", code="upstream_unavailable")
        finally:
            answer.close()

    def _upstream_error(
        self, status: int, body: bytes, upstream_headers: Mapping[str, str], headers: dict[str, str]
    ) -> web.Response:
        """The upstream's error with its status, in OpenAI's shape (kept as is when it already is)."""
        self.counts.upstream_errors += 1
        if "Retry-After" in upstream_headers:
            headers["Retry-After"] = upstream_headers["Retry-After"]
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        log.warning("custom LLM: the upstream answered %d", status)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            return web.Response(status=status, body=body, content_type="application/json", headers=headers)
        text = body.decode(errors="replace").strip()[:500] or f"the upstream LLM answered {status}"
        return openai_error(status, text, kind="upstream_error", code=str(status), headers=headers)

    async def _stream(
        self,
        request: web.Request,
        events: AsyncIterator[bytes],
        reply: Reply,
        headers: dict[str, str],
        *,
        keep: bool,
    ) -> web.StreamResponse:
        response: web.StreamResponse | None = None
        try:
            async for block in events:
                # Only a block that may carry an error is decoded on the way.
                error = first_error(block) if b'"error"' in block else None
                if error is not None:
                    if response is None and error[0] == 0:
                        # Before the first chunk an error is the answer's status.
                        self.counts.upstream_errors += 1
                        return openai_error(
                            502,
                            str(error[2]["error"].get("message") or error[2]["error"]),
                            kind="upstream_error",
                            code="upstream_error",
                        )
                    block = block[: error[1]]  # the error is the last event relayed
                if keep:
                    reply.blocks.append(block)
                if response is None:
                    reply.said_ms = now_ms()
                    response = await self._open_stream(request, headers)
                await response.write(block)
                if error is not None:
                    self.counts.upstream_errors += 1
                    break
                if not reply.relayed_all and _ANSWER_END.search(block) is not None:
                    reply.relayed_all = True
            else:
                reply.relayed_all = True  # the upstream's stream ended: its last chunk went out
        except UpstreamFailed as exc:
            self.counts.upstream_errors += 1
            if response is None:
                raise
            log.warning("custom LLM: %s (mid-stream)", exc.message)
            error_event = {
                "error": {
                    "message": exc.message,
                    "type": "upstream_error",
                    "param": None,
                    "code": "upstream_unavailable",
                }
            }
            await response.write(b"data: " + dumps(error_event).encode() + b"\n\n")
        if response is None:
            response = await self._open_stream(request, headers)
        await response.write_eof()
        return response

    async def _open_stream(self, request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
        self.counts.streamed += 1
        response = EventStream(
            headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        return response
