"""The life set (bench/life_data.py): deterministic, told by both speakers, too much to quote whole."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import life_data
import life_more
import pytest
import recall_hard_data

from agent_memory.condense.offline import SUMMARY_MAX_TOKENS
from agent_memory.core.tokens import count_tokens


def test_the_set_is_deterministic_bilingual_and_told_by_both_speakers() -> None:
    """Same seed, same data; every type; the character tells details of its own, asked as "you"."""
    users = life_data.generate(2, 1, seed=5)
    assert json.dumps(recall_hard_data.as_json(users)) == json.dumps(
        recall_hard_data.as_json(life_data.generate(2, 1, seed=5))
    )
    assert {u.language for u in users} == {"en", "zh"}
    for user in users:
        assert {q.type for q in user.questions} == set(recall_hard_data.TYPES)
        assert {q.teller for q in user.questions} == {"user", "character"}
        for q in user.questions:
            role = "assistant" if q.teller == "character" else "user"
            for turn in q.evidence:
                said = next(s for s in user.sessions if s["agent_id"] == turn.agent_id)
                assert said["contents"][turn.index] == {**said["contents"][turn.index], "role": role}
            if q.type == "multi":
                assert len({t.agent_id for t in q.evidence}) == 2
    for seed in (21, 22):  # the default size: no gold answer is said outside its evidence
        assert recall_hard_data.leaks(life_data.generate(8, 4, seed=seed)) == []


def test_a_life_holds_more_than_a_start_context_can_quote() -> None:
    """Each user's evidence turns alone take more than the offline summary's whole budget."""
    for user in life_data.generate(2, 1, seed=21):
        evidence = {t.content for q in user.questions for t in q.evidence}
        assert len(user.questions) >= 35
        assert sum(count_tokens(text) for text in evidence) > SUMMARY_MAX_TOKENS


def test_questions_about_the_characters_life_are_asked_of_you() -> None:
    assert life_data.second_person("What's the novel I told you I'd been reading?", "en") == (
        "What's the novel you told me you'd been reading?"
    )
    assert life_data.second_person("What did my team release?", "en") == "What did your team release?"
    assert life_data.second_person("Which project did we ship?", "en") == "Which project did you ship?"
    assert (
        life_data.second_person("我跟你说过我在读的那本小说叫什么？", "zh")
        == "你跟我说过你在读的那本小说叫什么？"
    )


def test_a_question_asked_of_you_is_asked_again_as_its_teller_would() -> None:
    """`first_person` undoes `second_person` on every question the life set asks ("we" and "our" come back as "I" and "my")."""
    for language in ("en", "zh"):
        for kinds in (life_data.KINDS[language], life_more.EXTRA_KINDS[language]):
            for kind in kinds.values():
                for text in (*kind.asks, *([kind.multi] if kind.multi else [])):
                    own = text.replace(" we ", " I ").replace(" our ", " my ") if language == "en" else text
                    assert life_data.first_person(life_data.second_person(text, language), language) == own


def test_when_the_character_tells_the_life_the_user_asks_it_of_you() -> None:
    """`recall_hard.py --teller character`: each question names as its teller whoever said its
    evidence, and asks what the character said as "you" ("I" is always the user)."""
    import recall_hard

    for users in (life_data.generate(2, 1, seed=5), recall_hard_data.generate(1, 1, seed=5)):
        recall_hard.swap_roles(users)
        for user in users:
            for q in user.questions:
                role = "assistant" if q.teller == "character" else "user"
                for turn in q.evidence:
                    said = next(s for s in user.sessions if s["agent_id"] == turn.agent_id)
                    assert said["contents"][turn.index]["role"] == role
                if user.language == "en" and q.teller == "character":
                    assert not {"I", "my"} & set(q.text.replace("?", " ").split()), q.text


def test_named_calls_open_and_close_by_name_and_questions_name_whom_they_ask_about() -> None:
    """`recall_hard.py --named`: greetings by name in every call, evidence turns as said, questions in
    the third person (the teller's name, no "I" or "you")."""
    import recall_hard

    users = life_data.generate(2, 1, seed=5)
    recall_hard.name_speakers(users)
    for user in users:
        character = recall_hard_data.CHARACTERS[user.language][int(user.user_id[-2:]) % 2]
        for session in user.sessions:
            contents = session["contents"]
            assert user.name in contents[1]["content"] and character in contents[0]["content"]
        for q in user.questions:
            for turn in q.evidence:
                said = next(s for s in user.sessions if s["agent_id"] == turn.agent_id)
                assert said["contents"][turn.index]["content"] == turn.content
            if user.language == "en":
                assert not {"I", "my", "me", "you", "your"} & set(q.text.replace("?", " ").split()), q.text
            else:
                assert "我" not in q.text and "你" not in q.text, q.text


def test_the_default_life_is_as_it_was() -> None:
    """`details` 1 (the default) draws exactly what it drew before `--details` existed, so the life
    set's figures stay comparable across sessions (the digest of seed 5's data at b02325d)."""
    data = json.dumps(recall_hard_data.as_json(life_data.generate(2, 1, seed=5)), ensure_ascii=False)
    assert data == json.dumps(
        recall_hard_data.as_json(life_data.generate(2, 1, seed=5, details=1)), ensure_ascii=False
    )
    assert hashlib.sha1(data.encode()).hexdigest() == "0a30e4f29f3d0e89e46945c51e25dd9a47245fe8"


def test_a_dense_life_tells_more_details_each_asked_about_once() -> None:
    """`details` 2: deterministic, bilingual, every type, the sixteen more kinds told (each value
    once a user) and asked about, in as many calls; no gold answer said outside its evidence."""
    plain = life_data.generate(2, 1, seed=5)
    dense = life_data.generate(2, 1, seed=5, details=2)
    assert json.dumps(recall_hard_data.as_json(dense)) == json.dumps(
        recall_hard_data.as_json(life_data.generate(2, 1, seed=5, details=2))
    )
    for thin, user in zip(plain, dense, strict=True):
        assert len(user.questions) >= 1.5 * len(thin.questions)
        assert {q.type for q in user.questions} == set(recall_hard_data.TYPES)
        assert {q.teller for q in user.questions} == {"user", "character"}
        evidence = [t.content for q in user.questions if q.type != "multi" for t in q.evidence]
        assert len(evidence) == len(set(evidence))  # one detail a turn, each asked about once
        asked = {recall_hard_data.fold(q.answer) for q in user.questions}
        extra = life_more.EXTRA_POOLS[user.language]
        told = {recall_hard_data.fold(life_data.article_free(v)) for pool in extra.values() for v in pool}
        assert len(told & asked) >= 8  # the new kinds' values are among the answers
    for seed in (21, 22):
        assert recall_hard_data.leaks(life_data.generate(8, 4, seed=seed, details=2)) == []
    with pytest.raises(ValueError):
        life_data.generate(1, 0, seed=5, details=3)
