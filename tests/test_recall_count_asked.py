"""A question that says how many answers it wants ("Which two films …?") is not asking about the
word "two": the turns that say "two" ("I slept until two") do not come before the answers."""

from __future__ import annotations

from typing import Any

import pytest
from test_recall import recall, small_talk, told

from agent_memory.core.recall import weighted_terms

pytestmark = pytest.mark.postgres


async def test_the_count_of_answers_asked_for_is_not_a_word_of_the_question(service: Any) -> None:
    films = "We saw Little Thunder at the cinema and I cried at the end."
    lines = [
        *small_talk(8),
        films,
        "Aw.",
        *small_talk(4),
        "I slept until two, then did the washing.",
        "Nice.",
    ]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "Which two films did I tell you about?")
    assert body["memories"] and body["memories"][0]["text"] == films, body["memories"]


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        ("Which two films did I tell you about?", False),
        ("Name the two classes I took up.", False),
        ("What three dishes did you try making?", False),
        ("What did I do two days ago?", True),  # a time, not a count of answers
        ("Did I buy two tickets?", True),
    ],
)
def test_two_is_asked_only_when_it_is_not_the_count_of_answers(question: str, asked: bool) -> None:
    found = {term for term, _ in weighted_terms(question)}
    assert ("two" in found or "three" in found) == asked
