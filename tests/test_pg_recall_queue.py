"""The recall index's queue on PostgreSQL: a stuck drain never holds up recall, and the drain is never
planned once for all (a plan cached while the queue was nearly empty ran for minutes on a long one)."""

from __future__ import annotations

from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import Service, agent_event, said, wait_for

from agent_memory.store.postgres import PostgresStore, PostgresTransaction, engine

PAIR = "/v1/users/u-queue/characters/c"
LABELS = {"user_id": "u-queue", "character_id": "c"}


@pytest.fixture
def backend() -> str:
    return "postgres"


async def recall(service: Service, q: str) -> dict[str, Any]:
    # A recall that waited on the drain would hang until it ends: 30 s is the hang detector.
    timeout = aiohttp.ClientTimeout(total=30)
    status, body = await service.api("GET", f"{PAIR}/recall", params={"q": q}, timeout=timeout)
    assert status == 200, body
    return body


def texts(body: dict[str, Any]) -> str:
    return " ".join(memory["text"] for memory in body["memories"])


async def test_a_recall_does_not_wait_on_a_drain_that_holds_the_queue(
    start_service: Any, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No background drain: the turns stay queued until this test's own drain or a recall takes them.
    monkeypatch.setattr(engine, "INDEX_EVERY_S", 3600.0)
    service = await start_service()
    first = said("I go to a pottery class on Tuesdays.", "Pottery sounds relaxing!")
    assert (await service.callback(agent_event(103, "Q-1", labels=LABELS, contents=first)))[0] == 200
    body = await recall(service, "pottery")
    assert "pottery class" in texts(body) and body["index_lag"] == 0

    later = said("My violin lesson moved to Friday.", "Friday it is.", "And the cello too.", "Noted.")
    assert (await service.callback(agent_event(103, "Q-2", labels=LABELS, contents=later)))[0] == 200
    with psycopg.connect(db_path) as drain:
        # A drain that took the queue's rows and does not end (its instance was killed, say).
        held = drain.execute("SELECT id FROM recall_pending ORDER BY id FOR UPDATE").fetchall()
        assert len(held) == len(later)
        body = await recall(service, "pottery violin")
        assert drain.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # still holding them
        # Answered from what is indexed, saying how many turns it could not see yet.
        assert "pottery class" in texts(body) and "violin" not in texts(body)
        assert body["index_lag"] == len(later)
        drain.rollback()
    body = await recall(service, "violin")
    assert "violin lesson" in texts(body) and body["index_lag"] == 0


def test_the_drain_is_planned_afresh_each_time(db_path: str) -> None:
    store = PostgresStore(db_path, index=False)
    store.open()
    try:

        def drain_often(tx: PostgresTransaction) -> list[str]:
            for round_ in range(10):
                tx.conn.execute(b"INSERT INTO recall_pending (id) VALUES (%s)", (round_ + 1,))
                tx.recall.catch_up(500)
            rows = tx.conn.execute(b"SELECT statement FROM pg_prepared_statements").fetchall()
            return [row["statement"] for row in rows]

        prepared = store.write_now(drain_often)
    finally:
        store.close()
    # psycopg prepares a statement run 5 times, and PostgreSQL may then keep one generic plan for it.
    assert not [statement for statement in prepared if "DELETE FROM recall_pending" in statement], prepared


def test_the_background_indexer_waits_for_this_instances_writes_to_pause() -> None:
    """As SQLite's writer does: a burst's turns are stemmed after it, not between its callbacks
    (True: index until caught up); while writes never pause, one chunk now and then (False);
    otherwise not yet (None)."""
    write = 100.0
    assert engine.index_due(write + engine.IDLE_AFTER_S / 2, write, write - 0.1) is None
    assert (
        engine.index_due(write + engine.IDLE_AFTER_S / 2, write, write - engine.BUSY_INDEX_EVERY_S) is False
    )
    assert engine.index_due(write + 2 * engine.IDLE_AFTER_S, write, write) is True


async def test_turns_stored_are_indexed_in_the_background_once_writes_pause(
    service: Service, db_path: str
) -> None:
    """No recall needed: once the callbacks stop, the queue drains by itself."""
    for index in range(3):
        contents = said(f"My sister plays the oboe number {index}.", "Lovely!")
        assert (await service.callback(agent_event(103, f"BG-{index}", labels=LABELS, contents=contents)))[
            0
        ] == 200

    def drained() -> bool:
        with psycopg.connect(db_path) as conn:
            row = conn.execute("SELECT count(*) FROM recall_pending").fetchone()
        return row is not None and row[0] == 0

    await wait_for(drained, failure="the recall queue was not drained once the writes paused")
    body = await recall(service, "oboe")
    assert "oboe" in texts(body) and body["index_lag"] == 0
