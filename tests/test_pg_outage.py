"""A PostgreSQL outage, from outside: the real service on a real port, its own cluster stopped as by kill -9.

While the database is down every request is answered at once (503 `store_unavailable` naming
the database; the custom-LLM endpoint relays without memory); once it is back the same process
serves again. A client timeout of 10 s is the hang detector (the pool used to hold each request
30 s): no timing is asserted, the figures are printed for the closing note (`pytest -s`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import TOKEN, agent_event, turns, wait_for
from fakes.upstream_llm import FakeUpstreamLLM
from postgres_server import PostgresCluster, bindir
from served import Server, servers
from test_durability import post

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import LlmRoute
from agent_memory.core.secrets import hash_key
from agent_memory.store.postgres import PostgresStore

# PostgreSQL stopped under a running service: the whole suite runs them.
pytestmark = [
    pytest.mark.skipif(bindir() is None, reason="PostgreSQL server binaries (initdb) not found"),
    pytest.mark.slow,
]

LLM_TOKEN = "llm-token-for-the-outage"
ROUTE_KEY = "minted-route-key-for-the-outage"
LABELS = {"user_id": "u-outage", "character_id": "c"}
PAIR = "/v1/users/u-outage/characters/c"
# A request answered later than this failed the test: the pool used to hold each one 30 s.
HANG_S = 10.0
# How long PostgreSQL stays down (at least): long enough for pools to try reconnecting.
OUTAGE_S = 5.0


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    """A cluster of this test's own, so it can be stopped and started again."""
    cluster = PostgresCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def add_route(database: str) -> None:
    """A per-agent key, as POST /v1/agents mints one, for the live call to use."""
    store = PostgresStore(database, index=False)
    store.open()
    try:
        route = LlmRoute(
            key_hash=hash_key(ROUTE_KEY), agent_id="OUTAGE-LIVE", user_id="u-outage", character_id="c",
            upstream_base_url=None, upstream_api_key=None, upstream_model=None, upstream_params={},
            created_ms=now_ms(),
        )  # fmt: skip
        store.write_now(lambda tx: tx.llm_routes.add(route))
    finally:
        store.close()


async def answer(resp: aiohttp.ClientResponse) -> tuple[int, Any]:
    if resp.content_type == "application/json":
        return resp.status, await resp.json()
    return resp.status, await resp.text()


