"""Recall: the memories that answer a question, ranked, dated and within a token budget.

The store ranks a pair's turns by BM25 over their words (`store/sqlite/recall.py`); here the
turns, facts and summary lines are put in one ranked list and rendered. Facts and summary
lines are scored with the same BM25 statistics as turns, so one scale orders them all.
Recency is a mild prior (at most +`RECENCY_WEIGHT`), not the order. A turn that is another
hit's neighbour is not repeated as context, and the same words said twice are one memory
(a summary line quoting a turn too: the turn is shown, with its time).

The ranked list is rendered within a token budget by `core.recall_fit`: the hits first, best
first, each whole; what is left then buys the turns said just before and after the best hits,
shortened, so a reply can be understood. Dates: every turn shows when it was said, and relative
expressions in it are resolved against that time (`core.dates`), appended so the words said
stay as they were.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from typing import Literal

import numpy as np

from agent_memory.core.dates import annotate
from agent_memory.core.domain import Fact, Message, Summary
from agent_memory.core.related import FORMS, RELATED, RELATED_WEIGHT, compound_parts, phrase_terms
from agent_memory.core.render import said_text
from agent_memory.core.stock import without_stock
from agent_memory.core.terms import (
    CHARACTER_WEIGHT,
    STOP_WORDS,
    cached_terms,
    character_parts,
    query_terms,
    terms,
    text_length,
)
from agent_memory.core.textcache import text_cache

MemoryKind = Literal["fact", "summary", "turn"]
RecallScope = Literal["pair", "user"]
RECALL_SCOPES: tuple[RecallScope, ...] = ("pair", "user")

DEFAULT_MAX_TOKENS = 500
HEADING = "Memories from your earlier conversations with this user that may help now (most relevant first; dates UTC):"
USER_FACTS_HEADING = "Always true about this user:"
BM25_K1 = 1.2
# No length normalisation for what recall scores (turns, and facts and summary lines on the same
# scale). A turn counts each word once (binary term frequency), so a long turn gains nothing by
# repeating a word: what b would correct is only that it says more things. People say their news
# at length (a greeting, the news, a question back), and b = 0.75 put such a turn under a short
# one that shares a word with the question ("Why did the scarecrow win an award?" above "I won
# the raffle at the school fair, a cookbook ..."). bench/recall_hard.py at 500 tokens, b 0.75
# -> 0: life seeds 21/22 74.9 -> 76.6 / 73.2 -> 74.1 %, hard seed 11 86.1 -> 87.2 %; 0.3 and
# 0.15 gave less, 0.05 less than 0.
BM25_B = 0.0
# Terms that are numbers or names (capitalised inside the question) weigh this much more.
NUMBER_WEIGHT = 1.5
NAME_WEIGHT = 1.3
# Above this share of the turns in scope, a name or number in the question weighs as any word.
RARE_SHARE = 0.03
RARE_COUNT = 3  # ...and above this many turns, for a short memory
# A name asked that is said in more than this share of the turns is a speaker's (or the user's
# own): two people talking call each other by name ("Hey Gina!", "Thanks, Jon"), so it is in
# the lines said *to* them, not about what they did, and finds greetings. Left out of the question.
SPEAKER_SHARE = 0.05
# A related word (not asked, standing in for one asked) or a Chinese character in more than this
# share of the turns is left out. How an answer is said is common in a long life ("watched" a
# film): 0.01 / 20 -> 0.02 / 40 gave bench/recall_hard.py's life set +4.5-6.3 points (bench/README).
RELATED_SHARE = 0.02
RELATED_COUNT = 40  # ...and in more than this many, for a memory of a few thousand turns
RECENCY_WEIGHT = 0.1
# A memory that says nearly what one ranked above it says weighs less: its score times
# (1 - REPEAT_DISCOUNT x the share of their words they share), for the best `DIVERSE_TOP`.
REPEAT_DISCOUNT = 0.8
DIVERSE_TOP = 40
DIVERSE_HELD = 20  # ...each compared with the best this many (their cost grows as the product)
RECENCY_HALF_LIFE_MS = 30 * 24 * 3600 * 1000
# Hits scoring under this share of the best are noise. Kept low: the best come first whatever
# the floor, so it only decides whether a budget not yet spent buys a weaker match (recall_hard's
# dev seeds, 0.15 -> 0.05: +2 / +2 questions at 500 and at 1,000 tokens; 0.0 gave the same).
MIN_RELATIVE_SCORE = 0.05
CANDIDATES = 20
# A candidate per this many tokens of budget, at least `RANKED`: a larger budget is spent on
# more distinct memories, not left empty; and more are ranked than fit, so that near repeats
# of one line (`REPEAT_DISCOUNT`) and turns matched only in stock sentences (`core.stock`) are
# not all there is to show. 20 / 40 -> 10 / 80 with `core.stock` (alone it moved nothing): life
# seeds 21/22 at 500 tokens 77.5 -> 80.0 / 75.1 -> 78.7 %, multi 44 -> 51 / 37 -> 54 % (bench/README.md).
TOKENS_PER_CANDIDATE = 10
RANKED = 80
_DIGEST_DAY = re.compile(r"^(?:#+\s*)?(\d{4}-\d{2}-\d{2})\b")
_BULLET = re.compile(r"^\s*(?:[-*•]\s+)")
# What a summary line adds to a statement it quotes: the day it was said in front, its dates resolved after.
_QUOTED_DAY = re.compile(r"^\[\d{4}-\d{2}-\d{2}\]\s*")
_DATE_NOTE = re.compile(r"\s*\([^()]* = [^()]*\)$")
# A question about when something happened ("when did I move?", 我哪天搬的家) prefers the turns
# that date an event ("we moved two days ago"): their date, resolved, is the answer. Weighed
# against a turn that matches as well but says no time, by this much.
WHEN_WEIGHT = 1.5
_WHEN = re.compile(
    r"\b(?:when|what (?:date|day|month|year|time)|which (?:date|day|month|year)|how long ago"
    r"|how many (?:days|weeks|months|years) ago)\b|什么时候|哪天|哪一天|几号|几月|日期|多久|多长时间|いつ|언제",
    re.IGNORECASE,
)
# The words that say what kind of answer is wanted ("how long ago", "on what date", 哪天, 多久以前)
# name no content: "long" would find "the long way home", 哪天 the bigrams around it; nor does the
# count of answers asked for ("Which two films …?", "Name the two classes …"): "two" found "I
# stayed up until two" and "two days ago". They are left out of the question's terms (the
# question stays a when-question: `asks_when` reads it whole).
_SCAFFOLD = re.compile(
    r"\bhow (?:long|many (?:days|weeks|months|years|times)|much time)(?: ago| before| after| back)?\b"
    r"|\b(?:what|which) (?:date|day|month|year|time of (?:the )?year)\b|\b(?:days|weeks|months|years) ago\b"
    r"|\b(?:which|what|name (?:the|my|your)) (?:two|three|four)\b"
    r"|什么时候|哪一?天|几号|几月|多久(?:以前|之前)?|多长时间(?:以前|之前)?|什么日期|哪个月",
    re.IGNORECASE,
)
# A question about one speaker's life ("what did you win?" asks the character's, "what did I
# win?" the user's: `core.people.asked_about`) prefers what that speaker said: the other's turns
# (and summary lines quoting them) weigh this much. A preference, not a filter: "you" may be
# said loosely, and a memory that matches far better still comes first.
OTHER_SPEAKER_WEIGHT = 0.7
_SPEAKER_LABEL = re.compile(r"^(User|Assistant):")
_QUOTED_SPEAKER = re.compile(r"^(?:user|assistant):\s*")  # ... in a `statement_key`
# A summary line of at least this many distinct terms that a turn says is that turn quoted (`_distinct`).
QUOTE_TERMS = 3


@dataclass(frozen=True, slots=True)
class ContextTurn:
    """A turn said next to a recalled one: `before` or `after` it."""

    position: Literal["before", "after"]
    role: str
    text: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """One recalled memory: what it says, when, how well it matched, and where it came from."""

    kind: MemoryKind
    text: str
    at_ms: int
    score: float
    character_id: str | None
    # The session (agent run) a turn was said in; None for facts and summaries.
    session: str | None = None
    role: str | None = None
    id: int | None = None
    context: tuple[ContextTurn, ...] = ()
    # A user-wide fact, included whatever was asked (scope user).
    always: bool = False
    # A turn's stored message: its neighbours are looked up only if it is shown.
    message: Message | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class TurnHit:
    """A turn the index found, with its BM25 score."""

    message: Message
    score: float


# Reciprocal rank fusion's constant (Cormack et al.): ranks deep in either list still count.
RRF_K = 60


def fuse(keyword: Sequence[TurnHit], semantic: Sequence[TurnHit]) -> list[TurnHit]:
    """The keyword and the semantic ranking as one (reciprocal rank fusion), on the keyword scale.

    A turn high in both lists rises above one high in a single list. The fused scores are
    scaled so the best is the best keyword score, which facts and summary lines share.
    """
    if not semantic:
        return list(keyword)
    fused: dict[int, float] = {}
    messages: dict[int, Message] = {}
    for ranking in (keyword, semantic):
        for position, hit in enumerate(ranking, 1):
            fused[hit.message.id] = fused.get(hit.message.id, 0.0) + 1 / (RRF_K + position)
            messages[hit.message.id] = hit.message
    scale = (keyword[0].score if keyword else 1.0) / max(fused.values())
    order = sorted(fused, key=lambda message_id: (-fused[message_id], -message_id))
    return [TurnHit(messages[message_id], fused[message_id] * scale) for message_id in order]


# The turns said just before and just after each of some messages in its session (either may
# be None), by message id: asked once for all the memories shown (one round trip).
Neighbours = Callable[[Sequence[Message]], Mapping[int, tuple[Message | None, Message | None]]]


@dataclass(frozen=True, slots=True)
class TermStats:
    """A question's terms over the turns in scope: index pairs, weighted idfs, BM25's figures."""

    pairs: list[int]
    idfs: dict[str, float]
    frequencies: dict[str, int]
    documents: int
    average_length: float


@dataclass(frozen=True, slots=True)
class Recall:
    """The answer to a question: memories within `max_tokens`, and them rendered for a call."""

    q: str
    terms: list[str]
    memories: list[RecalledMemory]
    tokens: int
    max_tokens: int
    system_message: str
    candidates: int = 0
    extra: dict[str, object] = field(default_factory=dict)
    # How long its read took where it ran (a thread hand-off not counted).
    read_ms: float = 0.0
    # Turns in scope not yet in the recall index when it answered (it stopped waiting for them).
    index_lag: int = 0


def candidates_for(max_tokens: int) -> int:
    """How many turns to rank for a budget of `max_tokens`."""
    return max(RANKED, max_tokens // TOKENS_PER_CANDIDATE)


@text_cache(1024)
def weighted_terms(q: str) -> tuple[tuple[str, float], ...]:
    """The question's terms with their weights: numbers and names count more; everyday words
    related to one asked (`core.related`) count less. Cached: a recall reads them twice
    (to rank and to fit), and a call asks about what was just said again."""
    weights: dict[str, float] = {}
    q = _SCAFFOLD.sub(" , ", q)
    parts = character_parts(q)
    words = q.split()
    for position, word in enumerate(words):
        for term in terms(word):
            weight = 1.0
            if term.isdigit():
                weight = NUMBER_WEIGHT
            elif _is_name(word, position):
                weight = NAME_WEIGHT
            elif term in parts:
                weight = CHARACTER_WEIGHT
            weights[term] = max(weights.get(term, 0.0), weight)
    for term in query_terms(q):
        weights.setdefault(term, CHARACTER_WEIGHT if term in parts else 1.0)
    folded = q.casefold()
    for word in folded.split():
        for part in compound_parts(word.strip("?!.,;:'\"")):
            weights.setdefault(part, RELATED_WEIGHT)
    for term in list(weights):
        for form in FORMS.get(term, ()):
            weights.setdefault(form, weights[term])
    for term in list(weights):
        for related in RELATED.get(term, ()):
            weights.setdefault(related, RELATED_WEIGHT)
    for related in phrase_terms(folded):
        weights.setdefault(related, RELATED_WEIGHT)
    # A related word's other forms are the same related word ("purchase": buy, and so bought).
    for term, weight in list(weights.items()):
        for form in FORMS.get(term, ()):
            weights.setdefault(form, weight)
    return tuple(weights.items())


def _is_name(word: str, position: int) -> bool:
    """Whether a question's word is a name: capitalised inside the question, or first and
    possessive ("Gina's sister ..."); not a stop word."""
    bare = word.strip('?!.,;:"')
    if not bare[:1].isupper() or bare.casefold() in STOP_WORDS:
        return False
    return position > 0 or bare.endswith(("'s", "’s"))


def okapi(
    matches: Iterable[tuple[int, float]], length: float, average_length: float, *, b: float = BM25_B
) -> float:
    """Okapi BM25 of one text from its (term frequency, idf) per query term and its length."""
    norm = BM25_K1 * (1 - b + b * length / max(average_length, 1.0))
    return sum(idf * tf * (BM25_K1 + 1) / (tf + norm) for tf, idf in matches if tf)


def bm25(text: str, idfs: Mapping[str, float], average_length: float, *, b: float = BM25_B) -> float:
    """BM25 of one text (a fact, a summary line) for the weighted idfs of a question."""
    counts, length = _term_counts(text)
    # A question has a few terms, a text many: each of the question's is looked up, and most
    # texts have none of them.
    matches = [(counts[term], idf) for term, idf in idfs.items() if term in counts]
    return okapi(matches, length, average_length, b=b) if matches else 0.0


@text_cache(8192)
def _term_counts(text: str) -> tuple[Mapping[str, int], int]:
    # Facts and summary lines are scored again at every question: their terms are counted once
    # (the counts are shared by every caller: never changed).
    found = cached_terms(text)
    counts: dict[str, int] = {}
    for term in found:
        counts[term] = counts.get(term, 0) + 1
    return counts, text_length(text, found)


def recency(at_ms: int, newest_ms: int) -> float:
    """1 for the newest memory, halving every `RECENCY_HALF_LIFE_MS` before it."""
    return float(0.5 ** (max(newest_ms - at_ms, 0) / RECENCY_HALF_LIFE_MS))


def said_at(message: Message) -> int:
    return message.ts_ms or message.at_ms


def turn_text(message: Message) -> str:
    """What a turn said, as recall shows it (`core.render.said_text`)."""
    return said_text(message.content, message.interrupted, message.original)


@text_cache(8192)
def text_key(text: str) -> str:
    """What two memories share when they say the same words (case and spacing aside)."""
    return " ".join(text.casefold().split())


@text_cache(8192)
def statement_key(text: str) -> str:
    """`text_key` of what a memory states: a summary line quoting a turn (its day in front, its
    dates resolved after) is the same memory as the turn, and is shown once."""
    return text_key(_DATE_NOTE.sub("", _QUOTED_DAY.sub("", text)))


def summary_lines(summary: Summary) -> tuple[tuple[str, int], ...]:
    """A summary's statements with the day each belongs to (a digest's day headings), or its update time."""
    return _statements(summary.text, summary.covered_until_ms or summary.updated_ms)


@text_cache(256)
def _statements(text: str, day_ms: int) -> tuple[tuple[str, int], ...]:
    # Every recall of a pair reads its summary again: parsed once per text (dates are slow to parse).
    lines: list[tuple[str, int]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        day = _DIGEST_DAY.match(line)
        if day:
            day_ms = _day_ms(day.group(1), day_ms)
        found = _BULLET.sub("", line)
        quoted = _QUOTED_DAY.match(found)
        if quoted:  # a statement kept with the day it was said: dated by it, shown once
            lines.append((found[quoted.end() :], _day_ms(found[1:11], day_ms)))
        elif found:
            lines.append((found, day_ms))
    return tuple(lines)


def _day_ms(day: str, fallback: int) -> int:
    try:
        return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError:
        return fallback


# A memory before it is built: (score, when, its text, what it comes from).
Scored = tuple[float, int, str, "TurnHit | Fact | Summary"]


def asks_when(q: str) -> bool:
    """Whether `q` asks when something happened (or how long ago)."""
    return _WHEN.search(q) is not None


def dates_an_event(text: str, at_ms: int) -> bool:
    """Whether `text` places something on a day other than the one it was said ("yesterday", "last May")."""
    return annotate(text, at_ms, same_day=False) != text


def rank(
    *,
    hits: Sequence[TurnHit],
    facts: Sequence[Fact],
    summaries: Sequence[Summary],
    idfs: Mapping[str, float],
    average_length: float,
    always: Sequence[Fact] = (),
    when: bool = False,
    speaker: str | None = None,
) -> list[RecalledMemory]:
    """Turns, facts and summary lines in one list, best first; each text once. `when`: the
    question asks when something happened (`asks_when`), so turns that date an event weigh more;
    `speaker`: it asks about what "user" or "assistant" said of themselves, so the other's weigh less."""
    always_ids = {fact.id for fact in always}
    scored = _scored(hits, [f for f in facts if f.id not in always_ids], summaries, idfs, average_length)
    scored = without_stock(scored, lambda source: isinstance(source, TurnHit), idfs)
    if speaker is not None:
        other = "assistant" if speaker == "user" else "user"
        scored = [
            (score * OTHER_SPEAKER_WEIGHT, at_ms, text, source)
            if _said_by(text, source) == other
            else (score, at_ms, text, source)
            for score, at_ms, text, source in scored
        ]
    if when:
        scored = [
            (score * WHEN_WEIGHT, at_ms, text, source)
            if isinstance(source, TurnHit) and dates_an_event(text, at_ms)
            else (score, at_ms, text, source)
            for score, at_ms, text, source in scored
        ]
    newest = max((at_ms for _, at_ms, _, _ in scored), default=0)
    # Ranked and deduplicated as plain tuples: only the memories kept are built (most hits
    # are dropped as repeats or below the floor, on every turn of a live call).
    found = [
        (round(score * (1 + RECENCY_WEIGHT * recency(at_ms, newest)), 4), at_ms, text, source)
        for score, at_ms, text, source in scored
    ]
    found.sort(key=lambda entry: (-entry[0], -entry[1]))
    # Hits under the floor are noise; near repeats above it are put lower, not dropped.
    floor = found[0][0] * MIN_RELATIVE_SCORE if found else 0.0
    found = _diverse([entry for entry in found if entry[0] >= floor])
    pinned = [RecalledMemory("fact", f.text, f.updated_ms, 0.0, None, id=f.id, always=True) for f in always]
    return pinned + _distinct(found)


