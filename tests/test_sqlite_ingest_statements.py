"""What a 103 costs SQLite's writer in statements: a run's messages go in by multi-row INSERTs,
not one statement per message (issue 28); the rows are those a statement per message stored."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Service, agent_event, turns

LABELS = {"user_id": "u-cost", "character_id": "c"}


@pytest.fixture
def backend() -> str:
    return "sqlite"


async def traced(service: Service, envelope: dict[str, Any]) -> list[str]:
    """The statements the writer ran for one callback (each execution of one, as SQLite traces them)."""
    sent: list[str] = []
    await service.store.write(lambda tx: tx.conn.set_trace_callback(sent.append))
    try:
        status, body = await service.callback(envelope)
    finally:
        await service.store.write(lambda tx: tx.conn.set_trace_callback(None))
    assert (status, body["status"]) == (200, "done"), body
    return [" ".join(sql.split()) for sql in sent]


async def stored_rows(service: Service, agent_id: str) -> list[Any]:
    """The session's message rows in id order, with the stored type of each flag."""
    return await service.store.read(
        lambda view: view.conn.execute(
            "SELECT id, seq, content, interrupted, typeof(interrupted), gap_before, typeof(gap_before), "
            "at_ms FROM messages WHERE agent_id = ? ORDER BY id",
            (agent_id,),
        ).fetchall()
    )


@pytest.mark.parametrize(("count", "inserts"), [(32, 1), (40, 2), (7, 3)])
async def test_a_runs_messages_go_in_by_a_few_multi_row_inserts(
    service: Service, count: int, inserts: int
) -> None:
    contents = turns(count)
    contents[1]["metadata"].update({"interrupted": True, "interrupt_timestamp": 1_763_690_001_500})
    agent_id = f"A-ROWS-{count}"
    sent = await traced(service, agent_event(103, agent_id, labels=LABELS, contents=contents))
    # Not the search index's `INSERT INTO messages_fts`: an idle writer (50 ms without writes,
    # as on a loaded machine before the trace is removed) indexes the rows just stored.
    statements = [sql for sql in sent if sql.startswith("INSERT INTO messages (")]
    # Chunks of powers of two up to 32 rows: 32 is one statement, 40 is 32 + 8, 7 is 4 + 2 + 1.
    assert len(statements) == inserts, statements
    rows = await stored_rows(service, agent_id)
    # Every message, ids in the window's order, flags stored as integers as before.
    assert [row["seq"] for row in rows] == list(range(count))
    assert [row["content"] for row in rows] == [message["content"] for message in contents]
    assert [row["at_ms"] for row in rows] == [message["timestamp"] for message in contents]
    assert {row["typeof(interrupted)"] for row in rows} == {"integer"}
    assert {row["typeof(gap_before)"] for row in rows} == {"integer"}
    assert [row["interrupted"] for row in rows] == [int(index == 1) for index in range(count)]
    assert {row["gap_before"] for row in rows} == {0}
    redelivered = await service.callback(agent_event(103, agent_id, labels=LABELS, contents=contents))
    assert redelivered[1]["status"] == "duplicate"
    assert await stored_rows(service, agent_id) == rows


def test_a_wide_tables_rows_go_in_within_the_oldest_variable_limit(tmp_path: Any) -> None:
    # SQLite builds before 3.32 bind at most 999 variables a statement: 32 rows of 40 columns
    # would be 1,280, so a wide table's chunks are smaller; every row still goes in, in order.
    import sqlite3

    from agent_memory.store.sqlite.common import SQLiteSql

    conn = sqlite3.connect(tmp_path / "wide.db")
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    columns = [f"c{i}" for i in range(40)]
    conn.execute(f"CREATE TABLE wide (id INTEGER PRIMARY KEY, {', '.join(columns)})")
    rows = [[row * 100 + column for column in range(40)] for row in range(45)]
    SQLiteSql(conn).insert_rows("wide", columns, rows)
    assert [list(row) for row in conn.execute(f"SELECT {', '.join(columns)} FROM wide ORDER BY id")] == rows
    conn.close()


async def test_a_callbacks_savepoints_are_statements_prepared_once(service: Service) -> None:
    # Savepoints are named by depth, not one name each: every callback's SAVEPOINT and RELEASE
    # are then the same few texts, prepared once from sqlite3's statement cache, where a new
    # name made two new statements to prepare per write and pushed others out of the cache.
    first = await traced(service, agent_event(103, "A-SP-1", labels=LABELS, contents=turns(4)))
    second = await traced(service, agent_event(103, "A-SP-2", labels=LABELS, contents=turns(4)))

    def savepoints(sent: list[str]) -> list[str]:
        return [sql for sql in sent if "SAVEPOINT sp_" in sql]  # the writes' own (engine.py)

    assert savepoints(first), first
    assert savepoints(second) == savepoints(first)
