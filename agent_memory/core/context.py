"""The context builder: the `system_messages` a call starts with, within a token budget.

Order and importance, most important first: the caller's persona, remembered facts, the
memories recalled for the call's `query` (when the app says what the call is about), the
rolling summary, then the most recent turns. When the budget is short the oldest
turns go first, then the summary is shortened, then the least important facts go.
The same stored memory and arguments always give the same messages, shaped for the
agent's `llm.style`. Reading a pair's memory for it is `memory.service` (a live refresh
leaves out the running call's own turns there: the agent already holds them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_memory.core.clock import format_datetime
from agent_memory.core.domain import Fact, Message, Summary
from agent_memory.core.render import Entry, day_header, entries_newest_first, join_entries
from agent_memory.core.styles import DEFAULT_STYLE, shape_system_messages
from agent_memory.core.tokens import count_message_tokens, count_tokens
from agent_memory.errors import InvalidField

FACTS_HEADING = "What you remember about this user (long-term memory):"
SUMMARY_HEADING = "Summary of your earlier conversations with this user"
RECENT_HEADING = "The most recent turns of your conversations with this user (times in UTC):"
MIN_SUMMARY_TOKENS = 40
# The latest turns keep at least this share of max_tokens when there are turns (a few turns at
# 1,500: where the last call left off): the summary (a profile, open threads and a dated timeline
# of every call) takes the rest it needs. Measured with bench/recall_hard.py (the README gives
# the figures of each split; a tenth gave 1.6-3.6 points fewer on the life and hard sets).
RECENT_SHARE = 0.05
# With a query, recall may take up to a third of max_tokens (500 of the default 1,500).
RECALL_SHARE = 3
MIN_RECALL_TOKENS = 60


@dataclass
class Context:
    """Built system_messages and what went into them."""

    system_messages: list[dict[str, Any]]
    tokens: int
    max_tokens: int
    included: dict[str, Any] = field(default_factory=dict)
    style: str = DEFAULT_STYLE

    def as_json(self) -> dict[str, Any]:
        return {
            "system_messages": self.system_messages,
            "style": self.style,
            "tokens": self.tokens,
            "max_tokens": self.max_tokens,
            "included": self.included,
        }


def facts_message(facts: Sequence[Fact]) -> str:
    return "\n".join([FACTS_HEADING, *(f"- {fact.text}" for fact in facts)])


def summary_message(summary: Summary, text: str | None = None) -> str:
    freshness = f"updated {format_datetime(summary.updated_ms)}"
    if summary.covered_until_ms:
        freshness += f", covering the conversation until {format_datetime(summary.covered_until_ms)}"
    if summary.method == "offline":
        freshness += ", made without a language model"
    return f"{SUMMARY_HEADING} ({freshness}):\n{text if text is not None else summary.text}"


def _shorten(text: str, budget: int) -> str:
    """Cut `text` to about `budget` tokens at a sentence or word boundary."""
    if count_tokens(text) <= budget:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text[:middle]) + 1 <= budget:
            low = middle
        else:
            high = middle - 1
    cut = text[:low]
    boundary = max(cut.rfind(mark) for mark in (". ", "。", "! ", "? ", "\n", "；"))
    if boundary > len(cut) // 2:
        cut = cut[: boundary + 1]
    elif " " in cut[len(cut) // 2 :]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip() + " …"


def _fact_importance(fact: Fact) -> tuple[bool, int, int]:
    # Pinned facts matter most, then the newest.
    return (fact.pinned, fact.updated_ms, fact.id)


def _fit_facts(facts: Sequence[Fact], budget: int) -> list[Fact]:
    kept = list(facts)
    while kept and count_message_tokens(facts_message(kept)) > budget:
        least = min(kept, key=_fact_importance)
        kept.remove(least)
    return kept


def _fit_recent(messages: Sequence[Message], budget: int) -> tuple[str | None, int]:
    """The transcript of the newest messages that fits; returns (text, messages used).

    Each line is rendered and counted once, and the transcript grows from the newest line
    back. Estimates of separate lines add up to at least the estimate of the joined text,
    so what fits line by line fits as a whole.
    """
    room = budget - count_message_tokens(RECENT_HEADING) - 1
    if room <= 0:
        return None, 0
    # Rendered from the newest back only as far as the budget reaches.
    taken: list[Entry] = []
    used, first_day = 0, None
    for entry in entries_newest_first(messages):
        header_cost = count_tokens(day_header(entry.day)) + 1  # cached: one per day
        cost = count_tokens(entry.text) + 1 + header_cost
        if entry.day == first_day:
            cost -= header_cost  # the newer line's day header is no longer needed
        if used + cost > room:
            break
        used, first_day = used + cost, entry.day
        taken.append(entry)
    taken.reverse()
    for start in range(len(taken)):
        text = "\n".join([RECENT_HEADING, *join_entries(taken[start:])])
        if count_message_tokens(text) <= budget:
            return text, len(messages) - taken[start].index
    return None, 0


def _fit_summary(
    summary: Summary | None, budget: int, shorten_summary: Callable[[str, int], str | None] | None
) -> tuple[str | None, bool]:
    """The summary's message within `budget` tokens, and whether it had to be shortened."""
    if not summary or not summary.text.strip():
        return None, False
    text = summary_message(summary)
    cost = count_message_tokens(text)
    if cost <= budget:
        return text, False
    room = budget - (cost - count_tokens(summary.text))
    if room < MIN_SUMMARY_TOKENS:
        return None, False
    short = shorten_summary(summary.text, room) if shorten_summary else None
    return summary_message(summary, short or _shorten(summary.text, room)), True


