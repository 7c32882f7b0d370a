"""Messages: each session's transcript, read by pair in conversation order or by session."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

from agent_memory.core.domain import Message, MessageFingerprint
from agent_memory.store.shared.messages import FINGERPRINT_COLUMNS, READ_COLUMNS, SPOKEN
from agent_memory.store.sqlite.common import Repository, marks
from agent_memory.store.sqlite.versions import bump
from agent_memory.store.types import MessageChanges, NewMessage

# What an insert writes, in order (`id` is assigned; AUTOINCREMENT: never reused).
MESSAGE_COLUMNS = (
    "agent_id", "user_id", "character_id", "seq", "role", "content", "turn_id", "ts_ms",
    "at_ms", "source", "speaker", "interrupted", "interrupt_ms", "original", "fp",
    "gap_before", "extra", "created_ms", "kind", "images",
)  # fmt: skip
INSERT_MESSAGE = f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES ({marks(len(MESSAGE_COLUMNS))})"
# Rows arrive 32 at a time per callback: pick their values in C, not in a Python loop.
_message_values = operator.itemgetter(*MESSAGE_COLUMNS)
_NO_MESSAGE_VALUES: dict[str, Any] = {column: None for column in MESSAGE_COLUMNS} | {"kind": "turn"}
# A row naming every column (ingest's) is taken as it is.
_ALL = len(MESSAGE_COLUMNS)


def message_of(row: Sequence[Any]) -> Message:
    """A `READ_COLUMNS` row as a message."""
    (
        id_, agent_id, user_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms,
        source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images,
    ) = row  # fmt: skip
    return Message(
        id_, agent_id, user_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms,
        source, speaker, bool(interrupted), interrupt_ms, original, bool(gap_before), extra, images,
    )  # fmt: skip


def fingerprint_of(row: Sequence[Any]) -> MessageFingerprint:
    """A `FINGERPRINT_COLUMNS` row."""
    (
        id_,
        seq,
        role,
        fp,
        gap_before,
        turn_id,
        ts_ms,
        source,
        speaker,
        interrupted,
        interrupt_ms,
        original,
        images,
    ) = row
    return MessageFingerprint(
        id_, seq, role, fp, bool(gap_before), turn_id, ts_ms, source, speaker, bool(interrupted),
        interrupt_ms, original, images,
    )  # fmt: skip


class SQLiteMessages(Repository):
    """The `messages` table (its search index follows by trigger, see search.py)."""

    __slots__ = ()

    def _messages(self, sql: str, params: Sequence[Any]) -> list[Message]:
        return [message_of(row) for row in self.conn.execute(sql, params)]

    def latest(
        self,
        user_id: str,
        character_id: str,
        limit: int,
        *,
        spoken_only: bool = True,
        exclude_agent_id: str | None = None,
    ) -> list[Message]:
        """The pair's `limit` latest spoken turns (or all items), oldest first."""
        spoken = f" AND {SPOKEN}" if spoken_only else ""
        params: tuple[object, ...] = (user_id, character_id)
        if exclude_agent_id is not None:
            spoken += " AND agent_id != ?"
            params += (exclude_agent_id,)
        rows = self._messages(
            f"SELECT {READ_COLUMNS} FROM messages WHERE user_id = ? AND character_id = ?"
            f"{spoken} ORDER BY at_ms DESC, seq DESC LIMIT ?",
            (*params, limit),
        )
        rows.reverse()
        return rows

    def after(self, user_id: str, character_id: str, watermark_id: int, limit: int) -> list[Message]:
        """The first `limit` spoken turns stored after the watermark (by id), in conversation order."""
        # Taken by id, then ordered: the caller's new watermark is the batch's highest id, so
        # the batch must hold every turn below it (ids and times disagree when an older call's
        # turns arrive late, or two calls of a pair overlap).
        return self._messages(
            f"SELECT * FROM (SELECT {READ_COLUMNS} FROM messages "
            f"WHERE user_id = ? AND character_id = ? AND id > ? AND {SPOKEN} "
            "ORDER BY id LIMIT ?) AS batch ORDER BY at_ms, seq",
            (user_id, character_id, watermark_id, limit),
        )

    def count_after(self, user_id: str, character_id: str, watermark_id: int) -> int:
        """How many spoken turns were stored after the watermark."""
        return self._count(
            f"SELECT count(*) FROM messages WHERE user_id = ? AND character_id = ? AND id > ? AND {SPOKEN}",
            (user_id, character_id, watermark_id),
        )

    def of_session(self, agent_id: str) -> list[Message]:
        return self._messages(
            f"SELECT {READ_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq", (agent_id,)
        )

    def fingerprints(self, agent_id: str) -> list[MessageFingerprint]:
        """What window merging needs of a session's stored messages, in order."""
        return [
            fingerprint_of(row)
            for row in self.conn.execute(
                f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq",
                (agent_id,),
            )
        ]

    def tail(self, agent_id: str, count: int) -> list[MessageFingerprint]:
        """The last `count` of what window merging needs, in order."""
        rows = [
            fingerprint_of(row)
            for row in self.conn.execute(
                f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = ? ORDER BY seq DESC LIMIT ?",
                (agent_id, count),
            )
        ]
        rows.reverse()
        return rows

    def insert(self, rows: Iterable[NewMessage]) -> None:
        """Insert new messages in one statement (a missing column is NULL)."""
        full = [row if len(row) == _ALL else {**_NO_MESSAGE_VALUES, **row} for row in rows]
        self.conn.executemany(INSERT_MESSAGE, [_message_values(row) for row in full])
        bump(self.conn, ((row["user_id"], row["character_id"]) for row in full))

    def update(self, message_id: int, changes: MessageChanges) -> None:
        """Change a stored message, counting a change of its pair; no changes: nothing to do."""
        # Ingest calls this for every stored message a window overlaps (a live call's every
        # request carries its earlier turns), mostly with nothing to change: no statement
        # then, and the pair's version stays, so its cached context is not built again.
        if not changes:
            return
        self._set("messages", "id", message_id, dict(changes))
        pair = self.conn.execute(
            "SELECT user_id, character_id FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        if pair is not None:
            bump(self.conn, [(pair[0], pair[1])])
