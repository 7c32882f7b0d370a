"""Remembered facts: normalisation for deduplication, and adding one by hand."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from agent_memory.errors import InvalidField
from agent_memory.store import SQLiteTransaction

MAX_FACT_CHARS = 500
_SPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = " .。!！?？,，;；:：-—\"'“”‘’"


def normalise(text: str) -> str:
    """The form two facts share when they say the same thing."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", folded).strip(_EDGE_PUNCTUATION)


def clean_text(text: str) -> str:
    """A fact's text as stored, or InvalidField if there is nothing to store."""
    cleaned = _SPACE.sub(" ", text).strip()
    if not normalise(cleaned):
        raise InvalidField("a fact needs some text")
    if len(cleaned) > MAX_FACT_CHARS:
        raise InvalidField(f"a fact is at most {MAX_FACT_CHARS} characters, got {len(cleaned)}")
    return cleaned


def add_pinned_fact(
    tx: SQLiteTransaction, user_id: str, character_id: str, text: str
) -> tuple[dict[str, Any], bool]:
    """A fact said by hand: pinned, so the model never removes it."""
    cleaned = clean_text(text)
    return tx.add_fact(user_id, character_id, cleaned, normalise(cleaned), pinned=True, origin="manual")
