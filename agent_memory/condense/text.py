"""Text as the offline condenser reads it: its script, its sentences and clauses, clipped."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Literal

from agent_memory.core.textcache import text_cache

Language = Literal["en", "zh", "ja", "ko"]

ELLIPSIS = "…"

# -- language ------------------------------------------------------------------------------
HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
KANA = re.compile("[\u3040-\u30ff]")
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile("[A-Za-z\u00c0-\u024f]")


def detect_language(texts: Iterable[str]) -> Language:
    """The conversation's script: Chinese, Japanese or Korean when mostly CJK, else "en"."""
    text = "".join(texts)
    if text.isascii():
        return "en"  # no CJK character is ASCII
    hangul, kana, han = len(HANGUL.findall(text)), len(KANA.findall(text)), len(HAN.findall(text))
    cjk = hangul + kana + han
    # One CJK character carries about as much as a short Latin word (~3 letters).
    if cjk == 0 or cjk * 3 < len(LATIN.findall(text)):
        return "en"
    if hangul >= kana + han:
        return "ko"
    if kana:  # Chinese is written without kana; a fair share of it means Japanese
        return "ja" if kana * 5 >= han else "zh"
    return "zh"


# -- small text helpers --------------------------------------------------------------------
def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a word boundary when there is one."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:  # only Latin text has spaces worth cutting at
        cut = cut[:space]
    return cut.rstrip(" ,;:，、") + ELLIPSIS


# Abbreviations whose period ends no sentence: "the ICU at St. Mary's, seven p.m. to seven a.m."
# is one sentence, not four fragments that a digest would quote one of.
ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "St", "Mt", "Prof", "Jr", "Sr", "vs", "a.m", "p.m", "e.g", "i.e")
_NOT_ABBREVIATED = "".join(rf"(?<!\b{re.escape(word)}\.)" for word in ABBREVIATIONS)
# After CJK punctuation, after Latin punctuation and a space, or after Latin punctuation
# directly followed by CJK text ("好!我想"), but not inside "3.5" or "St.Mary".
SENTENCE_END = re.compile(rf"(?<=[。！？])\s*|(?<=[.!?]){_NOT_ABBREVIATED}(?:\s+|(?=[^\x00-\x7f]))|\n+")


# A statement is split for its facts, for its salience and for its gist: once (a forget empties it).
@text_cache(16384)
def sentences(text: str) -> tuple[str, ...]:
    """`text` split after sentence-ending punctuation (Latin and CJK)."""
    return tuple(part.strip() for part in SENTENCE_END.split(text) if part and part.strip())


# A sentence ending in a question mark or particle (吗, 么, 까) asks rather than states.
# A sentence that only greets or takes leave, perhaps by name ("Hi Sam!", "Hey Luna, good to hear
# from you.", "Sam!", "Talk soon, Luna.", 小林你好！, 拜拜，小月！): what every call opens and
# closes with, whose words are said too seldom for their frequency to tell (once a call).
# The words people greet with, and those they take leave with (a name may follow either).
EN_HELLO = r"(?:hi|hey|hello|hiya|howdy|good (?:morning|afternoon|evening)|morning|evening)"
_EN_GOODBYE = (
    r"(?:bye|goodbye|bye for now|good night|talk (?:soon|later|to you soon)|speak soon|take care|"
    r"see you(?: soon| later)?|cheers|hello again|(?:good|nice|great) to (?:hear from|see|talk to) you)"
)
_SALUTE_EN = rf"(?:{EN_HELLO}|{_EN_GOODBYE})"
NAME_WORD = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)?"
ZH_HELLO = r"(?:你好|您好|嗨|哈喽)"
_SALUTE_ZH = rf"(?:{ZH_HELLO}|拜拜|再见|回头聊|保重|又见面啦|晚安|早上好|晚上好)"
SALUTATION = re.compile(
    rf"(?i:{_SALUTE_EN})(?:,?\s+{NAME_WORD})?(?:[,!.]*\s+(?i:{_SALUTE_EN}))?[!.,]*"
    rf"|{NAME_WORD}!+|{NAME_WORD}[,!.]*\s+(?i:{_SALUTE_EN})[!.]*"
    rf"|(?:[\u4e00-\u9fff]{{2,3}}[，,]?)?{_SALUTE_ZH}[，,]?(?:[\u4e00-\u9fff]{{2,3}})?[！!。.]*"
)


def salutation(sentence: str) -> bool:
    """Whether a sentence only greets or takes leave (perhaps by name): it tells nothing."""
    return SALUTATION.fullmatch(sentence.strip()) is not None


QUESTION = re.compile(r"(?:[?？]|吗|么|까)\W*$")


CLAUSE_BREAK = re.compile(r"[,;.!?，。！？；]")


def clause_so_far(sentence: str, match: re.Match[str]) -> str:
    """The sentence up to the end of the clause the match ends in: what may qualify it."""
    after = CLAUSE_BREAK.search(sentence, match.end())
    return sentence[: after.start() if after else len(sentence)]


# -- case-insensitive patterns, matched case-sensitively -----------------------------------
# `re.IGNORECASE` compares characters one by one through Unicode case folding and keeps `re`
# from skipping ahead by a pattern's first characters: three to five times dearer than the
# same pattern matched case-sensitively on the text lower-cased. Beyond A-Z, re matches these
# to ASCII letters (İ ı to i, ſ to s, K to k); a text holding one is matched the slow way.
_FOLDS_TO_ASCII = frozenset("\u0130\u0131\u017f\u212a")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ESCAPE = re.compile(r"\\.")
_INLINE_FLAGS = re.compile(r"\(\?[aiLmsux-]")


def fold_ascii(text: str) -> str | None:
    """`text` with its ASCII letters lower-cased (one character for one, so offsets hold), or
    None when it holds a character IGNORECASE matches to an ASCII letter by another rule."""
    if text.isascii():
        return text.lower()
    if not _FOLDS_TO_ASCII.isdisjoint(text):
        return None
    return text.translate(_ASCII_LOWER)


class Caseless:
    """An IGNORECASE pattern whose letters are lower-case ASCII (other scripts have no case),
    searched case-sensitively in text folded by `fold_ascii`: the same answers, cheaper; `first`
    (a character class) holds every character a match can begin with."""

    def __init__(self, pattern: re.Pattern[str], first: str = "") -> None:
        source = _ESCAPE.sub("", pattern.pattern)
        assert pattern.flags & re.IGNORECASE and not _INLINE_FLAGS.search(source), pattern.pattern
        # Cased characters other than a-z would need folding too ("É" to "é"): not done here.
        assert all(char.lower() == char.upper() or "a" <= char <= "z" for char in source), pattern.pattern
        self.pattern = pattern
        # `first`: a character class of every character a match can begin with, in the text
        # lower-cased; tested first, it lets `re` pass most positions without trying the rest.
        source = f"(?={first})(?:{pattern.pattern})" if first else pattern.pattern
        self.folded = re.compile(source, pattern.flags & ~re.IGNORECASE)

    def search(self, text: str, folded: str | None) -> bool:
        """Whether the pattern matches anywhere in `text`, whose `fold_ascii` is `folded`."""
        found = self.pattern.search(text) if folded is None else self.folded.search(folded)
        return found is not None