def _said_by(text: str, source: TurnHit | Fact | Summary) -> str | None:
    """Who said a memory: a turn's role, or the speaker a summary line quotes ("Assistant: …"); None for a fact."""
    if isinstance(source, TurnHit):
        return source.message.role
    label = _SPEAKER_LABEL.match(text) if isinstance(source, Summary) else None
    return label.group(1).lower() if label else None


def _diverse(found: list[Scored]) -> list[Scored]:
    """`found` (best first) with each memory discounted by how much it says the same words as
    one ranked above it (the share of their words they share, times `REPEAT_DISCOUNT`): ten
    turns saying nearly the same thing do not crowd out the one that says something else."""
    top = found[:DIVERSE_TOP]
    near = _nearest_repeats([_term_counts(text)[0] for _, _, text, _ in top])
    out = [
        (round(score * (1 - REPEAT_DISCOUNT * share), 4), at_ms, text, source)
        for (score, at_ms, text, source), share in zip(top, near, strict=True)
    ]
    out.sort(key=_BY_SCORE, reverse=True)  # stable: ties keep their order, as (-score, -at_ms) ascending
    return out + found[DIVERSE_TOP:]


_BY_SCORE = itemgetter(0, 1)
# [i, j]: whether memory j is ranked above memory i (and so is one it may repeat).
_ABOVE = np.tri(DIVERSE_TOP, DIVERSE_HELD, -1)


