"""What per-turn memory keeps of live calls (memory/live_calls.py): recording their windows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_memory.core.events import HistoryWindow, IncomingMessage, Outcome
from agent_memory.errors import StoreUnavailable
from agent_memory.memory.live_calls import HeldReplies, ProxyStats
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import open_store

pytestmark = pytest.mark.postgres

START_MS = 1_763_690_000_000


@pytest.fixture
async def memory(make_settings: Callable[..., Settings]) -> AsyncIterator[Memory]:
    settings = make_settings()
    store = open_store(settings)
    try:
        yield Memory(settings, store)
    finally:
        store.close()


def window(session: str, user_id: str, *lines: str) -> HistoryWindow:
    said = [
        IncomingMessage(role="user" if i % 2 == 0 else "assistant", content=line, ts_ms=START_MS + i * 1000)
        for i, line in enumerate(lines)
    ]
    return HistoryWindow(agent_id=session, messages=said, labels={"user_id": user_id, "character_id": "luna"})


async def stored(memory: Memory, session: str) -> list[str]:
    return [m.content for m in await memory._store.read(lambda view: view.messages.of_session(session))]


async def test_windows_asked_for_together_are_written_in_one_transaction(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[Any] = []
    write = memory._store.write

    async def counted(fn: Any) -> Any:
        writes.append(fn)
        return await write(fn)

    monkeypatch.setattr(memory._store, "write", counted)
    stats = ProxyStats()
    replies = HeldReplies(memory, stats, settle_s=20)  # gathering for its MERGE_GATHER_S
    told: list[tuple[str, Outcome]] = []
    for number in range(3):
        replies.merge(
            window(f"call-{number}", f"u-{number}", f"hello {number}", "hi there"),
            lambda outcome, number=number: told.append((f"call-{number}", outcome)),  # type: ignore[misc]
        )
    # A second request of the first call, with what it adds, in the same gathering: written after its first.
    replies.merge(window("call-0", "u-0", "hello 0", "hi there", "how are you?"))
    async with asyncio.timeout(10):  # the gathering ends by itself, then the write commits
        while stats.recorded + stats.record_errors < 7:
            await asyncio.sleep(0.01)
    assert len(writes) == 1  # one transaction, one commit, for the four windows
    assert [session for session, _ in told] == ["call-0", "call-1", "call-2"]
    assert [outcome.new_messages for _, outcome in told] == [2, 2, 2]
    assert await stored(memory, "call-0") == ["hello 0", "hi there", "how are you?"]
    assert await stored(memory, "call-2") == ["hello 2", "hi there"]
    assert (stats.recorded, stats.record_errors) == (7, 0)


async def test_a_gathered_window_is_written_at_close_and_dropped_by_a_forget_of_its_pair(
    memory: Memory,
) -> None:
    stats = ProxyStats()
    replies = HeldReplies(memory, stats, settle_s=20)
    replies.gather_s = 60
    replies.merge(window("kept", "u-kept", "remember the lake"))
    replies.merge(window("forgotten", "u-gone", "forget me"))
    replies.forget({"user_id": "u-gone"})
    await replies.close()  # well before the gathering's end: what is still gathered is written
    assert await stored(memory, "kept") == ["remember the lake"]
    assert await stored(memory, "forgotten") == []
    assert stats.recorded == 1


class Failing:
    """A watch whose merge fails inside its transaction with `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def before(self, tx: Any) -> None:
        raise self.error

    def after(self, tx: Any) -> None:
        pass


async def test_a_window_whose_merge_is_refused_is_undone_and_counted_alone(memory: Memory) -> None:
    stats = ProxyStats()
    replies = HeldReplies(memory, stats, settle_s=20)
    replies.merge(window("first", "u-1", "one"))
    replies.merge(
        window("failing", "u-2", "two"), watch=Failing(StoreUnavailable("this window's merge is refused"))
    )
    replies.merge(window("third", "u-3", "three"))
    await replies.close()
    assert [await stored(memory, session) for session in ("first", "failing", "third")] == [
        ["one"],
        [],
        ["three"],
    ]
    assert (stats.recorded, stats.record_errors) == (2, 1)


async def test_a_window_failing_otherwise_fails_its_transaction_as_it_would_alone(memory: Memory) -> None:
    stats = ProxyStats()
    replies = HeldReplies(memory, stats, settle_s=20)
    replies.merge(window("first", "u-1", "one"))
    replies.merge(
        window("broken", "u-2", "two"),
        watch=Failing(RuntimeError("not a refusal: a backend's lost race, say")),
    )
    await replies.close()
    # Raised out of the transaction, where a backend retries what lost a race (PostgreSQL's
    # deadlocks): nothing of it is stored, each window is counted (their calls' next requests
    # carry their turns again).
    assert [await stored(memory, session) for session in ("first", "broken")] == [[], []]
    assert (stats.recorded, stats.record_errors) == (0, 2)
