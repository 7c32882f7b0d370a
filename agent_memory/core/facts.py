"""Remembered facts: the one key that says two facts are the same, the one limit, the one sanitiser,
and where a new fact goes among those held (`place_fact`).

Every path that stores or compares facts uses these: the API's pinned facts, the store's
uniqueness (`facts.norm`), the LLM condenser's sanitiser and the offline condenser.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Literal

from agent_memory.core.domain import Fact, FactScope
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
    # Most facts are ASCII, which NFKC leaves as it is and casefold lower-cases; their
    # separators go in one translation of bytes (str.translate looks each character up in a
    # dict, ten times dearer: the offline condenser keys every statement said).
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        spaced = folded.encode("ascii").translate(_ASCII_SEPARATOR_BYTES).decode("ascii")
    else:
        spaced = "".join(ch if unicodedata.category(ch)[0] in _CONTENT_CATEGORIES else " " for ch in folded)
    return " ".join(spaced.split())


def _ascii_symbol(ch: str) -> bool:
    """True for the ASCII characters Unicode files as symbols (Sm, Sc, Sk): `$+<=>^`|~`."""
    return ch in "$+<=>^`|~"


# Every ASCII character that only separates words (not a letter, digit or symbol) as a space.
_ASCII_SEPARATORS = {
    code: " " for code in range(128) if not (chr(code).isalnum() or _ascii_symbol(chr(code)))
}
_ASCII_SEPARATOR_BYTES = bytes(ord(" ") if code in _ASCII_SEPARATORS else code for code in range(256))


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


# -- what a fact is about ----------------------------------------------------------------------
# A state fact's date ("(as of 2023-05-08)") says when it was true; the same statement on a
# later day is the same fact, so facts are compared without it.
STATE_DATE = re.compile(r"\s*\((?:as of |截至 ?)?\d{4}(?:-\d{2}){0,2}(?: 기준)?\)$")
# Who a fact is about when it says so: "The user …", "User's …", "I …" (the key's lower case).
_ABOUT_USER = re.compile(r"^(?:the user s |the user |user s |user |i m |i am |i |my |we )")


def undated_key(text: str) -> str:
    """`fact_key` of a fact without the date a state fact carries."""
    return fact_key(STATE_DATE.sub("", text))


def near_key(text: str) -> str:
    """The form near-duplicates share: undated, and without saying it is about the user.

    "The user lives in Paris (as of 2026-01-05)", "lives in Paris" and "User lives in
    Paris." are one fact; "lives in Lyon" is another.
    """
    key = undated_key(text)
    return _ABOUT_USER.sub("", key, count=1) or key


# The subjects a fact about the user can hold one value of at a time, tried on its `near_key`
# (lower case, punctuation as spaces): a new value supersedes the old one, whose text is kept
# as history. Conservative on purpose: a fact matching none is never superseded.
_SUBJECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "residence",
        re.compile(
            r"^(?:(?:currently|still|now|just|recently|finally|also|has|have|had|s|ve)\s+)*"
            r"(?:lives?|living|is living|am living|resides?|moved|relocated|has moved)\s+(?:back\s+)?(?:in|to|into)\s+\S"
        ),
    ),
    (
        "job",
        re.compile(
            r"^(?:(?:currently|still|now|has|have|just)\s+)*(?:works?|working|is working|started working)\s+as\s+\S"
            r"|^job is\s+\S"
        ),
    ),
    (
        "employer",
        re.compile(r"^(?:(?:currently|still|now)\s+)*(?:works?|working|is working)\s+(?:at|for)\s+\S"),
    ),
    ("name", re.compile(r"^name is\s+\S")),
    ("nickname", re.compile(r"^(?:likes|prefers|wants) to be called\s+\S")),
    ("age", re.compile(r"^(?:is|am)\s+\d{1,3}\s+(?:years|year)\s+old$")),
    (
        "residence",
        re.compile(r"^(?:用户|我)(?:家|们)?(?:现在|目前|最近|刚刚|刚|已经|又|也)*(?:住在|搬到|搬去|搬来)"),
    ),
    ("name", re.compile(r"^(?:用户|我)(?:叫|的名字是|的名字叫|名字叫)")),
    ("residence", re.compile(r"^사용자는 .*(?:살아요|살고|삽니다|살아)")),
)
# "The user's favourite colour is blue", "The user's sister is called Mia": one value each.
_OWN = re.compile(
    r"^(?P<what>favou?rite [^ ]+(?: [^ ]+)?|(?:mom|mum|mother|dad|father|wife|husband|partner|boyfriend"
    r"|girlfriend|fiance|fiancee|best friend)) (?:is|are)(?: called| named)? \S"
)


def fact_subject(text: str) -> str | None:
    """What a fact says about the user that holds one value at a time (where they live, their
    job, their name, a favourite …), or None when it is not such a fact.

    Two current facts with one subject contradict each other: the newer supersedes the older.
    """
    key = undated_key(text)
    about = _ABOUT_USER.sub("", key, count=1)
    # "The user's sister …" is the user's; "Ann's sister …" is not known to be.
    own = _OWN.match(about) if key.startswith(("the user s ", "user s ", "my ")) else None
    if own is not None:
        return own.group("what").replace("favourite", "favorite")
    return next((name for name, pattern in _SUBJECTS if pattern.search(about)), None)


Placement = Literal["same", "supersede", "new"]


def place_fact(
    text: str, scope: FactScope, pinned: bool, held: Sequence[Fact]
) -> tuple[Placement, Fact | None]:
    """Where a new fact goes among the current facts its pair sees (oldest first): the fact
    that already says it (`near_key`), the fact about the same subject it supersedes
    (`fact_subject`), or a new one.

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
