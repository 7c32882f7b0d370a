"""The recall index's fast paths give the terms their plain forms give (issue 28: cheaper, same index)."""

from __future__ import annotations

import random
import string

from agent_memory.core import terms as terms_module
from agent_memory.core.terms import HAN, _folded_terms, terms, text_length

# Pieces that reach every branch of `_TOKEN` on ASCII text: stop words, possessives, contractions,
# numbers with commas and points, underscores, one letter, over-long words, case to fold.
PIECES = (
    "I", "a", "the", "my", "Dog's", "dogs'", "don't", "y'all", "rock'n'roll", "O'Neil", "it’s",
    "3pm", "2023", "1,000", "1.5", "3.14.15", "12,34,", ",5", "x2", "a_b", "__init__", "HSK",
    "researching", "classes", "Pottery", "running", "ran", "x" * 41, "y" * 40, "e-mail", "U.S.A.",
    "hello!", "(what)", "who?", "ok...", "naïve", "Straße", "KELVIN", "\u212a", "ß", "ǅ",
)  # fmt: skip


def _random_text(rng: random.Random) -> str:
    words = [rng.choice(PIECES) for _ in range(rng.randint(0, 14))]
    noise = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 12)))
    text = " ".join(words)
    at = rng.randint(0, len(text))
    return text[:at] + noise + text[at:]


def test_terms_of_any_text_are_the_plain_findall_terms() -> None:
    rng = random.Random(28)
    seen_fast = 0
    for _ in range(20_000):
        text = _random_text(rng)
        seen_fast += text.casefold().isascii()
        assert terms(text) == _folded_terms(text.casefold()), text
    assert seen_fast > 10_000  # most went through the ASCII path


def test_text_length_of_ascii_text_counts_no_characters() -> None:
    rng = random.Random(11)
    for _ in range(5_000):
        text = _random_text(rng)
        found = terms(text)
        added = sum(len(HAN.findall(run)) for run in terms_module._HAN_RUN.findall(text) if len(run) > 1)
        assert text_length(text, found) == len(found) - added, text
