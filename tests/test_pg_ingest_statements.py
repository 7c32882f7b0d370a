"""What a 103 costs PostgreSQL in round trips and statements: each round trip is ~0.1 ms of the
service's CPU (psycopg's execute, the loopback send, the wake-up), each statement some of the
server's, on every callback (issue 28)."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import Service, agent_event, turns
from psycopg import _connection_base

from agent_memory.core.domain import Session
from agent_memory.store import Store
from agent_memory.store.postgres import common

LABELS = {"user_id": "u-cost", "character_id": "c"}
# Where one statement of a round trip's query ends and the next begins (the test's texts hold no "; ").
NEXT_STATEMENT = re.compile(r"; (?=BEGIN|SAVEPOINT|SELECT|INSERT|UPDATE|DELETE|COMMIT|WITH|COPY)")


def each_statement(round_trips: list[str]) -> list[str]:
    """The statements the round trips sent, in order."""
    return [statement for sent in round_trips for statement in NEXT_STATEMENT.split(sent)]


@pytest.fixture
def backend() -> str:
    return "postgres"


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every query the service's write threads send, in order (transaction control included):
    a round trip each (one with a COPY two)."""
    sent: list[str] = []

    def note(query: Any) -> None:
        if threading.current_thread().name.startswith("pg-write"):
            text = query.decode() if isinstance(query, bytes) else str(query)
            sent.append(" ".join(text.split()))

    execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
    command = _connection_base.BaseConnection._exec_command

    def noted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        note(query)
        return execute(self, query, *args, **kwargs)

    def noted_copy(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        note(statement)
        return copy(self, statement, *args, **kwargs)

    def noted_command(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        note(query)
        return command(self, query, *args, **kwargs)

    def noted_rows(cursor: Any, batch: list[Any]) -> Any:
        note(b"; ".join(each.statement if isinstance(each, common._Rows) else each for each in batch))
        return sent_with_rows(cursor, batch)

    sent_with_rows = getattr(common, "_sent_with_rows", None)  # the query a COPY's rows go in
    if sent_with_rows is not None:
        monkeypatch.setattr(common, "_sent_with_rows", noted_rows)
    monkeypatch.setattr(psycopg.Cursor, "execute", noted_execute)
    monkeypatch.setattr(psycopg.Cursor, "copy", noted_copy)
    monkeypatch.setattr(_connection_base.BaseConnection, "_exec_command", noted_command)
    yield sent


async def test_a_new_runs_transcript_updates_its_session_once_and_reads_no_watch(
    service: Service, statements: list[str]
) -> None:
    status, body = await service.callback(agent_event(103, "A-COST", labels=LABELS, contents=turns(32)))
    assert (status, body["status"]) == (200, "done"), body
    sent = each_statement(statements)
    session_updates = [sql for sql in sent if sql.startswith("UPDATE sessions")]
    # Its new counts go with its status and stop time: one UPDATE, not two.
    assert len(session_updates) == 1, session_updates
    assert "message_count" in session_updates[0] and "status" in session_updates[0]
    # The watch is unfollowed in one statement (RETURNING what the caller needs), not read first.
    assert not [sql for sql in sent if sql.startswith("SELECT") and "FROM watched_agents" in sql]
    # The event's savepoint ends with the commit: no RELEASE.
    assert not [sql for sql in sent if sql.startswith("RELEASE")], sent
    # The locks are still taken, each before the read it guards, and the transaction committed.
    assert [sql.split("(")[0] for sql in sent if "pg_advisory_xact_lock" in sql] == [
        "SELECT pg_advisory_xact_lock",  # the event's, before the inbox is read
        "SELECT pg_advisory_xact_lock",  # the session's, before it is read
        "SELECT pg_advisory_xact_lock_shared",  # the user's, before the forget cut-off is read
    ]
    assert sent[0].startswith("BEGIN") and sent[-1] == "COMMIT"
    # The whole callback: 16 queries in session 12, 13 in session 13, each a round trip, 7 in
    # session 14. What is written without being read goes with the next read or the commit: BEGIN
    # with the inbox read, the session read and the forget cut-off of the pair its labels name,
    # each under its lock in that order; the savepoint, the new session, the pair's version, the
    # messages' COPY (its rows sent when the server asks: two round trips), the condense job and
    # the session's update with the watch (RETURNING); the inbox row with COMMIT.
    assert len(statements) <= 3, statements
    first = statements[0]
    assert (
        first.index("FROM inbox WHERE") < first.index("FROM sessions WHERE") < first.index("FROM forgets")
    ), first
    with_rows = [query for query in statements if "COPY messages" in query]
    assert len(with_rows) == 1 and with_rows[0].startswith("SAVEPOINT"), statements
    assert with_rows[0].index("INSERT INTO memory_versions") < with_rows[0].index("COPY messages"), with_rows
    assert with_rows[0].split("; ")[-1].startswith("UPDATE watched_agents"), with_rows
    redelivered = await service.callback(agent_event(103, "A-COST", labels=LABELS, contents=turns(32)))
    assert redelivered[1]["status"] == "duplicate"
    messages = await service.store.read(lambda view: view.messages.of_session("A-COST"))
    session = await service.store.read(lambda view: view.sessions.get("A-COST"))
    inbox = await service.store.read(lambda view: view.inbox.get("A-COST:103"))
    assert session is not None and inbox is not None and inbox.status == "done"
    assert len(messages) == session.message_count == 32
    assert session.status == "stopped"


def run_of(agent_id: str) -> Session:
    return Session(
        agent_id=agent_id, user_id="u-kept", character_id="c", identity_source="labels", status="running"
    )


async def agents(store: Store) -> set[str]:
    rows = await store.read(lambda view: view.conn.execute(b"SELECT agent_id FROM sessions").fetchall())
    return {row["agent_id"] for row in rows}


async def test_statements_kept_for_the_next_round_trip_keep_the_transactions_guarantees(store: Store) -> None:
    """What a write keeps to send later is undone with its block, or with its transaction, as if sent at once."""

    def kept_then_raised(tx: Any) -> None:
        with contextlib.suppress(RuntimeError), tx.savepoint():
            tx.sessions.insert(run_of("never-sent"))  # kept, with the SAVEPOINT, when the block raises
            raise RuntimeError
        tx.sessions.insert(run_of("after-block"))

    def sent_then_raised(tx: Any) -> None:
        with contextlib.suppress(RuntimeError), tx.savepoint():
            tx.sessions.insert(run_of("sent"))
            assert tx.sessions.get("sent") is not None  # a read: sent, and seen within the transaction
            raise RuntimeError
        tx.sessions.insert(run_of("after-sent-block"))

    def refused(tx: Any) -> None:
        with pytest.raises(psycopg.errors.UniqueViolation), tx.savepoint():
            tx.sessions.insert(run_of("after-block"))  # refused by the server when the block ends
        tx.sessions.insert(run_of("after-refused"))

    def failed(tx: Any) -> None:
        tx.sessions.insert(run_of("in-failed-write"))
        raise RuntimeError("the write fails after keeping a statement")

    await store.write(kept_then_raised)
    await store.write(sent_then_raised)
    await store.write(refused)
    with pytest.raises(RuntimeError):
        await store.write(failed)
    await store.write(lambda tx: tx.sessions.insert(run_of("only-kept")))  # BEGIN, INSERT, COMMIT at once
    assert await agents(store) == {"after-block", "after-sent-block", "after-refused", "only-kept"}


async def assert_refused_alone(service: Service) -> None:
    """A 103 of u-refused's fails (200, "failed"): its raw event recorded failed, nothing of it stored."""
    labels = {"user_id": "u-refused", "character_id": "c"}
    status, body = await service.callback(agent_event(103, "A-REFUSED", labels=labels, contents=turns(4)))
    assert (status, body["status"]) == (200, "failed"), body
    inbox = await service.store.read(lambda view: view.inbox.get("A-REFUSED:103"))
    assert inbox is not None and inbox.status == "failed" and "refused" in (inbox.error or "")
    assert await service.store.read(lambda view: view.sessions.get("A-REFUSED")) is None
    assert await service.store.read(lambda view: view.messages.of_session("A-REFUSED")) == []


async def test_an_events_write_refused_by_the_server_fails_that_event_alone(service: Service) -> None:
    """A write kept for later and refused when sent fails its event (rolled back to the event's
    savepoint), and the raw event is still recorded, as when each write was sent at once."""
    await service.store.write(
        lambda tx: tx.conn.execute(b"ALTER TABLE jobs ADD CONSTRAINT refused CHECK (user_id <> 'u-refused')")
    )
    await assert_refused_alone(service)


async def test_a_statement_sent_with_the_copy_and_refused_fails_that_event_alone(service: Service) -> None:
    """The pair's version goes in the COPY's query: refused there, it fails its event (rolled back
    to the event's savepoint), and the raw event is still recorded."""
    await service.store.write(
        lambda tx: tx.conn.execute(
            b"ALTER TABLE memory_versions ADD CONSTRAINT refused CHECK (user_id <> 'u-refused')"
        )
    )
    await assert_refused_alone(service)
    status, body = await service.callback(agent_event(103, "A-KEPT", labels=LABELS, contents=turns(4)))
    assert (status, body["status"], body["new_messages"]) == (200, "done", 4), body


async def test_a_copy_refused_with_statements_after_it_fails_that_event_alone(service: Service) -> None:
    """The messages' COPY refused by the server (its rows sent, the statements after it in the
    same query never run) fails its event, rolled back to the event's savepoint."""
    await service.store.write(
        lambda tx: tx.conn.execute(
            b"ALTER TABLE messages ADD CONSTRAINT refused CHECK (content <> 'refused')"
        )
    )
    contents = turns(6)
    contents[4]["content"] = "refused"
    status, body = await service.callback(agent_event(103, "A-REFUSED", labels=LABELS, contents=contents))
    assert (status, body["status"]) == (200, "failed"), body
    inbox = await service.store.read(lambda view: view.inbox.get("A-REFUSED:103"))
    assert inbox is not None and inbox.status == "failed" and "refused" in (inbox.error or "")
    assert await service.store.read(lambda view: view.sessions.get("A-REFUSED")) is None
    jobs = await service.store.read(
        lambda view: view.conn.execute(b"SELECT count(*) AS n FROM jobs").fetchone()
    )
    assert jobs["n"] == 0
    status, body = await service.callback(agent_event(103, "A-KEPT", labels=LABELS, contents=turns(4)))
    assert (status, body["status"], body["new_messages"]) == (200, "done", 4), body


async def test_rows_larger_than_one_chunk_are_sent_whole(service: Service) -> None:
    """A transcript whose rows exceed what is handed to libpq at once goes in several chunks."""
    contents = turns(48)
    for number, message in enumerate(contents):
        message["content"] = f"{number} " + "x" * 4000
    assert sum(len(message["content"]) for message in contents) > 128 * 1024  # common._COPY_CHUNK
    status, body = await service.callback(agent_event(103, "A-LONG", labels=LABELS, contents=contents))
    assert (status, body["status"], body["new_messages"]) == (200, "done", 48), body
    stored = await service.store.read(lambda view: view.messages.of_session("A-LONG"))
    assert [message.content for message in stored] == [message["content"] for message in contents]
