"""Search on PostgreSQL: substrings through pg_trgm indexes (the rest is store/shared/search.py).

A word of three or more characters, any script, is matched case-insensitively through the
messages' trigram GIN index (m002), which PostgreSQL keeps itself: there is nothing to catch up;
a user's facts and summaries, a few rows each, are read through their keys (m013).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.store.postgres.common import Connection, Instance, Repository
from agent_memory.store.postgres.recall import PostgresRecall
from agent_memory.store.shared.search import MAX_CANDIDATES, Kind, SearchReads, like_pattern, sources

# A summary has no id of its own: its watermark stands in, as in a ranked (several words) search.
SOURCES = sources("watermark_id")
_ORDER = {"message": "t.id", "fact": "t.id", "summary": "t.updated_ms"}


class PostgresSearch(Repository, SearchReads):
    """Search through the trigram indexes (and bounded substring scans for short words)."""

    recall: PostgresRecall
    sources = SOURCES
    like = "ILIKE"

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(conn, instance)
        self.recall = PostgresRecall(self.conn, self.instance)

    def _indexed(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], bool]:
        where, params = self._scope(kind, character_id)
        holds = " AND ".join(f"t.{kind.column} ILIKE ?" for _ in terms)
        rows = self.sql.all(
            f"SELECT {kind.columns} FROM {kind.table} t WHERE t.user_id = ?{where} AND {holds} "
            f"ORDER BY {_ORDER[kind.name]} DESC LIMIT ?",
            (user_id, *params, *map(like_pattern, terms), MAX_CANDIDATES),
        )
        return [dict(row) for row in rows], len(rows) >= MAX_CANDIDATES

    def _frequency(self, kind: Kind, user_id: str, character_id: str | None, term: str) -> int:
        where, params = self._scope(kind, character_id)
        return self.sql.count(
            f"SELECT count(*) FROM {kind.table} t WHERE t.user_id = ?{where} AND t.{kind.column} ILIKE ?",
            (user_id, *params, like_pattern(term)),
        )

    def _phrase(self, phrase: str) -> tuple[str, list[Any]]:
        return "FROM messages m WHERE m.content ILIKE ?", [like_pattern(phrase)]
