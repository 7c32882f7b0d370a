"""Sessions: one row per agent run, and who it belongs to.

On a write transaction, reading a session (`get`) or moving one takes the session's
advisory lock until commit: ingest reads the session first, so the windows of one agent
merged by several instances at once run one after the other, each seeing what the one
before stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.core.domain import IdentitySource, Session
from agent_memory.store.postgres.common import Repository, bump, dumps, loads_object
from agent_memory.store.shared.messages import MESSAGE_COLUMNS
from agent_memory.store.types import SessionChanges

SESSION_COLUMNS = (
    "agent_id, user_id, character_id, identity_source, status, channel, name, stop_reason, "
    "start_ms, stop_ms, labels, rtc_uid, message_count, gap_count, error_count, first_seen_ms, "
    "updated_ms, token_warning_ms, turn_count, turns_truncated"
)
_SESSION_MARKS = ", ".join(["%s"] * len(SESSION_COLUMNS.split(", ")))
# The message columns a move copies as they are.
_MOVED_COLUMNS = ", ".join(column for column in MESSAGE_COLUMNS if column not in ("user_id", "character_id"))
# A move in one statement: the originals are deleted (their recall rows and vectors go with
# them) and inserted again under the new pair, with new ids above every other, in order.
_MOVE = (
    f"WITH gone AS (DELETE FROM messages WHERE agent_id = %s RETURNING id, {_MOVED_COLUMNS}) "
    f"INSERT INTO messages (user_id, character_id, {_MOVED_COLUMNS}) "
    f"SELECT %s, %s, {_MOVED_COLUMNS} FROM gone ORDER BY id"
).encode()


def session_of(row: Mapping[str, Any]) -> Session:
    """A `SESSION_COLUMNS` row (by name) as a session."""
    return Session(
        row["agent_id"], row["user_id"], row["character_id"], row["identity_source"], row["status"],
        row["channel"], row["name"], row["stop_reason"], row["start_ms"], row["stop_ms"],
        loads_object(row["labels"]), row["rtc_uid"], row["message_count"] or 0, row["gap_count"] or 0,
        row["error_count"] or 0, row["first_seen_ms"], row["updated_ms"], row["token_warning_ms"],
        row["turn_count"], bool(row["turns_truncated"]),
    )  # fmt: skip


def _columns(changes: SessionChanges | Session) -> dict[str, Any]:
    """Column values of a session (or of changes to one) as stored."""
    values: dict[str, Any] = (
        dict(changes) if isinstance(changes, dict) else {
            name: getattr(changes, name) for name in SESSION_COLUMNS.split(", ")
        }
    )  # fmt: skip
    if "labels" in values:
        values["labels"] = dumps(values["labels"]) if values["labels"] else None
    if "turns_truncated" in values:
        values["turns_truncated"] = int(values["turns_truncated"])
    return values


class PostgresSessions(Repository):
    """The `sessions` table."""

    __slots__ = ()

    def get(self, agent_id: str) -> Session | None:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE agent_id = %s"
        # Writes hold the session's advisory lock until commit; reads need none.
        row = (
            self._one(sql, (agent_id,))
            if self.conn.read_only
            else self._one_locked(agent_id, 0, sql, (agent_id,))
        )
        return session_of(row) if row is not None else None

    def in_channel(self, channel: str, sources: Sequence[IdentitySource]) -> list[Session]:
        """The channel's sessions whose identity came from one of `sources`, oldest first."""
        return [
            session_of(row)
            for row in self._all(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE channel = %s AND identity_source = ANY(%s) "
                'ORDER BY start_ms, agent_id COLLATE "C"',
                (channel, list(sources)),
            )
        ]

    def insert(self, session: Session) -> None:
        self._execute(
            f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({_SESSION_MARKS})".encode(),
            tuple(_columns(session).values()),
        )

    def update(self, agent_id: str, changes: SessionChanges) -> None:
        self._set("sessions", "agent_id", agent_id, _columns(changes))

    def move(self, agent_id: str, user_id: str, character_id: str) -> int:
        """Give a session and its messages to another pair; returns the messages moved.

        The messages get new ids above every other (the new pair's summary watermark treats
        them as not yet condensed); recall indexes them again, and they lose their vectors.
        """
        before = self._one_locked(
            agent_id,
            0,
            "SELECT user_id, character_id FROM sessions WHERE agent_id = %s FOR UPDATE",
            (agent_id,),
        )
        if before is not None:
            bump(self.conn, [(before["user_id"], before["character_id"]), (user_id, character_id)])
        self._execute(
            b"UPDATE sessions SET user_id = %s, character_id = %s WHERE agent_id = %s",
            (user_id, character_id, agent_id),
        )
        return self._execute(_MOVE, (agent_id, user_id, character_id)).rowcount
