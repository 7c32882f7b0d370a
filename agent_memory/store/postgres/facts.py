"""Facts and summaries: what condensing (and the API) keep of a (user, character) memory.

Facts are unique per (user, character column, key), the key being core.facts' one form of
"says the same thing", computed here so that no caller can store another. A user-wide fact
has the empty character (`store.shared.facts` says how).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import errors

from agent_memory.core.domain import Fact, FactOrigin, FactScope, Summary
from agent_memory.core.facts import fact_key
from agent_memory.store.postgres.common import Repository, dumps, loads_object, now_ms
from agent_memory.store.shared.facts import USER_WIDE, fact_character

__all__ = ["FACT_COLUMNS", "SUMMARY_COLUMNS", "PostgresFacts", "PostgresSummaries", "fact_of", "summary_of"]

FACT_COLUMNS = "id, user_id, character_id, text, pinned, origin, created_ms, updated_ms"
SUMMARY_COLUMNS = (
    "user_id, character_id, text, watermark_id, covered_until_ms, message_count, method, model, "
    "created_ms, updated_ms, meta"
)
_SUMMARY_MARKS = ", ".join(["%s"] * len(SUMMARY_COLUMNS.split(", ")))
# A replaced summary takes every column of the new one.
_SUMMARY_REPLACE = ", ".join(f"{column} = excluded.{column}" for column in SUMMARY_COLUMNS.split(", ")[2:])
# A fact found gone between its conflicting insert and the read is looked for again.
_ADD_ATTEMPTS = 3


def fact_of(row: Mapping[str, Any]) -> Fact:
    """A `FACT_COLUMNS` row (by name) as a fact."""
    character = row["character_id"]
    return Fact(
        row["id"], row["user_id"], None if character == USER_WIDE else character, row["text"],
        bool(row["pinned"]), row["origin"], row["created_ms"], row["updated_ms"],
    )  # fmt: skip


def summary_of(row: Mapping[str, Any]) -> Summary:
    """A `SUMMARY_COLUMNS` row (by name) as a summary."""
    return Summary(
        row["user_id"], row["character_id"], row["text"], row["watermark_id"], row["covered_until_ms"],
        row["message_count"] or 0, row["method"], row["model"], row["created_ms"], row["updated_ms"],
        loads_object(row["meta"]),
    )  # fmt: skip


class PostgresFacts(Repository):
    """The `facts` table: unique per (user, character column, key)."""

    __slots__ = ()

    def of_pair(self, user_id: str, character_id: str) -> list[Fact]:
        """The pair's facts and the user's user-wide facts, oldest first."""
        return [
            fact_of(row)
            for row in self._all(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = %s AND character_id = ANY(%s) "
                "ORDER BY created_ms, id",
                (user_id, [character_id, USER_WIDE]),
            )
        ]

    def get(self, fact_id: int) -> Fact | None:
        row = self._one(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = %s", (fact_id,))
        return fact_of(row) if row is not None else None

    def add(
        self,
        user_id: str,
        character_id: str,
        text: str,
        *,
        scope: FactScope,
        pinned: bool,
        origin: FactOrigin,
    ) -> tuple[Fact, bool]:
        """Insert a fact unless an equal one exists; returns (fact, created).

        Another instance adding the same fact at once is waited for (the unique key), and
        its fact is the one returned.
        """
        character = fact_character(scope, character_id)
        key = (user_id, character, fact_key(text))
        for _ in range(_ADD_ATTEMPTS):
            stamp = now_ms()
            row = self._one(
                "INSERT INTO facts (user_id, character_id, text, norm, pinned, origin, created_ms, updated_ms) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (user_id, character_id, norm) DO NOTHING "
                f"RETURNING {FACT_COLUMNS}",
                (user_id, character, text, key[2], int(pinned), origin, stamp, stamp),
            )
            if row is not None:
                return fact_of(row), True
            if pinned:
                # Saying by hand what the model already knew makes it pinned.
                row = self._one(
                    "UPDATE facts SET pinned = 1, updated_ms = %s "
                    f"WHERE user_id = %s AND character_id = %s AND norm = %s RETURNING {FACT_COLUMNS}",
                    (stamp, *key),
                )
            else:
                row = self._one(
                    f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = %s AND character_id = %s AND norm = %s",
                    key,
                )
            if row is not None:
                return fact_of(row), False
        raise RuntimeError(f"fact {key} kept vanishing while it was added")

    def update(self, fact_id: int, text: str) -> bool:
        """Reword a fact; when it then says what another one says, it goes instead."""
        try:
            with self.conn.transaction():  # a savepoint: the conflict undoes only the update
                cursor = self.conn.execute(
                    b"UPDATE facts SET text = %s, norm = %s, updated_ms = %s WHERE id = %s",
                    (text, fact_key(text), now_ms(), fact_id),
                )
        except errors.UniqueViolation:
            cursor = self.conn.execute(b"DELETE FROM facts WHERE id = %s", (fact_id,))
        return cursor.rowcount == 1

    def delete(self, fact_id: int) -> bool:
        return self.conn.execute(b"DELETE FROM facts WHERE id = %s", (fact_id,)).rowcount == 1

    def delete_unpinned(self, user_id: str, character_id: str) -> int:
        """Drop the pair's model-made facts (user-wide ones are not the pair's)."""
        return self.conn.execute(
            b"DELETE FROM facts WHERE user_id = %s AND character_id = %s AND pinned = 0",
            (user_id, fact_character("character", character_id)),
        ).rowcount


class PostgresSummaries(Repository):
    """The `summaries` table: one per pair."""

    __slots__ = ()

    def get(self, user_id: str, character_id: str) -> Summary | None:
        row = self._one(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = %s AND character_id = %s",
            (user_id, character_id),
        )
        return summary_of(row) if row is not None else None

    def put(self, summary: Summary) -> None:
        """Store the pair's summary, replacing the one it had."""
        self.conn.execute(
            f"INSERT INTO summaries ({SUMMARY_COLUMNS}) VALUES ({_SUMMARY_MARKS}) "
            f"ON CONFLICT (user_id, character_id) DO UPDATE SET {_SUMMARY_REPLACE}".encode(),
            (
                summary.user_id, summary.character_id, summary.text, summary.watermark_id,
                summary.covered_until_ms, summary.message_count, summary.method, summary.model,
                summary.created_ms, summary.updated_ms, dumps(summary.meta),
            ),
        )  # fmt: skip

    def delete(self, user_id: str, character_id: str) -> int:
        return self.conn.execute(
            b"DELETE FROM summaries WHERE user_id = %s AND character_id = %s", (user_id, character_id)
        ).rowcount