def _nearest_repeats(said: Sequence[Mapping[str, int]]) -> list[float]:
    """For each text's distinct terms, the largest share of words (intersection over union) it
    has with one of the first `DIVERSE_HELD` ranked above it; 0 for none.

    One matrix product over the texts' words instead of a comparison per pair in Python (a
    recall compares ~40 texts with 20 each: a sixth of its CPU when done pair by pair).
    """
    if not said:
        return []
    held = min(len(said), DIVERSE_HELD)
    every = [term for terms_ in said for term in terms_]
    column = {term: index for index, term in enumerate(dict.fromkeys(every))}
    sizes = [len(terms_) for terms_ in said]
    words = np.zeros((len(said), len(column)))
    words[np.repeat(np.arange(len(said)), sizes), [column[term] for term in every]] = 1.0
    count = np.array(sizes, dtype=np.float64)
    shared = words @ words[:held].T
    # Counts are exact small integers in float64, so each share is the same float as int / int;
    # two texts without a word share none (not 0 / 0).
    share = shared / np.maximum(count[:, None] + count[:held] - shared, 1.0)
    share *= _ABOVE[: len(said), :held]
    return share.max(axis=1).tolist()


def _scored(
    hits: Sequence[TurnHit],
    facts: Sequence[Fact],
    summaries: Sequence[Summary],
    idfs: Mapping[str, float],
    average_length: float,
) -> list[Scored]:
    """Every turn hit, and the facts and summary lines that match the question at all."""
    scored: list[Scored] = [(hit.score, said_at(hit.message), turn_text(hit.message), hit) for hit in hits]
    for fact in facts:
        score = bm25(fact.text, idfs, average_length)
        if score > 0:
            scored.append((score, fact.updated_ms, fact.text, fact))
    for summary in summaries:
        day_ms = summary.covered_until_ms or summary.updated_ms
        lines = _statements(summary.text, day_ms)
        # Only a statement that holds one of the question's terms can score (in their order).
        where = _statement_terms(summary.text, day_ms)
        for index in sorted({index for term in idfs for index in where.get(term, ())}):
            text, at_ms = lines[index]
            score = bm25(text, idfs, average_length)
            if score > 0:
                scored.append((score, at_ms, text, summary))
    return scored