def build_context(
    *,
    facts: Sequence[Fact],
    summary: Summary | None,
    messages: Sequence[Message],
    max_tokens: int,
    persona: str | None = None,
    style: str = DEFAULT_STYLE,
    shorten_summary: Callable[[str, int], str | None] | None = None,
) -> Context:
    """Assemble system_messages from memory; `messages` are the latest turns, oldest first.
    `shorten_summary` cuts a summary to a token budget by what it says (the condenser that
    made it knows its form); without it, or when it gives None, the summary is cut at its end."""
    system: list[str] = []
    budget = max_tokens
    if persona:
        persona_tokens = count_message_tokens(persona)
        if persona_tokens > max_tokens:
            raise InvalidField(
                f"the persona alone is about {persona_tokens} tokens, over max_tokens={max_tokens}; "
                "raise max_tokens or shorten the persona"
            )
        system.append(persona)
        budget -= persona_tokens

    kept_facts = _fit_facts(facts, budget) if facts else []
    facts_text = facts_message(kept_facts) if kept_facts else None
    if facts_text:
        budget -= count_message_tokens(facts_text)

    reserve = int(max_tokens * RECENT_SHARE) if messages else 0
    summary_text, summary_shortened = _fit_summary(summary, budget - reserve, shorten_summary)
    used = count_message_tokens(summary_text) if summary_text else 0
    recent_text, recent_count = _fit_recent(messages, budget - used)
    if summary_shortened or (summary_text is None and summary is not None):
        # What the latest turns could not use of their share goes back to the summary.
        left = budget - (count_message_tokens(recent_text) if recent_text else 0)
        if left > budget - reserve:
            summary_text, summary_shortened = _fit_summary(summary, left, shorten_summary)
    system.extend(text for text in (facts_text, summary_text, recent_text) if text)
    tokens = sum(count_message_tokens(text) for text in system)
    return Context(
        system_messages=shape_system_messages(system, style),
        tokens=tokens,
        max_tokens=max_tokens,
        style=style,
        included={
            "persona": bool(persona),
            "facts": len(kept_facts),
            "facts_available": len(facts),
            "recalled": 0,
            "summary": summary_text is not None,
            "summary_shortened": summary_shortened,
            "messages": recent_count,
            "messages_available": len(messages),
        },
    )


def recall_budget(max_tokens: int, persona: str | None = None) -> int:
    """What the memories recalled for a query may take of a start context: a third of it (at
    least `MIN_RECALL_TOKENS`), never what the persona needs; 0 when that leaves too little."""
    room = max_tokens - (count_message_tokens(persona) if persona else 0)
    budget = min(room, max(max_tokens // RECALL_SHARE, MIN_RECALL_TOKENS))
    return budget if budget >= MIN_RECALL_TOKENS else 0


def with_recall(base: Context, recalled: str | None, count: int, *, max_tokens: int, query: str) -> Context:
    """A context built within `max_tokens - recall_budget(...)` with the recalled memories
    added right after the persona and facts.

    The base is the same for every query of a pair until its memory changes, so it is built
    once; only the recall is done per query.
    """
    messages = list(base.system_messages)
    tokens = base.tokens
    if recalled:
        at = int(base.included["persona"]) + int(base.included["facts"] > 0)
        messages[at:at] = shape_system_messages([recalled], base.style)
        tokens += count_message_tokens(recalled)
    return Context(
        system_messages=messages,
        tokens=tokens,
        max_tokens=max_tokens,
        style=base.style,
        included={**base.included, "recalled": count, "query": query},
    )
