"""No cold first turn: a call's start reads its pair's recall index into memory, and first-turn recalls are counted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Service, agent_event, deliver, live
from fakes.agora_server import FakeAgora
from fakes.upstream_llm import FakeUpstreamLLM
from test_live import join_body
from test_llm_proxy import post, start, stats

from agent_memory.core.postings import Docs, PostingsCache
from agent_memory.web.keys import MEMORY

LABELS = {"user_id": "u-ana", "character_id": "luna"}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


async def said_before(service: Service) -> None:
    """A past call of the pair, stored and indexed (recalled from nowhere yet: not held)."""
    turns = [
        {"role": "user", "content": "My sister's dog is called Biscuit.", "turn_id": 1, "timestamp": 1_700_000_000_000},
        {"role": "assistant", "content": "What a lovely name!", "turn_id": 1, "timestamp": 1_700_000_001_000},
    ]  # fmt: skip
    await deliver(service, agent_event(103, "a-past", labels=LABELS, contents=turns), expect="done")
    while await service.store.catch_up_search():
        pass


async def held(service: Service) -> bool:
    return await service.store.read(lambda view: view.recall.held("u-ana", "luna"))


async def settled(service: Service) -> None:
    await service.server.app[MEMORY].reading.warming.settled()


async def metric(service: Service, name: str) -> str:
    headers = {"Authorization": "Bearer test-api-token"}
    async with service.session.get(f"{service.url}/metrics", headers=headers) as resp:
        assert resp.status == 200
        text = await resp.text()
    return next(line for line in text.splitlines() if line.startswith(name))


@pytest.mark.sqlite_only
async def test_a_signed_101_holds_its_pairs_recall_index_in_memory(
    start_service: Any,
    upstream: FakeUpstreamLLM,
) -> None:
    service = await start(start_service, upstream)
    await said_before(service)
    assert not await held(service)
    await deliver(service, agent_event(101, "a-now", labels=LABELS), expect="done")
    await settled(service)
    assert await held(service)
    status, body = await service.api("GET", "/v1/llm/stats")
    assert status == 200 and body["warming"]["pairs_warmed"] == 1
    assert (await metric(service, "agent_memory_recall_warming_pairs_warmed_total")).endswith(" 1.0")
    # A second start of the same pair finds it held: not read again.
    await deliver(service, agent_event(101, "a-again", labels=LABELS), expect="done")
    await settled(service)
    assert (await service.api("GET", "/v1/llm/stats"))[1]["warming"]["pairs_warmed"] == 1


@pytest.mark.sqlite_only
async def test_starting_an_agent_with_memory_holds_its_pairs_recall_index(
    start_service: Any, fake: FakeAgora
) -> None:
    service = await live(start_service, fake)
    await said_before(service)
    assert not await held(service)
    status, answer = await service.api("POST", "/v1/agents", json={**LABELS, "join": join_body("luna-warm")})
    assert status == 201, answer
    await settled(service)
    assert await held(service)


@pytest.mark.postgres
async def test_the_first_request_of_a_run_is_a_first_turn_recall_and_warms_its_pair(
    start_service: Any,
    upstream: FakeUpstreamLLM,
    backend: str,
) -> None:
    service = await start(start_service, upstream)
    await said_before(service)
    question = {"role": "user", "content": "do you remember what my sister's dog is called?"}
    body = {"model": "m", "messages": [question], "stream": False, **LABELS, "agent_id": "a-live"}
    for _ in range(2):
        response = await post(service, body)
        assert response.status == 200, await response.text()
    counted = await stats(service)
    assert counted["recalls"] == 2 and counted["first_turn_recalls"] == 1
    assert counted["first_turn_misses"] == 0
    await settled(service)
    # Held in this process, on either backend.
    assert await held(service)
    assert (await metric(service, "agent_memory_llm_proxy_first_turn_recalls_total")).endswith(" 1.0")


@pytest.mark.postgres
async def test_a_first_turn_recall_past_its_deadline_is_counted_and_still_warms(
    start_service: Any,
    upstream: FakeUpstreamLLM,
    backend: str,
) -> None:
    service = await start(start_service, upstream, recall_timeout_ms=0.001)
    await said_before(service)
    question = {"role": "user", "content": "what is my sister's dog called?"}
    body = {"model": "m", "messages": [question], "stream": False, **LABELS, "agent_id": "a-live"}
    response = await post(service, body)
    assert response.status == 200, await response.text()
    counted = await stats(service)
    assert counted["first_turn_recalls"] == 1 and counted["first_turn_misses"] == 1
    assert (await metric(service, "agent_memory_llm_proxy_first_turn_misses_total")).endswith(" 1.0")
    await settled(service)
    assert await held(service)


def test_a_read_begun_before_a_forget_is_not_held_after_it() -> None:
    cache = PostingsCache()
    key = ("db", 1)

    def whole() -> Docs:
        cache.clear()  # a forget commits while the pair is being read (a warming read, say)
        return 1, [(10, 2, ["biscuit", "dog"])]

    def never() -> Docs:
        raise AssertionError("not read in the background")

    cache.current(key, 1, 1, newer=lambda _: (1, []), whole=whole, whole_later=never, at_once=True)
    assert not cache.holds(key) and len(cache) == 0
