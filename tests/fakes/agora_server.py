"""A fake of Agora's ConvoAI REST API on loopback, for integration tests and benchmarks."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RUNNING = "RUNNING"
STOPPED = "STOPPED"


@dataclass
class FakeAgent:
    """One agent: its whole conversation, of which history shows the last `max_history`."""

    agent_id: str
    max_history: int = 32
    status: str = RUNNING
    start_ts: int = field(default_factory=lambda: int(time.time()))
    messages: list[dict[str, Any]] = field(default_factory=list)
    join_body: dict[str, Any] | None = None


@dataclass
class FailureCue:
    """Answer `status` to the next `times` requests whose path contains `path_substring`."""

    path_substring: str
    status: int
    times: int
    retry_after: float | None


def error(status: int, detail: str, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    """Agora's error shape: {"detail", "reason"}."""
    return web.json_response({"detail": detail, "reason": reason}, status=status, headers=headers)


class FakeAgora:
    """Agents plus a record of requests; `async with FakeAgora() as fake` serves on 127.0.0.1."""

    def __init__(
        self,
        app_id: str = "app",
        customer_id: str | None = "cid",
        customer_secret: str | None = "csec",
        token: str | None = None,
        latency_s: float = 0.0,
    ) -> None:
        """Accept Basic customer_id:customer_secret and/or `agora token=<token>`."""
        self.app_id = app_id
        self.token = token
        self.latency_s = latency_s
        self.basic = (
            "Basic " + base64.b64encode(f"{customer_id}:{customer_secret}".encode()).decode()
            if customer_id and customer_secret
            else None
        )
        self.agents: dict[str, FakeAgent] = {}
        self.joins: list[dict[str, Any]] = []
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.requests: Counter[str] = Counter()
        self.cues: list[FailureCue] = []
        # Called with the new agent before /join answers (e.g. to deliver its 101 first,
        # as Agora may when the agent joins the channel quickly).
        self.on_join: Callable[[FakeAgent], Awaitable[None]] | None = None
        # The raw body a successful leave answers with; Agora documents it as empty.
        self.leave_body = ""
        # When set, /join answers 200 with this raw body (after recording the join).
        self.join_answer: str | None = None
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    # -- scripting the fake --------------------------------------------------------------
    def add_agent(self, agent_id: str, max_history: int = 32, status: str = RUNNING) -> FakeAgent:
        """Create (or replace) an agent."""
        self.agents[agent_id] = FakeAgent(agent_id, max_history=max_history, status=status)
        return self.agents[agent_id]

    def say(self, agent_id: str, messages: Iterable[dict[str, Any]]) -> None:
        """Append messages to the agent's full conversation."""
        self.agents[agent_id].messages.extend(dict(m) for m in messages)

    def stop(self, agent_id: str) -> None:
        """Stop the agent: history answers 404 TaskNotFound from now on."""
        self.agents[agent_id].status = STOPPED

    def fail_next(
        self, path_substring: str, status: int, times: int = 1, retry_after: float | None = None
    ) -> None:
        """Answer `status` (with Retry-After if given) to the next matching requests."""
        self.cues.append(FailureCue(path_substring, status, times, retry_after))

    def count(self, path_substring: str) -> int:
        """How many requests were made to paths containing `path_substring`."""
        return sum(n for path, n in self.requests.items() if path_substring in path)

    # -- the HTTP side -------------------------------------------------------------------
    def make_app(self) -> web.Application:
        """The aiohttp application serving `/v2/projects/{app_id}/…`."""
        app = web.Application(middlewares=[self._middleware])
        prefix = f"/v2/projects/{self.app_id}"
        app.router.add_post(f"{prefix}/join", self._join)
        app.router.add_get(f"{prefix}/agents/{{agent_id}}/history", self._history)
        app.router.add_post(f"{prefix}/agents/{{agent_id}}/update", self._update)
        app.router.add_post(f"{prefix}/agents/{{agent_id}}/leave", self._leave)
        app.router.add_get(f"{prefix}/agents/{{agent_id}}", self._query)
        return app

    async def __aenter__(self) -> FakeAgora:
        """Serve on a free loopback port; `base_url` is then usable as AGORA_API_BASE."""
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.requests[request.path] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if not self._authorized(request.headers.get("Authorization")):
            return error(401, "invalid authorization", "Unauthorized")
        for cue in self.cues:
            if cue.times > 0 and cue.path_substring in request.path:
                cue.times -= 1
                headers = None
                if cue.retry_after is not None:
                    headers = {"Retry-After": f"{cue.retry_after:g}"}
                phrase = HTTPStatus(cue.status).phrase
                return error(cue.status, phrase.lower(), phrase.replace(" ", ""), headers)
        return await handler(request)

    def _authorized(self, header: str | None) -> bool:
        token = f"agora token={self.token}" if self.token else None
        return header is not None and header in (self.basic, token)

    async def _json_body(self, request: web.Request) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _running(self, request: web.Request) -> FakeAgent | None:
        agent = self.agents.get(request.match_info["agent_id"])
        return agent if agent is not None and agent.status != STOPPED else None

    async def _join(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        if body is None:
            return error(400, "body is not a JSON object", "InvalidRequest")
        self.joins.append(body)
        if self.join_answer is not None:
            return web.Response(text=self.join_answer, content_type="application/json")
        name = body.get("name")
        for other in self.agents.values():
            if name and other.status != STOPPED and (other.join_body or {}).get("name") == name:
                return error(409, f"agent {name} is already running", "TaskConflict")
        llm = (body.get("properties") or {}).get("llm") or {}
        agent_id = secrets.token_hex(13).upper()[:25]
        agent = self.add_agent(agent_id, max_history=int(llm.get("max_history", 32)))
        agent.join_body = body
        if self.on_join is not None:
            await self.on_join(agent)
        return web.json_response(self._state(agent, "create_ts"))

    async def _history(self, request: web.Request) -> web.Response:
        agent = self._running(request)
        if agent is None:
            return error(404, "task not found", "TaskNotFound")
        window = agent.messages[-agent.max_history :]
        return web.json_response({**self._state(agent), "contents": window})

    async def _update(self, request: web.Request) -> web.Response:
        agent = self._running(request)
        if agent is None:
            return error(404, "task not found", "TaskNotFound")
        body = await self._json_body(request)
        if body is None:
            return error(400, "body is not a JSON object", "InvalidRequest")
        self.updates.append((agent.agent_id, body))
        return web.json_response(self._state(agent, "create_ts"))

    async def _leave(self, request: web.Request) -> web.Response:
        agent = self._running(request)
        if agent is None:
            return error(404, "task not found", "TaskNotFound")
        agent.status = STOPPED
        return web.Response(text=self.leave_body, content_type="application/json")

    async def _query(self, request: web.Request) -> web.Response:
        agent = self.agents.get(request.match_info["agent_id"])
        if agent is None:
            return error(404, "task not found", "TaskNotFound")
        return web.json_response(self._state(agent))

    @staticmethod
    def _state(agent: FakeAgent, ts_key: str = "start_ts") -> dict[str, Any]:
        return {"agent_id": agent.agent_id, ts_key: agent.start_ts, "status": agent.status}
