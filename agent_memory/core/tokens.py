"""Offline token estimates that never under-count much, for any language.

No tokenizer download at run time. Latin text is counted at about 4.5 characters a token, and
never fewer tokens than its pieces as o200k splits them (words, contraction endings, groups of
up to three digits, runs of punctuation). Chinese, Japanese and Korean are counted per script, at rates
calibrated against o200k_base (the tokenizer of the default model) on the conversational corpus
in tests/data/tokens: 0.85 tokens per Han character, 0.7 per kana, and 0.65 per Hangul
syllable plus 0.5 per Korean word; CJK punctuation and other CJK-range characters at 1. The
rates sit a few per cent above o200k on average, so a budget is rarely overrun;
tests/test_tokens.py measures the error per language.

Every term is a count of characters or words of the text, rounded up once, so the estimates of
separate lines add up to at least the estimate of the lines joined with newlines (one more token
per newline covers the separator), which the context builder relies on.

`count_tokens` is the one seam every budget is counted through. It counts with the estimate
until the memory layer hands it a real tokenizer (`use_counter`, from AGENT_MEMORY_TOKENIZER):
core reads no settings and loads no files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from agent_memory.core.textcache import text_cache

CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
HAN = re.compile("[\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
HANGUL_WORD = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]+")
# Words with a contraction's apostrophe part as its own piece ("don" "'t"), numbers in groups of
# up to three digits, runs of punctuation: how o200k splits Latin text before merging.
WORD = re.compile(r"'[^\W\d_]+|[^\W\d_]+|\d{1,3}|[^\w\s]+", re.UNICODE)
HAN_TOKENS_PER_CHAR = 0.85
KANA_TOKENS_PER_CHAR = 0.7
HANGUL_TOKENS_PER_CHAR = 0.65
HANGUL_TOKENS_PER_WORD = 0.5
OTHER_CJK_TOKENS_PER_CHAR = 1.0  # CJK punctuation, full-width forms, bopomofo
LATIN_CHARS_PER_TOKEN = 4.5
MESSAGE_OVERHEAD = 4  # role and separators of one chat message


def _cjk_tokens(text: str, cjk: int) -> int:
    han = len(HAN.findall(text))
    kana = len(KANA.findall(text))
    hangul = len(HANGUL.findall(text))
    hangul_words = len(HANGUL_WORD.findall(text)) if hangul else 0
    other = cjk - han - kana - hangul
    return math.ceil(
        han * HAN_TOKENS_PER_CHAR
        + kana * KANA_TOKENS_PER_CHAR
        + hangul * HANGUL_TOKENS_PER_CHAR
        + hangul_words * HANGUL_TOKENS_PER_WORD
        + other * OTHER_CJK_TOKENS_PER_CHAR
    )


Counter = Callable[[str], int]


@text_cache(32768)
def estimate_tokens(text: str) -> int:
    """Estimated tokens of `text` (cached: start contexts count the same lines again and again)."""
    if not text:
        return 0
    cjk = len(CJK.findall(text))
    rest = CJK.sub(" ", text) if cjk else text
    words = len(WORD.findall(rest))
    latin_chars = len(CJK.sub("", text).strip()) if cjk else len(text.strip())
    latin = max(words, math.ceil(latin_chars / LATIN_CHARS_PER_TOKEN)) if rest.strip() else 0
    return latin + (_cjk_tokens(text, cjk) if cjk else 0)


_counter: Counter = estimate_tokens


def use_counter(counter: Counter) -> None:
    """Count every budget of this process with `counter` (a cached function of the text)."""
    global _counter
    _counter = counter


def count_tokens(text: str) -> int:
    """Tokens of `text`, by the tokenizer in use (the estimate unless told otherwise)."""
    return _counter(text)


def count_message_tokens(content: str) -> int:
    """Tokens of one chat message with `content`."""
    return count_tokens(content) + MESSAGE_OVERHEAD
