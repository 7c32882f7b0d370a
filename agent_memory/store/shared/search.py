"""Search written once: how a query is read, matched, ranked and shown, on any backend.

Each backend only says how its trigram index finds the rows holding a word of three or more
characters. Ranking is BM25 over the user's own rows; a shorter word (考试) is found by a bounded
substring scan of the user's latest rows; several words are ranked like recall."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agent_memory.core.recall import weighted_terms
from agent_memory.core.search import (
    SEARCH_KINDS,
    MentionRole,
    Mentions,
    Scored,
    SearchHit,
    SearchKind,
    SearchMethod,
    UserSearch,
    hit,
    query_terms,
    scored_rows,
    search_answer,
    several_words,
    term_patterns,
    words_answer,
)
from agent_memory.store.shared.facts import USER_WIDE, fact_scope
from agent_memory.store.shared.recall import RecallReads
from agent_memory.store.shared.sql import Repository

MIN_FTS_CHARS = 3  # a trigram index cannot match less
# The most recent matches of each kind that are ranked; older ones beyond this are not.
MAX_CANDIDATES = 1000
# How many of a user's most recent rows of each kind a substring (short-word) scan reads.
SUBSTRING_SCAN_ROWS = 20_000
# How many of the most recent messages an operator's short-word mention query reads.
MENTIONS_SCAN_ROWS = 500_000


@dataclass(frozen=True)
class Kind:
    """How one searchable table is read: `columns`, what a result needs (id, ..., text, at_ms, ...)."""

    name: SearchKind
    table: str
    column: str
    key: str
    at: str
    more: str

    @cached_property
    def columns(self) -> str:
        text = f"t.{self.column} AS text, t.{self.at} AS at_ms"
        return f"t.{self.key} AS id, t.user_id, t.character_id, {text}, {self.more}"


def like_pattern(term: str) -> str:
    """`%term%` for LIKE ... ESCAPE '\\', with the term's own wildcards escaped."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def ranked_hits(scored: Sequence[Scored], patterns: Sequence[re.Pattern[str]], limit: int) -> list[SearchHit]:
    """The best `limit` of the scored rows as search results, best (then newest) first."""
    best = sorted(scored, key=lambda item: (-item[0], -item[1]))[:limit]
    results: list[SearchHit] = []
    for position, (score, _, row) in enumerate(best, 1):
        item = hit(row["kind"], row["id"], row["character_id"], row["text"], row["at_ms"], patterns)
        item["rank"], item["score"] = position, round(score, 6)
        if row["kind"] == "message":
            item["agent_id"], item["role"] = row["agent_id"], row["role"]
        elif row["kind"] == "fact":
            item["scope"], item["pinned"] = fact_scope(row["character_id"]), bool(row["pinned"])
        results.append(item)
    return results


def by_words(
    recall: RecallReads,
    user_id: str,
    q: str,
    *,
    character_id: str | None,
    kinds: Sequence[SearchKind],
    limit: int,
) -> UserSearch:
    """Several words: messages from the recall index, facts and summaries on the same BM25 scale."""
    stats = recall.term_stats(user_id, character_id, weighted_terms(q))
    return words_answer(
        user_id,
        character_id,
        q,
        stats,
        turns=recall.turns(stats, limit) if "message" in kinds and stats.idfs else [],
        facts=recall.facts(user_id, character_id) if "fact" in kinds else [],
        summaries=recall.summaries(user_id, character_id) if "summary" in kinds else [],
        limit=limit,
    )


def sources(summary_key: str) -> dict[SearchKind, Kind]:
    """The searchable tables; a summary, which has no id of its own, is found by `summary_key`."""
    return {
        "message": Kind("message", "messages", "content", "id", "at_ms", "t.agent_id, t.role"),
        "fact": Kind("fact", "facts", "text", "id", "updated_ms", "t.pinned"),
        "summary": Kind("summary", "summaries", "text", summary_key, "updated_ms", "t.watermark_id"),
    }


