"""The speakers' names: learnt from how calls open ("Hi Sam!"), and a question naming one asks about them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import condense, said, seed
from test_recall import MAY_8, recall, small_talk, texts
from test_recall_speaker import THE_CHARACTERS, THE_USERS

from agent_memory.condense.facts_offline import greeted, greeting_facts, known_names
from agent_memory.core.people import named_speaker, named_terms, speaker_names
from agent_memory.core.terms import query_terms, terms

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Hi Sam! How was the week?", "Sam"),
        ("Hey Sam, good to hear from you.", "Sam"),
        ("Good morning Rosalind! Guess what happened.", "Rosalind"),
        ("Sam! Hello again.", "Sam"),
        ("小林你好！最近怎么样？", "小林"),
        ("嗨，小林！好久不见。", "小林"),
        # No one greeted by name.
        ("Hi there! How are you?", None),
        ("Hello again, how was work?", None),
        ("Hey, I finished the book.", None),
        ("Hi Mum's friend came round.", None),
        ("I met Sam at the shop.", None),
        ("大家好！", None),
    ],
)
def test_the_name_a_turn_opens_by_greeting(text: str, name: str | None) -> None:
    assert greeted(text) == name


def test_a_greeting_by_the_character_names_the_user_and_one_by_the_user_the_character() -> None:
    openings = [
        ("assistant", "Hi Sam! Good to hear you."),
        ("user", "Hey Luna, guess what?"),
        ("user", "Hi!"),
    ]
    facts = greeting_facts(openings)
    assert facts == [("The user's name is Sam", "user"), ("The user's name for you is Luna", "character")]
    assert speaker_names(text for text, _ in facts) == {"sam": "user", "luna": "assistant"}
    # As an LLM condenser may put them too.
    assert speaker_names(["User's name is Ana.", "The user is called Bo", "The user goes by Cy"]) == {
        "ana": "user",
        "bo": "user",
        "cy": "user",
    }
    assert speaker_names(["用户叫小林", "用户叫你小月", "The user likes to be called Sammy"]) == {
        "小林": "user",
        "小月": "assistant",
        "sammy": "user",
    }


@pytest.mark.parametrize(
    ("question", "about"),
    [
        ("What did Sam win?", "user"),
        ("What did Luna win at the fair?", "assistant"),
        ("Did Sam ever tell Luna about the fair?", None),  # both: no preference
        ("What did Samantha win?", "user"),  # a longer form of the name greeted
        ("What did Sa win?", None),  # ...not a shorter one
        ("Did Sam's sister win?", "user"),
        ("what did sam win?", None),  # a name is capitalised
        ("小林赢了什么？", "user"),
        ("What did Priya win?", None),
    ],
)
def test_a_question_naming_a_speaker_asks_about_them(question: str, about: str | None) -> None:
    names = {"sam": "user", "luna": "assistant", "小林": "user"}
    assert named_speaker(question, names) == about


def test_the_terms_of_a_name_asked_are_those_that_weigh() -> None:
    names = {"sam": "user"}
    assert named_terms("What did Sam win?", names, {"sam", "win"}) == {"sam"}
    assert named_terms("What did Sam win?", names, {"win"}) == set()
    assert named_terms("What did Samantha win?", names, {"samantha", "win"}) == {"samantha"}


def test_the_speakers_own_names_are_not_people_the_digest_looks_for() -> None:
    facts = ["The user's name is Sam", "The user's sister is named Clara", "The user calls you Luna"]
    assert known_names(facts) == {"Clara"}


def greeted_calls(first: str, second: str) -> list[list[dict[str, Any]]]:
    """Two calls, each opened by the speakers greeting each other by name; the user tells `first`
    in the first and the character `second` in the second (the newer)."""
    calls = []
    for number, told in enumerate((first, second)):
        lines = ["Hey Luna, good to hear from you.", "Hi Sam! How has your week been?", *small_talk(6)]
        lines += ([told, "Amazing!"] if number == 0 else ["Guess what?", told]) + small_talk(6)
        calls.append(said(*lines, start_ms=MAY_8 + number * 86_400_000))
    return calls


async def test_a_question_naming_a_speaker_recalls_their_words_not_the_greetings(start_service: Any) -> None:
    service = await start_service(summary_delay_s=0, job_sweep_s=3600)
    for number, contents in enumerate(greeted_calls(THE_USERS, THE_CHARACTERS)):
        await seed(service, "u1", "luna", f"a{number}", contents)
    await condense(service)
    facts = await service.store.read(lambda view: view.facts.of_pair("u1", "luna"))
    assert {"The user's name is Sam", "The user's name for you is Luna"} <= {fact.text for fact in facts}
    # Without the names, the greetings match "Sam" best, and the newer raffle comes first.
    sam = texts(await recall(service, "u1", "luna", "What did Sam win?"))
    assert sam[0] == THE_USERS and sam.index(THE_USERS) < sam.index(THE_CHARACTERS)
    assert not [text for text in sam[:2] if "Hi Sam!" in text]
    luna = texts(await recall(service, "u1", "luna", "What did Luna win?"))
    assert luna.index(THE_CHARACTERS) < luna.index(THE_USERS)


def test_the_characters_name_is_kept_in_words_no_question_about_something_called_asks() -> None:
    # "The user calls you Luna" came first for "What is my cat called?" (the README's tour).
    ((fact, scope),) = greeting_facts([("user", "Hey Luna!")])
    assert scope == "character" and speaker_names([fact]) == {"luna": "assistant"}
    assert not set(query_terms("What is my cat called?")) & set(terms(fact))
