"""The embedded SQLite store: one writer thread with group commit, pooled readers.

Every write is a function run on the writer thread inside a savepoint of a shared
transaction; many such functions commit together (one fsync), and each caller's future
resolves only after that commit. A failing function rolls back its own savepoint only.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import operator
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from agent_memory.errors import StoreUnavailable
from agent_memory.store.sqlite.analytics import AnalyticsReads, AnalyticsWrites, ExportReads
from agent_memory.store.sqlite.migrations import migrations
from agent_memory.store.sqlite.retention import RetentionReads, RetentionWrites
from agent_memory.store.sqlite.search import SearchReads, SearchWrites

log = logging.getLogger(__name__)

T = TypeVar("T")

MESSAGE_COLUMNS = (
    "agent_id", "user_id", "character_id", "seq", "role", "content", "turn_id", "ts_ms",
    "at_ms", "source", "speaker", "interrupted", "interrupt_ms", "original", "fp",
    "gap_before", "extra", "created_ms", "kind",
)  # fmt: skip

# Sequence numbers stay far below this (gaps leave 2**20 of room each).
MOVE_SEQ_SHIFT = 1 << 52

INSERT_MESSAGE = (
    f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in MESSAGE_COLUMNS)})"
)
# Rows arrive 32 at a time per callback: pick their values in C, not in a Python loop.
_message_values = operator.itemgetter(*MESSAGE_COLUMNS)
_NO_MESSAGE_VALUES: dict[str, Any] = {column: None for column in MESSAGE_COLUMNS} | {"kind": "turn"}

PUBLIC_MESSAGE_COLUMNS = (
    "id, agent_id, user_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
    "source, speaker, interrupted, interrupt_ms, original, gap_before, extra"
)
# Memory, summaries and transcripts read what was said; tool calls and results are kept
# (export, GET …/messages) but were never said.
SPOKEN = "kind = 'turn'"


_savepoints = itertools.count()
# The search index is brought up to date only after the writer has had nothing to do for
# this long (so bursts of callbacks are not slowed), in transactions of this many messages
# (so a callback arriving meanwhile waits little).
IDLE_AFTER_S = 0.05
IDLE_INDEX_CHUNK = 1000
# Under sustained load the writer is never idle: it still indexes this many messages
# at least once a second, so search falls behind slowly instead of not at all.
BUSY_INDEX_CHUNK = 500
BUSY_INDEX_EVERY_S = 1.0
# Messages a search indexes before it reads, so that it sees what was just stored.
SEARCH_CATCH_UP = 20_000


def now_ms() -> int:
    """Milliseconds since the epoch: the only time unit in storage."""
    return time.time_ns() // 1_000_000


def _connect(path: Path, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 5000")
    if writer:
        # Only takes effect on a new file: lets retention give space back without VACUUM.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a 200 to Agora promises the callback survives a power cut.
        conn.execute("PRAGMA synchronous = FULL")
        # Forgotten text must not linger in freed pages.
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA foreign_keys = ON")
    else:
        conn.execute("PRAGMA query_only = ON")
    return conn


class SQLiteView(SearchReads, AnalyticsReads, ExportReads, RetentionReads):
    """Reads, on whichever connection the view was given."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(sql, params)]

    def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        row = self.conn.execute(sql, params).fetchone()
        return dict(row) if row is not None else None

    def schema_migrations(self) -> list[str]:
        return [row["name"] for row in self._all("SELECT name FROM _sqlite_migrations ORDER BY id")]

    def latest_messages(
        self, user_id: str, character_id: str, limit: int, *, spoken_only: bool = True
    ) -> list[dict[str, Any]]:
        """The pair's `limit` latest spoken turns (or all items), oldest first."""
        spoken = f" AND {SPOKEN}" if spoken_only else ""
        rows = self._all(
            f"SELECT {PUBLIC_MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND character_id = ?"
            f"{spoken} ORDER BY at_ms DESC, seq DESC LIMIT ?",
            (user_id, character_id, limit),
        )
        rows.reverse()
        return rows

    def messages_after(
        self, user_id: str, character_id: str, watermark_id: int, limit: int
    ) -> list[dict[str, Any]]:
        """Spoken turns stored after the watermark (by id), in conversation order."""
        return self._all(
            f"SELECT {PUBLIC_MESSAGE_COLUMNS} FROM messages "
            f"WHERE user_id = ? AND character_id = ? AND id > ? AND {SPOKEN} "
            "ORDER BY at_ms, seq LIMIT ?",
            (user_id, character_id, watermark_id, limit),
        )

    def count_messages_after(self, user_id: str, character_id: str, watermark_id: int) -> int:
        """How many spoken turns were stored after the watermark."""
        row = self.conn.execute(
            f"SELECT count(*) FROM messages WHERE user_id = ? AND character_id = ? AND id > ? "
            f"AND {SPOKEN}",
            (user_id, character_id, watermark_id),
        ).fetchone()
        return int(row[0])

    def session_messages(self, agent_id: str) -> list[dict[str, Any]]:
        return self._all(
            f"SELECT {PUBLIC_MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq",
            (agent_id,),
        )

    def session_fingerprints(self, agent_id: str) -> list[dict[str, Any]]:
        """What window merging needs of a session's stored messages, in order."""
        return self._all(
            "SELECT id, seq, fp, gap_before, turn_id, ts_ms, source, speaker, interrupted, interrupt_ms, original "
            "FROM messages WHERE agent_id = ? ORDER BY seq",
            (agent_id,),
        )

    def session_tail(self, agent_id: str, count: int) -> list[dict[str, Any]]:
        """The last `count` of what window merging needs, in order."""
        rows = self._all(
            "SELECT id, seq, fp, gap_before, turn_id, ts_ms, source, speaker, interrupted, "
            "interrupt_ms, original FROM messages WHERE agent_id = ? ORDER BY seq DESC LIMIT ?",
            (agent_id, count),
        )
        rows.reverse()
        return rows

    def get_session(self, agent_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM sessions WHERE agent_id = ?", (agent_id,))

    def get_binding(self, agent_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM bindings WHERE agent_id = ?", (agent_id,))

    def get_channel_binding(self, channel: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM channel_bindings WHERE channel = ?", (channel,))

    def channel_sessions(self, channel: str, sources: Sequence[str]) -> list[dict[str, Any]]:
        """The sessions held for `channel` whose identity came from one of `sources`."""
        marks = ", ".join("?" for _ in sources)
        return self._all(
            f"SELECT * FROM sessions WHERE channel = ? AND identity_source IN ({marks}) "
            "ORDER BY start_ms, agent_id",
            (channel, *sources),
        )

    def list_facts(self, user_id: str, character_id: str) -> list[dict[str, Any]]:
        """The pair's facts and the user's user-wide facts, oldest first."""
        return self._all(
            "SELECT id, user_id, character_id, text, pinned, origin, created_ms, updated_ms "
            "FROM facts WHERE user_id = ? AND character_id IN (?, '') ORDER BY created_ms, id",
            (user_id, character_id),
        )

    def get_fact(self, fact_id: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM facts WHERE id = ?", (fact_id,))

    def get_summary(self, user_id: str, character_id: str) -> dict[str, Any] | None:
        return self._one(
            "SELECT * FROM summaries WHERE user_id = ? AND character_id = ?",
            (user_id, character_id),
        )

    def get_inbox(self, notice_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM inbox WHERE notice_id = ?", (notice_id,))

    def inbox_by_status(self, status: str, limit: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM inbox WHERE status = ? ORDER BY received_ms LIMIT ?", (status, limit)
        )

    def get_job(self, kind: str, user_id: str, character_id: str) -> dict[str, Any] | None:
        return self._one(
            "SELECT * FROM jobs WHERE kind = ? AND user_id = ? AND character_id = ?",
            (kind, user_id, character_id),
        )

    def get_job_by_id(self, job_id: int) -> dict[str, Any] | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def jobs(self, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if status is None:
            return self._all("SELECT * FROM jobs ORDER BY due_ms LIMIT ?", (limit,))
        return self._all(
            "SELECT * FROM jobs WHERE status = ? ORDER BY due_ms LIMIT ?", (status, limit)
        )

    def due_jobs(self, kind: str, now: int, limit: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM jobs WHERE status = 'pending' AND kind = ? AND due_ms <= ? "
            "ORDER BY due_ms LIMIT ?",
            (kind, now, limit),
        )

    def get_watch(self, agent_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM watched_agents WHERE agent_id = ?", (agent_id,))

    def due_watches(self, now: int, limit: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM watched_agents WHERE status = 'watching' AND next_poll_ms <= ? "
            "ORDER BY next_poll_ms LIMIT ?",
            (now, limit),
        )

    def due_pushes(self, now: int, limit: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM watched_agents WHERE status = 'watching' AND push_due_ms <= ? "
            "ORDER BY push_due_ms LIMIT ?",
            (now, limit),
        )

    def running_agents_of(self, user_id: str, character_id: str) -> list[dict[str, Any]]:
        """Followed agents still running for a pair."""
        return self._all(
            "SELECT w.* FROM watched_agents w JOIN sessions s ON s.agent_id = w.agent_id "
            "WHERE w.status = 'watching' AND s.user_id = ? AND s.character_id = ?",
            (user_id, character_id),
        )

    def counts(self) -> dict[str, int]:
        return {
            table: int(self.conn.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0])
            for table in ("messages", "sessions", "facts", "summaries", "jobs", "inbox")
        }


class SQLiteTransaction(SQLiteView, RetentionWrites, AnalyticsWrites, SearchWrites):
    """Writes, on the writer connection, inside the current transaction."""

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only what the block wrote if it raises."""
        name = f"sp_{next(_savepoints)}"
        self.conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                self.conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        self.conn.execute(f"RELEASE SAVEPOINT {name}")

    def inbox_has(self, notice_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM inbox WHERE notice_id = ?", (notice_id,)).fetchone()
            is not None
        )

    def insert_inbox(self, row: dict[str, Any]) -> bool:
        """Record a raw callback; False if its noticeId was already recorded."""
        cursor = self.conn.execute(
            "INSERT OR IGNORE INTO inbox (notice_id, event_type, product_id, notify_ms, "
            "received_ms, agent_id, label_user, label_character, body, status, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row["notice_id"], row["event_type"], row.get("product_id"), row.get("notify_ms"),
                row["received_ms"], row.get("agent_id"), row.get("label_user"),
                row.get("label_character"), row["body"], row["status"], row.get("error"),
            ),
        )  # fmt: skip
        return cursor.rowcount == 1

    def set_inbox_status(self, notice_id: str, status: str, error: str | None = None) -> None:
        self.conn.execute(
            "UPDATE inbox SET status = ?, error = ? WHERE notice_id = ?", (status, error, notice_id)
        )

    def insert_session(self, row: dict[str, Any]) -> None:
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(f"INSERT INTO sessions ({columns}) VALUES ({marks})", tuple(row.values()))

    def update_session(self, agent_id: str, changes: dict[str, Any]) -> None:
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.conn.execute(
            f"UPDATE sessions SET {assignments} WHERE agent_id = ?", (*changes.values(), agent_id)
        )

    def move_session(self, agent_id: str, user_id: str, character_id: str) -> int:
        """Give a session and its messages to another (user, character); returns messages moved.

        The messages get new ids above every other, so that the new pair's summary
        watermark treats them as not yet condensed.
        """
        self.conn.execute(
            "UPDATE sessions SET user_id = ?, character_id = ? WHERE agent_id = ?",
            (user_id, character_id, agent_id),
        )
        others = ", ".join(column for column in MESSAGE_COLUMNS if column not in ("user_id", "character_id", "seq"))
        # Copies first, shifted out of the originals' seq range (seq is unique per session).
        moved = self.conn.execute(
            f"INSERT INTO messages (user_id, character_id, seq, {others}) "
            f"SELECT ?, ?, seq + {MOVE_SEQ_SHIFT}, {others} FROM messages WHERE agent_id = ? ORDER BY id",
            (user_id, character_id, agent_id),
        ).rowcount
        self.conn.execute(
            f"DELETE FROM messages WHERE agent_id = ? AND seq < {MOVE_SEQ_SHIFT // 2}", (agent_id,)
        )
        self.conn.execute(
            f"UPDATE messages SET seq = seq - {MOVE_SEQ_SHIFT} WHERE agent_id = ?", (agent_id,)
        )
        return moved

    def reset_condensed(self, user_id: str, character_id: str) -> dict[str, int]:
        """Drop a pair's summary and model-made facts, to be condensed again from what remains."""
        return {
            "summaries": self.conn.execute(
                "DELETE FROM summaries WHERE user_id = ? AND character_id = ?",
                (user_id, character_id),
            ).rowcount,
            "facts": self.conn.execute(
                "DELETE FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 0",
                (user_id, character_id),
            ).rowcount,
        }

    def set_binding(self, agent_id: str, user_id: str, character_id: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO bindings (agent_id, user_id, character_id, created_ms) "
            "VALUES (?, ?, ?, ?)",
            (agent_id, user_id, character_id, now_ms()),
        )

    def set_channel_binding(self, channel: str, user_id: str, character_id: str) -> dict[str, Any]:
        """Tie a channel to a pair (a rebinding keeps its created_ms); returns the binding."""
        stamp = now_ms()
        self.conn.execute(
            "INSERT INTO channel_bindings (channel, user_id, character_id, created_ms, updated_ms) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel) DO UPDATE SET user_id = excluded.user_id, "
            "character_id = excluded.character_id, updated_ms = excluded.updated_ms",
            (channel, user_id, character_id, stamp, stamp),
        )
        binding = self.get_channel_binding(channel)
        assert binding is not None
        return binding

    def delete_channel_binding(self, channel: str) -> dict[str, Any] | None:
        """Remove a channel's binding; returns what it was, or None if there was none."""
        binding = self.get_channel_binding(channel)
        if binding is not None:
            self.conn.execute("DELETE FROM channel_bindings WHERE channel = ?", (channel,))
        return binding

    def insert_messages(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert message rows (dicts of MESSAGE_COLUMNS; a missing column is NULL)."""
        self.conn.executemany(
            INSERT_MESSAGE, [_message_values({**_NO_MESSAGE_VALUES, **row}) for row in rows]
        )

    def update_message(self, message_id: int, changes: dict[str, Any]) -> None:
        if not changes:
            return
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.conn.execute(
            f"UPDATE messages SET {assignments} WHERE id = ?", (*changes.values(), message_id)
        )

    def add_fact(
        self, user_id: str, character_id: str, text: str, norm: str, *, pinned: bool, origin: str
    ) -> tuple[dict[str, Any], bool]:
        """Insert a fact unless an equal one exists; returns (fact, created)."""
        stamp = now_ms()
        cursor = self.conn.execute(
            "INSERT OR IGNORE INTO facts (user_id, character_id, text, norm, pinned, origin, "
            "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, character_id, text, norm, int(pinned), origin, stamp, stamp),
        )
        created = cursor.rowcount == 1
        if not created and pinned:
            # Saying by hand what the model already knew makes it pinned.
            self.conn.execute(
                "UPDATE facts SET pinned = 1, updated_ms = ? "
                "WHERE user_id = ? AND character_id = ? AND norm = ?",
                (stamp, user_id, character_id, norm),
            )
        fact = self._one(
            "SELECT id, user_id, character_id, text, pinned, origin, created_ms, updated_ms "
            "FROM facts WHERE user_id = ? AND character_id = ? AND norm = ?",
            (user_id, character_id, norm),
        )
        assert fact is not None
        return fact, created

    def update_fact(self, fact_id: int, text: str, norm: str) -> bool:
        try:
            cursor = self.conn.execute(
                "UPDATE facts SET text = ?, norm = ?, updated_ms = ? WHERE id = ?",
                (text, norm, now_ms(), fact_id),
            )
        except sqlite3.IntegrityError:
            # The new wording equals another fact: the duplicate goes.
            cursor = self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
        return cursor.rowcount == 1

    def delete_fact(self, fact_id: int) -> bool:
        return self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,)).rowcount == 1

    def set_summary(self, row: dict[str, Any]) -> None:
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.conn.execute(
            f"INSERT OR REPLACE INTO summaries ({columns}) VALUES ({marks})", tuple(row.values())
        )

    def schedule_job(
        self,
        kind: str,
        user_id: str,
        character_id: str,
        *,
        delay_ms: int,
        max_wait_ms: int,
        max_messages: int,
        new_messages: int,
    ) -> None:
        """Debounce a job: due `delay_ms` from now, but never later than `max_wait_ms` after
        it was first scheduled, and due at once once `max_messages` new messages are waiting."""
        stamp = now_ms()
        job = self.get_job(kind, user_id, character_id)
        if job is None:
            due = stamp if new_messages >= max_messages else stamp + delay_ms
            self.conn.execute(
                "INSERT INTO jobs (kind, user_id, character_id, status, due_ms, first_due_ms, "
                "pending_messages, attempts, created_ms, updated_ms) "
                "VALUES (?, ?, ?, 'pending', ?, ?, ?, 0, ?, ?)",
                (kind, user_id, character_id, due, stamp, new_messages, stamp, stamp),
            )
            return
        pending = job["pending_messages"] + new_messages
        if job["status"] != "pending" or job["attempts"]:
            # Running: finish_job sees the count change and runs it again. Dead: waits for a
            # human. Retrying: keeps its backoff. In each case only the count grows.
            self.conn.execute(
                "UPDATE jobs SET pending_messages = ?, updated_ms = ? WHERE id = ?",
                (pending, stamp, job["id"]),
            )
            return
        deadline = job["first_due_ms"] + max_wait_ms
        due = stamp if pending >= max_messages else min(stamp + delay_ms, max(deadline, stamp))
        self.conn.execute(
            "UPDATE jobs SET due_ms = ?, pending_messages = ?, updated_ms = ? WHERE id = ?",
            (due, pending, stamp, job["id"]),
        )

    def make_due(self, kind: str, user_id: str, character_id: str) -> None:
        """Make the pair's job due now, creating or reviving it; a running one is left alone."""
        stamp = now_ms()
        self.conn.execute(
            "INSERT INTO jobs (kind, user_id, character_id, status, due_ms, first_due_ms, "
            "pending_messages, attempts, created_ms, updated_ms) "
            "VALUES (?, ?, ?, 'pending', ?, ?, 0, 0, ?, ?) "
            "ON CONFLICT (kind, user_id, character_id) DO UPDATE SET due_ms = excluded.due_ms, "
            "status = CASE status WHEN 'running' THEN 'running' ELSE 'pending' END, "
            "attempts = CASE status WHEN 'dead' THEN 0 ELSE attempts END, "
            "updated_ms = excluded.updated_ms",
            (kind, user_id, character_id, stamp, stamp, stamp, stamp),
        )

    def claim_job(self, job_id: int) -> dict[str, Any] | None:
        """Mark a pending job running; None if it is not pending any more."""
        cursor = self.conn.execute(
            "UPDATE jobs SET status = 'running', updated_ms = ? WHERE id = ? AND status = 'pending'",
            (now_ms(), job_id),
        )
        if cursor.rowcount != 1:
            return None
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def finish_job(self, claimed: dict[str, Any], *, again_at_ms: int) -> bool:
        """Delete a finished job, or make it pending at `again_at_ms` if messages came
        while it ran; returns True when it was deleted."""
        job = self._one("SELECT * FROM jobs WHERE id = ?", (claimed["id"],))
        if job is None:
            return True
        arrived = job["pending_messages"] - claimed["pending_messages"]
        if arrived > 0:
            self.conn.execute(
                "UPDATE jobs SET status = 'pending', attempts = 0, last_error = NULL, due_ms = ?, "
                "first_due_ms = ?, pending_messages = ?, updated_ms = ? WHERE id = ?",
                (again_at_ms, now_ms(), arrived, now_ms(), job["id"]),
            )
            return False
        self.conn.execute("DELETE FROM jobs WHERE id = ?", (job["id"],))
        return True

    def fail_job(self, job_id: int, error: str, *, retry_at_ms: int | None) -> None:
        """Record a failure: pending again at `retry_at_ms`, or dead when that is None."""
        if retry_at_ms is None:
            self.conn.execute(
                "UPDATE jobs SET status = 'dead', attempts = attempts + 1, last_error = ?, "
                "updated_ms = ? WHERE id = ?",
                (error, now_ms(), job_id),
            )
        else:
            self.conn.execute(
                "UPDATE jobs SET status = 'pending', attempts = attempts + 1, last_error = ?, "
                "due_ms = ?, updated_ms = ? WHERE id = ?",
                (error, retry_at_ms, now_ms(), job_id),
            )

    def revive_job(self, job_id: int) -> bool:
        cursor = self.conn.execute(
            "UPDATE jobs SET status = 'pending', attempts = 0, due_ms = ?, updated_ms = ? "
            "WHERE id = ? AND status = 'dead'",
            (now_ms(), now_ms(), job_id),
        )
        return cursor.rowcount == 1

    def release_running_jobs(self) -> int:
        """At start nothing runs: a job left 'running' by a crash is pending again."""
        return self.conn.execute(
            "UPDATE jobs SET status = 'pending' WHERE status = 'running'"
        ).rowcount

    def watch(
        self,
        agent_id: str,
        origin: str,
        *,
        first_poll_ms: int,
        base_system_messages: list[dict[str, Any]] | None = None,
        persona: str | None = None,
        max_tokens: int | None = None,
        style: str | None = None,
    ) -> str:
        """Follow a running agent; an explicit request (not a 101) also updates or resumes
        an existing watch. Returns created, updated, unchanged, or stopped (not followable).
        `style` is the agent's `llm.style`, the shape its refreshes take (None: openai)."""
        session = self.get_session(agent_id)
        if session is not None and session["status"] != "running":
            return "stopped"
        stamp = now_ms()
        base = dumps(base_system_messages) if base_system_messages is not None else None
        existing = self.get_watch(agent_id)
        if existing is None:
            self.conn.execute(
                "INSERT INTO watched_agents (agent_id, origin, status, next_poll_ms, "
                "base_system_messages, persona, max_tokens, style, created_ms, updated_ms) "
                "VALUES (?, ?, 'watching', ?, ?, ?, ?, ?, ?, ?)",
                (agent_id, origin, first_poll_ms, base, persona, max_tokens, style, stamp, stamp),
            )
            return "created"
        if origin == "callback":
            return "unchanged"
        changes: dict[str, Any] = {}
        if base is not None and (base, persona, max_tokens, style) != (
            existing["base_system_messages"], existing["persona"], existing["max_tokens"],
            existing["style"],
        ):
            changes.update(
                base_system_messages=base, persona=persona, max_tokens=max_tokens, style=style
            )
        if existing["status"] != "watching":
            changes.update(status="watching", stop_reason=None, next_poll_ms=first_poll_ms, failures=0)
        if not changes:
            return "unchanged"
        changes.update(origin=origin, updated_ms=stamp)
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.conn.execute(
            f"UPDATE watched_agents SET {assignments} WHERE agent_id = ?", (*changes.values(), agent_id)
        )
        return "updated"

    def unwatch(self, agent_id: str, reason: str) -> bool:
        cursor = self.conn.execute(
            "UPDATE watched_agents SET status = 'stopped', stop_reason = ?, push_due_ms = NULL, "
            "updated_ms = ? WHERE agent_id = ? AND status = 'watching'",
            (reason, now_ms(), agent_id),
        )
        return cursor.rowcount == 1

    def polled(self, agent_id: str, *, next_poll_ms: int, error: str | None) -> None:
        """Record a poll: failures count up until one succeeds."""
        stamp = now_ms()
        if error is None:
            self.conn.execute(
                "UPDATE watched_agents SET next_poll_ms = ?, last_poll_ms = ?, polls = polls + 1, "
                "failures = 0, last_error = NULL, updated_ms = ? WHERE agent_id = ?",
                (next_poll_ms, stamp, stamp, agent_id),
            )
        else:
            self.conn.execute(
                "UPDATE watched_agents SET next_poll_ms = ?, failures = failures + 1, "
                "last_error = ?, updated_ms = ? WHERE agent_id = ?",
                (next_poll_ms, error, stamp, agent_id),
            )

    def request_push(self, agent_id: str, due_ms: int) -> None:
        """Ask for a refresh push no earlier than `due_ms` (an earlier request stands)."""
        self.conn.execute(
            "UPDATE watched_agents SET push_due_ms = min(coalesce(push_due_ms, ?), ?) "
            "WHERE agent_id = ? AND status = 'watching' AND base_system_messages IS NOT NULL",
            (due_ms, due_ms, agent_id),
        )

    def pushed(self, agent_id: str, system_messages: list[dict[str, Any]] | None) -> None:
        stamp = now_ms()
        if system_messages is None:
            self.conn.execute(
                "UPDATE watched_agents SET push_due_ms = NULL WHERE agent_id = ?", (agent_id,)
            )
            return
        self.conn.execute(
            "UPDATE watched_agents SET push_due_ms = NULL, last_push_ms = ?, last_pushed = ?, "
            "updated_ms = ? WHERE agent_id = ?",
            (stamp, dumps(system_messages), stamp, agent_id),
        )

    def forget(self, user_id: str, character_id: str | None) -> dict[str, int]:
        """Delete everything held for a pair, or for a user when `character_id` is None."""
        where = "user_id = ?" if character_id is None else "user_id = ? AND character_id = ?"
        params: tuple[str, ...] = (user_id,) if character_id is None else (user_id, character_id)
        agent_ids = [
            row[0] for row in self.conn.execute(f"SELECT agent_id FROM sessions WHERE {where}", params)
        ]
        receipt: dict[str, int] = {}
        receipt["messages"] = self.conn.execute(f"DELETE FROM messages WHERE {where}", params).rowcount
        if character_id is None:
            receipt["facts"] = self.conn.execute(
                "DELETE FROM facts WHERE user_id = ?", params
            ).rowcount
        else:
            # The user's user-wide facts are not the pair's: they stay.
            receipt["facts"] = self.conn.execute(f"DELETE FROM facts WHERE {where}", params).rowcount
        receipt["summaries"] = self.conn.execute(
            f"DELETE FROM summaries WHERE {where}", params
        ).rowcount
        receipt["jobs"] = self.conn.execute(f"DELETE FROM jobs WHERE {where}", params).rowcount
        receipt["followed_agents"] = sum(
            self.conn.execute("DELETE FROM watched_agents WHERE agent_id = ?", (agent_id,)).rowcount
            for agent_id in agent_ids
        )
        receipt["sessions"] = self.conn.execute(f"DELETE FROM sessions WHERE {where}", params).rowcount
        receipt["bindings"] = self.conn.execute(f"DELETE FROM bindings WHERE {where}", params).rowcount
        receipt["channel_bindings"] = self.conn.execute(
            f"DELETE FROM channel_bindings WHERE {where}", params
        ).rowcount
        # The noticeId stays so that a redelivery is still recognised, but its text goes.
        blank = "UPDATE inbox SET body = '', status = 'forgotten', error = NULL WHERE "
        raw = sum(
            self.conn.execute(blank + "agent_id = ? AND status != 'forgotten'", (agent_id,)).rowcount
            for agent_id in agent_ids
        )
        labelled = "label_user = ?" if character_id is None else "label_user = ? AND label_character = ?"
        raw += self.conn.execute(blank + labelled + " AND status != 'forgotten'", params).rowcount
        receipt["raw_callbacks"] = raw
        # Metrics of the forgotten agents, their search-index tokens, and a scrub of the index.
        receipt.update(self.forget_extras(user_id, character_id, agent_ids, receipt))
        return receipt


@dataclass(eq=False)
class _Work:
    fn: Callable[[SQLiteTransaction], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    transactional: bool = True
    outcome: tuple[bool, Any] = field(default=(False, None))


_STOP = object()


def _settle_all(works: list[_Work]) -> None:
    for work in works:
        if work.future.done():
            continue  # the caller gave up waiting
        ok, value = work.outcome
        if ok:
            work.future.set_result(value)
        else:
            work.future.set_exception(value)


class SQLiteStore:
    """The SQLite implementation of the store: `open`, `read`, `write`, `checkpoint`, `close`."""

    def __init__(self, path: Path | str, *, group_commit_max: int = 256, readers: int = 4) -> None:
        self.path = Path(path)
        self.group_commit_max = group_commit_max
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="store-read")
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        self.commits = 0
        self._last_indexed = 0.0

    # lifecycle

    def open(self) -> None:
        """Create or migrate the database and start the writer thread."""
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
        self._writer.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise StoreUnavailable(f"cannot open {self.path}: {self._startup_error}")

    def close(self) -> None:
        if self._writer is not None and self._writer.is_alive():
            self._queue.put(_STOP)
            self._writer.join()
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    # reads

    def _reader(self) -> SQLiteView:
        view = getattr(self._local, "view", None)
        if view is None:
            conn = _connect(self.path, writer=False)
            with self._reader_lock:
                self._reader_conns.append(conn)
            view = self._local.view = SQLiteView(conn)
        return view

    async def read(self, fn: Callable[[SQLiteView], T]) -> T:
        """Run `fn(view)` on a reader thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, lambda: fn(self._reader()))

    def read_now(self, fn: Callable[[SQLiteView], T]) -> T:
        """Run `fn(view)` on the calling thread (CLI and benchmarks)."""
        return fn(self._reader())

    # writes

    async def write(self, fn: Callable[[SQLiteTransaction], T]) -> T:
        """Run `fn(tx)` on the writer thread; returns once its transaction is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Work(fn, loop, future))
        return await future

    async def catch_up_search(self) -> int:
        """Index what the idle writer has not yet indexed (bounded); returns how many."""
        return await self.write(lambda tx: tx.index_messages(SEARCH_CATCH_UP))

    async def checkpoint(self) -> tuple[int, int, int]:
        """Copy the WAL into the database file and truncate it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, int, int]] = loop.create_future()

        def run(tx: SQLiteTransaction) -> tuple[int, int, int]:
            row = tx.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            return (row[0], row[1], row[2])

        self._queue.put(_Work(run, loop, future, transactional=False))
        return await future

    def _write_loop(self) -> None:
        try:
            conn = _connect(self.path, writer=True)
            db = Database(conn, execute_plugins=False)
            migrations.apply(db)
        except BaseException as exc:  # reported by open()
            self._startup_error = exc
            self._ready.set()
            return
        tx = SQLiteTransaction(conn)
        self._ready.set()
        log.info("store ready: %s", self.path)
        stopping = False
        while not stopping:
            try:
                first = self._queue.get(timeout=IDLE_AFTER_S)
            except queue.Empty:
                self._idle_step(db, tx)
                first = self._queue.get()
            if first is _STOP:
                break
            batch: list[_Work] = [first]
            while len(batch) < self.group_commit_max:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            self._run_batch(db, tx, batch)
            if time.monotonic() - self._last_indexed >= BUSY_INDEX_EVERY_S:
                self._index_step(db, tx, BUSY_INDEX_CHUNK)
        conn.close()

    def _idle_step(self, db: Database, tx: SQLiteTransaction) -> None:
        """While no write waits, bring the search index up to date in short transactions."""
        while self._queue.empty() and self._index_step(db, tx, IDLE_INDEX_CHUNK) == IDLE_INDEX_CHUNK:
            pass

    def _index_step(self, db: Database, tx: SQLiteTransaction, limit: int) -> int:
        """Index up to `limit` messages in a transaction of their own; returns how many."""
        self._last_indexed = time.monotonic()
        try:
            with db.atomic():
                return tx.index_messages(limit)
        except Exception:
            log.exception("indexing messages for search failed; it is tried again later")
            return 0

    def _run_batch(self, db: Database, tx: SQLiteTransaction, batch: list[_Work]) -> None:
        transactional = [work for work in batch if work.transactional]
        if transactional:
            try:
                with db.atomic():
                    for work in transactional:
                        try:
                            with db.atomic():
                                work.outcome = (True, work.fn(tx))
                        except Exception as exc:
                            work.outcome = (False, exc)
                self.commits += 1
            except Exception as exc:
                log.exception("commit of %d writes failed", len(transactional))
                failure = StoreUnavailable(f"the database could not commit: {exc}")
                for work in transactional:
                    work.outcome = (False, failure)
        for work in batch:
            if not work.transactional:
                try:
                    work.outcome = (True, work.fn(tx))
                except Exception as exc:
                    work.outcome = (False, exc)
        # One wake-up per event loop for the whole batch, not one per write.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Work]] = {}
        for work in batch:
            by_loop.setdefault(work.loop, []).append(work)
        for loop, works in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, works)
            except RuntimeError:
                pass  # the caller's loop is gone; the writes are committed all the same


def dumps(value: Any) -> str:
    """Compact JSON for storage."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
