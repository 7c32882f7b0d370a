"""Facts and summaries: what condensing (and the API) keep of a (user, character) memory.

Facts are unique per (user, character column, key), the key being core.facts' one form of
"says the same thing", computed here so that no caller can store another.

A user-wide fact is stored with the empty character (`store.shared.facts` says how).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import Fact, FactChange, FactOrigin, FactScope, FactVersion, Summary
from agent_memory.core.facts import fact_key
from agent_memory.errors import Conflict
from agent_memory.store.shared.facts import HISTORY_COLUMNS, USER_WIDE, fact_character, place_fact
from agent_memory.store.sqlite.common import Repository, dumps, loads_object, now_ms

FACT_COLUMNS = "id, user_id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from"
SUMMARY_COLUMNS = (
    "user_id, character_id, text, watermark_id, covered_until_ms, message_count, method, model, "
    "created_ms, updated_ms, meta"
)


def fact_of(row: Sequence[Any]) -> Fact:
    """A `FACT_COLUMNS` row as a fact."""
    id_, user_id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from = row
    scoped = None if character_id == USER_WIDE else character_id
    return Fact(
        id_,
        user_id,
        scoped,
        text,
        bool(pinned),
        origin,
        created_ms,
        updated_ms,
        valid_from or created_ms or 0,
    )


def summary_of(row: Sequence[Any]) -> Summary:
    """A `SUMMARY_COLUMNS` row as a summary."""
    (
        user_id,
        character_id,
        text,
        watermark_id,
        covered_until_ms,
        message_count,
        method,
        model,
        created_ms,
        updated_ms,
        meta,
    ) = row
    return Summary(
        user_id,
        character_id,
        text,
        watermark_id,
        covered_until_ms,
        message_count or 0,
        method,
        model,
        created_ms,
        updated_ms,
        loads_object(meta),
    )


class SQLiteFacts(Repository):
    """The `facts` table (current facts, unique per (user, character column, key)) and
    `fact_history` (the texts they had before, and facts that ended)."""

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

    def history(self, fact_id: int) -> list[FactVersion]:
        """Every text the fact had, oldest first, its current one last; [] for no such fact."""
        rows = self.conn.execute(
            f"SELECT {HISTORY_COLUMNS} FROM fact_history WHERE fact_id = ? ORDER BY valid_from, id",
            (fact_id,),
        ).fetchall()
        past = [FactVersion(*row) for row in rows]
        now = self.get(fact_id)
        if now is not None:
            past.append(FactVersion(now.id, now.text, now.origin, now.valid_from, None, None))
        return past

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
        """Insert a fact unless one saying the same exists, superseding the one about the same
        subject (`store.shared.facts.place_fact`); returns (fact, created)."""
        character = fact_character(scope, character_id)
        placement, held = place_fact(text, scope, pinned, self.of_pair(user_id, character_id))
        stamp = now_ms()
        if placement == "same" and held is not None:
            if pinned and not held.pinned:
                # Saying by hand what the model already knew makes it pinned.
                self.conn.execute(
                    "UPDATE facts SET pinned = 1, updated_ms = ? WHERE id = ?", (stamp, held.id)
                )
            return self._must(held.id), False
        if placement == "supersede" and held is not None:
            self._archive(held, stamp, "superseded")
            self.conn.execute(
                "UPDATE facts SET text = ?, norm = ?, pinned = max(pinned, ?), origin = ?, updated_ms = ?, "
                "valid_from = ? WHERE id = ?",
                (text, fact_key(text), int(pinned), origin, stamp, stamp, held.id),
            )
            return self._must(held.id), True
        # An id no fact had before: an ended fact's history keeps its id (SQLite would hand
        # the newest one out again).
        cursor = self.conn.execute(
            "INSERT OR IGNORE INTO facts (id, user_id, character_id, text, norm, pinned, origin, "
            "created_ms, updated_ms, valid_from) VALUES (1 + max(coalesce((SELECT max(id) FROM facts), 0), "
            "coalesce((SELECT max(fact_id) FROM fact_history), 0)), ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, character, text, fact_key(text), int(pinned), origin, stamp, stamp, stamp),
        )
        row = self.conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND character_id = ? AND norm = ?",
            (user_id, character, fact_key(text)),
        ).fetchone()
        return fact_of(row), cursor.rowcount == 1

    def edit(self, fact_id: int, *, text: str | None = None, pinned: bool | None = None) -> Fact | None:
        """Change a fact by hand (its old text kept as history); None if there is no such fact.

        Conflict when the new text says what another of the fact's scope already says.
        """
        fact = self.get(fact_id)
        if fact is None:
            return None
        stamp = now_ms()
        if text is not None and text != fact.text:
            other = self.conn.execute(
                "SELECT id FROM facts WHERE user_id = ? AND character_id = ? AND norm = ? AND id != ?",
                (fact.user_id, fact.character_id or USER_WIDE, fact_key(text), fact_id),
            ).fetchone()
            if other is not None:
                raise Conflict(f"fact {other[0]} already says this; edit or delete that one instead")
            self._archive(fact, stamp, "edited")
            self.conn.execute(
                "UPDATE facts SET text = ?, norm = ?, origin = 'manual', updated_ms = ?, valid_from = ? WHERE id = ?",
                (text, fact_key(text), stamp, stamp, fact_id),
            )
        if pinned is not None and pinned != fact.pinned:
            self.conn.execute(
                "UPDATE facts SET pinned = ?, updated_ms = ? WHERE id = ?", (int(pinned), stamp, fact_id)
            )
        return self._must(fact_id)

    def update(self, fact_id: int, text: str) -> bool:
        """Reword a fact (its old text kept as history); when it then says what another one
        says, it ends instead."""
        fact = self.get(fact_id)
        if fact is None:
            return False
        stamp = now_ms()
        clash = self.conn.execute(
            "SELECT 1 FROM facts WHERE user_id = ? AND character_id = ? AND norm = ? AND id != ?",
            (fact.user_id, fact.character_id or USER_WIDE, fact_key(text), fact_id),
        ).fetchone()
        if clash is not None:
            return self.end(fact_id)
        self._archive(fact, stamp, "updated")
        return (
            self.conn.execute(
                "UPDATE facts SET text = ?, norm = ?, updated_ms = ?, valid_from = ? WHERE id = ?",
                (text, fact_key(text), stamp, stamp, fact_id),
            ).rowcount
            == 1
        )

    def end(self, fact_id: int) -> bool:
        """The fact no longer holds: its text is kept as history (valid_to set), the fact goes
        from what is remembered now."""
        fact = self.get(fact_id)
        if fact is None:
            return False
        self._archive(fact, now_ms(), "ended")
        return self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,)).rowcount == 1

    def delete(self, fact_id: int) -> bool:
        """Forget a fact and every text it had."""
        self.conn.execute("DELETE FROM fact_history WHERE fact_id = ?", (fact_id,))
        return self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,)).rowcount == 1

    def delete_unpinned(self, user_id: str, character_id: str) -> int:
        """Drop the pair's model-made facts and their history (user-wide ones are not the pair's)."""
        character = fact_character("character", character_id)
        self.conn.execute(
            "DELETE FROM fact_history WHERE user_id = ? AND character_id = ? AND fact_id NOT IN "
            "(SELECT id FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 1)",
            (user_id, character, user_id, character),
        )
        return self.conn.execute(
            "DELETE FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 0", (user_id, character)
        ).rowcount

    def _archive(self, fact: Fact, stamp: int, change: FactChange) -> None:
        """Keep the fact's current text as history, held from its valid_from until `stamp`."""
        self.conn.execute(
            "INSERT INTO fact_history (fact_id, user_id, character_id, text, origin, valid_from, valid_to, change) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                fact.id,
                fact.user_id,
                fact.character_id or USER_WIDE,
                fact.text,
                fact.origin,
                fact.valid_from,
                max(stamp, fact.valid_from),
                change,
            ),
        )

    def _must(self, fact_id: int) -> Fact:
        fact = self.get(fact_id)
        if fact is None:  # pragma: no cover - read in the transaction that wrote it
            raise RuntimeError(f"fact {fact_id} vanished in its own transaction")
        return fact


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
            f"INSERT OR REPLACE INTO summaries ({SUMMARY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                summary.user_id,
                summary.character_id,
                summary.text,
                summary.watermark_id,
                summary.covered_until_ms,
                summary.message_count,
                summary.method,
                summary.model,
                summary.created_ms,
                summary.updated_ms,
                dumps(summary.meta),
            ),
        )

    def delete(self, user_id: str, character_id: str) -> int:
        return self.conn.execute(
            "DELETE FROM summaries WHERE user_id = ? AND character_id = ?", (user_id, character_id)
        ).rowcount
