"""The platform seam: memory takes in neutral events, whichever platform made them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import agent_event, seed_sqlite

from agent_memory.core.events import (
    HistoryWindow,
    IncomingMessage,
    Outcome,
    RawEvent,
    SessionEvent,
)
from agent_memory.memory.service import Memory
from agent_memory.platforms.agora.events import parse_callback
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store

LABELS = {"user_id": "u-neutral", "character_id": "c"}


@pytest.fixture
def settings(tmp_path: Any) -> Settings:
    return Settings(db_path=tmp_path / "events.db", summary_delay_s=3600)


@pytest.fixture
def store(settings: Settings, migrated_sqlite: bytes) -> Any:
    seed_sqlite(settings, migrated_sqlite)  # a copy of a migrated database, not the migrations again
    store = open_store(settings)
    yield store
    store.close()


@pytest.fixture
def memory(settings: Settings, store: Store) -> Memory:
    return Memory(settings, store)


def raw(event_id: str, agent_id: str = "N1") -> RawEvent:
    return RawEvent(event_id=event_id, event_type=1, body="{}", received_ms=1, agent_id=agent_id)


def incoming(*lines: str, start: int = 0) -> list[IncomingMessage]:
    """Alternating user/assistant messages as a platform hands them to memory."""
    return [
        IncomingMessage(role="user" if i % 2 == 0 else "assistant", content=text, turn_id=start + i)
        for i, text in enumerate(lines)
    ]


async def texts(store: Store, agent_id: str) -> list[str]:
    rows = await store.read(lambda view: view.messages.of_session(agent_id))
    return [row.content for row in rows]


async def test_a_platform_free_run_becomes_one_session_and_transcript(memory: Memory, store: Store) -> None:
    joined = SessionEvent("joined", "N1", channel="room", labels=LABELS)
    assert (await memory.accept_event(raw("n-1"), joined)).status == "done"
    window = HistoryWindow("N1", messages=incoming("hello", "hi there"))
    assert (await memory.merge_window(window, 1)).new_messages == 2
    history = SessionEvent("history", "N1", labels=LABELS, messages=incoming("hello", "hi there", "bye"))
    outcome = await memory.accept_event(raw("n-2"), history)
    assert (outcome.status, outcome.new_messages, outcome.user_id) == ("done", 1, "u-neutral")
    assert await texts(store, "N1") == ["hello", "hi there", "bye"]
    session = await memory.identity.session("N1")
    assert (session.status, session.channel, session.identity_source) == (
        "stopped",
        "room",
        "labels",
    )
    # The same event id again is a redelivery: nothing is applied twice.
    assert (await memory.accept_event(raw("n-2"), history)).status == "duplicate"


async def test_an_outcome_is_recorded_and_parts_set_aside_make_it_partial(
    memory: Memory, store: Store
) -> None:
    ignored = await memory.accept_event(raw("n-3", "N2"), Outcome("ignored", detail="not ours"))
    assert ignored.status == "ignored"
    left = SessionEvent("left", "N2", labels=LABELS, failed=True, stop_reason="lost", skipped=["x: bad"])
    outcome = await memory.accept_event(raw("n-4", "N2"), left)
    assert outcome.status == "partial" and "x: bad" in (outcome.detail or "")
    session = await memory.identity.session("N2")
    assert (session.status, session.stop_reason) == ("failed", "lost")
    rows = await store.read(lambda view: [view.inbox.get("n-3"), view.inbox.get("n-4")])
    assert [row.status for row in rows] == ["ignored", "partial"]


async def test_a_speech_time_relative_to_the_start_dates_the_message(memory: Memory, store: Store) -> None:
    # Agora's custom-LLM speech_start_ms below 10^11 is ms since the agent started.
    envelope = agent_event(103, "N3", labels=LABELS, start_ts=1_763_690_000,
                           contents=[{"role": "user", "content": "hi", "speech_start_ms": 2500}])  # fmt: skip
    raw_event, event = parse_callback(json.dumps(envelope), 1, follow=False)
    assert isinstance(event, SessionEvent) and event.kind == "history"
    assert (event.messages[0].ts_ms, event.messages[0].elapsed_ms) == (None, 2500)
    await memory.accept_event(raw_event, event)
    rows = await store.read(lambda view: view.messages.of_session("N3"))
    assert rows[0].ts_ms == 1_763_690_000_000 + 2500
