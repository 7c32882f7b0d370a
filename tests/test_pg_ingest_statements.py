"""What a 103 costs PostgreSQL in statements: each is a round trip, ~0.1 ms of the service's
Python and some of the server's CPU, on every callback (issue 28)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import Service, agent_event, turns
from psycopg import _connection_base

LABELS = {"user_id": "u-cost", "character_id": "c"}


@pytest.fixture
def backend() -> str:
    return "postgres"


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the service's write threads send, in order (transaction control included)."""
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

    monkeypatch.setattr(psycopg.Cursor, "execute", noted_execute)
    monkeypatch.setattr(psycopg.Cursor, "copy", noted_copy)
    monkeypatch.setattr(_connection_base.BaseConnection, "_exec_command", noted_command)
    yield sent


async def test_a_new_runs_transcript_updates_its_session_once_and_reads_no_watch(
    service: Service, statements: list[str]
) -> None:
    status, body = await service.callback(agent_event(103, "A-COST", labels=LABELS, contents=turns(32)))
    assert (status, body["status"]) == (200, "done"), body
    session_updates = [sql for sql in statements if sql.startswith("UPDATE sessions")]
    # Its new counts go with its status and stop time: one UPDATE, not two.
    assert len(session_updates) == 1, session_updates
    assert "message_count" in session_updates[0] and "status" in session_updates[0]
    # The watch is unfollowed in one statement (RETURNING what the caller needs), not read first.
    assert not [sql for sql in statements if sql.startswith("SELECT") and "FROM watched_agents" in sql]
    # The event's savepoint ends with the commit: no RELEASE round trip.
    assert not [sql for sql in statements if sql.startswith("RELEASE")], statements
    # The whole callback, 16 statements before: begin, the inbox read under its lock, the
    # savepoint, the session read under its lock, the new session, the forget cut-off under the
    # user's lock, the pair's version, the messages (COPY), the condense job, the session's
    # update, the watch, the inbox row, commit.
    assert len(statements) <= 13, statements
    redelivered = await service.callback(agent_event(103, "A-COST", labels=LABELS, contents=turns(32)))
    assert redelivered[1]["status"] == "duplicate"
    messages = await service.store.read(lambda view: view.messages.of_session("A-COST"))
    session = await service.store.read(lambda view: view.sessions.get("A-COST"))
    assert session is not None
    assert len(messages) == session.message_count == 32
    assert session.status == "stopped"
