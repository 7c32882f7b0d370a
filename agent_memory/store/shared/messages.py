"""Messages: each session's transcript, read by pair in conversation order or by session."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, get_type_hints

from agent_memory.core.domain import Message, MessageChanges, MessageFingerprint
from agent_memory.store.shared.facts import USER_WIDE
from agent_memory.store.shared.sql import Repository
from agent_memory.store.types import NewMessage

# What a read returns, in `Message`'s order.
READ_COLUMNS = (
    "id, agent_id, user_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
    "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images"
)
# What window merging needs of a stored message, in `MessageFingerprint`'s order.
FINGERPRINT_COLUMNS = (
    "id, seq, role, fp, gap_before, turn_id, ts_ms, source, speaker, interrupted, interrupt_ms, original, "
    "images, kind"
)
# Memory, summaries and transcripts read what was said; tool calls and results are kept
# (export, GET …/messages) but were never said.
SPOKEN = "kind = 'turn'"
# What an insert writes, in order (`id` is assigned, never reused): the columns `NewMessage` names.
MESSAGE_COLUMNS = tuple(NewMessage.__annotations__)
# Rows arrive 32 at a time per callback: pick their values in C, not in a Python loop.
_ROW = itemgetter(*MESSAGE_COLUMNS)
# Where `NewMessage`'s flags (bools, stored as integers) are in a row.
_FLAGS = tuple(place for place, kind in enumerate(get_type_hints(NewMessage).values()) if kind is bool)
# Where a row's pair is.
_USER, _CHARACTER = MESSAGE_COLUMNS.index("user_id"), MESSAGE_COLUMNS.index("character_id")
# What a row that leaves a column out stores in it (others: NULL).
_DEFAULTS = {"kind": "turn"}


def message_of(row: Sequence[Any]) -> Message:
    """A `READ_COLUMNS` row (in order) as a message."""
    values = list(row)
    values[13] = bool(values[13])  # interrupted
    values[16] = bool(values[16])  # gap_before
    return Message(*values)


def _message(*row: Any) -> Message:
    return message_of(row)


def _fingerprint(*row: Any) -> MessageFingerprint:
    """A `FINGERPRINT_COLUMNS` row."""
    values = list(row)
    values[4] = bool(values[4])  # gap_before
    values[9] = bool(values[9])  # interrupted
    return MessageFingerprint(*values)


def stored_row(message: NewMessage) -> list[Any]:
    """A new message's values in `MESSAGE_COLUMNS` order, as stored (a flag as an integer)."""
    try:
        values = list(_ROW(message))
    except KeyError:  # a row may leave columns out
        values = [message.get(column, _DEFAULTS.get(column)) for column in MESSAGE_COLUMNS]
    # Only the flags are bools (`NewMessage`): converted by place, not by testing every value.
    for place in _FLAGS:
        if values[place].__class__ is bool:
            values[place] = int(values[place])
    return values


