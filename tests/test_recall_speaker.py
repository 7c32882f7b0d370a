"""Who a question asks about: "you" is the character, "I" the user; recall prefers that speaker's words."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import said, seed
from fakes.upstream_llm import FakeUpstreamLLM
from test_llm_proxy import PARAMS, client, start
from test_recall import MAY_8, content_of, recall, small_talk, system_messages, texts

from agent_memory.core.domain import Summary
from agent_memory.core.people import asked_about
from agent_memory.core.recall import rank

pytestmark = pytest.mark.postgres


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


# Both speakers won a raffle, said in as many words: only who is asked about tells them apart.
THE_CHARACTERS = "I won the raffle at the street party, a signed cricket bat of all things."
THE_USERS = "I won the raffle at the school fair, a giant teddy bear of all things."
THE_CHARACTERS_ZH = "我在街坊聚会上抽中了奖，是一支签名板球拍。"
THE_USERS_ZH = "我在学校义卖会上抽中了奖，是一只巨型泰迪熊。"


def both_won(character: str, user: str, *, user_newer: bool = True) -> list[dict[str, Any]]:
    """The character says `character` and the user `user`, the user later or earlier (when all
    else is equal, the newer ranks first)."""
    if user_newer:
        told = ["Tell me something fun.", character, "Ha, lucky you!", "Thanks!", user, "Amazing!"]
    else:
        told = [user, "Amazing!", "Guess what?", character, "Ha, lucky you!", "Thanks!"]
    return said(*small_talk(10), *told, *small_talk(10), start_ms=MAY_8)


@pytest.mark.parametrize(
    ("question", "about"),
    [
        ("What did you win?", "assistant"),
        ("What did I win?", "user"),
        # The one told is not who it is about; the teller is: the book "I told you" about is the user's.
        ("What's the novel I told you I'd been reading?", "user"),
        ("Which two books did you tell me you read?", "assistant"),
        ("Do you remember what I won?", "user"),
        ("Remind me what you painted.", "assistant"),
        ("Can you tell me what I bought?", "user"),
        ("Which work project did we get out the door?", "user"),
        ("你还记得我赢了什么吗？", "user"),
        ("你跟我说过你在读的那本小说叫什么？", "assistant"),
        # Neither more than the other, or no one: no preference.
        ("Where is Priya going to study?", None),
        ("Did you ever meet my sister?", None),
    ],
)
def test_a_question_says_whose_life_it_asks_about(question: str, about: str | None) -> None:
    assert asked_about(question) == about


async def test_you_asks_for_what_the_character_said_and_i_for_what_the_user_said(service: Any) -> None:
    # Without the preference the newer turn comes first whoever is asked about.
    await seed(service, "u1", "luna", "a1", both_won(THE_CHARACTERS, THE_USERS, user_newer=True))
    assert texts(await recall(service, "u1", "luna", "What did you win?"))[:2] == [THE_CHARACTERS, THE_USERS]
    assert texts(await recall(service, "u1", "luna", "What did I win?"))[:2] == [THE_USERS, THE_CHARACTERS]
    await seed(service, "u2", "luna", "a2", both_won(THE_CHARACTERS_ZH, THE_USERS_ZH, user_newer=False))
    assert texts(await recall(service, "u2", "luna", "我抽中的奖品是什么？"))[:2] == [
        THE_USERS_ZH,
        THE_CHARACTERS_ZH,
    ]
    assert texts(await recall(service, "u2", "luna", "你抽中的奖品是什么？"))[:2] == [
        THE_CHARACTERS_ZH,
        THE_USERS_ZH,
    ]
    # A preference, not a filter: the other speaker's turn is still recalled.
    assert THE_USERS in texts(await recall(service, "u1", "luna", "What did you win at the school fair?"))


async def test_the_start_context_asked_with_a_query_prefers_the_speaker_asked_about(service: Any) -> None:
    await seed(service, "u1", "luna", "a1", both_won(THE_CHARACTERS, THE_USERS))
    content = content_of(
        await system_messages(service, "u1", "luna", max_tokens=1500, query="What did you win?")
    )
    assert content.index(THE_CHARACTERS) < content.index(THE_USERS)


async def test_the_custom_llm_endpoint_recalls_what_the_character_said_for_you(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    await seed(service, PARAMS["user_id"], PARAMS["character_id"], "a1", both_won(THE_CHARACTERS, THE_USERS))
    while await service.store.catch_up_search():  # the endpoint recalls from what is indexed
        pass
    messages = [
        {"role": "system", "content": "You are Luna."},
        {"role": "user", "content": "what did you win in that raffle?"},
    ]
    await client(service).chat.completions.create(model="m", messages=messages, extra_body=PARAMS)
    memory = upstream.requests[0]["messages"][1]["content"]
    assert memory.index(THE_CHARACTERS) < memory.index(THE_USERS)


def test_a_summary_line_quoting_the_other_speaker_weighs_less() -> None:
    # The offline digest labels the character's statements ("Assistant: …"); the user's are not.
    text = "- Assistant: I won the raffle, a bat.\n- I won the raffle, a teddy bear."
    summary = Summary("u1", "luna", text, 10, MAY_8, 10, "offline", None, MAY_8, MAY_8)
    idfs = {term: 1.0 for term in ("won", "raffl")}

    def ranked(speaker: str | None) -> list[str]:
        found = rank(hits=[], facts=[], summaries=[summary], idfs=idfs, average_length=4.0, speaker=speaker)
        return [memory.text for memory in found]

    assert ranked("user") == ["I won the raffle, a teddy bear.", "Assistant: I won the raffle, a bat."]
    assert ranked("assistant") == ["Assistant: I won the raffle, a bat.", "I won the raffle, a teddy bear."]
