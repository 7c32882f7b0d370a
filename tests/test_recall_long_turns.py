"""Long turns (a greeting, the news, a question back): recall ranks them by what they say, not under a
short turn that shares a word with the question, held in memory or read through the index."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import said, seed
from test_recall import MAY_8, recall, small_talk

from agent_memory.store.postgres import recall as pg_recall
from agent_memory.store.sqlite import recall as sqlite_recall

pytestmark = pytest.mark.postgres

NEWS = (
    "Oh, that's lovely to hear! I took Biscuit to the vet this morning and she said his leg is "
    "healing nicely. Have you ever tried something like that? Honestly, what a week, I'm still "
    "smiling about it."
)


@pytest.mark.parametrize("held", [True, False], ids=["held", "index"])
async def test_a_long_turn_that_says_more_of_the_question_comes_before_a_short_one(
    service: Any, held: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not held:  # nothing held in memory: each backend scores through its own index (SQL)
        monkeypatch.setattr(sqlite_recall.POSTINGS, "budget_docs", 0)
        monkeypatch.setattr(pg_recall.POSTINGS, "budget_docs", 0)
    # Short turns that say one word of the question each, newer than the news.
    lines = [
        *small_talk(10),
        NEWS,
        "Oh nice.",
        *small_talk(6),
        "The vet was closed.",
        "Oh no.",
        "Biscuit is asleep.",
    ]
    await seed(service, "u1", "luna", "a1", said(*lines, start_ms=MAY_8))
    body = await recall(service, "u1", "luna", "What did the vet say about Biscuit?")
    assert body["memories"] and body["memories"][0]["text"] == NEWS, body["memories"]
