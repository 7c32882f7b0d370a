"""A fake OpenAI-compatible chat completions endpoint on loopback, driven by the real SDK.

    async with FakeOpenAI() as fake:
        fake.script(500, "malformed", {"summary": "…", "facts": [{"event": "ADD", …}]})
        settings = Settings(openai_base_url=fake.base_url, openai_api_key="test", …)

Each request takes the next scripted answer; with the queue empty it answers a valid
memory update echoing the last user line. Every request body is kept in `fake.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from aiohttp import web

MALFORMED = "malformed"
HANG = "hang"
MALFORMED_CONTENT = "Sure! Here is the updated memory: the user likes green tea."
LAST_USER_LINE = re.compile(r"^\[\d\d:\d\d\] User[^:]*: (?P<text>.+)$", re.MULTILINE)


@dataclass
class Reply:
    """Full control over one answer: an HTTP status, the message content, extra headers."""

    status: int = 200
    content: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


Answer = Reply | str | int | dict[str, Any]


def as_reply(answer: Answer, retry_after: float) -> Reply:
    """Read a scripted shorthand: a status code, "malformed", "hang", a dict or a JSON string."""
    if isinstance(answer, Reply):
        return answer
    if isinstance(answer, bool):
        raise TypeError("script a status code, a string, a dict or a Reply")
    if isinstance(answer, int):
        headers = {"Retry-After": f"{retry_after:g}"} if answer == 429 else {}
        return Reply(status=answer, headers=headers)
    if isinstance(answer, dict):
        return Reply(content=json.dumps(answer, ensure_ascii=False))
    if answer == MALFORMED:
        return Reply(content=MALFORMED_CONTENT)
    if answer == HANG:
        return Reply(hang=True)
    return Reply(content=answer)


def echo_update(body: dict[str, Any]) -> dict[str, Any]:
    """A valid memory update whose summary repeats the last user line of the transcript."""
    texts = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
    lines = [match.group("text") for text in texts for match in LAST_USER_LINE.finditer(text)]
    summary = f"Echo: {lines[-1]}" if lines else "Echo: nothing new."
    return {"summary": summary, "facts": []}


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """About four characters a token, plus a little per message, like a real tokenizer."""
    messages = body.get("messages", [])
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return max(1, chars // 4 + 4 * len(messages))


class FakeOpenAI:
    """Serves POST /v1/chat/completions on a free 127.0.0.1 port; see the module docstring."""

    def __init__(self, *, hang_s: float = 30.0, retry_after: float = 2.0) -> None:
        """`hang_s`: how long a "hang" answer stalls; `retry_after`: the 429 Retry-After."""
        self.hang_s = hang_s
        self.retry_after = retry_after
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.base_url = ""
        self._queue: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()

    # -- scripting the fake --------------------------------------------------------------
    def script(self, *answers: Answer) -> None:
        """Queue answers for the next requests, in order."""
        self._queue.extend(as_reply(answer, self.retry_after) for answer in answers)

    @property
    def calls(self) -> int:
        """How many chat completion requests arrived."""
        return len(self.requests)

    def sent_text(self, index: int = -1) -> str:
        """All message contents of request `index`, joined: what the model would have read."""
        return "\n".join(str(m.get("content") or "") for m in self.requests[index]["messages"])

    async def before_answer(self, body: dict[str, Any]) -> None:
        """Called with each request once it is recorded, before it is answered.

        A test that must act while the model is "thinking" overrides it to hold the request.
        """

    # -- the HTTP side -------------------------------------------------------------------
    def make_app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        return app

    async def __aenter__(self) -> FakeOpenAI:
        """Serve on a free loopback port; `base_url` ends in /v1 as the SDK expects."""
        self._closing.clear()
        # A short shutdown timeout: a stalled "hang" handler must not hold up the test.
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Release stalled handlers, then stop serving."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _chat_completions(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, "the body is not a JSON object")
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        await self.before_answer(body)
        reply = self._queue.popleft() if self._queue else Reply()

        if reply.hang:
            with contextlib.suppress(TimeoutError):  # stall until closing or hang_s
                await asyncio.wait_for(self._closing.wait(), self.hang_s)
        if reply.status >= 400:
            phrase = HTTPStatus(reply.status).phrase
            return error(reply.status, f"fake {phrase.lower()}", headers=reply.headers)
        content = reply.content
        if content is None:
            content = json.dumps(echo_update(body), ensure_ascii=False)
        return web.json_response(self._completion(body, content), headers=reply.headers)

    def _completion(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        """A chat.completion object as the OpenAI API returns it."""
        prompt_tokens = estimate_prompt_tokens(body)
        completion_tokens = max(1, len(content) // 4)
        number = len(self.requests)
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000 + number,
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    kind = "invalid_request_error"
    if status == 429:
        kind = "rate_limit_exceeded"
    elif status >= 500:
        kind = "server_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return web.json_response(body, status=status, headers=headers)
