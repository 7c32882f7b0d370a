"""Related words (core/related.py): a question worded apart from its answer finds it through the server."""

from __future__ import annotations

from typing import Any

import pytest
from test_recall import recall, small_talk, texts, told

from agent_memory.core.recall import weighted_terms

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(
    ("turn", "question"),
    [
        # A kind of the concept asked (a hyponym): tennis is a sport, a kitten a pet, 网球 a 运动.
        ("I've been playing tennis every Tuesday evening with Rosa.", "Which sport do I do?"),
        ("We got a little kitten, grey with white socks, called Smudge.", "What's my pet's name?"),
        # A mood asked by what soothes it: "comfort" against "upset".
        ("When I'm upset I put on my grandad's old jazz records.", "What comforts me?"),
        # A phrase asked ("took in") by the words of its concept: adopted, shelter.
        ("We adopted a greyhound from the shelter last winter.", "Which animal did we take in?"),
        ("我每周三晚上都去打网球，出一身汗特别舒服。", "我平时做什么运动？"),
        # A one-character word is a related word too: 猫 is a 宠物.
        ("我家的猫叫奶茶，特别黏人。", "我的宠物叫什么？"),
        # Pastimes: a painting by its canvas, a class by its lessons, volunteering by "helping
        # out", a prize won, a purchase bought, a garden grown, a sailing trip and seasickness.
        ("My new canvas is a heron by the river, it's drying by the window.", "What did I paint last?"),
        ("Week three of my pottery lessons and I'm completely hooked.", "What have I been learning?"),
        ("Spent the morning helping out at the food bank again.", "Where do I volunteer?"),
        ("I won the raffle at the school fair, a teddy bear of all things.", "What prize did I get?"),
        (
            "So I did something impulsive and bought a cargo bike off a neighbour.",
            "What did I purchase?",
        ),
        ("I've been growing chillies on the balcony all summer.", "What's in my garden?"),
        (
            "I get horribly seasick, even the ferry to the island wipes me out.",
            "Would a sailing trip suit me?",
        ),
        # A verb's irregular past form ("drank" for "drink"), and a related word's ("sang": music, sing).
        ("I drank far too much mulled cider at Gus's.", "What did I drink?"),
        ("I sang at my cousin's wedding, my voice cracked twice.", "Have I done any music lately?"),
    ],
)
async def test_a_question_asked_with_a_related_word_finds_its_answer(
    service: Any, turn: str, question: str
) -> None:
    lines = [*small_talk(10), turn, "Oh nice.", *small_talk(10)]
    await told(service, lines)
    body = await recall(service, "u1", "luna", question)
    assert body["memories"] and body["memories"][0]["text"] == turn, body["memories"]


async def test_a_related_word_said_in_many_turns_still_finds_its_answer(service: Any) -> None:
    # How an answer is said is often common in a long memory: "watched" in thirty turns of
    # forty, "film" in none. Left out as too common, nothing would answer the question.
    watched = [f"I watched the match with cousin number {i} after work." for i in range(30)]
    answer = "Watched Little Thunder last night, no shame in crying at the end."
    lines = [line for said_ in watched for line in (said_, "Oh nice.")]
    await told(service, [*small_talk(10), *lines, answer, "Ha, lovely."])
    body = await recall(service, "u1", "luna", "Which film got to me?", max_tokens=2000)
    assert any(text.startswith(answer) for text in texts(body)), body["memories"]


ZH_TALK = [
    "今天天气不错，你那边呢？",
    "也挺好的，我刚吃完午饭。",
    "我周末报名了一个徒步活动。",
    "听起来不错！",
]


@pytest.mark.parametrize(
    ("turn", "question"),
    [
        # 班 and 课 (a class), 小说 read (读完), a prize by 抽中.
        ("水彩课上到第三周了，我彻底迷上了。", "我报了什么班？"),
        ("我终于读完了《铜月亮》，结尾太好了。", "我最近那本小说叫什么？"),
        ("我在学校义卖会上抽中了一只巨型泰迪熊。", "我得了什么奖品？"),
    ],
)
async def test_a_chinese_question_asked_with_a_related_word_finds_its_answer(
    service: Any, turn: str, question: str
) -> None:
    # Among Chinese small talk that shares characters with the questions (我, 了, 报名).
    lines = [*ZH_TALK, *ZH_TALK, turn, "真好。", *ZH_TALK]
    await told(service, lines)
    body = await recall(service, "u1", "luna", question)
    assert body["memories"] and body["memories"][0]["text"] == turn, body["memories"]


def test_a_kind_asked_brings_its_concept_not_the_other_kinds() -> None:
    # "tennis" asked stands for "sport" (its head), not for "football" (another kind of it);
    # the words asked weigh 1, the related ones less.
    weights = dict(weighted_terms("Do I still play tennis on Tuesdays?"))
    assert weights["tenni"] == 1.0
    assert 0 < weights["sport"] < 1.0
    assert "footbal" not in weights
    assert "footbal" in dict(weighted_terms("What sport do I do?"))
