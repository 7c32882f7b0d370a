"""OfflineCondenser: deterministic, labelled summaries and facts from explicit requests."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import stored_message

from agent_memory.condense.base import CondenseInput, CondenseResult, FactAdd, FactIn
from agent_memory.condense.offline import (
    LABEL,
    SUMMARY_MAX_CHARS,
    OfflineCondenser,
    detect_language,
    introductions,
    remember_requests,
)
from agent_memory.core.clock import to_ms
from agent_memory.core.domain import Message

DAY_MS = 1_793_736_900_000  # 2026-11-03 20:15 UTC
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "conversations"


def msg(seq: int, role: str, content: str, at_ms: int | None = None) -> Message:
    """A message as the store hands it to condensers."""
    return stored_message(seq, role, content, at_ms=at_ms if at_ms is not None else DAY_MS + seq * 7_000)


def dialogue(*lines: str, start: int = 1) -> list[Message]:
    """Alternating assistant/user messages, the assistant first."""
    return [msg(start + i, "assistant" if i % 2 == 0 else "user", line) for i, line in enumerate(lines)]


async def run_offline(
    messages: list[Message],
    previous_summary: str | None = None,
    facts: list[FactIn] | None = None,
) -> CondenseResult:
    """Run the offline condenser on one job."""
    job = CondenseInput(
        user_id="u-1",
        character_id="luna",
        previous_summary=previous_summary,
        facts=facts or [],
        messages=messages,
    )
    return await OfflineCondenser().condense(job)


ENGLISH = dialogue(
    "Welcome back! How was the night?",
    "Rough. Oh, and remember that my exam is on the 22nd.",
    "The 22nd, got it. Anything else?",
    "ok",
    "Sounds good.",
    "I have two cats and I live in Leeds with my sister Hannah.",
)
CHINESE = dialogue(
    "欢迎回来,小王!豆豆最近怎么样?",
    "它很好。昨天杭州下雨,它不想出门。",
    "哈哈,豆豆也不喜欢下雨天。",
    "对了,记住我22号有考试,是HSK五级。",
    "好的,我记住了:你22号有HSK五级考试。",
    "谢谢老师!",
)


# -- facts ---------------------------------------------------------------------------------
async def test_english_remember_request_becomes_fact() -> None:
    result = await run_offline(ENGLISH)

    assert result.method == "offline" and result.model == "offline"
    assert result.tokens_sent == 0 and result.fallback_reason is None
    assert result.add_facts == [FactAdd(text="The user's exam is on the 22nd", scope="user")]
    assert result.update_facts == [] and result.remove_facts == []


async def test_chinese_remember_request_becomes_fact() -> None:
    result = await run_offline(CHINESE)

    # The assistant's "我记住了:你22号…" is an acknowledgement, not a second fact.
    assert result.add_facts == [FactAdd(text="用户说：我22号有考试,是HSK五级", scope="user")]


REMINDED = "The user asked to be reminded to "
KO_ASKED = "사용자가 기억해 달라고 한 것: "


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("Please remember I have a peanut allergy.", "The user has a peanut allergy"),
        ("Luna, don't forget to ask me about my exam!", REMINDED + "ask the user about the user's exam"),
        ("Can you remind us to book flights by May 1st?", REMINDED + "book flights by May 1st"),
        ("remember my birthday", "The user asked to remember: the user's birthday"),
        ("My name is alice, by the way.", "The user's name is Alice"),
        ("别忘了我下周三要去北京!", "用户说：我下周三要去北京"),
        ("我叫小王,我住在杭州。", "用户叫小王"),
        ("기억해 줘, 내 생일은 5월 3일이야.", KO_ASKED + "내 생일은 5월 3일이야"),
        ("내 시험이 22일이라는 거 기억해 줘.", KO_ASKED + "내 시험이 22일이라는 거"),
        ("제 이름은 지아예요.", "사용자 이름은 지아"),
    ],
)  # fmt: skip
def test_request_patterns(said: str, fact: str) -> None:
    assert [text for text, _ in introductions(said) + remember_requests(said)] == [fact]


@pytest.mark.parametrize(
    "said",
    [
        "Do you remember my dog's name?",
        "I remember that day.",
        "Remember when we met?",
        "Call me back later.",
        "My name is not important.",
        "我记得你说过。",
        "你还记得我的狗叫什么吗?",
        "好的,我记住了。",
        "그때 기억해?",
    ],
)
def test_not_requests(said: str) -> None:
    assert introductions(said) + remember_requests(said) == []


def test_fact_about_the_relationship_has_character_scope() -> None:
    assert remember_requests("Remember that you promised to sing for me!") == [
        ("You promised to sing for the user", "character")
    ]


async def test_facts_are_deduplicated_against_existing_and_each_other() -> None:
    existing = [FactIn(id=4, text="  the user's EXAM is on the 22nd. ", scope="user", pinned=True)]
    messages = ENGLISH + dialogue(
        "Hi again.",
        "Remember that my exam is on the 22nd!",
        "Sure.",
        "Also, remember that my sister's wedding is on December 14th.",
        "Noted.",
        "And remember that my sister's wedding is on December 14th.",
        start=len(ENGLISH) + 1,
    )

    result = await run_offline(messages, facts=existing)

    assert result.add_facts == [FactAdd(text="The user's sister's wedding is on December 14th", scope="user")]
    assert result.update_facts == [] and result.remove_facts == []


async def test_assistant_lines_never_make_facts() -> None:
    result = await run_offline(dialogue("Remember that my name is Luna.", "Nice."))

    assert result.add_facts == []


# -- the summary ---------------------------------------------------------------------------
async def test_english_summary_is_labelled_dated_and_quotes_salient_lines() -> None:
    result = await run_offline(ENGLISH)

    summary = result.summary
    assert summary.startswith(LABEL)
    assert "2026-11-03 20:15–20:15 UTC" not in summary  # a single minute is said once
    assert "2026-11-03 20:15 UTC" in summary
    assert "3 exchanges" in summary
    assert '"Rough. Oh, and remember that my exam is on the 22nd."' in summary
    assert "I have two cats and I live in Leeds with my sister Hannah." in summary
    assert '"ok"' not in summary
    # Quotes keep the order they were said in.
    assert summary.index("Rough.") < summary.index("two cats")


async def test_summary_span_covers_several_days() -> None:
    messages = [
        msg(1, "user", "I'm back from Lisbon.", at_ms=DAY_MS),
        msg(2, "user", "My flight was delayed by 3 hours.", at_ms=DAY_MS + 2 * 86_400_000),
    ]

    result = await run_offline(messages)

    assert "2026-11-03 20:15 – 2026-11-05 20:15 UTC: 2 exchanges." in result.summary


async def test_chinese_conversation_gets_chinese_summary() -> None:
    result = await run_offline(CHINESE)

    lines = result.summary.splitlines()
    assert lines[0] == LABEL
    assert "共3轮对话" in lines[1] and "用户说：" in lines[1]
    assert "“对了,记住我22号有考试,是HSK五级。”" in lines[1]
    assert "exchanges" not in result.summary


def test_language_detection() -> None:
    assert detect_language(["Hello there, how are you?"]) == "en"
    assert detect_language(["我叫小王,我住在杭州。", "OK"]) == "zh"
    assert detect_language(["회사에서 presentation이 있었는데 너무 긴장했어요."]) == "ko"
    assert detect_language(["私の試験は22日だって覚えておいて。"]) == "ja"
    assert detect_language([]) == "en"


async def test_empty_messages_are_ignored() -> None:
    blanks = [msg(20, "user", ""), msg(21, "user", "   "), msg(22, "assistant", "")]
    with_blanks = [*ENGLISH, *blanks]

    result = await run_offline(with_blanks)

    assert result == await run_offline(ENGLISH)
    assert "3 exchanges" in result.summary


async def test_nothing_said_keeps_the_memory_unchanged() -> None:
    result = await run_offline([msg(1, "user", "  "), msg(2, "assistant", "")], "Earlier summary.")

    assert result.summary == "Earlier summary."
    assert result.add_facts == []
    assert (await run_offline([], None)).summary == ""


async def test_deterministic() -> None:
    facts = [FactIn(id=1, text="The user has two cats.", scope="user")]
    first = await run_offline(ENGLISH + CHINESE, "Earlier summary.", facts)
    second = await OfflineCondenser().condense(
        CondenseInput(
            user_id="u-1",
            character_id="luna",
            previous_summary="Earlier summary.",
            facts=facts,
            messages=[copy.copy(m) for m in ENGLISH + CHINESE],
        )
    )

    assert first == second
    assert first.model_dump_json() == second.model_dump_json()


# -- bounded length ------------------------------------------------------------------------
async def test_long_previous_summary_is_bounded_oldest_dropped_first() -> None:
    previous = "\n".join(f"Paragraph {n}: " + "the user talked about many things. " * 8 for n in range(40))

    result = await run_offline(ENGLISH, previous)

    assert len(result.summary) <= SUMMARY_MAX_CHARS
    assert "Paragraph 39:" in result.summary  # the newest past is kept
    assert "Paragraph 0:" not in result.summary
    assert result.summary.startswith(LABEL)
    assert result.summary.rstrip().endswith('with my sister Hannah."')


async def test_long_single_paragraph_is_cut_by_sentences() -> None:
    previous = " ".join(f"Sentence {n} says a thing about the user." for n in range(300))

    result = await run_offline(ENGLISH, previous)

    assert len(result.summary) <= SUMMARY_MAX_CHARS
    assert "Sentence 299 says a thing about the user." in result.summary
    assert "Sentence 0 " not in result.summary
    assert "…Sentence" in result.summary  # marks that older sentences were dropped


async def test_rolling_offline_summaries_stay_bounded_with_one_label() -> None:
    summary: str | None = None
    for round_ in range(15):
        lines = [f"Round {round_}: I tried {round_} new recipes and my oven broke on the {round_ + 1}th."]
        result = await run_offline([msg(1, "assistant", "Hi!"), msg(2, "user", lines[0])], summary)
        summary = result.summary
        assert len(summary) <= SUMMARY_MAX_CHARS

    assert summary is not None
    assert summary.count(LABEL) == 1
    assert "Round 14:" in summary and "Round 0:" not in summary


async def test_long_statements_are_clipped() -> None:
    long_line = "I love hiking in the mountains near my home town and " * 20

    result = await run_offline(dialogue("Hi", long_line))

    assert len(result.summary) <= SUMMARY_MAX_CHARS
    assert "…" in result.summary


# -- the example conversations -------------------------------------------------------------
def conversation_messages(name: str) -> list[Message]:
    """Stored messages from the Agora callback envelopes of one example conversation."""
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"{name} is not there")
    messages: list[Message] = []
    for envelope in json.loads(path.read_text(encoding="utf-8")):
        payload = envelope.get("payload") or {}
        for item in payload.get("contents") or []:
            metadata = item.get("metadata") or {}
            at = to_ms(item.get("timestamp")) or to_ms(envelope.get("notifyMs")) or DAY_MS
            message = stored_message(
                len(messages) + 1, item["role"], item.get("content") or "", at_ms=at,
                interrupted=bool(metadata.get("interrupted")), original=metadata.get("original"),
            )  # fmt: skip
            messages.append(message)
    return messages


async def test_example_conversations() -> None:
    english = await run_offline(conversation_messages("en_luna_companion.json"))
    chinese = await run_offline(conversation_messages("zh_xiaoyu_tutor.json"))

    assert any("December 14th" in fact.text for fact in english.add_facts)
    assert "The user said:" in english.summary
    assert any("22号" in fact.text for fact in chinese.add_facts)
    assert "轮对话" in chinese.summary
    for result in (english, chinese):
        assert result.summary.startswith(LABEL) and len(result.summary) <= SUMMARY_MAX_CHARS
