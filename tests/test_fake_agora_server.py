"""The fake Agora server, driven by the real AgoraClient over loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from fakes.agora_server import FakeAgora

from agent_memory.errors import AgoraNotFound
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.settings import Settings


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
async def client(fake: FakeAgora, sleeps: list[float]) -> AsyncIterator[AgoraClient]:
    async def no_sleep(delay: float) -> None:  # retry at once; backoff is tested elsewhere
        sleeps.append(delay)

    settings = Settings(
        agora_app_id="app",
        agora_customer_id="cid",
        agora_customer_secret="csec",
        agora_api_base=fake.base_url,
        agora_timeout_s=5,
    )
    async with aiohttp.ClientSession() as session:
        yield AgoraClient(settings, session, sleep=no_sleep)


def numbered(start: int, stop: int) -> list[dict[str, Any]]:
    """User messages `start`..`stop-1`, each its own turn."""
    return [{"role": "user", "content": f"message {i}", "turn_id": i} for i in range(start, stop)]


async def test_history_is_a_sliding_window_of_max_history(fake: FakeAgora, client: AgoraClient) -> None:
    fake.add_agent("A1", max_history=4)
    fake.say("A1", numbered(0, 3))
    first = await client.history("A1")
    fake.say("A1", numbered(3, 7))
    second = await client.history("A1")
    assert [m.content for m in first.contents] == ["message 0", "message 1", "message 2"]
    assert [m.turn_id for m in second.contents] == [3, 4, 5, 6]
    assert second.status == "RUNNING" and second.start_ms is not None
    assert fake.count("/agents/A1/history") == 2


async def test_history_after_stop_is_agora_not_found(fake: FakeAgora, client: AgoraClient) -> None:
    fake.add_agent("A1")
    await client.history("A1")
    fake.stop("A1")
    with pytest.raises(AgoraNotFound) as info:
        await client.history("A1")
    assert info.value.reason == "TaskNotFound"
    assert (await client.query("A1"))["status"] == "STOPPED"


async def test_429_on_cue_is_retried_and_join_update_leave_work(
    fake: FakeAgora, client: AgoraClient, sleeps: list[float]
) -> None:
    fake.fail_next("/join", 429, retry_after=0)
    answer = await client.join({"name": "n1", "properties": {"llm": {"max_history": 8}}})
    agent_id = answer["agent_id"]
    assert answer["status"] == "RUNNING"
    assert fake.count("/join") == 2 and sleeps == [0.0]
    assert fake.joins == [{"name": "n1", "properties": {"llm": {"max_history": 8}}}]
    assert fake.agents[agent_id].max_history == 8

    system = [{"role": "system", "content": "You are Luna."}]
    await client.update_system_messages(agent_id, system)
    assert fake.updates == [(agent_id, {"properties": {"llm": {"system_messages": system}}})]
    await client.leave(agent_id)
    assert fake.agents[agent_id].status == "STOPPED"


async def test_wrong_credentials_get_401(fake: FakeAgora) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{fake.base_url}/v2/projects/app/agents/A1") as resp,
    ):
        assert resp.status == 401
        assert (await resp.json())["reason"] == "Unauthorized"