class SearchReads(Repository):
    """A user's search and an operator's mentions; how an index finds a word's rows is the backend's."""

    recall: RecallReads
    sources: dict[SearchKind, Kind]
    # How a term is matched as a substring (PostgreSQL's ILIKE folds case in every script).
    like = "LIKE"
    # The characters of a mentions row's messages, and how they read back as a list.
    characters = "array_agg(DISTINCT m.character_id)"

    def _listed(self, characters: Any) -> list[str]:
        return list(characters or [])

    @abstractmethod
    def _indexed(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], bool] | None:
        """The latest `MAX_CANDIDATES` rows in scope holding every term, through the index, and whether
        there were more; None when the user has none indexed."""

    @abstractmethod
    def _frequency(self, kind: Kind, user_id: str, character_id: str | None, term: str) -> int:
        """How many of the scoped rows contain `term` (its document frequency), through the index."""

    @abstractmethod
    def _phrase(self, phrase: str) -> tuple[str, list[Any]]:
        """FROM and WHERE of the messages `m` holding a phrase (3+ characters), through the index."""

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
        return self.sql.count(
            f"SELECT count(*) FROM {kind.table} t WHERE t.user_id = ?{where}", (user_id, *params)
        )

    def _substring_rows(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], list[int]]:
        """Rows holding every term among the user's latest rows; also per-term row counts."""
        where, params = self._scope(kind, character_id)
        flags = ", ".join(
            f"(t.{kind.column} {self.like} ? ESCAPE '\\') AS term_{i}" for i in range(len(terms))
        )
        recent = "t.at_ms" if kind.name == "message" else "t.updated_ms"
        rows = [
            dict(row)
            for row in self.sql.all(
                f"SELECT * FROM (SELECT {kind.columns}, {flags} FROM {kind.table} t "
                f"WHERE t.user_id = ?{where} ORDER BY {recent} DESC LIMIT ?) s "
                f"WHERE {' OR '.join(f'term_{i}' for i in range(len(terms)))}",
                (*map(like_pattern, terms), user_id, *params, SUBSTRING_SCAN_ROWS),
            )
        ]
        flagged = [f"term_{i}" for i in range(len(terms))]
        counts = [sum(1 for row in rows if row[flag]) for flag in flagged]
        matched = [row for row in rows if all(row[flag] for flag in flagged)]
        for row in matched:
            for flag in flagged:
                del row[flag]
        return matched, counts

    def user(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] = SEARCH_KINDS,
        limit: int = 20,
    ) -> UserSearch:
        """A user's messages, facts and summaries matching `q`, best first: one word (or CJK run) as a
        substring, several words ranked like recall."""
        if several_words(q):
            return by_words(self.recall, user_id, q, character_id=character_id, kinds=kinds, limit=limit)
        terms = query_terms(q)
        method: SearchMethod = "fts" if terms and all(len(t) >= MIN_FTS_CHARS for t in terms) else "substring"
        patterns = term_patterns(terms)
        scored: list[Scored] = []
        truncated = False
        for name in kinds:
            kind = self.sources[name]
            if method == "fts":
                found = self._indexed(kind, user_id, character_id, terms)
                if found is None or not found[0]:
                    continue
                rows, capped = found
                if len(terms) == 1 and not capped:
                    containing = [len(rows)]
                else:
                    containing = [self._frequency(kind, user_id, character_id, term) for term in terms]
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
        """Which users' messages contain `q` (one phrase), how many, when first and last (a short
        phrase's scan also says how far it read)."""
        phrase = q.strip()
        filters, params = "", list[Any]()
        if role != "any":
            filters += " AND m.role = ?"
            params.append(role)
        if character_id is not None:
            filters += " AND m.character_id = ?"
            params.append(character_id)
        if len(phrase) >= MIN_FTS_CHARS:
            method: SearchMethod = "fts"
            source, first = self._phrase(phrase)
            floor = scanned = None
        else:
            method = "substring"
            newest = self.sql.one("SELECT max(id) AS id FROM messages")
            floor = (newest["id"] or 0) - MENTIONS_SCAN_ROWS if newest else 0
            scanned = self.sql.count("SELECT count(*) FROM messages WHERE id > ?", (floor,))
            source = f"FROM messages m WHERE m.id > ? AND m.content {self.like} ? ESCAPE '\\'"
            first = [floor, like_pattern(phrase)]
        rows = self.sql.all(
            "SELECT m.user_id, count(*) AS messages, min(m.at_ms) AS first_ms, max(m.at_ms) AS last_ms, "
            f"{self.characters} AS characters {source}{filters} GROUP BY m.user_id "
            f"ORDER BY messages DESC, last_ms DESC, m.user_id{self.sql.binary} LIMIT ?",
            (*first, *params, limit),
        )
        totals = self.sql.one(
            f"SELECT count(DISTINCT m.user_id) AS users, count(*) AS messages {source}{filters}",
            (*first, *params),
        )
        # Each row's columns are `MentionUser`'s, in order.
        users: list[Any] = [{**row, "characters": sorted(self._listed(row["characters"]))} for row in rows]
        answer: Mentions = {
            "q": q,
            "role": role,
            "character_id": character_id,
            "method": method,
            "total_users": totals["users"] if totals else 0,
            "total_messages": totals["messages"] if totals else 0,
            "users": users,
        }
        if floor is not None and scanned is not None:
            answer["scanned_messages"] = scanned
            answer["complete"] = floor <= 0
        return answer