@text_cache(256)
def _statement_terms(text: str, day_ms: int) -> Mapping[str, tuple[int, ...]]:
    """Which of a summary's statements (`_statements`, by index) hold each term."""
    where: dict[str, list[int]] = {}
    for index, (line, _) in enumerate(_statements(text, day_ms)):
        for term in _term_counts(line)[0]:
            where.setdefault(term, []).append(index)
    return {term: tuple(found) for term, found in where.items()}


def _distinct(found: Sequence[Scored]) -> list[RecalledMemory]:
    """The memories of `found` (best first), each text once; a summary line that quotes a sentence
    of a turn kept is that turn (the condenser keeps a long turn's news as such a line)."""
    kept: list[RecalledMemory] = []
    seen: dict[str, int] = {}
    # The kept turns' texts, and the kept summary lines' statements without their speaker, by index.
    turns: dict[int, str] = {}
    quotes: dict[int, str] = {}
    for score, at_ms, text, source in found:
        key = statement_key(text)
        index = seen.get(key)
        if index is None and isinstance(source, Summary):
            quote = _QUOTED_SPEAKER.sub("", key)
            if len(_term_counts(quote)[0]) < QUOTE_TERMS:
                pass  # too short to say it was quoted from one turn rather than said in several
            elif any(quote in said for said in turns.values()):
                continue  # shown already, in the turn with its time
            else:
                quotes[len(kept)] = quote
        elif index is None and isinstance(source, TurnHit):
            index = next((at for at, quote in quotes.items() if quote in key), None)
        if index is None:
            seen[key] = len(kept)
            if isinstance(source, TurnHit):
                turns[len(kept)] = key
            kept.append(_memory(source, text, at_ms, score))
        elif isinstance(source, TurnHit) and kept[index].kind == "summary":
            # The turn a summary line quotes says it with its time and the turns around it: in its place.
            seen[key] = index
            turns[index] = key
            quotes.pop(index, None)
            kept[index] = _memory(source, text, at_ms, kept[index].score)
    return kept