class Messages(Repository):
    """Stored transcripts, by pair (conversation order: time, then place) or by session; search and
    recall index them (by trigger, or queued by trigger)."""

    def latest(
        self,
        user_id: str,
        character_id: str,
        limit: int,
        *,
        spoken_only: bool = True,
        exclude_agent_id: str | None = None,
    ) -> list[Message]:
        """The pair's `limit` latest turns (or all items), oldest first; none of `exclude_agent_id`."""
        spoken = f" AND {SPOKEN}" if spoken_only else ""
        params: tuple[object, ...] = (user_id, character_id)
        if exclude_agent_id is not None:
            spoken += " AND agent_id <> ?"
            params += (exclude_agent_id,)
        rows = self.sql.records(
            _message,
            f"SELECT {READ_COLUMNS} FROM messages WHERE user_id = ? AND character_id = ?"
            f"{spoken} ORDER BY at_ms DESC, seq DESC LIMIT ?",
            (*params, limit),
        )
        rows.reverse()
        return rows

    def after(self, user_id: str, character_id: str, watermark_id: int, limit: int) -> list[Message]:
        """The first `limit` turns stored after the watermark, by id (every id up to the highest
        returned is there), put in conversation order (late turns arrive late, calls overlap)."""
        return self.sql.records(
            _message,
            f"SELECT * FROM (SELECT {READ_COLUMNS} FROM messages "
            f"WHERE user_id = ? AND character_id = ? AND id > ? AND {SPOKEN} "
            "ORDER BY id LIMIT ?) AS batch ORDER BY at_ms, seq",
            (user_id, character_id, watermark_id, limit),
        )

    def count_after(self, user_id: str, character_id: str, watermark_id: int) -> int:
        """How many spoken turns were stored after the watermark."""
        return self.sql.count(
            f"SELECT count(*) FROM messages WHERE user_id = ? AND character_id = ? AND id > ? AND {SPOKEN}",
            (user_id, character_id, watermark_id),
        )

    def of_session(self, agent_id: str) -> list[Message]:
        """A session's items in order."""
        return self.sql.records(
            _message, f"SELECT {READ_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq", (agent_id,)
        )

    def fingerprints(self, agent_id: str) -> list[MessageFingerprint]:
        """What window merging needs of a session's stored messages, in order."""
        return self.sql.records(
            _fingerprint,
            f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq",
            (agent_id,),
        )

    def tail(self, agent_id: str, count: int) -> list[MessageFingerprint]:
        """The last `count` of `fingerprints`, in order."""
        rows = self.sql.records(
            _fingerprint,
            f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq DESC LIMIT ?",
            (agent_id, count),
        )
        rows.reverse()
        return rows

    def insert(self, rows: Iterable[NewMessage]) -> None:
        """Insert new items given as `NewMessage`s."""
        self.insert_values([stored_row(row) for row in rows])

    def insert_values(self, rows: Sequence[Sequence[Any]]) -> None:
        """Insert new items given as their values in `MESSAGE_COLUMNS` order, flags as integers
        (the ingest hot path: dozens per callback, one statement, no dict per row)."""
        if not rows:
            return
        # Bumping first locks the pairs' version rows until commit (PostgreSQL), before ids
        # are handed out: a pair's messages then commit in id order, whichever instance writes
        # them, so a summary's watermark ("every id up to here is condensed") never skips one
        # that took a lower id but committed later.
        self.sql.bump((row[_USER], row[_CHARACTER]) for row in rows)
        self.sql.insert_rows("messages", MESSAGE_COLUMNS, rows)

    def delete_said_by(self, agent_id: str, speaker: str) -> int:
        """Delete the turns one speaker of a shared call said in a session; how many."""
        row = self.sql.one("SELECT user_id, character_id FROM sessions WHERE agent_id = ?", (agent_id,))
        deleted = self.sql.run(
            f"DELETE FROM messages WHERE agent_id = ? AND speaker = ? AND role = 'user' AND {SPOKEN}",
            (agent_id, speaker),
        )
        if deleted and row is not None:
            self.sql.bump([(row["user_id"], row["character_id"])])
        return deleted

    def update(self, message_id: int, changes: MessageChanges) -> None:
        """Change a stored message, counting a change of its pair; no changes: nothing to do."""
        # Ingest calls this for every stored message a window overlaps, mostly with nothing to
        # change: no statement then, and the pair's version stays (its cached context too).
        if not changes:
            return
        values = {
            column: int(value) if isinstance(value, bool) else value for column, value in changes.items()
        }
        assignments = ", ".join(f"{column} = ?" for column in values)
        pair = self.sql.one(
            f"UPDATE messages SET {assignments} WHERE id = ? RETURNING user_id, character_id",
            (*values.values(), message_id),
        )
        if pair is not None:
            self.sql.bump([(pair["user_id"], pair["character_id"])])


class Versions(Repository):
    """When a pair's memory last changed, as a number that only grows (bumped by trigger or `Sql.bump`)."""

    def of_pair(self, user_id: str, character_id: str) -> tuple[int, int]:
        """The pair's change counter and the user's user-wide facts' one (0: never changed); they only grow."""
        among, values = self.sql.among("character_id", [character_id, USER_WIDE])
        rows = {
            row["character_id"]: row["version"]
            for row in self.sql.all(
                f"SELECT character_id, version FROM memory_versions WHERE user_id = ? AND {among}",
                (user_id, *values),
            )
        }
        return rows.get(character_id, 0), rows.get(USER_WIDE, 0)
