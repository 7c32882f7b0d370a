"""The recall index on PostgreSQL: each spoken turn's terms in a GIN-indexed array, ranked by BM25.

Terms come from `core.terms`, as on SQLite, prefixed with the id of the message's (user,
character) pair (`12:pottery`), so a GIN posting list is one pair's and a question reads only
the asking pair's postings. BM25's statistics are the pair's own (`recall_pairs`, kept by
`catch_up` and by a trigger when docs go). Turns are indexed after they commit: a trigger
queues them in `recall_pending`, and any instance takes queued ids with SKIP LOCKED, so
several index at once without taking a turn twice. Ranking follows SQLite's exactly (the same
shortlist by matched words, then document length), so both backends answer alike.

The queue is drained by one statement whose cost follows what it takes, whatever the
planner believes of the queue's size: its rows are picked (and locked) once, in a
materialised CTE, and the statement is planned afresh each time (never prepared). The old
`DELETE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)`, once psycopg prepared it and
PostgreSQL cached a generic plan while the queue was nearly empty (a 3-row estimate), ran as
a nested-loop semi-join over every queued row against the picked ones: 7.1 s for 500 of
35,000 queued ids, and minutes for a recall's 20,000 (it grows with queued × taken). Every
transaction on the queue and index carries its own statement and lock timeouts
(`SET LOCAL`): a backend left behind by a killed instance gives up within them, and a
recall waits no longer than `WAIT_LOCK_MS` for another drain to commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import errors

from agent_memory.core.domain import Message
from agent_memory.core.recall import BM25_B, BM25_K1, TermStats, TurnHit, weighted_idfs
from agent_memory.core.terms import terms as index_terms
from agent_memory.core.terms import text_length
from agent_memory.store.postgres.common import Repository, int_array, text_array
from agent_memory.store.shared.messages import READ_COLUMNS, message_of
from agent_memory.store.shared.recall import (
    FREQUENCIES,
    FREQUENCY_CACHE_SIZE,
    FREQUENCY_TTL_S,
    MAX_POSTINGS,
    SHORTLIST_FACTOR,
    RecallReads,
)
from agent_memory.store.shared.sql import pair_scope

# Each statement of a catch-up (drain, index) gives up past this: its work is bounded (a few
# thousand rows), so only a stuck or runaway one reaches it.
QUEUE_STATEMENT_TIMEOUT_MS = 10_000
# A catch-up that finds every queued id taken by another drain waits this long for it to commit;
# then recall answers from what is indexed (and says how many turns are not).
WAIT_LOCK_MS = 1_000
# Each statement of a recall's read gives up past this (a dead client's backend too).
RECALL_STATEMENT_TIMEOUT_MS = 10_000


_SPOKEN = (
    f"SELECT {READ_COLUMNS} FROM messages WHERE agent_id = k.agent_id AND kind = 'turn' AND content != ''"
)
# Each asked message (id, session, place) with the spoken turn just before it and just after it.
_NEIGHBOURS = (
    "WITH k AS (SELECT * FROM unnest(?::bigint[], ?::text[], ?::bigint[]) AS k(of_id, agent_id, seq)) "
    f"SELECT k.of_id, -1 AS side, n.* FROM k CROSS JOIN LATERAL ({_SPOKEN} AND seq < k.seq ORDER BY seq DESC LIMIT 1) n "
    "UNION ALL "
    f"SELECT k.of_id, 1 AS side, n.* FROM k CROSS JOIN LATERAL ({_SPOKEN} AND seq > k.seq ORDER BY seq LIMIT 1) n"
)


def pair_term(pair: int, term: str) -> str:
    """A term as the index holds it: in its pair's own posting list."""
    return f"{pair}:{term}"


