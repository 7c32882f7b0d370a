"""The recall index on PostgreSQL: each spoken turn's terms in a GIN-indexed array, ranked by BM25.

Terms (`core.terms`, as on SQLite) are prefixed with the id of the message's (user, character)
pair (`12:pottery`), so a GIN posting list is one pair's and a question reads only its own pair's
postings. BM25's statistics are the pair's own (`recall_pairs`). Ranking follows SQLite's exactly
(a shortlist by matched words, then document length). Indexing queued turns is recall_index.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from psycopg.rows import tuple_row

from agent_memory.core.domain import Fact, Message, Summary
from agent_memory.core.postings import Docs, PairPostings, PostingsCache
from agent_memory.core.recall import BM25_B, BM25_K1, TermStats, TurnHit
from agent_memory.store.postgres.common import Connection, Instance, dialect, int_array
from agent_memory.store.postgres.recall_index import RecallIndexing, pair_term
from agent_memory.store.shared.facts import PAIR_FACTS, PAIR_SUMMARY, USER_WIDE, fact_of, summary_of
from agent_memory.store.shared.messages import READ_COLUMNS, message_of
from agent_memory.store.shared.recall import (
    FREQUENCIES,
    SHORTLIST_FACTOR,
)
from agent_memory.store.shared.sql import pair_scope

T = TypeVar("T")
# The turns after an id, read already (a guess that missed read them).
Newer = tuple[int, Docs] | None

# A pair read into memory in the background waits this long first (`PostgresRecall._copy`).
BACKGROUND_READ_AFTER_S = 0.1
# Each statement of a recall's read gives up past this (a dead client's backend too).
RECALL_STATEMENT_TIMEOUT_MS = 10_000


_SPOKEN = (
    f"SELECT {READ_COLUMNS} FROM messages WHERE agent_id = k.agent_id AND kind = 'turn' AND content != ''"
)
# Copies of the most recently asked pairs' indexes, shared by every connection of this process.
POSTINGS = PostingsCache()
# The pairs' figures a recall reads, and which database this is (for the copies' keys).
_PAIRS = (
    "SELECT pair, docs, total_length, changes, user_id, character_id, "
    "(SELECT value FROM store_state WHERE name = 'database_id') AS database_id FROM recall_pairs"
)

# The figures of the pairs recalled in this process, by (database address, user, character): the
# pair's next recall guesses they still hold (`PostgresRecall._guess`). Ids and counts only.
FIGURES: dict[tuple[str, str, str], dict[str, Any]] = {}
FIGURES_SIZE = 10_000


class Guessed(Exception):
    """A pair's figures moved since this process last read them: the read is made again."""


class IndexBehind(Exception):
    """Turns wait to be indexed: a read made only when none do stops before it uses what it read."""


# A pair's indexed turns (its change count in the same statement, so that both match).
_DOCS = (
    "SELECT (SELECT changes FROM recall_pairs WHERE pair = %s), id, length, "
    "array_to_string(terms, ' ') FROM recall_docs"
)
# Those after a turn: what a copy held lacks when only turns were added since. A range of the
# (pair, id) index: the planner, which takes ids past its statistics' last for few, read the
# newer turns of every pair by id otherwise (1 ms for a pair of 5,000 turns, none of them new).
_NEWER = f"{_DOCS} WHERE (pair, id) > (%s, %s) AND (pair, id) <= (%s, 9223372036854775807) ORDER BY pair, id"


def _docs(rows: Sequence[Sequence[Any]], pair: int) -> Docs:
    """Turns read (`_DOCS`' columns) as a copy takes them in: their terms without the pair's prefix."""
    now = rows[0][0] if rows else None
    # `12:a 12:b`, and no term holds a space: one split in C by the separator leaves each term bare.
    prefix = pair_term(pair, "")
    skip, between = len(prefix), f" {prefix}"
    return now, [(doc, length, terms[skip:].split(between)) for _, doc, length, terms in rows]


# Whether any message waits to be indexed.
_BEHIND = "SELECT count(*) FROM (SELECT 1 FROM recall_pending LIMIT 1) q"

