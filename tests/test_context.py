"""The context builder: order, budget, determinism."""

import pytest
from conftest import stored_message

from agent_memory.core.context import RECENT_SHARE, build_context
from agent_memory.core.domain import Fact, Summary
from agent_memory.core.tokens import count_message_tokens
from agent_memory.errors import InvalidField

DAY = 1_763_690_000_000


def message(index, content=None, **extra):
    role = "user" if index % 2 == 0 else "assistant"
    text = content if content is not None else f"message number {index} about the garden"
    return stored_message(index, role, text, at_ms=DAY + index * 60_000, turn_id=None, **extra)


def fact(id_, text, pinned, updated_ms):
    return Fact(id_, "u", "luna", text, pinned, "manual" if pinned else "llm", 1, updated_ms)


FACTS = [
    fact(1, "The user's cat is called Miso", pinned=True, updated_ms=1),
    fact(2, "The user's exam is on the 22nd", pinned=False, updated_ms=5),
    fact(3, "The user works night shifts", pinned=False, updated_ms=3),
]
SUMMARY = Summary(
    user_id="u", character_id="luna", text="They talked about gardening. " * 20, watermark_id=1,
    covered_until_ms=DAY, message_count=1, method="llm", model="m", created_ms=DAY, updated_ms=DAY,
)  # fmt: skip


def test_order_is_persona_facts_summary_recent():
    context = build_context(
        facts=FACTS,
        summary=SUMMARY,
        messages=[message(i) for i in range(6)],
        max_tokens=1500,
        persona="You are Luna.",
    )
    contents = [m["content"] for m in context.system_messages]
    assert contents[0] == "You are Luna."
    assert contents[1].startswith("What you remember") and "Miso" in contents[1]
    assert contents[2].startswith("Summary of your earlier conversations") and "2025-11-21" in contents[2]
    assert contents[3].startswith("The most recent turns") and "message number 5" in contents[3]
    assert all(m["role"] == "system" for m in context.system_messages)


@pytest.mark.parametrize("budget", [60, 120, 250, 600, 1500])
def test_never_over_budget_and_newest_turns_survive(budget):
    messages = [message(i) for i in range(200)]
    context = build_context(facts=FACTS, summary=SUMMARY, messages=messages, max_tokens=budget)
    assert context.tokens <= budget
    assert context.tokens == sum(count_message_tokens(m["content"]) for m in context.system_messages)
    if context.included["messages"]:
        assert "message number 199" in context.system_messages[-1]["content"]
        assert "message number 0 " not in context.system_messages[-1]["content"]


def test_short_budget_drops_turns_then_shortens_summary_then_facts():
    messages = [message(i) for i in range(50)]
    roomy = build_context(facts=FACTS, summary=SUMMARY, messages=messages, max_tokens=5000)
    assert roomy.included["messages"] == 50 and not roomy.included["summary_shortened"]
    # 180: the same answer under every tokenizer a process may be counting with (at 150 the
    # shortened summary no longer fits beside the turns' share as o200k_base counts it).
    tight = build_context(facts=FACTS, summary=SUMMARY, messages=messages, max_tokens=180)
    # The latest turns keep their share (RECENT_SHARE), a few at most; what it cannot hold of
    # them goes back to the summary, so the budget is still filled.
    assert tight.included["messages"] < 10 and tight.included["summary"]
    assert 180 >= tight.tokens > 180 * (1 - RECENT_SHARE)
    assert tight.included["facts"] == 3
    tiny = build_context(facts=FACTS, summary=SUMMARY, messages=messages, max_tokens=50)
    assert not tiny.included["summary"]
    assert tiny.included["facts"] >= 1 and "Miso" in tiny.system_messages[0]["content"]  # pinned stays


def test_deterministic():
    args = dict(facts=FACTS, summary=SUMMARY, messages=[message(i) for i in range(80)], max_tokens=400)
    assert build_context(**args).system_messages == build_context(**args).system_messages


def test_empty_contents_are_never_rendered_and_interruptions_are_marked():
    messages = [
        message(0, ""),
        message(1, "Why did the scarecrow ", interrupted=True,
                original="Why did the scarecrow win an award?"),
        message(2, "   "),
    ]  # fmt: skip
    context = build_context(facts=[], summary=None, messages=messages, max_tokens=500)
    text = context.system_messages[-1]["content"]
    assert text.count("User:") == 0
    assert "Why did the scarecrow… [interrupted by the user; the unheard rest: win an award?]" in text


def test_several_speakers_are_named():
    messages = [message(0, "hi", speaker="2001"), message(2, "hello", speaker="2002")]
    text = build_context(facts=[], summary=None, messages=messages, max_tokens=500).system_messages[-1][
        "content"
    ]
    assert "User 2001: hi" in text and "User 2002: hello" in text


def test_persona_over_budget_is_refused_with_a_clear_message():
    with pytest.raises(InvalidField, match="persona alone is about"):
        build_context(facts=[], summary=None, messages=[], max_tokens=50, persona="word " * 100)


def test_no_memory_gives_only_the_persona():
    context = build_context(facts=[], summary=None, messages=[], max_tokens=500, persona="You are Luna.")
    assert context.system_messages == [{"role": "system", "content": "You are Luna."}]
