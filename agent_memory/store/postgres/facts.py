"""Facts and summaries: what condensing (and the API) keep of a (user, character) memory.

Facts are unique per (user, character column, key), the key being core.facts' one form of
"says the same thing", computed here so that no caller can store another. A user-wide fact
has the empty character (`store.shared.facts` says how).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import errors

from agent_memory.core.domain import Fact, FactChange, FactOrigin, FactScope, FactVersion, Summary
from agent_memory.core.facts import fact_key
from agent_memory.errors import Conflict
from agent_memory.store.postgres.common import Repository, dumps, loads_object, now_ms
from agent_memory.store.shared.facts import HISTORY_COLUMNS, USER_WIDE, fact_character, place_fact

__all__ = ["FACT_COLUMNS", "SUMMARY_COLUMNS", "PostgresFacts", "PostgresSummaries", "fact_of", "summary_of"]

FACT_COLUMNS = "id, user_id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from"
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
        row["id"],
        row["user_id"],
        None if character == USER_WIDE else character,
        row["text"],
        bool(row["pinned"]),
        row["origin"],
        row["created_ms"],
        row["updated_ms"],
        row["valid_from"] or row["created_ms"] or 0,
    )


def summary_of(row: Mapping[str, Any]) -> Summary:
    """A `SUMMARY_COLUMNS` row (by name) as a summary."""
    return Summary(
        row["user_id"],
        row["character_id"],
        row["text"],
        row["watermark_id"],
        row["covered_until_ms"],
        row["message_count"] or 0,
        row["method"],
        row["model"],
        row["created_ms"],
        row["updated_ms"],
        loads_object(row["meta"]),
    )


class PostgresFacts(Repository):
    """The `facts` table (current facts, unique per (user, character column, key)) and
    `fact_history` (the texts they had before, and facts that ended)."""

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

    def history(self, fact_id: int) -> list[FactVersion]:
        """Every text the fact had, oldest first, its current one last; [] for no such fact."""
        rows = self._all(
            f"SELECT {HISTORY_COLUMNS} FROM fact_history WHERE fact_id = %s ORDER BY valid_from, id",
            (fact_id,),
        )
        past = [
            FactVersion(
                row["fact_id"], row["text"], row["origin"], row["valid_from"], row["valid_to"], row["change"]
            )
            for row in rows
        ]
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
        subject (`store.shared.facts.place_fact`); returns (fact, created).

        Another instance adding the same fact at once is waited for (the unique key), and
        its fact is the one returned.
        """
        character = fact_character(scope, character_id)
        key = (user_id, character, fact_key(text))
        for _ in range(_ADD_ATTEMPTS):
            stamp = now_ms()
            placement, held = place_fact(text, scope, pinned, self.of_pair(user_id, character_id))
            if placement == "same" and held is not None:
                if pinned and not held.pinned:
                    # Saying by hand what the model already knew makes it pinned.
                    self.conn.execute(
                        b"UPDATE facts SET pinned = 1, updated_ms = %s WHERE id = %s", (stamp, held.id)
                    )
                fact = self.get(held.id)
                if fact is not None:
                    return fact, False
                continue
            if placement == "supersede" and held is not None:
                try:
                    with self.conn.transaction():  # a savepoint: a concurrent equal fact undoes only this
                        self._archive(held, stamp, "superseded")
                        row = self._one(
                            "UPDATE facts SET text = %s, norm = %s, pinned = greatest(pinned, %s), origin = %s, "
                            f"updated_ms = %s, valid_from = %s WHERE id = %s RETURNING {FACT_COLUMNS}",
                            (text, key[2], int(pinned), origin, stamp, stamp, held.id),
                        )
                except errors.UniqueViolation:
                    continue
                if row is not None:
                    return fact_of(row), True
                continue
            row = self._one(
                "INSERT INTO facts (user_id, character_id, text, norm, pinned, origin, created_ms, updated_ms, "
                "valid_from) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                f"ON CONFLICT (user_id, character_id, norm) DO NOTHING RETURNING {FACT_COLUMNS}",
                (user_id, character, text, key[2], int(pinned), origin, stamp, stamp, stamp),
            )
            if row is not None:
                return fact_of(row), True
            if pinned:
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

    def edit(self, fact_id: int, *, text: str | None = None, pinned: bool | None = None) -> Fact | None:
        """Change a fact by hand (its old text kept as history); None if there is no such fact.

        Conflict when the new text says what another of the fact's scope already says.
        """
        row = self._one(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = %s FOR UPDATE", (fact_id,))
        if row is None:
            return None
        fact = fact_of(row)
        stamp = now_ms()
        if text is not None and text != fact.text:
            other = self._one(
                "SELECT id FROM facts WHERE user_id = %s AND character_id = %s AND norm = %s AND id != %s",
                (fact.user_id, fact.character_id or USER_WIDE, fact_key(text), fact_id),
            )
            if other is not None:
                raise Conflict(f"fact {other['id']} already says this; edit or delete that one instead")
            try:
                with self.conn.transaction():  # a savepoint: an equal fact added meanwhile undoes only this
                    self._archive(fact, stamp, "edited")
                    self.conn.execute(
                        b"UPDATE facts SET text = %s, norm = %s, origin = 'manual', updated_ms = %s, "
                        b"valid_from = %s WHERE id = %s",
                        (text, fact_key(text), stamp, stamp, fact_id),
                    )
            except errors.UniqueViolation:
                raise Conflict(
                    "another fact saying this was added meanwhile; edit or delete that one"
                ) from None
        if pinned is not None and pinned != fact.pinned:
            self.conn.execute(
                b"UPDATE facts SET pinned = %s, updated_ms = %s WHERE id = %s", (int(pinned), stamp, fact_id)
            )
        return self.get(fact_id)

    def update(self, fact_id: int, text: str) -> bool:
        """Reword a fact (its old text kept as history); when it then says what another one
        says, it ends instead."""
        row = self._one(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = %s FOR UPDATE", (fact_id,))
        if row is None:
            return False
        fact = fact_of(row)
        stamp = now_ms()
        try:
            with self.conn.transaction():  # a savepoint: the conflict undoes only the update
                self._archive(fact, stamp, "updated")
                cursor = self.conn.execute(
                    b"UPDATE facts SET text = %s, norm = %s, updated_ms = %s, valid_from = %s WHERE id = %s",
                    (text, fact_key(text), stamp, stamp, fact_id),
                )
        except errors.UniqueViolation:
            return self.end(fact_id)
        return cursor.rowcount == 1

    def end(self, fact_id: int) -> bool:
        """The fact no longer holds: its text is kept as history (valid_to set), the fact goes
        from what is remembered now."""
        row = self._one(f"DELETE FROM facts WHERE id = %s RETURNING {FACT_COLUMNS}", (fact_id,))
        if row is None:
            return False
        self._archive(fact_of(row), now_ms(), "ended")
        return True

    def delete(self, fact_id: int) -> bool:
        """Forget a fact and every text it had."""
        self.conn.execute(b"DELETE FROM fact_history WHERE fact_id = %s", (fact_id,))
        return self.conn.execute(b"DELETE FROM facts WHERE id = %s", (fact_id,)).rowcount == 1

    def delete_unpinned(self, user_id: str, character_id: str) -> int:
        """Drop the pair's model-made facts and their history (user-wide ones are not the pair's)."""
        character = fact_character("character", character_id)
        self.conn.execute(
            b"DELETE FROM fact_history WHERE user_id = %s AND character_id = %s AND fact_id NOT IN "
            b"(SELECT id FROM facts WHERE user_id = %s AND character_id = %s AND pinned = 1)",
            (user_id, character, user_id, character),
        )
        return self.conn.execute(
            b"DELETE FROM facts WHERE user_id = %s AND character_id = %s AND pinned = 0",
            (user_id, character),
        ).rowcount

    def _archive(self, fact: Fact, stamp: int, change: FactChange) -> None:
        """Keep the fact's current text as history, held from its valid_from until `stamp`."""
        self.conn.execute(
            b"INSERT INTO fact_history (fact_id, user_id, character_id, text, origin, valid_from, valid_to, change) "
            b"VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
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
            b"DELETE FROM summaries WHERE user_id = %s AND character_id = %s", (user_id, character_id)
        ).rowcount