# The messages asked by id (side 0), and the spoken turns just before (-1) and after (1) each, in
# one statement that reads the messages once: a recall shows most of the turns it ranked first,
# with their neighbours.
_WITH_NEIGHBOURS = (
    f"WITH k AS MATERIALIZED (SELECT {READ_COLUMNS} FROM messages WHERE id = ANY(?::bigint[])) "
    "SELECT k.id AS of_id, 0 AS side, k.* FROM k UNION ALL "
    f"SELECT k.id, -1, n.* FROM k CROSS JOIN LATERAL ({_SPOKEN} AND seq < k.seq ORDER BY seq DESC LIMIT 1) n "
    "UNION ALL "
    f"SELECT k.id, 1, n.* FROM k CROSS JOIN LATERAL ({_SPOKEN} AND seq > k.seq ORDER BY seq LIMIT 1) n"
)


class PostgresRecall(RecallIndexing):
    """Ranked turns of a pair for a question, and the upkeep of the word index."""

    postings = POSTINGS

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(conn, instance)
        # Read with the pair's figures (`term_stats`), for `facts` and `summaries` of that pair.
        self._facts: tuple[tuple[str, str], list[Fact]] | None = None
        self._summary: tuple[tuple[str, str], list[Summary]] | None = None
        # The turns around the messages `_hits` read, by message id and side (-1, 1).
        self._around: dict[int, dict[int, Message]] = {}
        # Whether `behind` is asked after this read (`read_if_caught_up`), and its answer, read
        # with the pair's figures in this read's snapshot (`term_stats`).
        self._ask_behind = False
        self._behind: bool | None = None
        # Whether `term_stats` may guess a held pair's figures, and what it left to send and check.
        self._may_guess = False
        self._pending: tuple[tuple[str, str], dict[str, Any], tuple[bytes, ...], bytes, int] | None = None
        # What the check of a guess that missed read (the pair, its figures, the turns after the
        # copy's last): the read made again takes them, in the same snapshot.
        self._checked: tuple[tuple[str, str], list[Any], tuple[int, Docs]] | None = None
        # The pair's figures as this read read them (a second `term_stats` of it reads none).
        self._read: tuple[tuple[str, str], list[Any]] | None = None

    # reading

    def behind(self) -> bool:
        self._settle()
        if self._behind is not None:  # read with the figures, in this read's snapshot
            return self._behind
        return bool(self.sql.count(_BEHIND))

    def read_if_caught_up(self, read: Callable[[], T]) -> tuple[T] | None:
        """Whether the index is behind asked with the pair's figures (a round trip less; one snapshot,
        so the same answer as asking first): `read()` stops there if it is."""
        self._ask_behind = bool(self.conn.read_only)  # a write's statements see other snapshots
        # A pair held in memory is ranked with the figures it was last read at, checked with
        # its turns' read (one round trip for both); if they moved, the read is made again.
        for guessing in (self._ask_behind, False):
            self._may_guess = guessing
            try:
                answer = read()
                self._settle()  # a guess never checked yet is checked now
            except Guessed:
                continue
            except IndexBehind:
                return None
            finally:
                self._may_guess = False
            self._checked = None
            return None if self.behind() else (answer,)
        raise AssertionError("a read that guessed nothing found its guess wrong")

    def lag(self, user_id: str, character_id: str | None, exclude_session: str | None = None) -> int:
        self._settle()
        scope, params = pair_scope(user_id, character_id, "m.")
        if exclude_session is not None:
            scope, params = f"{scope} AND m.agent_id <> ?", (*params, exclude_session)
        return self.sql.count(
            "SELECT count(*) FROM recall_pending p JOIN messages m ON m.id = p.id "
            f"WHERE {scope} AND m.kind = 'turn'",
            params,
        )

    def term_stats(
        self,
        user_id: str,
        character_id: str | None,
        weighted: Sequence[tuple[str, float]],
        *,
        idfs: bool = True,
    ) -> TermStats:
        # Recall's first statement: the rest of its read is bounded from here (this read only).
        self._timeouts(RECALL_STATEMENT_TIMEOUT_MS)
        rows, guessed, read_newer = self._pairs(user_id, character_id)
        self._owners = {(row["user_id"], row["character_id"]) for row in rows}
        pairs = [row["pair"] for row in rows]
        documents = sum(row["docs"] for row in rows)
        total_length = sum(row["total_length"] for row in rows)
        self._copies = guessed or {
            row["pair"]: copy
            for row in rows
            if row["docs"] and (copy := self._copy(*self._figures(row), read_newer=read_newer))
        }
        return self._stats(weighted, pairs, documents, total_length, idfs=idfs)

    def _pairs(
        self, user_id: str, character_id: str | None
    ) -> tuple[Sequence[Mapping[str, Any]], dict[int, PairPostings], tuple[int, Docs] | None]:
        """The scope's pairs' figures: read (a pair's with its facts and summary, in one trip), as
        this read already read them, or guessed (sent later, with the ranked turns: `_settle`);
        the copies held at a guess, and the turns a guess that missed read after its copy's last."""
        scope, params = pair_scope(user_id, character_id)
        if character_id is None:
            return self.sql.all(f"{_PAIRS} WHERE {scope} ORDER BY pair", params), {}, None
        # The pair's facts and summary, which recall reads next, in the same round trip (and
        # whether the index is behind, when that is asked after this read).
        bind = self.conn.bind
        behind = (dialect(_BEHIND),) if self._ask_behind and self._behind is None else ()
        statements = (
            bind(dialect(f"{_PAIRS} WHERE {scope} ORDER BY pair"), params),
            bind(dialect(PAIR_FACTS), (user_id, character_id, USER_WIDE)),
            bind(dialect(PAIR_SUMMARY), (user_id, character_id)),
            *behind,
        )
        checked, self._checked = self._checked, None
        read = self._read if self._read is not None and self._read[0] == (user_id, character_id) else None
        guess = self._guess(user_id, character_id) if self._may_guess and read is None else None
        if checked is not None and checked[0] == (user_id, character_id):
            return checked[1], {}, checked[2]  # read with the guess that missed
        elif read is not None:
            return read[1], {}, None  # asked again in this read (more words): its snapshot's figures
        elif guess is not None:
            # Sent with the ranked turns (`_hits`) and checked there against the guess, with
            # the turns after the copy's last (what it lacks if turns were only added since).
            figures, held = guess
            pair = figures["pair"]
            newer = bind(_NEWER.encode(), (pair, pair, held.last_id, pair))
            self._pending = ((user_id, character_id), figures, statements, newer, held.last_id)
            return [figures], {pair: held}, None
        return self._took((user_id, character_id), self.conn.results(*statements)), {}, None

    def _guess(self, user_id: str, character_id: str) -> tuple[dict[str, Any], PairPostings] | None:
        """The pair's figures as this process last read them, and its copy held at their change
        count: a recall ranks with them before reading anything, and checks them with its turns."""
        figures = FIGURES.get((self.sql.database(), user_id, character_id))
        if figures is None or not figures["docs"]:
            return None
        copy = POSTINGS.held_at((self._key(figures["database_id"]), figures["pair"]), figures["changes"])
        return (figures, copy) if copy is not None else None

    def _took(self, pair: tuple[str, str], found: list[list[Any]]) -> list[Any]:
        """The pair's figures, facts, summary (and whether the index is behind) as read: kept
        for this read, and the figures for the pair's next recall to guess with."""
        rows, facts, summary, *flags = found
        self._read = (pair, rows)
        if flags:
            self._behind = bool(flags[0][0]["count"])
            if self._behind:
                raise IndexBehind("turns wait to be indexed")
        self._facts = (pair, [fact_of(row) for row in facts])
        self._summary = (pair, [summary_of(row) for row in summary])
        key = (self.sql.database(), *pair)
        if len(rows) == 1:
            if len(FIGURES) >= FIGURES_SIZE and key not in FIGURES:
                FIGURES.clear()
            FIGURES[key] = rows[0]
        else:
            FIGURES.pop(key, None)
        return rows

    def _settle(self, *more: bytes) -> list[list[Any]]:
        """Send the statements a guess left for later (`term_stats`) with `more`, and check the
        guess: raises `Guessed` when the pair's figures had moved (the read is made again,
        reading them first); `more`'s rows, as tuples."""
        pending, self._pending = self._pending, None
        if pending is None:
            return self.conn.results(*more, plain=len(more)) if more else []
        pair, guess, statements, newer, last_id = pending
        found = self.conn.results(*statements, newer, *more, plain=1 + len(more))
        rows = self._took(pair, found[: len(statements)])
        if [dict(row) for row in rows] != [guess]:
            turns = _docs(found[len(statements)], guess["pair"])
            self._checked = (pair, rows, (last_id, turns))
            raise Guessed(f"pair {guess['pair']}'s index changed since this process last read it")
        return found[len(statements) + 1 :]

    def _key(self, database_id: int | None) -> str:
        """Which database this is, as the copies' keys say it: its address and its own id."""
        return f"{self.sql.database()}#{database_id or 0}"

    def _figures(self, row: Mapping[str, Any]) -> tuple[tuple[str, int], int, int]:
        """A pair's copy key, indexed turns and change count, from a row of `_PAIRS`."""
        return (self._key(row["database_id"]), row["pair"]), row["docs"], row["changes"]

    def _pair_figures(self, user_id: str, character_id: str) -> list[tuple[tuple[str, int], int, int]]:
        rows = self.sql.all(
            f"{_PAIRS} WHERE user_id = ? AND character_id = ? AND docs > 0", (user_id, character_id)
        )
        return [self._figures(row) for row in rows]

    def _copy(
        self,
        key: tuple[str, int],
        docs: int,
        changes: int,
        *,
        at_once: bool = False,
        read_newer: Newer = None,
    ) -> PairPostings | None:
        """As `RecallReads._copy` (`read_newer`: the turns after an id, read already). Its change
        count is read in the same statement as its turns: another instance's write is in both or neither."""
        pair = key[1]
        whole = f"{_DOCS} WHERE pair = %s ORDER BY id"

        def read(conn: Connection, sql: str, *args: object) -> Docs:
            with conn.cursor(row_factory=tuple_row) as cursor:
                rows = cursor.execute(sql.encode(), (pair, pair, *args)).fetchall()
            return _docs(rows, pair)

        def read_alone() -> Docs:
            # In the background, in a read of its own (a connection serves one thread at a time),
            # once the question that asked for it is answered: turning thousands of rows into
            # posting lists is tens of milliseconds of Python, which would hold that answer up.
            time.sleep(BACKGROUND_READ_AFTER_S)
            found: Docs = self.instance.read_alone(lambda view: read(view.conn, whole))
            return found

        return POSTINGS.current(
            key,
            changes,
            docs,
            newer=lambda last_id: (
                read_newer[1]
                if read_newer is not None and read_newer[0] == last_id
                else read(self.conn, _NEWER, last_id, pair)
            ),
            whole=lambda: read(self.conn, whole),
            whole_later=read_alone,
            at_once=at_once,
        )

    def drop_gone(self) -> int:
        """Drop the copies held of this database's pairs that are gone from it (forgotten by any
        instance), with their document frequencies; returns how many copies were dropped."""
        address = f"{self.sql.database()}#"
        held = [key for key in POSTINGS.held_keys() if key[0].startswith(address)]
        if not held:
            return 0
        row = self.sql.one(
            "SELECT (SELECT value FROM store_state WHERE name = 'database_id') AS database_id, "
            "array(SELECT pair FROM recall_pairs WHERE pair = ANY(?)) AS found",
            ([pair for _, pair in held],),
        )
        assert row is not None
        current, found = self._key(row["database_id"]), set(row["found"])
        gone = [key for key in held if key[0] != current or key[1] not in found]
        if gone:
            POSTINGS.drop(gone)
            pairs = {pair for _, pair in gone}
            database = self.sql.database()
            for key in [key for key in FREQUENCIES if key[0] == database and key[1] in pairs]:
                FREQUENCIES.pop(key, None)
            for figures_key in [
                key for key, row in list(FIGURES.items()) if key[0] == database and row["pair"] in pairs
            ]:
                FIGURES.pop(figures_key, None)
        return len(gone)

    def _count(self, keys: Sequence[tuple[int, str]]) -> list[int]:
        # All in one query (a round trip each would cost more than the counting).
        rows = self.sql.all(
            "SELECT (SELECT count(*) FROM recall_docs WHERE terms @> ARRAY[k.term]) AS docs "
            "FROM unnest(?::text[]) WITH ORDINALITY AS k(term, position) ORDER BY k.position",
            ([pair_term(pair, term) for pair, term in keys],),
        )
        return [int(row["docs"]) for row in rows]

    def _scores(self, pair: int, stats: TermStats, limit: int) -> dict[int, float]:
        """BM25 of the pair's turns, the best `limit` by message id: binary term frequency, as on SQLite
        (a shortlist of the turns with the most weighted words of the question, ranked with their lengths)."""
        present = [(term, weight) for term, weight in stats.idfs.items() if stats.frequencies[term]]
        if not present:
            return {}
        matched = " + ".join("CASE WHEN terms @> ARRAY[?::text] THEN ?::float8 ELSE 0 END" for _ in present)
        params: list[Any] = [value for term, weight in present for value in (pair_term(pair, term), weight)]
        shortlist = self.sql.all(
            f"SELECT id, length, {matched} AS matched FROM recall_docs WHERE terms && ?::text[] "
            "ORDER BY matched DESC, id DESC LIMIT ?",
            (*params, [pair_term(pair, term) for term, _ in present], limit * SHORTLIST_FACTOR),
        )
        average = stats.average_length
        scores = {
            row["id"]: row["matched"]
            * (BM25_K1 + 1)
            / (1 + BM25_K1 * (1 - BM25_B + BM25_B * row["length"] / average))
            for row in shortlist
        }
        return dict(sorted(scores.items(), key=lambda item: -item[1])[:limit])

    def facts(self, user_id: str, character_id: str | None) -> list[Fact]:
        self._settle()
        # What `term_stats` read with the figures, once: a later ask reads again.
        read, self._facts = self._facts, None
        return (
            read[1] if read and read[0] == (user_id, character_id) else super().facts(user_id, character_id)
        )

    def summaries(self, user_id: str, character_id: str | None) -> list[Summary]:
        self._settle()
        read, self._summary = self._summary, None
        return (
            read[1]
            if read and read[0] == (user_id, character_id)
            else super().summaries(user_id, character_id)
        )

    def _hits(self, scores: dict[int, float], limit: int) -> list[TurnHit]:
        """As `RecallReads._hits`, the turns around each read with them, in one round trip."""
        best = sorted(scores, key=lambda doc: (-scores[doc], -doc))[:limit]
        if not best:
            self._settle()
            return []
        messages, self._around = self._with_neighbours(best)
        return [TurnHit(messages[i], scores[i]) for i in best if i in messages and self._owns(messages[i])]

    def _with_neighbours(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, Message], dict[int, dict[int, Message]]]:
        """The messages `ids` by id, and the turns around each by side (-1, 1), in one round trip."""
        (found,) = self._settle(self.conn.bind(dialect(_WITH_NEIGHBOURS), (int_array(ids),)))
        messages: dict[int, Message] = {}
        around: dict[int, dict[int, Message]] = {i: {} for i in ids}
        for of_id, side, *columns in found:  # tuples (`_settle`)
            if side:
                around[of_id][side] = message_of(columns)
            else:
                messages[of_id] = message_of(columns)
        return messages, around

    def neighbours(self, messages: Sequence[Message]) -> dict[int, tuple[Message | None, Message | None]]:
        """As `RecallReads.neighbours`, in one round trip (a dozen memories or more: a trip each cost ms)."""
        if not messages:
            return {}
        self._settle()
        held = self._around  # read with the ranked turns (`_hits`)
        if not all(m.id in held for m in messages):
            held = self._with_neighbours([m.id for m in messages])[1]
        return {m.id: (held[m.id].get(-1), held[m.id].get(1)) for m in messages}


def forget_held() -> None:
    """Drop what this process holds of the recall index (copies of pairs, document frequencies):
    after a forget none of its words stay in memory; what is still remembered is read again.
    Another instance drops its copies of the forgotten pairs within `HELD_CHECK_S` (engine.py)."""
    POSTINGS.clear()
    FREQUENCIES.clear()
    FIGURES.clear()
