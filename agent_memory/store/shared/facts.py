"""Facts and summaries: what condensing (and the API) keep of a (user, character) memory.

Facts are unique per (user, character column, `core.facts.fact_key`), the key computed here so
that no caller can store another; a user-wide fact has the empty character, known only here
(`USER_WIDE`, `fact_scope`, `fact_character`). A new fact goes where `place_fact` says."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Fact, FactChange, FactOrigin, FactScope, FactVersion, Summary
from agent_memory.core.facts import fact_key, place_fact
from agent_memory.core.jsonutil import dumps, loads_object
from agent_memory.errors import Conflict
from agent_memory.store.shared.sql import Duplicate, Repository, Row, values_of

# The character column of a user-wide fact.
USER_WIDE = ""


def fact_scope(character_column: str) -> FactScope:
    """The scope of a stored fact, from its character column."""
    return "user" if character_column == USER_WIDE else "character"


def fact_character(scope: FactScope, character_id: str) -> str:
    """The character column of a fact of `scope` said with `character_id`."""
    if scope == "user":
        return USER_WIDE
    if character_id == USER_WIDE:
        raise ValueError("a fact about one character needs that character")
    return character_id


# Columns of a fact's past texts (`fact_history`), in the order both backends read them.
HISTORY_COLUMNS = "fact_id, text, origin, valid_from, valid_to, change"
FACT_COLUMNS = "id, user_id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from"
SUMMARY_COLUMNS = (
    "user_id, character_id, text, watermark_id, covered_until_ms, message_count, method, model, "
    "created_ms, updated_ms, meta"
)
_SUMMARY_MARKS = ", ".join("?" * len(SUMMARY_COLUMNS.split(", ")))
# A replaced summary takes every column of the new one.
_SUMMARY_REPLACE = ", ".join(f"{column} = excluded.{column}" for column in SUMMARY_COLUMNS.split(", ")[2:])
# A fact found gone between its conflicting insert and the read is looked for again.
_ADD_ATTEMPTS = 3


def fact_of(row: Row) -> Fact:
    """A `FACT_COLUMNS` row (read by name) as a fact."""
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


def summary_of(row: Row) -> Summary:
    """A `SUMMARY_COLUMNS` row (read by name) as a summary."""
    return Summary(**{**row, "message_count": row["message_count"] or 0, "meta": loads_object(row["meta"])})


class Facts(Repository):
    """The `facts` table (what is remembered now) and `fact_history` (past texts, ended facts). A
    write that another instance's equal fact refuses (the unique key) is undone alone, in a savepoint:
    one SQLite process never meets one."""

    # The id a new fact takes (a backend that would hand out an ended fact's id again says another).
    new_id = "DEFAULT"

    def of_pair(self, user_id: str, character_id: str) -> list[Fact]:
        """The pair's facts and the user's user-wide facts, oldest first."""
        return [fact_of(row) for row in self.sql.all(PAIR_FACTS, (user_id, character_id, USER_WIDE))]

    def get(self, fact_id: int) -> Fact | None:
        return self._read(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,))

    def _read(self, sql: str, params: Sequence[object]) -> Fact | None:
        row = self.sql.one(sql, params)
        return fact_of(row) if row is not None else None

    def history(self, fact_id: int) -> list[FactVersion]:
        """Every text the fact had, oldest first, its current one last; [] for no such fact."""
        past = self.sql.records(
            FactVersion,
            f"SELECT {HISTORY_COLUMNS} FROM fact_history WHERE fact_id = ? ORDER BY valid_from, id",
            (fact_id,),
        )
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
        """Insert a fact unless one says the same (saying it pinned pins it), superseding the one
        about the same subject (`place_fact`: its id, the old text kept); (fact, created). Another
        instance adding the same fact at once is waited for (the unique key), and its fact returned."""
        character = fact_character(scope, character_id)
        key = (user_id, character, fact_key(text))
        for _ in range(_ADD_ATTEMPTS):
            stamp = now_ms()
            placement, held = place_fact(text, scope, pinned, self.of_pair(user_id, character_id))
            if placement == "same" and held is not None:
                if pinned and not held.pinned:
                    # Saying by hand what the model already knew makes it pinned.
                    self.sql.run("UPDATE facts SET pinned = 1, updated_ms = ? WHERE id = ?", (stamp, held.id))
                fact = self.get(held.id)
                if fact is not None:
                    return fact, False
                continue
            if placement == "supersede" and held is not None:
                try:
                    with self.sql.savepoint():
                        self._archive(held, stamp, "superseded")
                        fact = self._read(
                            f"UPDATE facts SET text = ?, norm = ?, pinned = {self.sql.greatest}(pinned, ?), "
                            f"origin = ?, updated_ms = ?, valid_from = ? WHERE id = ? RETURNING {FACT_COLUMNS}",
                            (text, key[2], int(pinned), origin, stamp, stamp, held.id),
                        )
                except Duplicate:
                    continue
                if fact is not None:
                    return fact, True
                continue
            fact = self._read(
                "INSERT INTO facts (id, user_id, character_id, text, norm, pinned, origin, created_ms, "
                f"updated_ms, valid_from) VALUES ({self.new_id}, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                f"ON CONFLICT (user_id, character_id, norm) DO NOTHING RETURNING {FACT_COLUMNS}",
                (user_id, character, text, key[2], int(pinned), origin, stamp, stamp, stamp),
            )
            if fact is not None:
                return fact, True
            if pinned:
                fact = self._read(
                    "UPDATE facts SET pinned = 1, updated_ms = ? "
                    f"WHERE user_id = ? AND character_id = ? AND norm = ? RETURNING {FACT_COLUMNS}",
                    (stamp, *key),
                )
            else:
                fact = self._read(
                    f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND character_id = ? AND norm = ?",
                    key,
                )
            if fact is not None:
                return fact, False
        raise RuntimeError(f"fact {key} kept vanishing while it was added")

    def edit(self, fact_id: int, *, text: str | None = None, pinned: bool | None = None) -> Fact | None:
        """Change a fact by hand (its old text kept); None if none, Conflict if another says it."""
        fact = self._read(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?{self.sql.for_update}", (fact_id,))
        if fact is None:
            return None
        stamp = now_ms()
        if text is not None and text != fact.text:
            other = self.sql.one(
                "SELECT id FROM facts WHERE user_id = ? AND character_id = ? AND norm = ? AND id != ?",
                (fact.user_id, fact.character_id or USER_WIDE, fact_key(text), fact_id),
            )
            if other is not None:
                raise Conflict(f"fact {other['id']} already says this; edit or delete that one instead")
            try:
                with self.sql.savepoint():
                    self._archive(fact, stamp, "edited")
                    self.sql.run(
                        "UPDATE facts SET text = ?, norm = ?, origin = 'manual', updated_ms = ?, "
                        "valid_from = ? WHERE id = ?",
                        (text, fact_key(text), stamp, stamp, fact_id),
                    )
            except Duplicate:
                raise Conflict(
                    "another fact saying this was added meanwhile; edit or delete that one"
                ) from None
        if pinned is not None and pinned != fact.pinned:
            self.sql.run(
                "UPDATE facts SET pinned = ?, updated_ms = ? WHERE id = ?", (int(pinned), stamp, fact_id)
            )
        return self.get(fact_id)

    def update(self, fact_id: int, text: str) -> bool:
        """Reword a fact (its old text kept); when another one says the same, it ends instead."""
        fact = self._read(f"SELECT {FACT_COLUMNS} FROM facts WHERE id = ?{self.sql.for_update}", (fact_id,))
        if fact is None:
            return False
        stamp = now_ms()
        try:
            with self.sql.savepoint():
                self._archive(fact, stamp, "updated")
                changed = self.sql.run(
                    "UPDATE facts SET text = ?, norm = ?, updated_ms = ?, valid_from = ? WHERE id = ?",
                    (text, fact_key(text), stamp, stamp, fact_id),
                )
        except Duplicate:
            return self.end(fact_id)
        return changed == 1

    def end(self, fact_id: int) -> bool:
        """The fact no longer holds: it leaves `facts`, its text kept as history (valid_to set)."""
        fact = self._read(f"DELETE FROM facts WHERE id = ? RETURNING {FACT_COLUMNS}", (fact_id,))
        if fact is None:
            return False
        self._archive(fact, now_ms(), "ended")
        return True

    def delete(self, fact_id: int) -> bool:
        """Forget a fact and every text it had."""
        self.sql.run("DELETE FROM fact_history WHERE fact_id = ?", (fact_id,))
        return self.sql.run("DELETE FROM facts WHERE id = ?", (fact_id,)) == 1

    def delete_unpinned(self, user_id: str, character_id: str) -> int:
        """Drop the pair's model-made facts and their history (user-wide ones are not the pair's)."""
        character = fact_character("character", character_id)
        self.sql.run(
            "DELETE FROM fact_history WHERE user_id = ? AND character_id = ? AND fact_id NOT IN "
            "(SELECT id FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 1)",
            (user_id, character, user_id, character),
        )
        return self.sql.run(
            "DELETE FROM facts WHERE user_id = ? AND character_id = ? AND pinned = 0", (user_id, character)
        )

    def _archive(self, fact: Fact, stamp: int, change: FactChange) -> None:
        """Keep the fact's current text as history, held from its valid_from until `stamp`."""
        held = (fact.valid_from, max(stamp, fact.valid_from), change)
        self.sql.run(
            "INSERT INTO fact_history (fact_id, user_id, character_id, text, origin, valid_from, valid_to, change) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (fact.id, fact.user_id, fact.character_id or USER_WIDE, fact.text, fact.origin, *held),
        )


# A pair's summary (user, character), and its facts with the user's user-wide ones (user,
# character, USER_WIDE): PostgreSQL's recall reads them in one round trip with its figures.
PAIR_SUMMARY = f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = ? AND character_id = ?"
PAIR_FACTS = (
    f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? AND character_id IN (?, ?) ORDER BY created_ms, id"
)


class Summaries(Repository):
    """The `summaries` table: one per pair."""

    def get(self, user_id: str, character_id: str) -> Summary | None:
        row = self.sql.one(PAIR_SUMMARY, (user_id, character_id))
        return summary_of(row) if row is not None else None

    def put(self, summary: Summary) -> None:
        """Store the pair's summary, replacing the one it had."""
        self.sql.run(
            f"INSERT INTO summaries ({SUMMARY_COLUMNS}) VALUES ({_SUMMARY_MARKS}) "
            f"ON CONFLICT (user_id, character_id) DO UPDATE SET {_SUMMARY_REPLACE}",
            (*values_of(summary)[:-1], dumps(summary.meta)),  # the columns are in `Summary`'s order
        )

    def delete(self, user_id: str, character_id: str) -> int:
        return self.sql.run(
            "DELETE FROM summaries WHERE user_id = ? AND character_id = ?", (user_id, character_id)
        )
