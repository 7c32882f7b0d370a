"""Full-text search over a user's messages, facts and summaries (SQLite FTS5, trigram).

The indexes are contentless FTS5 tables kept in step by triggers (migration m003), each row
tagged with its (user, character) pair's owner token, so a user's search reads only that
user's postings. Queries of three or more characters per word go through the index; shorter
words (two-character Chinese words such as 考试) are below what a trigram index can match and
are found by a bounded substring scan of the user's most recent rows instead.

Ranking is BM25 (`core.recall.okapi`: k1 = 1.2, b = 0.75, as FTS5's `bm25()`), computed from the matched
text with statistics taken over the user's own rows: FTS5's `bm25()` would count each
phrase's documents across the whole database on every query, which grows with the database.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from agent_memory.store.shared.facts import USER_WIDE
from agent_memory.store.shared.search import (
    MAX_CANDIDATES,
    MENTIONS_SCAN_ROWS,
    MIN_FTS_CHARS,
    SUBSTRING_SCAN_ROWS,
    Kind,
    Scored,
    by_words,
    flagged_matches,
    like_pattern,
    mention_filters,
    mentions_answer,
    query_terms,
    ranked_hits,
    scored_rows,
    search_answer,
    several_words,
    term_patterns,
)
from agent_memory.store.sqlite.common import Repository
from agent_memory.store.sqlite.pairs import ensure_pairs
from agent_memory.store.sqlite.recall import SQLiteRecall
from agent_memory.store.types import (
    SEARCH_KINDS,
    MentionRole,
    Mentions,
    SearchKind,
    SearchMethod,
    SearchState,
    UserSearch,
)

SOURCES: dict[SearchKind, Kind] = {
    "message": Kind(
        "message",
        "messages",
        "content",
        "id",
        "t.id AS id, t.user_id, t.character_id, t.content AS text, t.at_ms, t.agent_id, t.role",
    ),
    "fact": Kind(
        "fact",
        "facts",
        "text",
        "id",
        "t.id AS id, t.user_id, t.character_id, t.text, t.updated_ms AS at_ms, t.pinned",
    ),
    "summary": Kind(
        "summary",
        "summaries",
        "text",
        "rowid",
        "t.rowid AS id, t.user_id, t.character_id, t.text, t.updated_ms AS at_ms, t.watermark_id",
    ),
}


def fts_phrase(term: str) -> str:
    """A term as an FTS5 string: matched as a substring by the trigram tokenizer."""
    return '"' + term.replace('"', '""') + '"'


class SQLiteSearch(Repository):
    """Search over the FTS5 indexes (and bounded substring scans for short words)."""

    __slots__ = ("recall",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.recall = SQLiteRecall(conn)

    # pieces

    def pair_tokens(self, user_id: str) -> dict[str, str]:
        """The owner token of each of the user's pairs, by character."""
        return {
            row["character_id"]: row["token"]
            for row in self._all("SELECT character_id, token FROM search_pairs WHERE user_id = ?", (user_id,))
        }

    def _scope(self, kind: Kind, character_id: str | None) -> tuple[str, tuple[str, ...]]:
        """The WHERE clause (after user_id = ?) that limits a kind to one character."""
        if character_id is None:
            return "", ()
        if kind.name == "fact":
            # A user-wide fact belongs to every character's memory.
            return " AND t.character_id IN (?, ?)", (character_id, USER_WIDE)
        return " AND t.character_id = ?", (character_id,)

    def _scope_total(self, kind: Kind, user_id: str, character_id: str | None) -> int:
        """How many rows of a kind the user has in scope (BM25's document count)."""
        where, params = self._scope(kind, character_id)
        row = self.conn.execute(
            f"SELECT count(*) FROM {kind.table} t WHERE t.user_id = ?{where}", (user_id, *params)
        ).fetchone()
        return int(row[0])

    def _owner_filter(self, tokens: dict[str, str], kind: Kind, character_id: str | None) -> str | None:
        """`owner : (...)` over the pair tokens in scope, or None if the user has none."""
        if character_id is None:
            chosen = list(tokens.values())
        else:
            wanted = (character_id, USER_WIDE) if kind.name == "fact" else (character_id,)
            chosen = [tokens[c] for c in wanted if c in tokens]
        if not chosen:
            return None
        return "owner : (" + " OR ".join(fts_phrase(token) for token in chosen) + ")"

    def _fts_candidates(
        self, kind: Kind, owner: str, terms: Sequence[str], user_id: str
    ) -> list[dict[str, Any]]:
        """The most recent rows of a kind matching every term, through the index."""
        fts = f"{kind.table}_fts"
        match = f"{owner} AND {kind.column} : (" + " AND ".join(map(fts_phrase, terms)) + ")"
        return self._all(
            f"SELECT {kind.columns} FROM (SELECT rowid AS r FROM {fts} WHERE {fts} MATCH ? "
            f"ORDER BY rowid DESC LIMIT ?) f JOIN {kind.table} t ON t.{kind.key} = f.r "
            "WHERE t.user_id = ?",
            (match, MAX_CANDIDATES, user_id),
        )

    def _fts_count(self, kind: Kind, owner: str, term: str) -> int:
        """How many of the scoped rows contain `term` (its document frequency)."""
        fts = f"{kind.table}_fts"
        match = f"{owner} AND {kind.column} : ({fts_phrase(term)})"
        row = self.conn.execute(f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?", (match,)).fetchone()
        return int(row[0])

    def _substring_rows(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Rows holding every term among the user's latest rows; also per-term row counts."""
        where, params = self._scope(kind, character_id)
        flags = ", ".join(f"(t.{kind.column} LIKE ? ESCAPE '\\') AS term_{i}" for i in range(len(terms)))
        matches_any = " OR ".join(f"term_{i}" for i in range(len(terms)))
        order = "t.at_ms" if kind.name == "message" else "t.updated_ms"
        rows = self._all(
            f"SELECT {kind.columns}, {flags} FROM (SELECT {kind.key} AS k FROM {kind.table} t "
            f"WHERE t.user_id = ?{where} ORDER BY {order} DESC LIMIT ?) s "
            f"JOIN {kind.table} t ON t.{kind.key} = s.k WHERE {matches_any}",
            (*map(like_pattern, terms), user_id, *params, SUBSTRING_SCAN_ROWS),
        )
        return flagged_matches(rows, len(terms))

    # the answer

    def user(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] = SEARCH_KINDS,
        limit: int = 20,
    ) -> UserSearch:
        """A user's messages, facts and summaries matching `q`, best first: a single word (or
        CJK run) as a substring, several words ranked like recall (BM25, any of the words)."""
        if several_words(q):
            return by_words(self.recall, user_id, q, character_id=character_id, kinds=kinds, limit=limit)
        terms = query_terms(q)
        method: SearchMethod = "fts" if terms and all(len(t) >= MIN_FTS_CHARS for t in terms) else "substring"
        patterns = term_patterns(terms)
        tokens = self.pair_tokens(user_id) if method == "fts" else {}
        scored: list[Scored] = []
        truncated = False
        for name in kinds:
            kind = SOURCES[name]
            if method == "fts":
                owner = self._owner_filter(tokens, kind, character_id)
                if owner is None:
                    continue
                rows = self._fts_candidates(kind, owner, terms, user_id)
                capped = len(rows) >= MAX_CANDIDATES
                if character_id is not None:
                    rows = [r for r in rows if r["character_id"] in (character_id, USER_WIDE)]
                if not rows:
                    continue
                if len(terms) == 1 and not capped:
                    containing = [len(rows)]
                else:
                    containing = [self._fts_count(kind, owner, term) for term in terms]
                total = self._scope_total(kind, user_id, character_id)
            else:
                total = self._scope_total(kind, user_id, character_id)
                if not total:
                    continue
                capped = total > SUBSTRING_SCAN_ROWS
                total = min(total, SUBSTRING_SCAN_ROWS)  # what the scan reads
                rows, containing = self._substring_rows(kind, user_id, character_id, terms)
            truncated = truncated or capped
            scored.extend(scored_rows(name, rows, containing, total, patterns))
        results = ranked_hits(scored, patterns, limit)
        return search_answer(user_id, character_id, q, terms, method, truncated=truncated, results=results)

    def mentions(
        self,
        q: str,
        *,
        role: MentionRole = "user",
        character_id: str | None = None,
        limit: int = 100,
    ) -> Mentions:
        """Which users' messages contain `q` (one phrase), how many, and when first and last."""
        phrase = q.strip()
        filters, params = mention_filters(role, character_id, "?")
        method: SearchMethod
        select = (
            "SELECT m.user_id, count(*) AS messages, min(m.at_ms) AS first_ms, "
            "max(m.at_ms) AS last_ms, json_group_array(DISTINCT m.character_id) AS characters"
        )
        if len(phrase) >= MIN_FTS_CHARS:
            method, scanned, floor = "fts", None, None
            source = "FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ?"
            first: list[Any] = [f"content : ({fts_phrase(phrase)})"]
        else:
            method = "substring"
            newest = self._one("SELECT max(id) AS id FROM messages")
            floor = (newest["id"] or 0) - MENTIONS_SCAN_ROWS if newest else 0
            scanned = int(
                self.conn.execute("SELECT count(*) FROM messages WHERE id > ?", (floor,)).fetchone()[0]
            )
            source = "FROM messages m WHERE m.id > ? AND m.content LIKE ? ESCAPE '\\'"
            first = [floor, like_pattern(phrase)]
        rows = self._all(
            f"{select} {source}{filters} GROUP BY m.user_id "
            "ORDER BY messages DESC, last_ms DESC, m.user_id LIMIT ?",
            (*first, *params, limit),
        )
        totals = self._one(
            f"SELECT count(DISTINCT m.user_id) AS users, count(*) AS messages {source}{filters}",
            (*first, *params),
        ) or {"users": 0, "messages": 0}
        return mentions_answer(
            q,
            role,
            character_id,
            method,
            totals=totals,
            rows=((row, json.loads(row["characters"] or "[]")) for row in rows),
            floor=floor,
            scanned=scanned,
        )

    def catch_up(self, limit: int) -> int:
        """Index up to `limit` messages stored since the last call for search; returns how many."""
        upto = self.conn.execute(
            "SELECT value FROM search_state WHERE name = 'messages_indexed_upto'"
        ).fetchone()[0]
        last = self.conn.execute(
            "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            (upto, limit),
        ).fetchone()[0]
        if last is None:
            return 0
        ensure_pairs(self.conn, upto, last)
        indexed = self.conn.execute(
            "INSERT INTO messages_fts (rowid, content, owner) "
            "SELECT m.id, m.content, p.token FROM messages m JOIN search_pairs p "
            "ON p.user_id = m.user_id AND p.character_id = m.character_id "
            "WHERE m.id > ? AND m.id <= ? ORDER BY m.id",
            (upto, last),
        ).rowcount
        self.conn.execute("UPDATE search_state SET value = ? WHERE name = 'messages_indexed_upto'", (last,))
        return int(indexed)


# The FTS5 tables that hold each kind's text: messages have the trigram index for search
# and the word index for recall.
INDEXES: dict[SearchKind, tuple[str, ...]] = {
    "message": ("messages_fts", "recall_fts"),
    "fact": ("facts_fts",),
    "summary": ("summaries_fts",),
}
# FTS5 keeps its segment structure in this row of %_data.
STRUCTURE_ROWID = 10


class SearchIndex(Repository):
    """The indexes' upkeep: what they owe after deletes, merging them, dropping a pair's token."""

    __slots__ = ()

    def size(self) -> dict[str, int]:
        """Rows of each index's segment table (each about one page): what a full merge rewrites."""
        return {
            name: sum(self._count(f"SELECT count(*) FROM {fts}_data") for fts in INDEXES[name])
            for name in SOURCES
        }

    def state(self) -> SearchState:
        """What the search index owes: dead rows since the last merge, forgets to scrub."""
        values = dict(self.conn.execute("SELECT name, value FROM search_state").fetchall())
        return {
            "dead_rows": values.get("dead_rows", 0),
            "scrub_owed": values.get("scrub_owed", 0),
            "messages_indexed_upto": values.get("messages_indexed_upto", 0),
        }

    def note_dead_rows(self, count: int) -> None:
        """Count index entries deleted since the last full merge."""
        if count:
            self.conn.execute("UPDATE search_state SET value = value + ? WHERE name = 'dead_rows'", (count,))

    def owe_scrub(self) -> None:
        """A forget left text in old index segments: a full merge is owed."""
        self.conn.execute("UPDATE search_state SET value = value + 1 WHERE name = 'scrub_owed'")

    def merge_step(self, kind: SearchKind, pages: int) -> bool:
        """Merge about `pages` pages of one kind's indexes towards a single segment each; False
        when each already is one (then no deleted entry is left in them)."""
        changed = False
        for fts in INDEXES[kind]:
            before = self._structure(fts)
            self.conn.execute(f"INSERT INTO {fts} ({fts}, rank) VALUES ('merge', ?)", (-pages,))
            changed = changed or self._structure(fts) != before
        return changed

    def _structure(self, fts: str) -> bytes | None:
        """The index's segment structure record, to tell whether a merge changed anything."""
        row = self.conn.execute(f"SELECT block FROM {fts}_data WHERE id = ?", (STRUCTURE_ROWID,)).fetchone()
        return bytes(row[0]) if row else None

    def optimize(self) -> None:
        """Rewrite every index as one segment: deleted entries leave the file now."""
        for fts in (fts for tables in INDEXES.values() for fts in tables):
            self.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
        self.conn.execute("UPDATE search_state SET value = 0 WHERE name IN ('dead_rows', 'scrub_owed')")

    def scrubbed(self, owed: int, dead_rows: int) -> None:
        """A full merge finished: what was owed when it began is paid."""
        self.conn.execute(
            "UPDATE search_state SET value = max(0, value - CASE name WHEN 'scrub_owed' THEN ? "
            "WHEN 'dead_rows' THEN ? ELSE 0 END)",
            (owed, dead_rows),
        )

    def drop_pairs(self, user_id: str, character_id: str | None) -> None:
        """Forget the owner tokens of a user's pairs (or of one pair)."""
        if character_id is None:
            self.conn.execute("DELETE FROM search_pairs WHERE user_id = ?", (user_id,))
        else:
            self.conn.execute(
                "DELETE FROM search_pairs WHERE user_id = ? AND character_id = ?",
                (user_id, character_id),
            )