class PostgresRecall(Repository, RecallReads):
    """Ranked turns of a pair for a question, and the upkeep of the word index."""

    __slots__ = ()

    # indexing (any instance, in its own write transaction)

    def catch_up(self, limit: int) -> int:
        """Index up to `limit` queued messages (new or changed); returns how many were taken.

        When every queued message is being indexed by another transaction, this waits for it
        to commit (at most `WAIT_LOCK_MS`, then returns 0), so that a read afterwards sees
        what was queued before it asked. Runs in a transaction of its own: its timeouts are
        set for that transaction alone.
        """
        self._timeouts(QUEUE_STATEMENT_TIMEOUT_MS, lock_ms=QUEUE_STATEMENT_TIMEOUT_MS)
        taken = self._take(limit, wait=False)
        if not taken and self.behind():
            try:
                with self.conn.transaction():  # a savepoint: giving up leaves the transaction usable
                    self._timeouts(QUEUE_STATEMENT_TIMEOUT_MS, lock_ms=WAIT_LOCK_MS)
                    taken = self._take(limit, wait=True)
                    self._timeouts(QUEUE_STATEMENT_TIMEOUT_MS, lock_ms=QUEUE_STATEMENT_TIMEOUT_MS)
            except errors.LockNotAvailable:
                return 0  # another drain holds them: what it indexes is read once it commits
        if taken:
            self.index(taken)
        return len(taken)

    def _timeouts(self, statement_ms: int, *, lock_ms: int | None = None) -> None:
        """Bound this transaction's statements (and lock waits) from here on; never the session's."""
        # Sent with the next statement: set before it runs, and no round trip of its own.
        if lock_ms is None:
            self.sql.send("SELECT set_config('statement_timeout', ?, true)", (str(statement_ms),))
            return
        self.sql.send(
            "SELECT set_config('statement_timeout', ?, true), set_config('lock_timeout', ?, true)",
            (str(statement_ms), str(lock_ms)),
        )

    def _take(self, limit: int, *, wait: bool) -> list[int]:
        """Dequeue up to `limit` ids, oldest first: deleting them now makes a change to one of
        those messages, committed meanwhile, queue it again once this transaction ends."""
        skip = "" if wait else " SKIP LOCKED"
        # Never prepared: a plan cached while the queue was nearly empty would be kept for it when long.
        rows = self.conn.execute(
            "WITH picked AS MATERIALIZED (SELECT id FROM recall_pending ORDER BY id "
            f"LIMIT %s FOR UPDATE{skip}) DELETE FROM recall_pending p USING picked "
            "WHERE p.id = picked.id RETURNING p.id".encode(),
            (limit,),
            prepare=False,
        ).fetchall()
        return sorted(row["id"] for row in rows)

    def index(self, ids: Iterable[int]) -> int:
        """(Re)index the spoken turns among message `ids` (others lose their doc); returns how many."""
        wanted = list(ids)
        # KEY SHARE: a message being deleted (or given a new id) meanwhile is not waited for,
        # which could deadlock with its delete trigger waiting for our queue rows; it is queued
        # again and looked at after that transaction ends.
        rows = self.sql.all(
            "SELECT id, user_id, character_id, kind, content FROM messages WHERE id = ANY(?::bigint[]) "
            "ORDER BY id FOR KEY SHARE SKIP LOCKED",
            (int_array(wanted),),
        )
        found = {row["id"] for row in rows}
        if len(found) < len(wanted):
            self.sql.run(
                "INSERT INTO recall_pending (id) SELECT id FROM messages WHERE id = ANY(?::bigint[]) "
                "ON CONFLICT DO NOTHING",
                (int_array(i for i in wanted if i not in found),),
            )
        if not rows:
            return 0
        computed = [
            (row, found_terms)
            for row in rows
            if row["kind"] == "turn" and (found_terms := index_terms(row["content"] or ""))
        ]
        pairs = self._pair_ids({(row["user_id"], row["character_id"]) for row, _ in computed})
        found_ids = int_array(found)
        old_pairs = [
            row["pair"]
            for row in self.sql.all(
                "SELECT DISTINCT pair FROM recall_docs WHERE id = ANY(?::bigint[])", (found_ids,)
            )
        ]
        # Pairs' statistics are locked in one order, so two instances never wait on each other in a circle.
        self.sql.run(
            "SELECT pair FROM recall_pairs WHERE pair = ANY(?) ORDER BY pair FOR UPDATE",
            (sorted({*pairs.values(), *old_pairs}),),
        )
        self.sql.run("DELETE FROM recall_docs WHERE id = ANY(?::bigint[])", (found_ids,))
        totals: dict[int, list[int]] = {}
        with self.conn.shared_cursor().copy(b"COPY recall_docs (id, pair, length, terms) FROM STDIN") as copy:
            for row, found_terms in computed:
                pair = pairs[(row["user_id"], row["character_id"])]
                prefix = pair_term(pair, "")
                distinct = text_array(prefix + term for term in dict.fromkeys(found_terms))
                length = text_length(row["content"], found_terms)
                copy.write_row((row["id"], pair, length, distinct))
                total = totals.setdefault(pair, [0, 0])
                total[0] += 1
                total[1] += length
        if totals:
            self.sql.run(
                "UPDATE recall_pairs p SET docs = p.docs + t.docs, total_length = p.total_length + t.length "
                "FROM unnest(?::integer[], ?::integer[], ?::bigint[]) AS t(pair, docs, length) "
                "WHERE p.pair = t.pair",
                (list(totals), [t[0] for t in totals.values()], [t[1] for t in totals.values()]),
            )
        return len(computed)

    def _pair_ids(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The index id of each (user, character) pair, given one when it has none yet."""
        found = self._known_pairs(pairs)
        missing = sorted(pairs - found.keys())
        if missing:
            # Sorted, so two instances adding the same new pairs wait for each other in one order;
            # only new pairs are inserted, since each attempt takes a number from the identity.
            self.sql.run(
                "INSERT INTO recall_pairs (user_id, character_id) "
                "SELECT * FROM unnest(?::text[], ?::text[]) ON CONFLICT (user_id, character_id) DO NOTHING",
                ([user for user, _ in missing], [character for _, character in missing]),
            )
            found.update(self._known_pairs(set(missing)))
        return found

    def _known_pairs(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        if not pairs:
            return {}
        rows = self.sql.all(
            "SELECT p.pair, p.user_id, p.character_id FROM recall_pairs p "
            "JOIN unnest(?::text[], ?::text[]) AS w(user_id, character_id) "
            "ON p.user_id = w.user_id AND p.character_id = w.character_id",
            ([user for user, _ in pairs], [character for _, character in pairs]),
        )
        return {(row["user_id"], row["character_id"]): row["pair"] for row in rows}

    # reading

    def behind(self) -> bool:
        """Whether messages are queued that the index has not taken in yet."""
        return bool(self.sql.count("SELECT count(*) FROM (SELECT 1 FROM recall_pending LIMIT 1) q"))

    def lag(self, user_id: str, character_id: str | None, exclude_session: str | None = None) -> int:
        scope, params = pair_scope(user_id, character_id, "m.")
        if exclude_session is not None:
            scope, params = f"{scope} AND m.agent_id <> ?", (*params, exclude_session)
        return self.sql.count(
            "SELECT count(*) FROM recall_pending p JOIN messages m ON m.id = p.id "
            f"WHERE {scope} AND m.kind = 'turn'",
            params,
        )

    def term_stats(
        self, user_id: str, character_id: str | None, weighted: Sequence[tuple[str, float]]
    ) -> TermStats:
        """BM25's statistics over the turns in scope: each term's weighted idf, the average length.

        Recall's first statement: the rest of its read is bounded from here (SET LOCAL, this read only).
        """
        self._timeouts(RECALL_STATEMENT_TIMEOUT_MS)
        scope, params = pair_scope(user_id, character_id)
        rows = self.sql.all(
            f"SELECT pair, docs, total_length FROM recall_pairs WHERE {scope} ORDER BY pair",
            params,
        )
        pairs = [row["pair"] for row in rows]
        documents = sum(row["docs"] for row in rows)
        total_length = sum(row["total_length"] for row in rows)
        counts = self._frequencies([(pair, term) for term, _ in weighted for pair in pairs])
        frequencies = {term: sum(counts[(pair, term)] for pair in pairs) for term, _ in weighted}
        idfs = weighted_idfs(weighted, frequencies, documents, max_frequency=MAX_POSTINGS)
        return TermStats(pairs, idfs, frequencies, documents, total_length / documents if documents else 1.0)

    def _frequencies(self, keys: Sequence[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """In how many of its pair's turns each term is, counted in one query. A count is reused
        for `FREQUENCY_TTL_S` (a few seconds of new turns barely move an idf); a word not said
        yet is counted again each time, as a turn may say it any moment."""
        database, now = self.sql.database(), time.monotonic()
        found: dict[tuple[int, str], int] = {}
        for key in keys:
            cached = FREQUENCIES.get((database, *key))
            if cached is not None and cached[0] > now:
                found[key] = cached[1]
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if not missing:
            return found
        rows = self.sql.all(
            "SELECT (SELECT count(*) FROM recall_docs WHERE terms @> ARRAY[k.term]) AS docs "
            "FROM unnest(?::text[]) WITH ORDINALITY AS k(term, position) ORDER BY k.position",
            ([pair_term(pair, term) for pair, term in missing],),
        )
        if len(FREQUENCIES) + len(missing) > FREQUENCY_CACHE_SIZE:
            FREQUENCIES.clear()
        for key, row in zip(missing, rows, strict=True):
            found[key] = int(row["docs"])
            if found[key]:
                FREQUENCIES[(database, *key)] = (now + FREQUENCY_TTL_S, found[key])
        return found

    def _scores(self, pair: int, stats: TermStats, limit: int) -> dict[int, float]:
        """BM25 of the pair's turns: the best `limit`, by message id.

        A turn counts as saying a word once (BM25 with binary term frequency, as on SQLite):
        first the turns with the most (weighted) words of the question, then that shortlist
        ranked with its lengths.
        """
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

    def turns(self, stats: TermStats, limit: int) -> list[TurnHit]:
        """The best-matching turns in scope, best first."""
        scores: dict[int, float] = {}
        for pair in stats.pairs:
            scores.update(self._scores(pair, stats, limit))
        return self._hits(scores, limit)

    def neighbours(self, messages: Sequence[Message]) -> dict[int, tuple[Message | None, Message | None]]:
        """The spoken turns just before and just after each message in its session, all in one
        round trip (a recall shows a dozen memories or more: one trip each cost milliseconds)."""
        if not messages:
            return {}
        rows = self.sql.all(
            _NEIGHBOURS, ([m.id for m in messages], [m.agent_id for m in messages], [m.seq for m in messages])
        )
        found: dict[tuple[int, int], Message] = {}
        for row in rows:
            of_id, side, *message = row.values()
            found[(of_id, side)] = message_of(message)
        return {m.id: (found.get((m.id, -1)), found.get((m.id, 1))) for m in messages}


def forget_held() -> None:
    """Drop what this process holds of the recall index (document frequencies): after a forget
    none of its words stay in memory; what is still remembered is read again."""
    FREQUENCIES.clear()
