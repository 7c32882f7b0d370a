"""How a search query is read, matched and shown, and how several words are ranked, on any backend.

Both backends take a query's terms, score rows and cut snippets with these helpers, so that
they answer alike; each only says in its own SQL which rows hold the terms.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent_memory.core.recall import bm25, idf, okapi, weighted_terms
from agent_memory.core.terms import terms as terms_of
from agent_memory.store.protocols import RecallReads
from agent_memory.store.shared.facts import USER_WIDE, fact_scope
from agent_memory.store.types import (
    MentionRole,
    Mentions,
    MentionUser,
    SearchHit,
    SearchKind,
    SearchMethod,
    UserSearch,
)

MIN_FTS_CHARS = 3  # a trigram index cannot match less
MAX_TERMS = 16
# The most recent matches of each kind that are ranked; older ones beyond this are not.
MAX_CANDIDATES = 1000
# How many of a user's most recent rows of each kind a substring (short-word) scan reads.
SUBSTRING_SCAN_ROWS = 20_000
# How many of the most recent messages an operator's short-word mention query reads.
MENTIONS_SCAN_ROWS = 500_000
SNIPPET_CHARS = 96
# A run of Chinese, Japanese or Korean this long is a sentence (a question), not one word.
CJK_SENTENCE_CHARS = 6
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{" + str(CJK_SENTENCE_CHARS) + ",}"
)


@dataclass(frozen=True)
class Kind:
    """How one searchable table is read."""

    name: SearchKind
    table: str
    column: str
    key: str
    columns: str  # what a result needs, as id, user_id, character_id, text, at_ms, ...


def query_terms(q: str) -> list[str]:
    """The words of a query: split on whitespace, edge punctuation dropped, duplicates once."""
    terms: list[str] = []
    for word in q.split():
        stripped = word.strip("".join(_edge_punctuation(word)))
        term = stripped or word
        if term.casefold() not in (t.casefold() for t in terms):
            terms.append(term)
    return terms[:MAX_TERMS]


def _edge_punctuation(word: str) -> set[str]:
    """The punctuation characters at either end of a word."""
    return {ch for ch in (word[:1], word[-1:]) if ch and unicodedata.category(ch).startswith("P")}


def several_words(q: str) -> bool:
    """Whether `q` is several words (or a CJK sentence), ranked like recall rather than matched whole."""
    return sum(1 for word in query_terms(q) if terms_of(word)) >= 2 or bool(_CJK_RUN.search(q))


def like_pattern(term: str) -> str:
    """`%term%` for LIKE ... ESCAPE '\\', with the term's own wildcards escaped."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def term_patterns(terms: Sequence[str]) -> list[re.Pattern[str]]:
    """Case-insensitive literal patterns, one per term."""
    return [re.compile(re.escape(term), re.IGNORECASE) for term in terms]


def term_frequencies(text: str, patterns: Sequence[re.Pattern[str]]) -> list[int]:
    """How often each pattern occurs in `text`."""
    return [len(pattern.findall(text)) for pattern in patterns]


def snippet(text: str, patterns: Sequence[re.Pattern[str]], width: int = SNIPPET_CHARS) -> str:
    """A window of `text` around its best match, each match marked as [..], cuts marked with …."""
    spans = sorted(
        (m.start(), m.end(), index)
        for index, pattern in enumerate(patterns)
        for m in pattern.finditer(text)
        if m.end() > m.start()
    )
    if not spans:
        return text[:width] + ("…" if len(text) > width else "")
    lead = width // 4
    best_start, best_score = 0, -1
    for start, _, _ in spans:
        window_start = max(0, min(start - lead, len(text) - width))
        window_end = window_start + width
        score = len({index for s, e, index in spans if s >= window_start and e <= window_end})
        if score > best_score:
            best_start, best_score = window_start, score
    window_start, window_end = best_start, min(len(text), best_start + width)
    parts: list[str] = ["…"] if window_start > 0 else []
    cursor = window_start
    for start, end, _ in spans:
        start, end = max(start, cursor), min(end, window_end)
        if start >= end:
            continue  # overlaps one already marked, or outside the window
        parts.extend((text[cursor:start], "[", text[start:end], "]"))
        cursor = end
    parts.append(text[cursor:window_end])
    if window_end < len(text):
        parts.append("…")
    return "".join(parts)


def hit(
    kind: SearchKind, id_: int, character_id: str, text: str, at_ms: int, patterns: Sequence[re.Pattern[str]]
) -> SearchHit:
    """A search result of one row, not yet ranked."""
    return {
        "kind": kind,
        "id": id_,
        "character_id": character_id,
        "snippet": snippet(text, patterns),
        "text": text,
        "at_ms": at_ms,
        "rank": 0,
        "score": 0.0,
    }


# A matched row's score, its time (the tie-break, newer first) and the row with its kind.
Scored = tuple[float, int, dict[str, Any]]