class Probes:
    """The requests an outage is judged by, each timed."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.timings: dict[str, list[float]] = {}
        self.phase = "up"
        self._calls = 0

    async def timed(self, name: str, request: Callable[[], Awaitable[tuple[int, Any]]]) -> tuple[int, Any]:
        started = time.monotonic()
        result = await request()
        self.timings.setdefault(f"{self.phase}: {name}", []).append(time.monotonic() - started)
        return result

    async def health(self) -> tuple[int, Any]:
        async def go() -> tuple[int, Any]:
            async with self.session.get(f"{self.url}/healthz") as resp:
                if resp.status == 503:
                    assert resp.headers.get("Retry-After") == "1", resp.headers
                return await answer(resp)

        return await self.timed("healthz", go)

    async def callback(self, notice: str) -> tuple[int, Any]:
        envelope = agent_event(
            103,
            f"OUTAGE-{notice}",
            notice_id=f"outage:{notice}",
            labels=LABELS,
            contents=turns(4, prefix=notice),
        )
        return await self.timed("callback", lambda: post(self.session, self.url, envelope))

    async def api(self, name: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async def go() -> tuple[int, Any]:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with self.session.request(method, f"{self.url}{path}", json=body, headers=headers) as resp:
                return await answer(resp)

        return await self.timed(name, go)

    async def llm(self, key: str) -> tuple[int, Any]:
        self._calls += 1
        body = {
            "model": "m", "stream": True, "turn_id": self._calls,
            "messages": [{"role": "user", "content": f"do you remember my pottery class? ({self._calls})"}],
        }  # fmt: skip
        if key == LLM_TOKEN:
            body.update(LABELS)

        async def go() -> tuple[int, Any]:
            headers = {"Authorization": f"Bearer {key}"}
            async with self.session.post(
                f"{self.url}/v1/llm/chat/completions", json=body, headers=headers
            ) as resp:
                return resp.status, await resp.text()

        return await self.timed("llm" if key == LLM_TOKEN else "llm (minted key)", go)

    async def stats(self) -> dict[str, int]:
        status, body = await self.api("stats", "GET", "/v1/llm/stats")
        assert status == 200, body
        stats: dict[str, int] = body["llm_proxy"]
        return stats


def assert_down(status: int, body: Any, database: str) -> None:
    """A 503 `store_unavailable` that names the database and says it is down."""
    assert status == 503, body
    assert body["error"]["code"] == "store_unavailable", body
    message = body["error"]["message"]
    assert database.rsplit("/", 1)[0] in message and "down" in message, message


async def test_a_postgres_outage_is_answered_at_once_and_served_again_without_a_restart(
    tmp_path: Path, own_cluster: PostgresCluster
) -> None:
    database = own_cluster.database()
    add_route(database)
    async with FakeUpstreamLLM() as model:
        with servers() as started:
            more = {
                "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN, "AGENT_MEMORY_UPSTREAM_BASE_URL": model.base_url,
                "AGENT_MEMORY_UPSTREAM_API_KEY": "upstream-key", "AGENT_MEMORY_LOG_LEVEL": "INFO",
            }  # fmt: skip
            server = Server(database, tmp_path / "serve.log", more)
            started.append(server)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
                await server.wait_healthy(session, timeout_s=60)
                probes = Probes(session, server.url)
                assert (await probes.callback("before"))[0] == 200
                status, _ = await probes.llm(ROUTE_KEY)  # the minted key is known to this process
                assert status == 200

                own_cluster.halt()
                halted, probes.phase = time.monotonic(), "down"
                round_ = 0
                while round_ < 3 or time.monotonic() - halted < OUTAGE_S:
                    round_ += 1
                    assert_down(*await probes.health(), database)
                    assert_down(*await probes.callback(f"down{round_}"), database)
                    assert_down(*await probes.api("recall", "GET", f"{PAIR}/recall?q=pottery"), database)
                    assert_down(
                        *await probes.api("facts", "POST", f"{PAIR}/facts", {"text": "likes tea"}), database
                    )
                    # The live call goes on, without memory.
                    for key in (LLM_TOKEN, ROUTE_KEY):
                        status, text = await probes.llm(key)
                        assert status == 200 and '"Hello"' in text and "data: [DONE]" in text, text
                    await asyncio.sleep(0.5)
                stats = await probes.stats()
                assert stats["store_unavailable"] >= 6, stats
                down_for = time.monotonic() - halted

                own_cluster.resume()
                back, probes.phase = time.monotonic(), "back"

                async def served() -> bool:
                    status, _ = await probes.health()
                    return status == 200

                await wait_for(served, 60, failure="the service did not serve again once PostgreSQL was back")
                recovered = time.monotonic() - back
                assert (await probes.callback("after"))[0] == 200
                status, body = await probes.api("recall", "GET", f"{PAIR}/recall?q=line")
                assert status == 200, body
                assert server.proc.poll() is None  # the same process, never restarted
    log = (tmp_path / "serve.log").read_text()
    print(f"\noutage of {down_for:.1f} s; served again {recovered:.2f} s after PostgreSQL was back")
    for name, times in probes.timings.items():
        print(
            f"  {name}: {len(times)} answers, max {max(times) * 1000:.0f} ms, "
            + " ".join(f"{t * 1000:.0f}" for t in times)
        )
    assert "is down" in log and "answers again" in log, log[-3000:]


async def test_a_service_started_while_postgres_is_down_waits_for_it_and_says_so(
    tmp_path: Path, own_cluster: PostgresCluster
) -> None:
    database = own_cluster.database()
    own_cluster.halt()
    with servers() as started:
        server = Server(database, tmp_path / "serve.log", {"AGENT_MEMORY_LOG_LEVEL": "INFO"})
        started.append(server)
        await wait_for(
            lambda: "waiting for it" in (tmp_path / "serve.log").read_text(), 60,
            failure="the service did not say it waits for the database",
        )  # fmt: skip
        assert server.proc.poll() is None  # waiting, not exited
        own_cluster.resume()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
            health = await server.wait_healthy(session, timeout_s=60)
    assert health["status"] == "ok"
    log = (tmp_path / "serve.log").read_text()
    assert f"cannot open PostgreSQL at {database}" in log and "the database answers" in log, log
