"""The recall index: stemmed words and CJK bigrams of every spoken turn, ranked by BM25.

Each indexed term is prefixed with the id of the message's (user, character) pair
(`12_pottery`), so FTS5 keeps one posting list per pair and term and a question reads only
the asking pair's postings, however large the database grows. BM25's statistics (document
count, average length, document frequency) are the pair's own. Messages are indexed after
they commit, with the trigram index (`SQLiteSearch.catch_up`): a webhook never waits for it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from agent_memory.core.domain import Message
from agent_memory.core.postings import Docs, PairPostings, PostingsCache
from agent_memory.core.recall import BM25_B, BM25_K1, TermStats
from agent_memory.core.terms import terms as index_terms
from agent_memory.core.terms import text_length
from agent_memory.store.protocols import NotBrief
from agent_memory.store.shared.messages import READ_COLUMNS, message_of
from agent_memory.store.shared.recall import (
    FREQUENCIES,
    SHORTLIST_FACTOR,
    RecallReads,
)
from agent_memory.store.shared.sql import pair_scope
from agent_memory.store.sqlite.common import Repository, ensure_pairs, fts_phrase

# Copies of the most recently asked pairs' indexes, shared by every connection of this process.
POSTINGS = PostingsCache()
_SPOKEN_IN_SESSION = "FROM messages WHERE agent_id = ? AND kind = 'turn' AND content != ''"
_NEIGHBOURS = (
    f"SELECT * FROM (SELECT -1, {READ_COLUMNS} {_SPOKEN_IN_SESSION} AND seq < ? ORDER BY seq DESC LIMIT 1) "
    f"UNION ALL SELECT * FROM (SELECT 1, {READ_COLUMNS} {_SPOKEN_IN_SESSION} AND seq > ? ORDER BY seq LIMIT 1)"
)


def _pair_term(pair: int, term: str) -> str:
    return f"{pair}_{term}"


class SQLiteRecall(Repository, RecallReads):
    """Ranked turns of a pair for a question, and the upkeep of the word index."""

    postings = POSTINGS

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        # Set while a brief read runs on the event loop: a search in SQLite would hold it up.
        self.brief = False
        self._key: str | None = None
        self._path = ""

    # indexing (writer)

    def index(self, ids: Iterable[int]) -> int:
        """Index the spoken turns among message `ids` (others are skipped); returns how many."""
        return sum(self._add(among, values) for among, values in self.sql.chunks("m.id", list(ids)))

    def _add(self, which: str, params: Sequence[object]) -> int:
        """Index the spoken turns of the messages `which` selects (not indexed yet); returns how many."""
        # Plain tuples, not the connection's Rows: every turn stored comes through here.
        cursor = self.conn.cursor()
        cursor.row_factory = None
        rows = cursor.execute(
            "SELECT m.id, p.id, m.content FROM messages m JOIN search_pairs p "
            "ON p.user_id = m.user_id AND p.character_id = m.character_id "
            f"WHERE {which} AND m.kind = 'turn' "
            "AND NOT EXISTS (SELECT 1 FROM recall_docs d WHERE d.id = m.id)",
            params,
        ).fetchall()
        docs: list[tuple[int, int, int, str]] = []
        counts: dict[int, int] = {}
        lengths: dict[int, int] = {}
        for message_id, pair, content in rows:
            found = index_terms(content or "")
            if not found:
                continue
            # Each term prefixed with the pair (`_pair_term`), in one join.
            prefix = f"{pair}_"
            length = text_length(content, found)
            docs.append((message_id, pair, length, prefix + f" {prefix}".join(found)))
            counts[pair] = counts.get(pair, 0) + 1
            lengths[pair] = lengths.get(pair, 0) + length
        self.conn.executemany("INSERT INTO recall_docs (id, pair, length, terms) VALUES (?, ?, ?, ?)", docs)
        self.conn.executemany(
            "INSERT INTO recall_fts (rowid, terms) VALUES (?, ?)", [(d[0], d[3]) for d in docs]
        )
        self.conn.executemany(
            "INSERT INTO recall_pairs (pair, docs, total_length, changes) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (pair) DO UPDATE SET docs = docs + excluded.docs, "
            "total_length = total_length + excluded.total_length, changes = changes + excluded.docs",
            [(pair, docs_, lengths[pair], docs_) for pair, docs_ in counts.items()],
        )
        return len(docs)

    def catch_up(self, limit: int) -> int:
        """Index up to `limit` new messages, then up to `limit` changed ones; how many were read."""
        upto = self.conn.execute(
            "SELECT value FROM search_state WHERE name = 'recall_indexed_upto'"
        ).fetchone()[0]
        # The next `limit` ids are a range: read by it, not by a list of each id.
        read, last = self.conn.execute(
            "SELECT count(*), max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            (upto, limit),
        ).fetchone()
        if read:
            ensure_pairs(self.conn, upto, last)
            self._add("m.id > ? AND m.id <= ?", (upto, last))
            self.conn.execute("UPDATE search_state SET value = ? WHERE name = 'recall_indexed_upto'", (last,))
        return int(read) + self.index_pending(limit)

    def index_pending(self, limit: int) -> int:
        """Index again up to `limit` messages whose text or pair changed; returns how many."""
        ids = [row[0] for row in self.conn.execute("SELECT id FROM recall_pending LIMIT ?", (limit,))]
        if not ids:
            return 0
        self.index(ids)
        for among, values in self.sql.chunks("id", ids):
            self.conn.execute(f"DELETE FROM recall_pending WHERE {among}", values)
        return len(ids)

    # reading

    def behind(self) -> bool:
        row = self.conn.execute(
            "SELECT (SELECT value FROM search_state WHERE name = 'recall_indexed_upto') "
            "< (SELECT coalesce(max(id), 0) FROM messages) "
            "OR EXISTS (SELECT 1 FROM recall_pending)"
        ).fetchone()
        return bool(row[0])

    def lag(self, user_id: str, character_id: str | None, exclude_session: str | None = None) -> int:
        # Those past the watermark, found by id, then those queued again below it: the scope's
        # columns hidden from the index choice (`+`), else SQLite reads every turn of the pair.
        own, params = pair_scope(user_id, character_id, "+")
        queued, _ = pair_scope(user_id, character_id, "+m.")
        if exclude_session is not None:
            own, queued, params = (
                f"{own} AND +agent_id <> ?",
                f"{queued} AND +m.agent_id <> ?",
                (*params, exclude_session),
            )
        upto = "(SELECT value FROM search_state WHERE name = 'recall_indexed_upto')"
        row = self.conn.execute(
            f"SELECT (SELECT count(*) FROM messages WHERE id > {upto} AND kind = 'turn' AND {own}) + "
            "(SELECT count(*) FROM recall_pending p CROSS JOIN messages m ON m.id = p.id "
            f"WHERE p.id <= {upto} AND m.kind = 'turn' AND {queued})",
            (*params, *params),
        ).fetchone()
        return int(row[0])

    def term_stats(
        self,
        user_id: str,
        character_id: str | None,
        weighted: Sequence[tuple[str, float]],
        *,
        idfs: bool = True,
    ) -> TermStats:
        """BM25's statistics over the turns in scope: each term's weighted idf, the average length."""
        # The pairs with their figures in one statement (each one more is a trip through SQLite).
        scope, params = pair_scope(user_id, character_id, "p.")
        found = self.conn.execute(
            "SELECT p.id, r.docs, r.total_length, r.changes, p.user_id, p.character_id FROM search_pairs p "
            f"LEFT JOIN recall_pairs r ON r.pair = p.id WHERE {scope}",
            params,
        ).fetchall()
        self._owners = {(row[4], row[5]) for row in found}
        rows = [row[:4] for row in found]
        pairs = [row[0] for row in rows]
        documents = sum(row[1] or 0 for row in rows)
        total_length = sum(row[2] or 0 for row in rows)
        self._copies = {
            pair: copy
            for pair, docs, _, changes in rows
            if docs and (copy := self._copy((self._database(), pair), docs, changes))
        }
        return self._stats(weighted, pairs, documents, total_length, idfs=idfs)

    def _pair_figures(self, user_id: str, character_id: str) -> list[tuple[tuple[str, int], int, int]]:
        rows = self.conn.execute(
            "SELECT p.id, r.docs, r.changes FROM search_pairs p JOIN recall_pairs r ON r.pair = p.id "
            "WHERE p.user_id = ? AND p.character_id = ? AND r.docs > 0",
            (user_id, character_id),
        ).fetchall()
        return [((self._database(), row[0]), row[1], row[2]) for row in rows]

    def _copy(
        self, key: tuple[str, int], docs: int, changes: int, *, at_once: bool = False
    ) -> PairPostings | None:
        pair = key[1]
        prefix = len(f"{pair}_")
        # A doc's terms are written `12_a 12_b` (`_add`) and no term holds a space: one split in C
        # by the separator leaves each term without its pair.
        between = f" {pair}_"
        columns = (
            "SELECT (SELECT changes FROM recall_pairs WHERE pair = ?), id, length, terms FROM recall_docs"
        )
        whole = f"{columns} WHERE pair = ? ORDER BY id"

        def read(conn: sqlite3.Connection, sql: str, *args: object) -> Docs:
            rows = conn.execute(sql, (pair, pair, *args)).fetchall()
            # The count comes from the same statement as the turns, so that it matches them.
            now = rows[0][0] if rows else None
            return now, [
                (doc, length, terms[prefix:].split(between) if terms else [])
                for _, doc, length, terms in rows
            ]

        def read_alone() -> Docs:
            # In the background, on a connection of its own (a connection serves one thread at a time).
            conn = sqlite3.connect(self._path)
            try:
                conn.execute("PRAGMA query_only = ON")
                return read(conn, whole)
            finally:
                conn.close()

        return POSTINGS.current(
            key,
            changes,
            docs,
            newer=lambda last_id: read(
                self.conn, f"{columns} WHERE pair = ? AND id > ? ORDER BY id", last_id
            ),
            whole=lambda: read(self.conn, whole),
            whole_later=read_alone,
            at_once=at_once,
        )

    def _count(self, keys: Sequence[tuple[int, str]]) -> list[int]:
        # A statement each (in process: no round trip to save); a long posting list costs a tenth
        # of a millisecond or more to count.
        counts = []
        for pair, term in keys:
            row = self.conn.execute(
                "SELECT doc FROM recall_terms WHERE term = ?", (_pair_term(pair, term),)
            ).fetchone()
            counts.append(int(row[0]) if row else 0)
        return counts

    def _database(self) -> str:
        """Which database this connection reads, as its file and its id (pair ids are per database)."""
        if self._key is None:
            self._path = str(self.conn.execute("PRAGMA database_list").fetchone()[2])
            found = self.conn.execute("SELECT value FROM search_state WHERE name = 'database_id'").fetchone()
            self._key = f"{self._path}#{found[0] if found else 0}"
        return self._key

    def _scores(self, pair: int, stats: TermStats, limit: int) -> dict[int, float]:
        """BM25 of the pair's turns: the best `limit`, by message id (summed in SQLite, in C)."""
        if self.brief:
            raise NotBrief("the pair's recall index is not held in memory: it would be searched in SQLite")
        present = [(term, weight) for term, weight in stats.idfs.items() if stats.frequencies[term]]
        if not present:
            return {}
        # Each term's posting list through the index (MATCH reads it twice as fast as the
        # fts5vocab table would give counts): a turn counts as saying a word once, which short
        # spoken turns nearly always do (BM25 with binary term frequency).
        postings = " UNION ALL ".join(
            "SELECT ? AS w, rowid AS doc FROM recall_fts WHERE recall_fts MATCH ?" for _ in present
        )
        params: list[object] = [
            value for term, weight in present for value in (weight, fts_phrase(_pair_term(pair, term)))
        ]
        # First the turns with the most (weighted) words of the question, in SQLite; then the
        # shortlist's lengths: with binary term frequency a turn's BM25 is that sum times one
        # length factor, and joining every posting to its length would cost twice the search.
        # The length factor is applied in SQLite too, so only the best `limit` rows come back
        # (each row fetched hands the GIL back and forth with the event loop).
        average = stats.average_length
        rows = self.conn.execute(
            f"WITH p AS ({postings}), s AS (SELECT doc, sum(w) AS matched FROM p GROUP BY doc "
            "ORDER BY matched DESC, doc DESC LIMIT ?) "
            "SELECT s.doc, s.matched * ? / (1 + ? * (1 - ? + ? * coalesce(d.length, ?) / ?)) AS score "
            "FROM s LEFT JOIN recall_docs d ON d.id = s.doc "
            "ORDER BY score DESC, s.matched DESC, s.doc DESC LIMIT ?",
            (
                *params,
                limit * SHORTLIST_FACTOR,
                BM25_K1 + 1,
                BM25_K1,
                BM25_B,
                BM25_B,
                average,
                average,
                limit,
            ),
        ).fetchall()
        return {doc: score for doc, score in rows}

    def neighbours(self, messages: Sequence[Message]) -> dict[int, tuple[Message | None, Message | None]]:
        """As `RecallReads.neighbours`, a statement each (SQLite answers in process: no trip to save)."""
        around: dict[int, tuple[Message | None, Message | None]] = {}
        for message in messages:
            found: dict[int, Message] = {
                row[0]: message_of(row[1:])
                for row in self.conn.execute(_NEIGHBOURS, (message.agent_id, message.seq) * 2)
            }
            around[message.id] = (found.get(-1), found.get(1))
        return around


def forget_held() -> None:
    """Drop what this process holds of the recall index (copies of pairs, document frequencies):
    after a forget none of its words stay in memory; what is still remembered is read again."""
    POSTINGS.clear()
    FREQUENCIES.clear()
