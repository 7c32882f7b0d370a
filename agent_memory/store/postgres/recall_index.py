"""The upkeep of PostgreSQL's recall index: queued turns taken and (re)indexed, by any instance.

A trigger queues new and changed turns in `recall_pending`; instances take them with SKIP LOCKED.
The queue is drained by one statement whose cost follows what it takes: its rows are picked (and
locked) once, in a materialised CTE, planned afresh each time (never prepared: a generic plan
cached while the queue was nearly empty took 7.1 s for 500 of 35,000 queued ids; bench/pg_drain.py).
Every transaction on the queue and index sets its own statement and lock timeouts: a backend left
by a killed instance gives up within them, and a recall waits at most `WAIT_LOCK_MS` for a drain.
"""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import errors

from agent_memory.core.terms import terms as index_terms
from agent_memory.core.terms import text_length
from agent_memory.store.postgres.common import Repository, int_array, text_array
from agent_memory.store.shared.recall import RecallReads

# Each statement of a catch-up (drain, index) gives up past this: its work is bounded (a few
# thousand rows), so only a stuck or runaway one reaches it.
QUEUE_STATEMENT_TIMEOUT_MS = 10_000
# A catch-up that finds every queued id taken by another drain waits this long for it to commit;
# then recall answers from what is indexed (and says how many turns are not).
WAIT_LOCK_MS = 1_000


def pair_term(pair: int, term: str) -> str:
    """A term as the index holds it: in its pair's own posting list."""
    return f"{pair}:{term}"


class RecallIndexing(Repository, RecallReads):
    """The recall index's upkeep (any instance, in its own write transaction); `PostgresRecall` reads it."""

    def catch_up(self, limit: int) -> int:
        """Index up to `limit` queued messages (new or changed), in a transaction of its own; how many.
        When another is indexing every queued one, waits for its commit (at most `WAIT_LOCK_MS`, then
        0), so that a read afterwards sees what was queued before it asked."""
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
        """Bound this transaction's statements (and lock waits) from here on, with the next statement."""
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
                "UPDATE recall_pairs p SET docs = p.docs + t.docs, total_length = p.total_length + t.length, "
                "changes = p.changes + t.docs "
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
