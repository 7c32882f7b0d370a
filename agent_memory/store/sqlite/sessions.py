"""Sessions: one row per agent run, and who it belongs to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import IdentitySource, Session
from agent_memory.store.shared.messages import MESSAGE_COLUMNS
from agent_memory.store.sqlite.common import Repository, bump, dumps, loads_object, marks
from agent_memory.store.types import SessionChanges

SESSION_COLUMNS = (
    "agent_id, user_id, character_id, identity_source, status, channel, name, stop_reason, "
    "start_ms, stop_ms, labels, rtc_uid, message_count, gap_count, error_count, first_seen_ms, "
    "updated_ms, token_warning_ms, turn_count, turns_truncated"
)
# What a session's messages are moved by while their (unique per session) seq is rewritten;
# sequence numbers stay far below it (gaps leave 2**20 of room each).
MOVE_SEQ_SHIFT = 1 << 52
# The message columns a move copies as they are.
_MOVED_COLUMNS = ", ".join(
    column for column in MESSAGE_COLUMNS if column not in ("user_id", "character_id", "seq")
)


def session_of(row: Sequence[Any]) -> Session:
    """A `SESSION_COLUMNS` row as a session."""
    (
        agent_id, user_id, character_id, identity_source, status, channel, name, stop_reason,
        start_ms, stop_ms, labels, rtc_uid, message_count, gap_count, error_count, first_seen_ms,
        updated_ms, token_warning_ms, turn_count, turns_truncated,
    ) = row  # fmt: skip
    return Session(
        agent_id, user_id, character_id, identity_source, status, channel, name, stop_reason,
        start_ms, stop_ms, loads_object(labels), rtc_uid, message_count or 0, gap_count or 0,
        error_count or 0, first_seen_ms, updated_ms, token_warning_ms, turn_count,
        bool(turns_truncated),
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


class SQLiteSessions(Repository):
    """The `sessions` table."""

    __slots__ = ()

    def get(self, agent_id: str) -> Session | None:
        row = self.conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        return session_of(row) if row is not None else None

    def in_channel(self, channel: str, sources: Sequence[IdentitySource]) -> list[Session]:
        """The channel's sessions whose identity came from one of `sources`, oldest first."""
        return [
            session_of(row)
            for row in self.conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE channel = ? "
                f"AND identity_source IN ({marks(len(sources))}) ORDER BY start_ms, agent_id",
                (channel, *sources),
            )
        ]

    def insert(self, session: Session) -> None:
        values = _columns(session)
        self.conn.execute(
            f"INSERT INTO sessions ({', '.join(values)}) VALUES ({marks(len(values))})",
            tuple(values.values()),
        )

    def update(self, agent_id: str, changes: SessionChanges) -> None:
        self._set("sessions", "agent_id", agent_id, _columns(changes))

    def move(self, agent_id: str, user_id: str, character_id: str) -> int:
        """Give a session and its messages to another pair; returns the messages moved.

        The messages are copied (new ids above every other, so the new pair's summary
        watermark treats them as not yet condensed) and the originals deleted.
        """
        before = self.conn.execute(
            "SELECT user_id, character_id FROM sessions WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        if before is not None:
            bump(self.conn, [(before[0], before[1]), (user_id, character_id)])
        self.conn.execute(
            "UPDATE sessions SET user_id = ?, character_id = ? WHERE agent_id = ?",
            (user_id, character_id, agent_id),
        )
        # Copies first, shifted out of the originals' seq range (seq is unique per session).
        moved = self.conn.execute(
            f"INSERT INTO messages (user_id, character_id, seq, {_MOVED_COLUMNS}) "
            f"SELECT ?, ?, seq + {MOVE_SEQ_SHIFT}, {_MOVED_COLUMNS} FROM messages "
            "WHERE agent_id = ? ORDER BY id",
            (user_id, character_id, agent_id),
        ).rowcount
        self.conn.execute(
            f"DELETE FROM messages WHERE agent_id = ? AND seq < {MOVE_SEQ_SHIFT // 2}", (agent_id,)
        )
        self.conn.execute(f"UPDATE messages SET seq = seq - {MOVE_SEQ_SHIFT} WHERE agent_id = ?", (agent_id,))
        return moved
