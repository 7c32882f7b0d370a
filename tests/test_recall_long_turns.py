"""Long turns (a greeting, the news, a question back): recall ranks them by what they say, not under a
short turn that shares a word with the question, held in memory or read through the index; and
shows each once, not again as the summary line that quotes their news."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import said, seed
from test_recall import DAY_MS, MAY_8, recall, small_talk, told

from agent_memory.core.domain import Message, Summary
from agent_memory.core.recall import TurnHit, rank
from agent_memory.core.terms import terms
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
    await told(service, lines)
    body = await recall(service, "u1", "luna", "What did the vet say about Biscuit?")
    assert body["memories"] and body["memories"][0]["text"] == NEWS, body["memories"]


async def test_a_summary_line_quoting_a_sentence_of_a_turn_is_that_turn_shown_once(service: Any) -> None:
    # The offline condenser keeps a long turn's news as a summary line (the character's labelled
    # "Assistant:"): the turn says it with its time and the turns around it, and the budget the
    # line would take buys another memory.
    news = "I've started volunteering at the community garden on Sunday mornings."
    turn = f"Oh, that's lovely to hear! {news} I'll show you pictures sometime. I'm still smiling about it."
    await seed(service, "u1", "luna", "a1", said(*small_talk(5), turn, "Ha, lovely.", start_ms=MAY_8))
    summary = Summary(
        user_id="u1",
        character_id="luna",
        watermark_id=1,
        covered_until_ms=MAY_8 + 30 * DAY_MS,
        text=f"About the user's life:\n- [2023-05-08] Assistant: {news}\n- The user volunteers at a food bank.",
        message_count=7,
        method="offline",
        model="test",
        created_ms=1,
        updated_ms=MAY_8 + 30 * DAY_MS,
    )
    await service.store.write(lambda tx: tx.summaries.put(summary))
    body = await recall(service, "u1", "luna", "Where do you volunteer?")
    said_news = [m for m in body["memories"] if news in m["text"]]
    assert [(m["kind"], m["text"]) for m in said_news] == [("turn", turn)], body["memories"]
    assert body["system_message"]["content"].count(news) == 1
    assert any(m["kind"] == "summary" and "food bank" in m["text"] for m in body["memories"])


def test_a_turn_ranked_below_the_summary_line_quoting_it_takes_the_line_s_place() -> None:
    news = "I've started volunteering at the community garden on Sunday mornings."
    turn = f"Oh, that's lovely to hear! {news} I'll show you pictures sometime."
    message = Message(
        7, "a1", "u1", "luna", 3, "user", "turn", turn, 2, MAY_8, MAY_8, None, None, False, None, None, False
    )
    summary = Summary(
        "u1", "luna", f"- {news}\n- I cook on Sundays.", 10, MAY_8, 10, "offline", None, MAY_8, MAY_8
    )
    idfs = {term: 1.0 for term in terms("volunteering garden")}
    found = rank(hits=[TurnHit(message, 0.5)], facts=[], summaries=[summary], idfs=idfs, average_length=4.0)
    assert [(memory.kind, memory.text) for memory in found] == [("turn", turn)]
    assert found[0].score > 0.5  # the line's score: its place
