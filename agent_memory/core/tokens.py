"""Offline token estimates that never under-count much, for any language.

No tokenizer download at run time: Latin text is counted at about four characters a
token (never fewer tokens than words), and each Chinese, Japanese or Korean character
at 1.4 tokens, which is what cl100k-style tokenizers spend on such text on average.
"""

from __future__ import annotations

import math
import re

CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)
CJK_TOKENS_PER_CHAR = 1.4
LATIN_CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD = 4  # role and separators of one chat message


def count_tokens(text: str) -> int:
    """Estimated tokens of `text`."""
    if not text:
        return 0
    cjk = len(CJK.findall(text))
    rest = CJK.sub(" ", text) if cjk else text
    words = len(WORD.findall(rest))
    latin = max(words, math.ceil(len(rest.strip()) / LATIN_CHARS_PER_TOKEN)) if rest.strip() else 0
    return latin + math.ceil(cjk * CJK_TOKENS_PER_CHAR)


def count_message_tokens(content: str) -> int:
    """Estimated tokens of one chat message with `content`."""
    return count_tokens(content) + MESSAGE_OVERHEAD
