"""How a fact's scope is stored: a user-wide fact has the empty character.

This module is the one place that knows it (`USER_WIDE`, `fact_scope`, `fact_character`);
each backend's facts, search and export ask it.
"""

from __future__ import annotations

from agent_memory.core.domain import FactScope

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
