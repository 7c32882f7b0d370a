"""Full-text search on PostgreSQL: substrings through pg_trgm indexes, several words like recall.

A single word (or CJK run) is matched as a case-insensitive substring, any script: words of
three or more characters through the trigram GIN indexes (m002, kept by PostgreSQL itself,
so there is nothing to catch up), shorter ones (two-character Chinese words such as 考试) by a
bounded scan of the user's most recent rows, as on SQLite. Several words are ranked like
recall, through the recall index. Scores, snippets and limits are `store.shared.search`'s,
as on SQLite, so both backends answer alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.store.postgres.common import Connection, Instance, Repository
from agent_memory.store.postgres.recall import PostgresRecall
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
from agent_memory.store.types import (
    SEARCH_KINDS,
    MentionRole,
    Mentions,
    SearchKind,
    SearchMethod,
    UserSearch,
)

# A summary has no id of its own: its watermark stands in, as in a ranked (several words) search.
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
        "watermark_id",
        "t.watermark_id AS id, t.user_id, t.character_id, t.text, t.updated_ms AS at_ms, t.watermark_id",
    ),
}
_ORDER = {"message": "t.id", "fact": "t.id", "summary": "t.updated_ms"}
_RECENT = {"message": "t.at_ms", "fact": "t.updated_ms", "summary": "t.updated_ms"}


class PostgresSearch(Repository):
    """Search through the trigram indexes (and bounded substring scans for short words)."""

    __slots__ = ("recall",)

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(conn, instance)
        self.recall = PostgresRecall(self.conn, self.instance)

    # pieces

    @staticmethod
    def _scope(kind: Kind, character_id: str | None) -> tuple[str, tuple[Any, ...]]:
        """The WHERE clause (after user_id = %s) that limits a kind to one character."""
        if character_id is None:
            return "", ()
        if kind.name == "fact":
            # A user-wide fact belongs to every character's memory.
            return " AND t.character_id = ANY(%s)", ([character_id, USER_WIDE],)
        return " AND t.character_id = %s", (character_id,)

    def _scope_total(self, kind: Kind, user_id: str, character_id: str | None) -> int:
        """How many rows of a kind the user has in scope (BM25's document count)."""
        where, params = self._scope(kind, character_id)
        return self._count(
            f"SELECT count(*) FROM {kind.table} t WHERE t.user_id = %s{where}", (user_id, *params)
        )

    def _indexed_candidates(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> list[dict[str, Any]]:
        """The most recent rows of a kind in scope holding every term, through the trigram index."""
        where, params = self._scope(kind, character_id)
        holds = " AND ".join(f"t.{kind.column} ILIKE %s" for _ in terms)
        return self._all(
            f"SELECT {kind.columns} FROM {kind.table} t WHERE t.user_id = %s{where} AND {holds} "
            f"ORDER BY {_ORDER[kind.name]} DESC LIMIT %s",
            (user_id, *params, *map(like_pattern, terms), MAX_CANDIDATES),
        )

    def _indexed_count(self, kind: Kind, user_id: str, character_id: str | None, term: str) -> int:
        """How many of the scoped rows contain `term` (its document frequency)."""
        where, params = self._scope(kind, character_id)
        return self._count(
            f"SELECT count(*) FROM {kind.table} t WHERE t.user_id = %s{where} AND t.{kind.column} ILIKE %s",
            (user_id, *params, like_pattern(term)),
        )

    def _substring_rows(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Rows holding every term among the user's latest rows; also per-term row counts."""
        where, params = self._scope(kind, character_id)
        flags = ", ".join(f"(t.{kind.column} ILIKE %s) AS term_{i}" for i in range(len(terms)))
        rows = self._all(
            f"SELECT * FROM (SELECT {kind.columns}, {flags} FROM {kind.table} t "
            f"WHERE t.user_id = %s{where} ORDER BY {_RECENT[kind.name]} DESC LIMIT %s) s "
            f"WHERE {' OR '.join(f'term_{i}' for i in range(len(terms)))}",
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
        scored: list[Scored] = []
        truncated = False
        for name in kinds:
            kind = SOURCES[name]
            if method == "fts":
                rows = self._indexed_candidates(kind, user_id, character_id, terms)
                capped = len(rows) >= MAX_CANDIDATES
                if not rows:
                    continue
                if len(terms) == 1 and not capped:
                    containing = [len(rows)]
                else:
                    containing = [self._indexed_count(kind, user_id, character_id, term) for term in terms]
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
        filters, params = mention_filters(role, character_id, "%s")
        method: SearchMethod
        select = (
            "SELECT m.user_id, count(*) AS messages, min(m.at_ms) AS first_ms, "
            "max(m.at_ms) AS last_ms, array_agg(DISTINCT m.character_id) AS characters"
        )
        first: list[Any]
        scanned: int | None
        if len(phrase) >= MIN_FTS_CHARS:
            method, scanned, floor = "fts", None, None
            source = "FROM messages m WHERE m.content ILIKE %s"
            first = [like_pattern(phrase)]
        else:
            method = "substring"
            newest = self._one("SELECT max(id) AS id FROM messages")
            floor = (newest["id"] or 0) - MENTIONS_SCAN_ROWS if newest else 0
            scanned = self._count("SELECT count(*) FROM messages WHERE id > %s", (floor,))
            source = "FROM messages m WHERE m.id > %s AND m.content ILIKE %s"
            first = [floor, like_pattern(phrase)]
        rows = self._all(
            f"{select} {source}{filters} GROUP BY m.user_id "
            'ORDER BY messages DESC, last_ms DESC, m.user_id COLLATE "C" LIMIT %s',
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
            rows=((row, row["characters"] or []) for row in rows),
            floor=floor,
            scanned=scanned,
        )

    def catch_up(self, limit: int) -> int:
        """Nothing to do: PostgreSQL keeps the trigram indexes as rows change (recall has its own)."""
        return 0
