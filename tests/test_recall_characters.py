"""Chinese characters are recall terms beside bigrams: a word said apart, or a one-character
word, is found through the characters it shares with the question (core/terms.py)."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import pytest
from sqlite_utils import Database
from test_recall import told

from agent_memory.core import terms as terms_module
from agent_memory.core.recall import RELATED_COUNT, weighted_terms
from agent_memory.core.related import RELATED
from agent_memory.core.terms import CHARACTER_WEIGHT, is_character, query_terms, terms
from agent_memory.core.textcache import forget_texts
from agent_memory.store.postgres.migrations import m012_recall_characters
from agent_memory.store.sqlite.migrations import m022_recall_characters

pytestmark = pytest.mark.postgres
SMALL_TALK = [
    "今天天气不错。",
    "是啊，挺好的。",
    "晚饭吃什么？",
    "面条吧。",
    "周末有什么安排？",
    "还没想好。",
]
# The turn shares no bigram with the question (养猫 / 对猫), only the character 猫 (and 我).
TURN = "医生说我对猫严重过敏。"
QUESTION = "我养猫合适吗？"


def chat(rounds: int) -> list[str]:
    return [SMALL_TALK[i % len(SMALL_TALK)] for i in range(rounds)]


async def recall(service: Any, q: str) -> list[str]:
    status, body = await service.api("GET", "/v1/users/u1/characters/xiaoyu/recall", params={"q": q})
    assert status == 200, body
    return [memory["text"] for memory in body["memories"]]


def test_chinese_characters_are_terms_beside_bigrams_and_weigh_less() -> None:
    assert terms("我明天考试") == ["我明", "明天", "天考", "考试", "我", "明", "天", "考", "试"]
    assert terms("马") == ["马"]  # a lone character was its own term already
    assert terms("ひらがな") == ["ひら", "らが", "がな"]  # kana carry no meaning alone
    assert terms("학교에 가요") == ["학교", "교에", "가요"]
    # A Latin word stops where Han or Hangul starts (both are letters to a regex's \\w).
    assert terms("HSK五级考试") == ["hsk", "五级", "级考", "考试", "五", "级", "考", "试"]
    assert terms("PPT발표") == ["ppt", "발표"]
    weights = dict(weighted_terms(QUESTION))
    assert weights["养猫"] == 1.0 and weights["猫"] == CHARACTER_WEIGHT
    assert is_character("猫") and not is_character("猫咪") and not is_character("a")
    # A Chinese word's related words are words, not their characters (a word of one character, 猫, is one).
    every = {term for related in RELATED.values() for term in related}
    assert "猫" in RELATED["宠物"] and not {"宠", "物", "救", "助"} & every
    assert "猫" in query_terms(QUESTION)


async def test_a_chinese_question_finds_a_turn_that_shares_only_characters(service) -> None:
    lines = [*chat(10), TURN, "要注意身体。", *chat(10)]
    await told(service, lines, "u1", "xiaoyu", "z1")
    found = await recall(service, QUESTION)
    assert found and found[0] == TURN


async def test_a_character_in_many_turns_is_left_out_of_the_question(service) -> None:
    # 我 is in most turns: as a related word would be, it is dropped (it says nothing and
    # costs a long posting list); a turn that says only 我 is not recalled.
    lines = [f"我今天第{i}次喝水。" for i in range(RELATED_COUNT + 5)]
    await told(service, lines, "u1", "xiaoyu", "z1")
    assert await recall(service, "我呢？") == []


async def test_the_migration_indexes_turns_said_in_chinese_again(service, backend, monkeypatch) -> None:
    # A database indexed before characters were terms: the same turns, indexed as they were then.
    # Terms are cached by text: empty the caches as the old tokeniser goes in and out, or the
    # question's terms hold whichever tokeniser asked first (an earlier test's, run alone this one's).
    forget_texts()
    monkeypatch.setattr(terms_module, "HAN", re.compile(r"(?!)"))
    lines = [*chat(10), TURN, "要注意身体。", *chat(10), "I had pasta for dinner."]
    await told(service, lines, "u1", "xiaoyu", "z1")
    assert TURN not in await recall(service, QUESTION)
    monkeypatch.undo()
    forget_texts()
    if backend == "sqlite":
        conn = sqlite3.connect(service.settings.db_path)
        with conn:
            m022_recall_characters(Database(conn))
        conn.close()
    else:
        await service.store.write(lambda tx: m012_recall_characters(tx.conn))
    # Recall catches the index up first: the Chinese turns are indexed again with their characters.
    found = await recall(service, QUESTION)
    assert found and found[0] == TURN
    assert (await recall(service, "pasta dinner"))[0] == "I had pasta for dinner."
