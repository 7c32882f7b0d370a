"""Recall rendered within a token budget: the ranked memories (`core.recall.rank`) that fit, best
first, each whole; what is left then buys the turns said just before and after them, shortened.

A long turn is shown as its first sentence and the sentences that match the question; every
turn shows the day it was said, with its relative dates resolved (`core.dates`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.core.clock import format_day
from agent_memory.core.dates import annotate
from agent_memory.core.domain import Message
from agent_memory.core.recall import (
    HEADING,
    ContextTurn,
    MemoryKind,
    Neighbours,
    Recall,
    RecalledMemory,
    said_at,
    text_key,
    turn_text,
    weighted_terms,
)
from agent_memory.core.render import ROLE_NAMES
from agent_memory.core.stock import SENTENCE
from agent_memory.core.terms import cached_terms, query_terms
from agent_memory.core.tokens import count_message_tokens, count_tokens

# A turn longer than this is shown as its first sentence and the sentences that match the
# question (the rest marked " … "), so the budget buys more distinct memories.
LONG_TURN_TOKENS = 60
CONTEXT_MAX_TOKENS = 40


def _dated_text(memory: RecalledMemory, asked: frozenset[str]) -> str:
    """A turn's text (its `snippet`) with its relative dates resolved against when it was said
    (done only for the shown); "today" is not noted: the line shows its day."""
    if memory.kind != "turn":
        return memory.text
    return annotate(snippet(memory.text, asked), memory.at_ms, same_day=False)


def _speaker(role: str | None) -> str:
    return ROLE_NAMES.get(role or "", (role or "").capitalize() or "Someone")


def _clip(text: str, budget: int) -> str:
    if count_tokens(text) <= budget:
        return text
    words = text.split()
    while words and count_tokens(" ".join(words) + " …") > budget:
        words = words[: max(len(words) * 3 // 4, len(words) - 8)] if len(words) > 8 else words[:-1]
    if not words:  # one long run of CJK text without spaces
        cut = text[: max(budget, 1)]
        while cut and count_tokens(cut + " …") > budget:
            cut = cut[:-1]
        return cut + " …"
    return " ".join(words) + " …"


def snippet(text: str, asked: frozenset[str]) -> str:
    """A long turn's first sentence and its sentences that say a word `asked`, in order, the
    sentences left out marked " … "; the turn itself when it is short or every sentence counts."""
    if count_tokens(text) <= LONG_TURN_TOKENS:
        return text
    sentences = [found.strip() for found in SENTENCE.findall(text) if found.strip()]
    kept = [
        index == 0 or not asked.isdisjoint(cached_terms(sentence)) for index, sentence in enumerate(sentences)
    ]
    if all(kept):
        return text
    parts: list[str] = []
    for sentence, keep in zip(sentences, kept, strict=True):
        if keep:
            parts.append(sentence)
        elif not parts or parts[-1] != "…":
            parts.append("…")
    return " ".join(parts)


def memory_line(memory: RecalledMemory) -> str:
    """How one memory reads in the system message (without its context)."""
    return _line(memory.kind, memory.text, memory.at_ms, memory.role)


def _line(kind: MemoryKind, text: str, at_ms: int, role: str | None) -> str:
    if kind == "fact":
        return f"- Fact: {text}"
    if kind == "summary":
        return f"- [{format_day(at_ms)}] Summary: {text}"
    # The day, not the minute: the time of day answers next to no question and costs ~4 tokens a
    # memory (on bench/recall_hard.py's dev seeds, the budget they free buys a memory more).
    return f"- [{format_day(at_ms)}] {_speaker(role)}: {text}"


def context_line(turn: ContextTurn) -> str:
    label = "just before" if turn.position == "before" else "just after"
    return f"  ({label}) {_speaker(turn.role)}: {turn.text}"


def fit(
    q: str,
    ranked: Sequence[RecalledMemory],
    max_tokens: int,
    *,
    neighbours: Neighbours | None = None,
    candidates: int = 0,
    linked: Sequence[str] = (),
) -> Recall:
    """The best memories that fit in `max_tokens`, then context for them while room is left;
    `linked`: terms the question was asked with besides its own (a person's other name,
    `core.people`), whose sentences a long turn shows too."""
    used = count_message_tokens(HEADING)
    asked = frozenset(term for term, _ in weighted_terms(q)).union(linked)
    chosen: list[tuple[RecalledMemory, str]] = []
    for memory in ranked:
        text = _dated_text(memory, asked)
        cost = count_tokens(_line(memory.kind, text, memory.at_ms, memory.role)) + 1
        if used + cost <= max_tokens:  # else a shorter one further down may still fit
            used += cost
            chosen.append((memory, text))
    turns = [memory.message for memory, _ in chosen if memory.message is not None]
    around = neighbours(turns) if neighbours is not None and turns and used < max_tokens else {}
    # A neighbour that is itself shown is not repeated as context.
    shown_keys = {
        text_key((memory.message and turn_text(memory.message)) or memory.text) for memory, _ in chosen
    }
    shown: list[RecalledMemory] = []
    for memory, text in chosen:
        pair = around.get(memory.message.id, (None, None)) if memory.message is not None else (None, None)
        added, used = _context(pair, shown_keys, used, max_tokens)
        shown.append(_shown(memory, text, added))
    content = "\n".join(
        [
            HEADING,
            *(line for memory in shown for line in (memory_line(memory), *map(context_line, memory.context))),
        ]
    )
    return Recall(
        q=q,
        terms=query_terms(q),
        memories=shown,
        tokens=count_message_tokens(content) if shown else 0,
        max_tokens=max_tokens,
        system_message=content if shown else "",
        candidates=candidates,
    )


def _context(
    around: tuple[Message | None, Message | None], shown_keys: set[str], used: int, max_tokens: int
) -> tuple[tuple[ContextTurn, ...], int]:
    """The turns around a memory that fit (and are not shown themselves), and the tokens used after them."""
    added: list[ContextTurn] = []
    for position, turn in zip(("before", "after"), around, strict=True):
        if turn is None or text_key(turn_text(turn)) in shown_keys:
            continue
        # Said in the session of the memory it stands by, whose line shows the day.
        said = _clip(annotate(turn_text(turn), said_at(turn), same_day=False), CONTEXT_MAX_TOKENS)
        context = ContextTurn(position, turn.role, said, said_at(turn))  # type: ignore[arg-type]
        cost = count_tokens(context_line(context)) + 1
        if used + cost <= max_tokens:
            used += cost
            added.append(context)
    return tuple(added), used


def _shown(memory: RecalledMemory, text: str, context: tuple[ContextTurn, ...]) -> RecalledMemory:
    """`memory` as shown: its text fitted, its context added. Built once, not copied with
    `dataclasses.replace` (which reads every field by name)."""
    return RecalledMemory(
        memory.kind,
        text,
        memory.at_ms,
        memory.score,
        memory.character_id,
        session=memory.session,
        role=memory.role,
        id=memory.id,
        context=context,
        always=memory.always,
        message=memory.message,
    )
