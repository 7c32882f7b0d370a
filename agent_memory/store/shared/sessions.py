"""Sessions: one row per agent run, and who it belongs to. A write's `get` (or a move) takes the
session's lock until commit (`Sql.locked`): instances merging one agent's windows take turns."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import IdentitySource, Session
from agent_memory.core.jsonutil import dumps, loads_object
from agent_memory.store.shared.messages import MESSAGE_COLUMNS
from agent_memory.store.shared.sql import LockedRead, Repository, Row, pair_scope
from agent_memory.store.types import SessionChanges

SESSION_COLUMNS = (
    "agent_id, user_id, character_id, identity_source, status, channel, name, stop_reason, "
    "start_ms, stop_ms, labels, rtc_uid, message_count, gap_count, error_count, first_seen_ms, "
    "updated_ms, token_warning_ms, turn_count, turns_truncated"
)
SESSION_GET = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE agent_id = ?"
_SESSION_NAMES = tuple(SESSION_COLUMNS.split(", "))
_SESSION_MARKS = ", ".join("?" * len(_SESSION_NAMES))
# The message columns a move copies as they are (besides the pair, and the id it renews).
MOVED_COLUMNS = ", ".join(column for column in MESSAGE_COLUMNS if column not in ("user_id", "character_id"))


def session_of(*row: Any) -> Session:
    """A `SESSION_COLUMNS` row as a session."""
    values = list(row)
    values[10] = loads_object(values[10])  # labels
    values[12:15] = [count or 0 for count in values[12:15]]  # message, gap and error counts
    values[19] = bool(values[19])  # turns_truncated
    return Session(*values)


def _columns(changes: SessionChanges | Session) -> dict[str, Any]:
    """Column values of a session (or of changes to one) as stored."""
    if isinstance(changes, dict):
        values: dict[str, Any] = dict(changes)
    else:
        values = {name: getattr(changes, name) for name in _SESSION_NAMES}
    if "labels" in values:
        values["labels"] = dumps(values["labels"]) if values["labels"] else None
    if "turns_truncated" in values:
        values["turns_truncated"] = int(values["turns_truncated"])
    return values


class Sessions(Repository):
    """Agent runs and who they belong to; how a session's messages move to another pair is the backend's."""

    def get(self, agent_id: str) -> Session | None:
        return self.session_from(self.sql.locked(agent_id, 0, SESSION_GET, (agent_id,)))

    @staticmethod
    def get_read(agent_id: str) -> LockedRead:
        """`get`'s read, under the session's lock, to send with others (`Sql.locked_each`)."""
        return agent_id, 0, SESSION_GET, (agent_id,), False

    def session_from(self, row: Row | None) -> Session | None:
        """The session a `get_read` row holds."""
        return self.sql.build(session_of, row) if row is not None else None

    def speaking_in(self, user_id: str, character_id: str | None) -> list[tuple[str, str]]:
        """(the call's session, the speaker's uid) of each shared call a user (or pair) spoke in as a
        guest, from their own sessions `<agent_id>~<uid>` (memory/ingest/speakers.py)."""
        where, params = pair_scope(user_id, character_id)
        rows = self.sql.all(
            f"SELECT agent_id, rtc_uid FROM sessions WHERE {where} AND rtc_uid IS NOT NULL", params
        )
        return [
            (row["agent_id"][: -len(row["rtc_uid"]) - 1], row["rtc_uid"])
            for row in rows
            if row["agent_id"].endswith(f"~{row['rtc_uid']}")
        ]

    def in_channel(self, channel: str, sources: Sequence[IdentitySource]) -> list[Session]:
        """The channel's sessions whose identity came from one of `sources`, oldest first."""
        among, values = self.sql.among("identity_source", sources)
        return self.sql.records(
            session_of,
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE channel = ? AND {among} "
            f"ORDER BY start_ms, agent_id{self.sql.binary}",
            (channel, *values),
        )

    def insert(self, session: Session) -> None:
        self.sql.send(
            f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({_SESSION_MARKS})",
            tuple(_columns(session).values()),
        )

    def update(self, agent_id: str, changes: SessionChanges) -> None:
        self.sql.set("sessions", "agent_id", agent_id, _columns(changes), send=True)

    def move(self, agent_id: str, user_id: str, character_id: str) -> int:
        """Give a session and its messages (under new ids: not yet condensed) to another pair; how many."""
        owner = f"SELECT user_id, character_id FROM sessions WHERE agent_id = ?{self.sql.for_update}"
        before = self.sql.locked(agent_id, 0, owner, (agent_id,))
        if before is not None:
            self.sql.bump([(before["user_id"], before["character_id"]), (user_id, character_id)])
        self.sql.run(
            "UPDATE sessions SET user_id = ?, character_id = ? WHERE agent_id = ?",
            (user_id, character_id, agent_id),
        )
        return self._move_messages(agent_id, user_id, character_id)

    @abstractmethod
    def _move_messages(self, agent_id: str, user_id: str, character_id: str) -> int:
        """Delete the session's messages and insert them again under the pair, in order; how many."""
