"""The hard recall set (bench/recall_hard_data.py): deterministic, hard by construction, scored as held out."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import recall_hard_data as data

STOP = set(
    [
        "what",
        "when",
        "where",
        "which",
        "with",
        "have",
        "been",
        "from",
        "that",
        "this",
        "into",
        "about",
        "does",
        "going",
        "your",
        "mine",
        "these",
        "days",
    ]
)


def test_the_set_is_deterministic_long_bilingual_and_typed() -> None:
    """Same seed, same data; hundreds of turns per user over dated sessions; every type in both languages."""
    users = data.generate(2, 1, seed=5)
    assert json.dumps(data.as_json(users)) == json.dumps(data.as_json(data.generate(2, 1, seed=5)))
    assert {u.language for u in users} == {"en", "zh"}
    for user in users:
        assert sum(len(s["contents"]) for s in user.sessions) >= 400
        days = {dt.datetime.fromtimestamp(s["start_ts"], dt.UTC).date() for s in user.sessions}
        assert len(days) == len(user.sessions) >= 10
        assert {q.type for q in user.questions} == set(data.TYPES)
        for q in user.questions:
            if q.type == "multi":
                assert len({t.agent_id for t in q.evidence}) == 2
    for seed in (3, 11):  # the default size: no gold answer is said outside its evidence
        assert data.leaks(data.generate(8, 4, seed=seed)) == []


def test_questions_do_not_repeat_their_evidence_words() -> None:
    """English questions (but those naming a person) share no content word with their evidence."""
    for user in data.generate(8, 0, seed=11):
        for q in user.questions:
            if q.type == "other_person":
                continue
            words = set(re.findall(r"[a-z]{4,}", q.text.lower())) - STOP
            evidence = " ".join(t.content.lower() for t in q.evidence)
            assert not [w for w in words if re.search(rf"\b{w}\b", evidence)], q.text


def test_scoring_is_the_held_out_rule() -> None:
    """Gold or every evidence opening, lowercased with punctuation folded; a distractor is no hit."""
    user = data.generate(1, 0, seed=11)[0]
    multi = next(q for q in user.questions if q.type == "multi")
    first, second = (t.content for t in multi.evidence)
    assert multi.answered_by(multi.answer.upper())
    assert multi.answered_by(f"- {first[:60].replace(',', ';')}...\n* {second.upper()}")
    assert not multi.answered_by(first)
    # Questions come in `questions_for`'s order: my pet first, the relative's pet twelfth.
    pet, relpet = user.questions[0], user.questions[11]
    assert (pet.type, relpet.type) == ("single", "other_person")
    assert not pet.answered_by(relpet.evidence[0].content)
    assert not relpet.answered_by(pet.evidence[0].content)


def test_a_when_question_has_the_day_resolved_from_the_day_said() -> None:
    """ "yesterday" said on a session's day answers with the day before, written out."""
    seen = 0
    for user in data.generate(8, 4, seed=11):
        by_id = {s["agent_id"]: s for s in user.sessions}
        for q in user.questions:
            said = q.evidence[0].content
            if (
                q.type != "temporal"
                or not ("yesterday" in said or "昨天" in said)
                or "ago" in q.text
                or "多久" in q.text
            ):
                continue
            day = dt.datetime.fromtimestamp(by_id[q.evidence[0].agent_id]["start_ts"], dt.UTC).date()
            assert q.answer == data.render_date(day - dt.timedelta(days=1), user.language)
            seen += 1
    assert seen


def test_varied_small_talk_leaves_the_planted_statements_few_among_the_lines_said_once() -> None:
    """With the templates every planted statement is among the few lines said only once (a
    question-blind pick of them answers everything); varied small talk hides them among
    hundreds, and keeps the same calls, plants and questions."""
    for seed in (11, 12):
        plain = data.generate(8, 4, seed=seed)
        varied = data.generate(8, 4, seed=seed, filler="varied")
        assert data.leaks(varied) == []
        assert [q.evidence for u in plain for q in u.questions] == [
            q.evidence for u in varied for q in u.questions
        ]
        for filler, users in (("templates", plain), ("varied", varied)):
            said_once = planted = 0
            for user in users:
                lines = Counter(
                    m["content"] for s in user.sessions for m in s["contents"] if m["role"] == "user"
                )
                evidence = {turn.content for q in user.questions for turn in q.evidence}
                said_once += sum(1 for count in lines.values() if count == 1)
                planted += sum(1 for text in evidence if lines[text] == 1)
            share = planted / said_once
            assert share > 0.3 if filler == "templates" else share < 0.1, (filler, share)