def _memory(source: TurnHit | Fact | Summary, text: str, at_ms: int, score: float) -> RecalledMemory:
    if isinstance(source, TurnHit):
        message = source.message
        return RecalledMemory(
            "turn",
            text,
            at_ms,
            score,
            message.character_id,
            session=message.agent_id,
            role=message.role,
            id=message.id,
            message=message,
        )
    if isinstance(source, Fact):
        return RecalledMemory("fact", text, at_ms, score, source.character_id, id=source.id)
    return RecalledMemory("summary", text, at_ms, score, source.character_id)


def weighted_idfs(
    weighted: Sequence[tuple[str, float]],
    frequencies: Mapping[str, int],
    documents: int,
    *,
    max_frequency: int,
) -> dict[str, float]:
    """Each question term's idf times its weight; terms in more than `max_frequency` turns are
    left out (they say little and cost long posting lists; a term no turn has may still be in a
    fact), and so are related words and Chinese characters in more than `RELATED_SHARE` of
    them, and names in more than `SPEAKER_SHARE`. A name or number weighs more only while it is
    rare: the user's own name, said in many greetings, tells nothing about which turn answers."""
    idfs: dict[str, float] = {}
    for term, weight in weighted:
        frequency = frequencies.get(term, 0)
        if frequency > max_frequency:
            continue
        if weight < 1.0 and frequency > max(RELATED_SHARE * documents, RELATED_COUNT):
            continue  # a related word this common adds little but a long posting list
        if weight == NAME_WEIGHT and frequency > max(SPEAKER_SHARE * documents, RARE_COUNT):
            continue  # a speaker's name: it finds the lines said to them
        if frequency > max(RARE_SHARE * documents, RARE_COUNT):
            weight = min(weight, 1.0)  # a related word or a character is not raised to a word asked
        idfs[term] = weight * idf(documents, frequency)
    return idfs


def idf(total: int, containing: int) -> float:
    """Inverse document frequency, never negative (Lucene's form)."""
    return math.log(1 + (total - containing + 0.5) / (containing + 0.5))
