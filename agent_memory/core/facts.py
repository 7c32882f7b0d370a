"""Remembered facts: the one key that says two facts are the same, the one limit, the one sanitiser.

Every path that stores or compares facts uses these: the API's pinned facts, the store's
uniqueness (`facts.norm`), the LLM condenser's sanitiser and the offline condenser.
"""

from __future__ import annotations

import unicodedata

from agent_memory.errors import InvalidField

# The longest fact kept, whoever says it (the API, the LLM or the offline condenser).
MAX_FACT_CHARS = 500
# Unicode categories that carry meaning in a fact: letters, marks, numbers and symbols
# ("C++", "$5", an emoji). Punctuation, spaces and control characters only separate words.
_CONTENT_CATEGORIES = frozenset("LMNS")


def fact_key(text: str) -> str:
    """The form two facts share when they say the same thing.

    Compatibility forms (full-width "ＣＡＴ"), case, punctuation and spacing do not count:
    "e-mail", "E mail" and "e mail!" share a key; "email" does not.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        # Most facts are ASCII: decide per character without the Unicode database.
        spaced = "".join(ch if ch.isalnum() or _ascii_symbol(ch) else " " for ch in folded)
    else:
        spaced = "".join(ch if unicodedata.category(ch)[0] in _CONTENT_CATEGORIES else " " for ch in folded)
    return " ".join(spaced.split())


def _ascii_symbol(ch: str) -> bool:
    """True for the ASCII characters Unicode files as symbols (Sm, Sc, Sk): `$+<=>^`|~`."""
    return ch in "$+<=>^`|~"


# The name the store and the service used before facts had one key (kept for this phase).
normalise = fact_key


def clean_text(text: str) -> str:
    """A fact's text as stored (spacing collapsed), or InvalidField if it cannot be one."""
    cleaned = " ".join(text.split())
    if not fact_key(cleaned):
        raise InvalidField("a fact needs some text")
    if len(cleaned) > MAX_FACT_CHARS:
        raise InvalidField(f"a fact is at most {MAX_FACT_CHARS} characters, got {len(cleaned)}")
    return cleaned
