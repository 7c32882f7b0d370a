"""Facts and summaries: what condensing (and the API) keep of a (user, character) memory.

Facts are unique per (user, character column, key), the key being core.facts' one form of
"says the same thing", computed here so that no caller can store another.

A user-wide fact is stored with the empty character (`store.shared.facts` says how).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import Fact, FactOrigin, FactScope, Summary
from agent_memory.core.facts import fact_key
from agent_memory.store.shared.facts import USER_WIDE, fact_character
from agent_memory.store.sqlite.common import Repository, dumps, loads_object, now_ms

FACT_COLUMNS = "id, user_id, character_id, text, pinned, origin, created_ms, updated_ms"
SUMMARY_COLUMNS = (
    "user_id, character_id, text, watermark_id, covered_until_ms, message_count, method, model, "
    "created_ms, updated_ms, meta"
)


def fact_of(row: Sequence[Any]) -> Fact:
    """A `FACT_COLUMNS` row as a fact."""
    id_, user_id, character_id, text, pinned, origin, created_ms, updated_ms = row
    scoped = None if character_id == USER_WIDE else character_id
    return Fact(id_, user_id, scoped, text, bool(pinned), origin, created_ms, updated_ms)


def summary_of(row: Sequence[Any]) -> Summary:
    """A `SUMMARY_COLUMNS` row as a summary."""
    (
        user_id, character_id, text, watermark_id, covered_until_ms, message_count, method,
        model, created_ms, updated_ms, meta,
    ) = row  # fmt: skip
    return Summary(
        user_id, character_id, text, watermark_id, covered_until_ms, message_count or 0, method,
        model, created_ms, updated_ms, loads_object(meta),
    )  # fmt: skip


class SQLiteFacts(Repository):
    """The `facts` table: unique per (user, character column, key)."""

    __slots__ = ()

    def of_pair(self, user_id: str, character_id: str) -> list[Fact]:
        """The pair's facts and the user's user-wide facts, oldest first."""
        return [
            fact_of(row)
            for row in self.conn.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND character_id IN (?, ?) "
                "ORDER BY created_ms, id",
                (user_id, character_id, USER_WIDE),
            )
        ]

    def get(self, fact_id: int) -> Fact | None:
        row = self.conn.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
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
        """Insert a fact unless an equal one exists; returns (fact, created)."""
        character = fact_character(scope, character_id)
        key = fact_key(text)
        stamp = now_ms()
        cursor = self.conn.execute(
            "INSERT OR IGNORE INTO facts (user_id, character_id, text, norm, pinned, origin, "
            "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, character, text, key, int(pinned), origin, stamp, stamp),
        )
        created = cursor.rowcount == 1
        if not created and pinned:
            # Saying by hand what the model already knew makes it pinned.
            self.conn.execute(
                "UPDATE facts SET pinned = 1, updated_ms = ? "
                "WHERE user_id = ? AND character_id = ? AND norm = ?",
                (stamp, user_id, character, key),
            )
        row = self.conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND character_id = ? AND norm = ?",
            (user_id, character, key),
        ).fetchone()
        return fact_of(row), created

    def update(self, fact_id: int, text: str) -> bool:
        """Reword a fact; when it then says what another one says, it goes instead."""
        try:
            cursor = self.conn.execute(
                "UPDATE facts SET text = ?, norm = ?, updated_ms = ? WHERE id = ?",
                (text, fact_key(text), now_ms(), fact_id),
            )
        except sqlite3.IntegrityError:
            cursor = self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
        return cursor.rowcount == 1

    def delete(self, fact_id: int) -> bool:
        return self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,)).rowcount == 1

    def delete_unpinned(self, user_id: str, character_id: str) -> int:
        """Drop the pair's model-made facts (user-wide ones are not the pair's)."""
        return self.conn.execute(
            "DELETE FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 0",
            (user_id, fact_character("character", character_id)),
        ).rowcount


class SQLiteSummaries(Repository):
    """The `summaries` table: one per pair (its search index follows by trigger)."""

    __slots__ = ()

    def get(self, user_id: str, character_id: str) -> Summary | None:
        row = self.conn.execute(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = ? AND character_id = ?",
            (user_id, character_id),
        ).fetchone()
        return summary_of(row) if row is not None else None

    def put(self, summary: Summary) -> None:
        """Store the pair's summary, replacing the one it had."""
        self.conn.execute(
            f"INSERT OR REPLACE INTO summaries ({SUMMARY_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                summary.user_id, summary.character_id, summary.text, summary.watermark_id,
                summary.covered_until_ms, summary.message_count, summary.method, summary.model,
                summary.created_ms, summary.updated_ms, dumps(summary.meta),
            ),
        )  # fmt: skip

    def delete(self, user_id: str, character_id: str) -> int:
        return self.conn.execute(
            "DELETE FROM summaries WHERE user_id = ? AND character_id = ?", (user_id, character_id)
        ).rowcount
