"""How a fact's scope is stored: a user-wide fact has the empty character.

This module is the one place that knows it (`USER_WIDE`, `fact_scope`, `fact_character`);
each backend's facts, search and export ask it. It also decides, for both backends, where a
new fact goes (`place_fact`): onto the one that already says it, over the one about the same
subject (whose text is kept in `fact_history`), or in a row of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agent_memory.core.domain import Fact, FactScope
from agent_memory.core.facts import fact_subject, near_key

# The character column of a user-wide fact.
USER_WIDE = ""


def fact_scope(character_column: str) -> FactScope:
    """The scope of a stored fact, from its character column."""
    return "user" if character_column == USER_WIDE else "character"


def fact_character(scope: FactScope, character_id: str) -> str:
    """The character column of a fact of `scope` said with `character_id`."""
    if scope == "user":
        return USER_WIDE
    if character_id == USER_WIDE:
        raise ValueError("a fact about one character needs that character")
    return character_id


# Columns of a fact's past texts (`fact_history`), in the order both backends read them.
HISTORY_COLUMNS = "fact_id, text, origin, valid_from, valid_to, change"
Placement = Literal["same", "supersede", "new"]


def place_fact(
    text: str, scope: FactScope, pinned: bool, held: Sequence[Fact]
) -> tuple[Placement, Fact | None]:
    """Where a new fact goes among the current facts its pair sees (oldest first): the fact
    that already says it (`core.facts.near_key`), the fact about the same subject it
    supersedes (`core.facts.fact_subject`), or a new one.

    A user-wide fact is only the same as, or supersedes, a user-wide one (it must reach every
    character); a fact the model found never supersedes a pinned one (what was said by hand
    stays until said otherwise by hand).
    """
    reachable = [fact for fact in held if scope == "character" or fact.scope == "user"]
    key = near_key(text)
    same = next((fact for fact in reachable if near_key(fact.text) == key), None)
    if same is not None:
        return "same", same
    subject = fact_subject(text)
    if subject is not None:
        for fact in reversed(reachable):  # the newest, should two already disagree
            if (pinned or not fact.pinned) and fact_subject(fact.text) == subject:
                return "supersede", fact
    return "new", None
