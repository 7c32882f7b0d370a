"""Text that a store must keep as it was given, whatever it holds: on PostgreSQL a window goes in
as COPY rows, a session is read under its lock in a query with its parameters bound client-side,
and long id and term lists go as array literals, each with escaping rules of its own."""

from __future__ import annotations

import psycopg
import pytest
from postgres_server import PostgresCluster

from agent_memory.core.domain import InboxEntry, Session
from agent_memory.store import Store
from agent_memory.store.postgres.common import int_array, text_array
from agent_memory.store.types import NewMessage

pytestmark = pytest.mark.postgres

# Tabs, newlines and backslashes are COPY's escapes; quotes, braces and commas an array's;
# quotes, backslashes and `%s` a query's.
ODD = 'it\'s\ta \\ "quoted"\nline {a,b} NULL %s; -- ✓ 中文'


def window(agent_id: str) -> list[NewMessage]:
    return [
        {
            "agent_id": agent_id, "user_id": "u1", "character_id": "luna", "seq": 0, "role": "user",
            "content": ODD, "at_ms": 1_000, "speaker": "\\N", "interrupted": True, "gap_before": False,
            "extra": '{"note": "\\\\ and \\t"}', "fp": "fp0", "created_ms": 5, "kind": "turn",
        },
        # A row may leave columns out: NULL, and `kind` turn.
        {"agent_id": agent_id, "user_id": "u1", "character_id": "luna", "seq": 1, "role": "assistant",
         "content": "", "at_ms": 1_001},
    ]  # fmt: skip


async def test_a_window_and_its_session_come_back_as_given(store: Store) -> None:
    agent_id = f"A-{ODD}"
    original = Session(
        agent_id=agent_id, user_id="u1", character_id="luna", identity_source="labels",
        status="running", channel=ODD, start_ms=1_000, labels={"note": ODD},
    )  # fmt: skip
    await store.write(lambda tx: (tx.sessions.insert(original), tx.messages.insert(window(agent_id))))

    # On a write, a session is read under its lock; on a read, without.
    assert await store.write(lambda tx: tx.sessions.get(agent_id)) == original
    assert await store.read(lambda view: view.sessions.get(agent_id)) == original
    first, second = await store.read(lambda view: view.messages.of_session(agent_id))
    assert (first.content, first.speaker, first.extra) == (ODD, "\\N", {"note": "\\ and \t"})
    assert first.interrupted is True and first.gap_before is False
    assert (second.kind, second.speaker, second.interrupted, second.extra) == ("turn", None, False, {})

    entry = InboxEntry(event_id=ODD, event_type=103, received_ms=7, body=ODD, status="done")
    assert await store.write(lambda tx: tx.inbox.has(ODD)) is False
    await store.write(lambda tx: tx.inbox.insert(entry))
    assert await store.write(lambda tx: tx.inbox.has(ODD)) is True
    assert await store.read(lambda view: view.inbox.get(ODD)) == entry


def test_array_literals_mean_what_their_lists_meant(pg_cluster: PostgresCluster) -> None:
    """The literals built in place of adapted lists, as PostgreSQL parses them."""
    texts = ["", ODD, '"', "\\", ",", "{}", "NULL", " padded "]
    with psycopg.connect(pg_cluster.database()) as conn:
        row = conn.execute(
            "SELECT %s::text[], %s::text[], %s::bigint[], %s::bigint[]",
            (text_array(texts), text_array([]), int_array([3, -1, 2**40]), int_array([])),
        ).fetchone()
    assert row == (texts, [], [3, -1, 2**40], [])
