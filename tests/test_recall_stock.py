"""A word of the question matched only in a sentence said over and over (a stock reply, a
catchphrase) does not rank a turn above the one whose own news matches (`core.stock`), and the
candidates reach past a crowd of such turns to the answer (`core.recall.RANKED`)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import said, seed
from test_recall import MAY_8, recall, small_talk, texts

from agent_memory.core.stock import sentence_keys, stock_shares

pytestmark = pytest.mark.postgres

ANSWER = "Our new puppy Biscuit chewed through my slippers."
STOCK = "Every puppy deserves a good name."
OPENERS = ("Oh wow.", "Ha, true.", "Aw.", "Honestly.", "Right.")


def history(stock_turns: int) -> list[str]:
    """The answer first (oldest), then the character's stock reply in `stock_turns` turns."""
    lines = [ANSWER, "Aw, poor slippers."]
    for index in range(stock_turns):
        lines += [*small_talk(index % 7 + 1)[-1:], f"{OPENERS[index % len(OPENERS)]} {STOCK}"]
    return lines


async def test_a_turn_matched_only_in_a_stock_sentence_ranks_under_one_matched_in_its_own(
    service: Any,
) -> None:
    # The stock reply says two of the question's words (puppy, name), the answer one (puppy).
    await seed(service, "u1", "luna", "a1", said(*history(4), start_ms=MAY_8))
    body = await recall(service, "u1", "luna", "What name did we give the puppy?", max_tokens=60)
    assert texts(body)[:1] == [ANSWER], body["memories"]


async def test_recall_reaches_past_a_crowd_of_stock_matches_to_the_answer(service: Any) -> None:
    # 45 turns outrank the answer by their words: more than the 40 candidates once ranked.
    await seed(service, "u1", "luna", "a1", said(*history(45), start_ms=MAY_8))
    body = await recall(service, "u1", "luna", "What name did we give the puppy?")
    assert ANSWER in texts(body), body["memories"]


def test_the_share_of_a_match_outside_stock_sentences() -> None:
    idfs = {"puppi": 1.0, "name": 3.0}
    turns = [f"{opener} {STOCK}" for opener in OPENERS[:3]] + [ANSWER]
    shares = stock_shares(turns, [*turns, f"A good name matters. {STOCK}"], idfs)
    # Said in three turns: stock, whatever else a turn says; the last says "name" on its own too.
    assert shares == [0.0, 0.0, 0.0, 1.0, 0.75]
    # Said in two, it is not stock yet (a turn and its retelling).
    assert stock_shares(turns[1:], turns[1:], idfs) == [1.0, 1.0, 1.0]
    assert stock_shares(turns, ["Nothing to do with it."], idfs) == [1.0]
    # A turn said again whole, word for word, is one telling: its news is not stock.
    assert stock_shares([STOCK] * 3, [STOCK], idfs) == [1.0]


def test_sentences_are_folded_and_a_text_without_a_stop_is_one_sentence() -> None:
    assert sentence_keys("Oh  WOW. Every puppy deserves a good name!") == (
        "oh wow.",
        "every puppy deserves a good name!",
    )
    assert sentence_keys("对了，差点忘了。真想再来一次。") == ("对了，差点忘了。", "真想再来一次。")
    assert sentence_keys("no stop at all") == ("no stop at all",)
