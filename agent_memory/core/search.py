"""How a search query is read and its matches scored and shown: pure text, as core.recall is for recall.

The store's search (`store.shared.search`) finds the rows; these say which words a query asks
for, whether it is several words (then ranked like recall), how a row that holds them scores
(BM25 over the matched text: `okapi`, k1 = 1.2, b = `MATCH_B`) and the snippet a result shows.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

from agent_memory.core.domain import Fact, Summary
from agent_memory.core.recall import TermStats, TurnHit, bm25, idf, okapi
from agent_memory.core.terms import terms as terms_of

# A search ranks whole rows, which count every time they say a term (not once, as recall's
# turns do), and a summary is one row of a whole life: the usual length normalisation holds.
MATCH_B = 0.75
# What search looks through, and whose messages a mention query counts.
SearchKind = Literal["message", "fact", "summary"]
SEARCH_KINDS: Final[tuple[SearchKind, ...]] = ("message", "fact", "summary")
MentionRole = Literal["user", "assistant", "any"]
# fts: through the trigram index; substring: a bounded scan (words under three characters).
SearchMethod = Literal["fts", "substring", "words"]
MENTION_ROLES: Final[tuple[MentionRole, ...]] = ("user", "assistant", "any")

MAX_TERMS = 16
SNIPPET_CHARS = 96
# A run of Chinese, Japanese or Korean this long is a sentence (a question), not one word.
CJK_SENTENCE_CHARS = 6
_CJK_RUN = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{" + str(CJK_SENTENCE_CHARS) + ",}"
)


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


# A matched row's score, its time (the tie-break, newer first) and the row with its kind.
Scored = tuple[float, int, dict[str, Any]]


def scored_rows(
    kind: str,
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
        score = okapi(zip(tfs, idfs, strict=True), len(row["text"]), avg_length, b=MATCH_B)
        scored.append((score, row["at_ms"] or 0, {"kind": kind, **row}))
    return scored


class SearchHit(TypedDict):
    """One search result: a message, fact or summary (the fields after `score` by kind)."""

    kind: SearchKind
    id: int
    character_id: str
    snippet: str
    text: str
    at_ms: int | None
    rank: int
    score: float
    agent_id: NotRequired[str]
    role: NotRequired[str]
    scope: NotRequired[Literal["user", "character"]]
    pinned: NotRequired[bool]


class UserSearch(TypedDict):
    """A user's matches, best first, and how they were found."""

    user_id: str
    character_id: str | None
    q: str
    terms: list[str]
    method: SearchMethod
    # More matched than were ranked: the oldest were left out.
    truncated: bool
    results: list[SearchHit]


class MentionUser(TypedDict):
    """One user whose messages contain the phrase."""

    user_id: str
    messages: int
    first_ms: int | None
    last_ms: int | None
    characters: list[str]


class Mentions(TypedDict):
    """Which users' messages contain a phrase (the substring method says how far it read)."""

    q: str
    role: MentionRole
    character_id: str | None
    method: SearchMethod
    total_users: int
    total_messages: int
    users: list[MentionUser]
    scanned_messages: NotRequired[int]
    complete: NotRequired[bool]


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


def words_answer(
    user_id: str,
    character_id: str | None,
    q: str,
    stats: TermStats,
    *,
    turns: Sequence[TurnHit],
    facts: Sequence[Fact],
    summaries: Sequence[Summary],
    limit: int,
) -> UserSearch:
    """A search of several words: the turns recall ranked, and the facts and summaries scored
    on the same BM25 scale (`stats`), best (then newest) first."""
    words = [word for word in query_terms(q) if terms_of(word)]
    patterns = term_patterns(words)
    scored: list[tuple[float, int, SearchHit]] = []
    for turn in turns:
        message = turn.message
        item = hit("message", message.id, message.character_id, message.content, message.at_ms, patterns)
        item["agent_id"], item["role"] = message.agent_id, message.role
        scored.append((turn.score, message.at_ms, item))
    for fact in facts:
        score = bm25(fact.text, stats.idfs, stats.average_length, b=MATCH_B)
        if score > 0:
            # A user-wide fact names no character ("").
            item = hit("fact", fact.id, fact.character_id or "", fact.text, fact.updated_ms, patterns)
            item["scope"], item["pinned"] = fact.scope, fact.pinned
            scored.append((score, fact.updated_ms, item))
    for summary in summaries:
        score = bm25(summary.text, stats.idfs, stats.average_length, b=MATCH_B)
        if score > 0:
            at, text = summary.updated_ms, summary.text
            item = hit("summary", summary.watermark_id, summary.character_id, text, at, patterns)
            scored.append((score, at, item))
    scored.sort(key=lambda item: (-item[0], -item[1]))
    results = []
    for position, (score, _, item) in enumerate(scored[:limit], 1):
        item["rank"], item["score"] = position, round(score, 6)
        results.append(item)
    return search_answer(user_id, character_id, q, words, "words", truncated=False, results=results)
