"""Messages: each session's transcript, read by pair in conversation order or by session."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from agent_memory.core.domain import Message, MessageFingerprint
from agent_memory.store.postgres.common import Repository
from agent_memory.store.postgres.versions import bump
from agent_memory.store.shared.messages import FINGERPRINT_COLUMNS, READ_COLUMNS, SPOKEN
from agent_memory.store.types import MessageChanges, NewMessage

# What an insert writes (`id` comes from the identity).
MESSAGE_COLUMNS = (
    "agent_id", "user_id", "character_id", "seq", "role", "content", "turn_id", "ts_ms", "at_ms",
    "source", "speaker", "interrupted", "interrupt_ms", "original", "fp", "gap_before", "extra",
    "created_ms", "kind", "images",
)  # fmt: skip
# A whole window in one COPY, rows in order (ids follow it): adapting a row is done in C,
# where a column array each (unnest) was adapted element by element in Python.
COPY_MESSAGES = f"COPY messages ({', '.join(MESSAGE_COLUMNS)}) FROM STDIN".encode()
_ROW = itemgetter(*MESSAGE_COLUMNS)
# What a row that leaves a column out stores in it (others: NULL).
_DEFAULTS = {"kind": "turn"}


def message_of(row: Mapping[str, Any]) -> Message:
    """A `READ_COLUMNS` row (by name) as a message."""
    return Message(
        row["id"], row["agent_id"], row["user_id"], row["character_id"], row["seq"], row["role"],
        row["kind"], row["content"], row["turn_id"], row["ts_ms"], row["at_ms"], row["source"],
        row["speaker"], bool(row["interrupted"]), row["interrupt_ms"], row["original"],
        bool(row["gap_before"]), row["extra"], row["images"],
    )  # fmt: skip


def fingerprint_of(row: Mapping[str, Any]) -> MessageFingerprint:
    """A `FINGERPRINT_COLUMNS` row (by name)."""
    return MessageFingerprint(
        row["id"], row["seq"], row["role"], row["fp"], bool(row["gap_before"]), row["turn_id"], row["ts_ms"],
        row["source"], row["speaker"], bool(row["interrupted"]), row["interrupt_ms"], row["original"],
        row["images"],
    )  # fmt: skip


def _stored(value: Any) -> Any:
    """A flag as the integer its column holds; anything else as it is."""
    return int(value) if isinstance(value, bool) else value


def _row(message: NewMessage) -> list[Any]:
    """A new message's values in `MESSAGE_COLUMNS` order, as stored."""
    try:
        values = _ROW(message)
    except KeyError:  # a row may leave columns out
        values = [message.get(column, _DEFAULTS.get(column)) for column in MESSAGE_COLUMNS]
    return [int(value) if value.__class__ is bool else value for value in values]


class PostgresMessages(Repository):
    """The `messages` table (recall indexes it after commit, queued by trigger)."""

    __slots__ = ()

    def _messages(self, sql: str, params: Sequence[Any]) -> list[Message]:
        return [message_of(row) for row in self._all(sql, params)]

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
            spoken += " AND agent_id <> %s"
            params += (exclude_agent_id,)
        rows = self._messages(
            f"SELECT {READ_COLUMNS} FROM messages WHERE user_id = %s AND character_id = %s"
            f"{spoken} ORDER BY at_ms DESC, seq DESC LIMIT %s",
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
            f"WHERE user_id = %s AND character_id = %s AND id > %s AND {SPOKEN} "
            "ORDER BY id LIMIT %s) AS batch ORDER BY at_ms, seq",
            (user_id, character_id, watermark_id, limit),
        )

    def count_after(self, user_id: str, character_id: str, watermark_id: int) -> int:
        """How many spoken turns were stored after the watermark."""
        return self._count(
            f"SELECT count(*) FROM messages WHERE user_id = %s AND character_id = %s AND id > %s AND {SPOKEN}",
            (user_id, character_id, watermark_id),
        )

    def of_session(self, agent_id: str) -> list[Message]:
        return self._messages(
            f"SELECT {READ_COLUMNS} FROM messages WHERE agent_id = %s ORDER BY seq", (agent_id,)
        )

    def fingerprints(self, agent_id: str) -> list[MessageFingerprint]:
        """What window merging needs of a session's stored messages, in order."""
        return [
            fingerprint_of(row)
            for row in self._all(
                f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = %s ORDER BY seq", (agent_id,)
            )
        ]

    def tail(self, agent_id: str, count: int) -> list[MessageFingerprint]:
        """The last `count` of what window merging needs, in order."""
        rows = [
            fingerprint_of(row)
            for row in self._all(
                f"SELECT {FINGERPRINT_COLUMNS} FROM messages WHERE agent_id = %s ORDER BY seq DESC LIMIT %s",
                (agent_id, count),
            )
        ]
        rows.reverse()
        return rows

    def insert(self, rows: Iterable[NewMessage]) -> None:
        """Insert new messages in one COPY (a missing column is NULL, `kind` turn)."""
        batch = list(rows)
        if not batch:
            return
        # Bumping first locks the pairs' version rows until commit, before the identity hands
        # out ids: a pair's messages then commit in id order, whichever instance writes them,
        # so a summary's watermark ("every id up to here is condensed") never skips one that
        # took a lower id but committed later.
        bump(self.conn, ((row["user_id"], row["character_id"]) for row in batch))
        with self.conn.shared_cursor().copy(COPY_MESSAGES) as copy:
            for row in batch:
                copy.write_row(_row(row))

    def update(self, message_id: int, changes: MessageChanges) -> None:
        """Change a stored message, counting a change of its pair; no changes: nothing to do."""
        # Ingest calls this for every stored message a window overlaps, mostly with nothing to
        # change: no statement then, and the pair's version stays (nothing changed).
        if not changes:
            return
        values = {column: _stored(value) for column, value in changes.items()}
        assignments = ", ".join(f"{column} = %s" for column in values)
        pair = self._one(
            f"UPDATE messages SET {assignments} WHERE id = %s RETURNING user_id, character_id",
            (*values.values(), message_id),
        )
        if pair is not None:
            bump(self.conn, [(pair["user_id"], pair["character_id"])])