def scored_rows(
    kind: SearchKind,
    rows: Sequence[dict[str, Any]],
    containing: Sequence[int],
    total: int,
    patterns: Sequence[re.Pattern[str]],
) -> list[Scored]:
    """BM25 of rows holding every term, `containing[i]` of the `total` rows in scope holding term i."""
    if not rows:
        return []
    total = max(total, max(containing))
    idfs = [idf(total, count) for count in containing]
    avg_length = sum(len(row["text"]) for row in rows) / len(rows)
    scored: list[Scored] = []
    for row in rows:
        tfs = term_frequencies(row["text"], patterns)
        score = okapi(zip(tfs, idfs, strict=True), len(row["text"]), avg_length)
        scored.append((score, row["at_ms"] or 0, {"kind": kind, **row}))
    return scored


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
    words = [word for word in query_terms(q) if terms_of(word)]
    patterns = term_patterns(words)
    scored: list[tuple[float, int, SearchHit]] = []
    if "message" in kinds and stats.idfs:
        for turn in recall.turns(stats, limit):
            message = turn.message
            item = hit("message", message.id, message.character_id, message.content, message.at_ms, patterns)
            item["agent_id"], item["role"] = message.agent_id, message.role
            scored.append((turn.score, message.at_ms, item))
    if "fact" in kinds:
        for fact in recall.facts(user_id, character_id):
            score = bm25(fact.text, stats.idfs, stats.average_length)
            if score > 0:
                item = hit(
                    "fact", fact.id, fact.character_id or USER_WIDE, fact.text, fact.updated_ms, patterns
                )
                item["scope"], item["pinned"] = fact.scope, fact.pinned
                scored.append((score, fact.updated_ms, item))
    if "summary" in kinds:
        for summary in recall.summaries(user_id, character_id):
            score = bm25(summary.text, stats.idfs, stats.average_length)
            if score > 0:
                scored.append(
                    (
                        score,
                        summary.updated_ms,
                        hit(
                            "summary",
                            summary.watermark_id,
                            summary.character_id,
                            summary.text,
                            summary.updated_ms,
                            patterns,
                        ),
                    )
                )
    scored.sort(key=lambda item: (-item[0], -item[1]))
    results = []
    for position, (score, _, item) in enumerate(scored[:limit], 1):
        item["rank"], item["score"] = position, round(score, 6)
        results.append(item)
    return {
        "user_id": user_id,
        "character_id": character_id,
        "q": q,
        "terms": words,
        "method": "words",
        "truncated": False,
        "results": results,
    }


def flagged_matches(rows: list[dict[str, Any]], count: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows flagged `term_0`.. `term_{count-1}`: those holding every term (flags dropped), and
    how many rows hold each term."""
    counts = [sum(1 for row in rows if row[f"term_{i}"]) for i in range(count)]
    matched = [row for row in rows if all(row[f"term_{i}"] for i in range(count))]
    for row in matched:
        for i in range(count):
            del row[f"term_{i}"]
    return matched, counts


def search_answer(
    user_id: str,
    character_id: str | None,
    q: str,
    terms: list[str],
    method: SearchMethod,
    *,
    truncated: bool,
    results: list[SearchHit],
) -> UserSearch:
    """A user search's answer."""
    return {
        "user_id": user_id,
        "character_id": character_id,
        "q": q,
        "terms": terms,
        "method": method,
        "truncated": truncated,
        "results": results,
    }


def mention_filters(role: MentionRole, character_id: str | None, mark: str) -> tuple[str, list[Any]]:
    """The ` AND ...` filters on messages `m` of a mentions query, `mark` being the placeholder."""
    filters, params = "", list[Any]()
    if role != "any":
        filters += f" AND m.role = {mark}"
        params.append(role)
    if character_id is not None:
        filters += f" AND m.character_id = {mark}"
        params.append(character_id)
    return filters, params


def mentions_answer(
    q: str,
    role: MentionRole,
    character_id: str | None,
    method: SearchMethod,
    *,
    totals: dict[str, Any],
    rows: Iterable[tuple[dict[str, Any], Iterable[str]]],
    floor: int | None,
    scanned: int | None,
) -> Mentions:
    """A mentions answer from the totals and (row, characters) of each user; a substring scan
    (`scanned` rows above id `floor`) also says how far it read."""
    users: list[MentionUser] = [
        {
            "user_id": row["user_id"],
            "messages": row["messages"],
            "first_ms": row["first_ms"],
            "last_ms": row["last_ms"],
            "characters": sorted(characters),
        }
        for row, characters in rows
    ]
    answer: Mentions = {
        "q": q,
        "role": role,
        "character_id": character_id,
        "method": method,
        "total_users": totals["users"],
        "total_messages": totals["messages"],
        "users": users,
    }
    if scanned is not None and floor is not None:
        answer["scanned_messages"] = scanned
        answer["complete"] = floor <= 0
    return answer
