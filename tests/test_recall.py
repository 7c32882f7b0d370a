"""Recall: natural-language questions find the turns that answer them, ranked, dated and within
the budget, over HTTP, in process and from the CLI; the word index follows every change."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import FIXTURES, assert_error, integrity_check, on_disk, said, seed
from fakes.embeddings_server import FakeEmbeddings
from test_embeddings import embed_now, session, spoken
from test_search import fixture_messages

from agent_memory.cli import main as cli_main
from agent_memory.core.domain import Summary
from agent_memory.core.recall import CANDIDATES, HEADING, asks_when, rank, weighted_terms
from agent_memory.core.recall_fit import fit, snippet
from agent_memory.core.related import RELATED_WEIGHT, compound_parts
from agent_memory.core.terms import query_terms, terms
from agent_memory.core.tokens import count_message_tokens
from agent_memory.settings import Settings
from agent_memory.store import Transaction, open_store
from agent_memory.store.postgres import PostgresStore
from agent_memory.store.sqlite import SQLiteStore
from agent_memory.web.keys import MEMORY

pytestmark = pytest.mark.postgres
DAY_MS = 24 * 3600 * 1000
# 2023-05-08 13:56 UTC, a Monday.
MAY_8 = 1_683_554_160_000
SMALL_TALK = [
    "How was your day?", "Pretty normal, work was busy.", "Did you sleep well?", "Not bad, thanks for asking.",
    "What are you up to this evening?", "Probably just cooking dinner and watching a show.",
    "That sounds relaxing.", "Yeah, I need a quiet night.", "Any plans for the weekend?", "Nothing big yet.",
]  # fmt: skip


def small_talk(rounds: int) -> list[str]:
    return [SMALL_TALK[i % len(SMALL_TALK)] for i in range(rounds)]


async def recall(service: Any, user: str, character: str, q: str, **params: Any) -> dict[str, Any]:
    status, body = await service.api(
        "GET", f"/v1/users/{user}/characters/{character}/recall", params={"q": q, **params}
    )
    assert status == 200, body
    return body


async def told(
    service: Any, lines: Sequence[str], user: str = "u1", character: str = "luna", agent: str = "a1"
) -> None:
    """`lines` stored as one call of the pair, alternating user and assistant from MAY_8."""
    await seed(service, user, character, agent, said(*lines, start_ms=MAY_8))


def texts(body: dict[str, Any]) -> list[str]:
    return [memory["text"] for memory in body["memories"]]


# -- the words --------------------------------------------------------------------------------


def test_terms_stem_english_drop_stop_words_and_split_cjk_into_bigrams() -> None:
    assert query_terms("When did Rosalind go to the bereavement support groups?") == [
        "rosalind",
        "bereav",
        "support",
        "group",
    ]
    assert terms("I researched pottery studios") == terms("researching a pottery studio")
    assert terms("我明天考试") == ["我明", "明天", "天考", "考试", "我", "明", "天", "考", "试"]
    assert terms("학교에 가요") == ["학교", "교에", "가요"]
    assert terms("It cost $1,200 on 3/14") == ["cost", "1200", "3", "14"]
    assert terms("Maya's pottery") == ["maya", "potteri"]


def test_numbers_and_names_in_a_question_weigh_more() -> None:
    weights = dict(weighted_terms("Did Maya pay 1200 for the pottery class?"))
    assert weights["maya"] > weights["potteri"]
    assert weights["1200"] > weights["maya"]


# -- ranking over the real service --------------------------------------------------------------


async def test_a_question_finds_its_answer_among_small_talk_with_or_semantics(service) -> None:
    lines = [*small_talk(30), "I finally signed up for a pottery class at the community center!", "Nice!"]
    lines += small_talk(30)
    await told(service, lines)
    # Not every word of the question is in the answer: "When", "start", "Maya" are not.
    body = await recall(service, "u1", "luna", "When did Maya start her pottery class?")
    assert body["memories"][0]["text"] == "I finally signed up for a pottery class at the community center!"
    assert body["memories"][0]["kind"] == "turn" and body["memories"][0]["role"] == "user"
    assert body["memories"][0]["at"] == "2023-05-08 13:56 UTC"
    assert body["tokens"] <= 500 and body["max_tokens"] == 500
    assert body["system_message"]["role"] == "system"
    content = body["system_message"]["content"]
    assert content.startswith(HEADING) and "pottery class at the community center!" in content
    assert count_message_tokens(content) == body["tokens"]
    # Small talk shares no word with the question: it is not recalled.
    assert not any("dinner" in text for text in texts(body))


async def test_rare_words_outrank_common_ones(service) -> None:
    lines = [
        "My sister has a new job.", "Cute.", "My sister's dog is a beagle.", "Lovely.",
        "My sister called again, my sister is so chatty.", "OK.", "My sister is visiting.", "Fun.",
    ]  # fmt: skip
    await told(service, lines)
    body = await recall(service, "u1", "luna", "my sister's beagle")
    assert body["memories"][0]["text"] == "My sister's dog is a beagle."


async def test_relative_dates_are_resolved_against_when_they_were_said(service) -> None:
    lines = ["I went to a support group yesterday and it was powerful.", "That's great."]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "When did I go to the support group?")
    top = body["memories"][0]
    assert top["text"].startswith("I went to a support group yesterday and it was powerful.")
    assert "7 May 2023" in top["text"]
    assert "7 May 2023" in body["system_message"]["content"]


async def test_a_when_question_prefers_the_turn_that_dates_the_event(service) -> None:
    # Both say the words asked; the shorter (and later) one would rank first, but only the
    # other says when it happened, which is what was asked.
    dated = "We moved into the new flat two days ago."
    lines = [
        *small_talk(6),
        dated,
        "Congrats!",
        *small_talk(6),
        "Moving into the new flat was chaos.",
        "Oh no.",
    ]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "When did we move into the new flat?")
    assert body["memories"][0]["text"] == f"{dated} (two days ago = 6 May 2023)"
    assert asks_when("从我们最近一次聊天算起，我搬家是多久以前？") and not asks_when("Where is the new flat?")


async def test_neighbouring_turns_come_as_context_and_a_neighbour_hit_is_not_repeated(service) -> None:
    lines = [*small_talk(6), "What did you name the new kitten?", "We named the kitten Miso, after the soup."]
    lines += small_talk(6)
    await told(service, lines)
    body = await recall(service, "u1", "luna", "what is the kitten's name")
    joined = texts(body)
    assert joined.count("We named the kitten Miso, after the soup.") == 1
    assert joined.count("What did you name the new kitten?") == 1
    kitten = next(m for m in body["memories"] if m["text"].startswith("We named"))
    # Its question is a hit of its own, so it is not shown again as context.
    assert all(turn["text"] != "What did you name the new kitten?" for turn in kitten["context"])
    # A hit whose neighbours are small talk gets them as context.
    question = next(m for m in body["memories"] if m["text"].startswith("What did you name"))
    assert [turn["position"] for turn in question["context"]] == ["before"]


async def test_each_memory_gets_its_own_neighbours_from_two_sessions(service) -> None:
    # The neighbours of every memory shown are read at once (one round trip on PostgreSQL):
    # each memory must still get the turns around it, from its own session.
    first = ["Good morning!", "I adopted a tortoise called Sheldon.", "How old is he?"]
    second = ["Back from the market.", "Sheldon the tortoise ate all the strawberries.", "Greedy little guy!"]
    await seed(service, "u1", "luna", "a1", said(*first, start_ms=MAY_8))
    await seed(service, "u1", "luna", "a2", said(*second, start_ms=MAY_8 + 86_400_000))
    body = await recall(service, "u1", "luna", "Sheldon tortoise")
    context = {
        m["text"]: [(turn["position"], turn["text"]) for turn in m["context"]] for m in body["memories"]
    }
    assert context["I adopted a tortoise called Sheldon."] == [
        ("before", "Good morning!"),
        ("after", "How old is he?"),
    ]
    assert context["Sheldon the tortoise ate all the strawberries."] == [
        ("before", "Back from the market."),
        ("after", "Greedy little guy!"),
    ]


async def test_the_same_words_said_twice_are_one_memory(service) -> None:
    await seed(service, "u1", "luna", "a1", said("I love hiking in the Alps.", "Nice.", start_ms=MAY_8))
    await seed(
        service, "u1", "luna", "a2", said("I love hiking in the Alps.", "You said!", start_ms=MAY_8 + DAY_MS)
    )
    body = await recall(service, "u1", "luna", "hiking Alps")
    assert texts(body).count("I love hiking in the Alps.") == 1
    # The newer saying is the one kept: recency is the tie-breaker.
    assert body["memories"][0]["session"] == "a2"


async def test_recency_is_a_prior_not_the_order(service) -> None:
    old = said("My favourite band is Radiohead, I saw Radiohead live in 2019.", "Wow.", start_ms=MAY_8)
    new = said("I listened to some band music today.", "Cool.", start_ms=MAY_8 + 300 * DAY_MS)
    await seed(service, "u1", "luna", "a1", old)
    await seed(service, "u1", "luna", "a2", new)
    body = await recall(service, "u1", "luna", "Which band is my favourite, Radiohead?")
    assert body["memories"][0]["session"] == "a1"


async def test_the_budget_holds_and_a_small_budget_keeps_the_best(service) -> None:
    lines: list[str] = []
    for index in range(40):
        lines += [f"The garden had {index} tomato plants and the tomato harvest was good.", "OK."]
    lines += ["My tomato tomato tomato garden won the tomato prize at the county fair!", "Congrats!"]
    await told(service, lines)
    for budget in (60, 120, 500):
        body = await recall(service, "u1", "luna", "tomato prize county fair", max_tokens=budget)
        assert 0 < body["tokens"] <= budget
        assert body["memories"][0]["text"].startswith("My tomato tomato tomato garden won")


async def test_chinese_questions_find_chinese_answers(service) -> None:
    lines = [
        "今天天气不错。",
        "是啊。",
        "我下个月要去成都参加姐姐的婚礼。",
        "太好了！",
        "晚饭吃什么？",
        "面条。",
    ]
    await told(service, lines, "u2", "xiaoyu", "z1")
    body = await recall(service, "u2", "xiaoyu", "我姐姐的婚礼在哪里？")
    assert body["memories"][0]["text"].startswith("我下个月要去成都参加姐姐的婚礼。")
    assert "2023年6月" in body["memories"][0]["text"]  # 下个月, said in May 2023


async def test_facts_and_summaries_are_recalled_with_turns(service) -> None:
    await seed(service, "u1", "luna", "a1", said(*small_talk(4), start_ms=MAY_8))
    status, _ = await service.api(
        "POST", "/v1/users/u1/characters/luna/facts", json={"text": "The user is allergic to peanuts"}
    )
    assert status == 201
    body = await recall(service, "u1", "luna", "am I allergic to anything like peanuts?")
    assert body["memories"][0] == {
        **body["memories"][0], "kind": "fact", "text": "The user is allergic to peanuts", "always": False,
    }  # fmt: skip


async def test_a_summary_line_quoting_a_turn_is_the_same_memory_shown_once_as_the_turn(service) -> None:
    # The offline summary quotes statements with the day they were said in front and their
    # dates resolved after: the turn it quotes is one memory, not two (the budget buys another).
    statement = "I moved into the new flat yesterday, it is all boxes."
    await seed(service, "u1", "luna", "a1", said(*small_talk(6), statement, "Congrats!", start_ms=MAY_8))
    summary = Summary(
        user_id="u1", character_id="luna", watermark_id=1, covered_until_ms=MAY_8 + 30 * DAY_MS,
        text=f"About the user's life:\n- [2023-05-08] {statement}\n2023-05-08 13:56 UTC:\n"
        f"- {statement} (yesterday = 7 May 2023)\n- The flat has a balcony.",
        message_count=8, method="offline", model="test", created_ms=1, updated_ms=MAY_8 + 30 * DAY_MS,
    )  # fmt: skip
    await service.store.write(lambda tx: tx.summaries.put(summary))
    body = await recall(service, "u1", "luna", "When did I move into the new flat?")
    moved = [m for m in body["memories"] if m["text"].startswith("I moved into the new flat")]
    assert [(m["kind"], m["at"]) for m in moved] == [("turn", "2023-05-08 13:56 UTC")]
    assert body["system_message"]["content"].count("I moved into the new flat") == 1
    balcony = next(m for m in body["memories"] if "balcony" in m["text"])
    assert balcony["kind"] == "summary"


async def test_user_scope_reads_every_character_and_always_includes_user_wide_facts(service) -> None:
    await seed(
        service, "u1", "luna", "a1", said("I adopted a greyhound called Pixel.", "Sweet.", start_ms=MAY_8)
    )
    await seed(
        service, "u1", "coach", "b1", said("My marathon is in October.", "Train well.", start_ms=MAY_8)
    )
    status, _ = await service.api(
        "POST", "/v1/users/u1/characters/luna/facts", json={"text": "The user's name is Sam", "scope": "user"}
    )
    assert status == 201
    pair = await recall(service, "u1", "luna", "when is my marathon")
    assert not any("marathon" in text for text in texts(pair))
    everything = await recall(service, "u1", "luna", "when is my marathon", scope="user")
    assert everything["scope"] == "user"
    assert "My marathon is in October." in texts(everything)
    assert any(
        m["kind"] == "fact" and m["always"] and m["text"] == "The user's name is Sam"
        for m in everything["memories"]
    )


async def test_recall_sees_what_was_stored_a_moment_ago(service) -> None:
    await seed(
        service, "u1", "luna", "a1", said("My flight to Lisbon leaves Friday.", "Have fun.", start_ms=MAY_8)
    )
    body = await recall(service, "u1", "luna", "flight Lisbon")
    assert body["memories"][0]["text"].startswith("My flight to Lisbon leaves Friday.")


async def test_the_index_lag_counts_the_scope_turns_not_indexed_yet(service) -> None:
    await seed(service, "u-lag", "luna", "lag1", said("One.", "Two.", "Three.", "Four."))
    body = await recall(service, "u-lag", "luna", "three")
    assert body["index_lag"] == 0

    def edit_then_count(tx: Transaction) -> tuple[int, ...]:
        # Edited turns are queued for indexing again; in this transaction none is taken yet.
        tx.conn.execute("UPDATE messages SET content = content || ' again' WHERE user_id = 'u-lag'")
        return (
            tx.recall.lag("u-lag", "luna"),
            tx.recall.lag("u-lag", None),
            tx.recall.lag("u-other", None),
            # A live call's own turns left out (memory/recall_reuse.py).
            tx.recall.lag("u-lag", "luna", exclude_session="lag1"),
            tx.recall.lag("u-lag", "luna", exclude_session="another"),
        )

    assert await service.store.write(edit_then_count) == (4, 4, 0, 0, 4)


async def test_nothing_matches_gives_an_empty_answer(service) -> None:
    await seed(service, "u1", "luna", "a1", said(*small_talk(4), start_ms=MAY_8))
    body = await recall(service, "u1", "luna", "quantum chromodynamics")
    assert body["memories"] == [] and body["tokens"] == 0 and body["system_message"]["content"] == ""
    unknown = await recall(service, "nobody", "luna", "anything at all")
    assert unknown["memories"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [({}, "q"), ({"q": "  "}, "q"), ({"q": "x", "max_tokens": "10"}, "max_tokens"),
     ({"q": "x", "max_tokens": "many"}, "max_tokens"), ({"q": "x", "scope": "world"}, "scope")],
)  # fmt: skip
async def test_bad_parameters_get_a_422_that_names_them(service, params: dict[str, str], field: str) -> None:
    status, body = await service.api("GET", "/v1/users/u1/characters/luna/recall", params=params)
    assert field in assert_error(status, body, 422, "invalid_field")


# -- the index follows every change -----------------------------------------------------------


async def test_forget_removes_the_words_from_the_index_and_the_file(service, db_path) -> None:
    # The file's bytes are SQLite's to check here (PostgreSQL's files: test_retention).
    sqlite = isinstance(service.store, SQLiteStore)
    await seed(
        service, "u1", "luna", "a1", said("My tortoise Zanzibarino turned 50.", "Wow.", start_ms=MAY_8)
    )
    assert (await recall(service, "u1", "luna", "Zanzibarino"))["memories"]
    assert not sqlite or b"zanzibarino" in on_disk(db_path).lower()
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    assert (await recall(service, "u1", "luna", "Zanzibarino"))["memories"] == []

    def rows(view: Any) -> tuple[int, int]:
        # The index's vocabulary: FTS5's on SQLite, the docs' term arrays on PostgreSQL.
        vocabulary = (
            "SELECT count(*) AS n FROM recall_terms WHERE term LIKE '%zanzibarino%'"
            if sqlite
            else "SELECT count(*) AS n FROM recall_docs WHERE array_to_string(terms, ' ') LIKE '%zanzibarino%'"
        )
        docs, words = (
            view.conn.execute(q).fetchone() for q in ("SELECT count(*) AS n FROM recall_docs", vocabulary)
        )
        return docs["n"], words["n"]

    assert await service.store.read(rows) == (0, 0)
    await service.store.checkpoint()
    assert not sqlite or b"zanzibarino" not in on_disk(db_path).lower()
    await integrity_check(service.store)


async def test_a_moved_session_is_recalled_for_its_new_pair(service) -> None:
    await seed(
        service, "u1", "luna", "a1", said("I play the cello in an orchestra.", "Lovely.", start_ms=MAY_8)
    )
    status, body = await service.api(
        "POST", "/v1/sessions/a1/bind", json={"user_id": "u9", "character_id": "luna"}
    )
    assert status == 200, body
    assert (await recall(service, "u1", "luna", "cello orchestra"))["memories"] == []
    moved = await recall(service, "u9", "luna", "cello orchestra")
    assert texts(moved)[0] == "I play the cello in an orchestra."


# -- in process and from the CLI ------------------------------------------------------------


def test_fit_spends_the_budget_on_hits_before_context() -> None:
    assert fit("q", rank(hits=[], facts=[], summaries=[], idfs={}, average_length=1.0), 100).memories == []


def test_the_cli_prints_the_recall(tmp_path, capsys) -> None:
    db = str(tmp_path / "m.db")
    assert cli_main(["replay", "--db", db, str(FIXTURES / "conversations" / "en_luna_companion.json")]) == 0
    capsys.readouterr()
    assert cli_main(["recall", "u-alice", "luna", "What is my cat called?", "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.startswith(HEADING) and "Just my cat, Miso." in out
    assert cli_main(["recall", "u-alice", "luna", "cat", "--db", db, "--json", "--max-tokens", "80"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["max_tokens"] == 80 and 0 < answer["tokens"] <= 80


# -- the start context: with a query, and rebuilt only when memory changes ---------------------


async def system_messages(service: Any, user: str, character: str, **params: Any) -> dict[str, Any]:
    status, body = await service.api(
        "GET", f"/v1/users/{user}/characters/{character}/system-messages", params=params
    )
    assert status == 200, body
    return body


def content_of(body: dict[str, Any]) -> str:
    return "\n".join(message["content"] for message in body["system_messages"])


async def test_a_query_brings_the_recalled_memories_into_the_start_context(service) -> None:
    old = said("My passport expires on 2024-02-01, I must renew it.", "Noted.", start_ms=MAY_8)
    await seed(service, "u1", "luna", "a1", old)
    # Plenty of newer small talk: the old statement is far outside the recent turns.
    await seed(service, "u1", "luna", "a2", said(*small_talk(400), start_ms=MAY_8 + 10 * DAY_MS))
    plain = await system_messages(service, "u1", "luna", max_tokens=600)
    assert "passport" not in content_of(plain) and plain["included"]["recalled"] == 0
    asked = await system_messages(service, "u1", "luna", max_tokens=600, query="renewing my passport")
    assert "My passport expires on 2024-02-01, I must renew it." in content_of(asked)
    assert asked["included"]["recalled"] >= 1 and asked["included"]["query"] == "renewing my passport"
    assert asked["tokens"] <= 600
    status, body = await service.api(
        "GET", "/v1/users/u1/characters/luna/system-messages", params={"query": "x" * 501}
    )
    assert "query" in assert_error(status, body, 422, "invalid_field")


async def test_the_start_context_is_reused_until_the_pair_memory_changes(service, db_path) -> None:
    await seed(service, "u1", "luna", "a1", said("I like green tea.", "Me too.", start_ms=MAY_8))
    memory = service.server.app[MEMORY]
    first = await system_messages(service, "u1", "luna")
    hits = memory.reading.contexts.hits
    assert await system_messages(service, "u1", "luna") == first
    assert memory.reading.contexts.hits == hits + 1
    # A new turn, a fact said by hand, a fact said by another process on the same database,
    # and a forget: each is in the very next context.
    await seed(service, "u1", "luna", "a2", said("Now I prefer coffee.", "Noted.", start_ms=MAY_8 + DAY_MS))
    assert "Now I prefer coffee." in content_of(await system_messages(service, "u1", "luna"))
    status, _ = await service.api(
        "POST", "/v1/users/u1/characters/luna/facts", json={"text": "Lives in Porto"}
    )
    assert status == 201
    assert "Lives in Porto" in content_of(await system_messages(service, "u1", "luna"))
    other = open_store(Settings(db_path=db_path))
    try:
        await other.write(
            lambda tx: tx.facts.add("u1", "luna", "Has a bike", scope="user", pinned=True, origin="manual")
        )
    finally:
        other.close()
    assert "Has a bike" in content_of(await system_messages(service, "u1", "luna"))
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    after = await system_messages(service, "u1", "luna")
    assert after["system_messages"] == [] and "coffee" not in json.dumps(after)


# -- with an embedding model: meaning and keywords fused ---------------------------------------


class ConceptEmbeddings(FakeEmbeddings):
    """An endpoint whose vectors mark concepts, so "which instrument" is near "the cello" though
    they share no word: what a real embedding model gives and keywords cannot."""

    CONCEPTS = (("instrument", "cello", "violin"), ("job", "work", "nurse", "hired"), ("pet", "cat", "dog"))

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = super()._answer(body)
        for item, text in zip(answer["data"], body["input"], strict=True):
            words = text.casefold()
            item["embedding"] = [
                float(any(word in words for word in concept)) + 0.01 * index
                for index, concept in enumerate(self.CONCEPTS)
            ]
        return answer


async def test_an_embedding_model_adds_turns_found_by_meaning(start_service, backend) -> None:
    async with ConceptEmbeddings() as fake:
        # A model of its own per backend: the process keeps questions' vectors by model.
        service = await start_service(
            embeddings_model=f"concepts-{backend}", embeddings_base_url=fake.base_url, embeddings_api_key="k",
        )  # fmt: skip
        lines = [*small_talk(10), "I practise the cello every evening.", "Lovely!", *small_talk(10)]
        await told(service, lines)
        question = "Which instrument do I play?"
        assert (await recall(service, "u1", "luna", question))["memories"] == []  # not embedded yet
        await embed_now(service)
        body = await recall(service, "u1", "luna", question)
        # No word of the question is in the answer; its meaning is.
        assert body["memories"][0]["text"] == "I practise the cello every evening."
        assert [question] in fake.inputs


async def test_recall_answers_from_keywords_when_the_embedding_model_fails(start_service) -> None:
    async with ConceptEmbeddings() as fake:
        service = await start_service(
            embeddings_model="concepts", embeddings_base_url=fake.base_url, embeddings_api_key="k",
            embeddings_timeout_s=0.2,
        )  # fmt: skip
        await seed(service, "u1", "luna", "a1", said("My cat Miso is orange.", "Cute.", start_ms=MAY_8))
        fake.script("hang")
        body = await recall(service, "u1", "luna", "what colour is Miso")
        assert body["memories"][0]["text"] == "My cat Miso is orange."


async def test_search_ranks_a_multi_word_question_like_recall(service) -> None:
    lines = [*small_talk(20), "I finally signed up for a pottery class at the community center!", "Nice!"]
    await told(service, lines)
    status, body = await service.api(
        "GET", "/v1/users/u1/search", params={"q": "When did I start my pottery class?"}
    )
    assert status == 200, body
    assert body["method"] == "words"
    assert body["results"][0]["text"] == "I finally signed up for a pottery class at the community center!"
    assert "[pottery]" in body["results"][0]["snippet"]


async def test_search_ranks_a_chinese_question_like_recall(service) -> None:
    lines = ["今天天气不错。", "是啊。", "我下个月要去成都参加姐姐的婚礼。", "太好了！"]
    await told(service, lines, "u2", "xiaoyu", "z1")
    status, body = await service.api("GET", "/v1/users/u2/search", params={"q": "我姐姐的婚礼在哪里？"})
    assert status == 200, body
    assert body["method"] == "words"
    assert body["results"][0]["text"] == "我下个月要去成都参加姐姐的婚礼。"


async def test_everyday_related_words_stand_in_for_each_other(service) -> None:
    lines = [*small_talk(10), "We moved again, to Denver this time.", "Exciting!", *small_talk(10)]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "Which city do I live in now?")
    assert body["memories"][0]["text"] == "We moved again, to Denver this time."
    weights = dict(weighted_terms("Which city do I live in now?"))
    assert weights["live"] == 1.0 and weights["move"] == RELATED_WEIGHT


@pytest.mark.parametrize(
    ("turn", "question"),
    [
        (
            "We finally brought a little rabbit home from the shelter, her name is Clover.",
            "What's my pet called?",
        ),
        ("Another double shift at the bakery today, my feet hurt.", "Where do I work?"),
        ("I bought tulips at the flower stall.", "What did I buy?"),
        ("我们终于从救助站领养了一只兔子。", "我的宠物是什么？"),
    ],
)
async def test_a_question_worded_apart_from_its_answer_finds_it(service, turn: str, question: str) -> None:
    # Everyday topics' words stand in for each other (a pet is a rabbit from a shelter), and an
    # irregular past form is its verb ("bought" answers "buy").
    lines = [*small_talk(10), turn, "Oh nice.", *small_talk(10)]
    await told(service, lines)
    body = await recall(service, "u1", "luna", question)
    assert any(memory["text"].startswith(turn) for memory in body["memories"]), body["memories"]


async def test_a_compound_asked_finds_what_was_said_in_its_parts_words(service) -> None:
    # "bookclub" is no word said: its parts are ("book", "club"), and their related words
    # ("reading", "library") find the turn; a word that is no compound of them is left whole.
    turn = "I joined a reading circle at the library, we meet on Thursdays."
    lines = [*small_talk(10), turn, "Lovely.", *small_talk(10)]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "When does my bookclub get together?")
    assert body["memories"] and body["memories"][0]["text"] == turn
    assert compound_parts("bookclub") == ("book", "club")
    assert compound_parts("understand") == compound_parts("birthday") == ()


async def test_a_word_first_said_a_moment_ago_is_recalled_at_once(service) -> None:
    await seed(service, "u1", "luna", "a1", said(*small_talk(6), start_ms=MAY_8))
    assert (await recall(service, "u1", "luna", "saxophone lessons"))["memories"] == []
    await seed(
        service, "u1", "luna", "a2", said("I booked saxophone lessons!", "Nice.", start_ms=MAY_8 + DAY_MS)
    )
    body = await recall(service, "u1", "luna", "saxophone lessons")
    assert body["memories"][0]["text"] == "I booked saxophone lessons!"


async def test_queries_share_one_built_context_of_the_rest_of_the_budget(service) -> None:
    await seed(service, "u1", "luna", "a1", said("My passport expires in June.", "Noted.", start_ms=MAY_8))
    memory = service.server.app[MEMORY]
    first = await system_messages(service, "u1", "luna", query="passport renewal")
    hits = memory.reading.contexts.hits
    second = await system_messages(service, "u1", "luna", query="what expires in June")
    assert memory.reading.contexts.hits == hits + 1  # only the recall was done for the second query
    assert await system_messages(service, "u1", "luna", query="passport renewal") == first
    assert memory.reading.contexts.hits == hits + 2  # the same query again: nothing done
    for body in (first, second):
        assert body["included"]["recalled"] == 1 and body["tokens"] <= body["max_tokens"] == 1500
        assert "My passport expires in June." in content_of(body)


# -- PostgreSQL: several instances index at once, and rank as SQLite does ----------------------


def pg_stores(url: str, count: int) -> list[PostgresStore]:
    """`count` instances on one database, none indexing in the background (the test does)."""
    stores = [PostgresStore(url, index=False) for _ in range(count)]
    for store in stores:
        store.open()
    return stores


def pg_turns(
    store: PostgresStore, agent_id: str, user_id: str, character_id: str, contents: list[str]
) -> list[int]:
    def write(tx: Transaction) -> list[int]:
        tx.sessions.insert(session(agent_id, user_id, character_id))
        tx.messages.insert(spoken(agent_id, user_id, character_id, *contents))
        return [message.id for message in tx.messages.of_session(agent_id)]

    return store.write_now(write)


def indexed(view: Any) -> dict[str, int]:
    """The recall index's docs, queued ids and per-pair totals, as the database holds them."""
    return {
        "docs": view.conn.execute("SELECT count(*) AS n FROM recall_docs").fetchone()["n"],
        "pending": view.conn.execute("SELECT count(*) AS n FROM recall_pending").fetchone()["n"],
        "counted": view.conn.execute("SELECT coalesce(sum(docs), 0) AS n FROM recall_pairs").fetchone()["n"],
    }


def batch(tag: str, count: int) -> list[str]:
    return [f"{tag} turn {i} about kites and word{i % 7}" for i in range(count)]


@pytest.mark.slow
def test_two_instances_catching_up_at_once_index_every_turn_exactly_once(pg_cluster: Any) -> None:
    first, second = pg_stores(pg_cluster.database(), 2)
    try:
        for n in range(6):
            pg_turns(first, f"A{n}", f"u{n % 3}", ("luna", "kai")[n % 2], batch(f"a{n}", 200))
        holding, release = threading.Event(), threading.Event()

        def held(tx: Any) -> int:
            # The first pair's turns: an instance indexing a pair holds its statistics until it
            # commits, so the other takes the other pairs' turns here.
            taken = tx.recall.catch_up(200)
            holding.set()
            assert release.wait(30)
            return int(taken)

        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(first.write_now, held)
            assert holding.wait(30)
            # The other instance skips the turns the first is indexing and takes all the rest.
            rest = second.write_now(lambda tx: tx.recall.catch_up(100_000))
            release.set()
            assert (running.result(), rest) == (200, 1000)
        assert second.read_now(indexed) == {"docs": 1200, "pending": 0, "counted": 1200}

        # Both loop over small chunks at once: every queued turn is taken by exactly one of them.
        for n in range(6, 12):
            pg_turns(second, f"A{n}", f"u{n % 4}", "luna", batch(f"b{n}", 200))

        def drain(store: PostgresStore) -> int:
            taken = 0
            while step := store.write_now(lambda tx: tx.recall.catch_up(50)):
                taken += step
            return taken

        with ThreadPoolExecutor(2) as pool:
            taken = [pool.submit(drain, store) for store in (first, second)]
            assert sum(future.result() for future in taken) == 1200
        assert first.read_now(indexed) == {"docs": 2400, "pending": 0, "counted": 2400}
        stats = first.read_now(lambda view: view.recall.term_stats("u1", None, [("kite", 1.0)]))
        assert stats.frequencies == {"kite": 600} and stats.documents == 600
    finally:
        for store in (first, second):
            store.close()


def test_a_catch_up_with_nothing_free_waits_for_the_one_indexing(pg_cluster: Any) -> None:
    first, second = pg_stores(pg_cluster.database(), 2)
    try:
        (changed, *_) = pg_turns(first, "A1", "u1", "luna", ["I fly kites on Sundays", "Nice", "Windy?"])
        holding, release = threading.Event(), threading.Event()

        def held(tx: Any) -> int:
            taken = tx.recall.catch_up(100)
            holding.set()
            assert release.wait(30)
            return int(taken)

        def catch_up_then_read(store: PostgresStore) -> tuple[int, int]:
            taken = store.write_now(lambda tx: tx.recall.catch_up(100))
            return taken, store.read_now(indexed)["docs"]

        def rewrite(tx: Any) -> None:
            tx.conn.execute("UPDATE messages SET content = 'I fly drones now' WHERE id = %s", (changed,))

        with ThreadPoolExecutor(3) as pool:
            running = pool.submit(first.write_now, held)
            assert holding.wait(30)
            waiting = pool.submit(catch_up_then_read, second)
            # Changed while its old text is being indexed: it is queued again, not lost.
            rewriting = pool.submit(second.write_now, rewrite)
            time.sleep(0.3)  # time to start waiting (a correct run passes however long this is)
            release.set()
            assert running.result() == 3
            rewriting.result()
            # The second found every queued turn taken: it waited for the first to commit, so its
            # read right after sees them indexed.
            taken, docs = waiting.result()
            assert taken in (0, 1) and docs == 3
        assert second.write_now(lambda tx: tx.recall.catch_up(100)) in (0, 1)
        stats = second.read_now(
            lambda view: view.recall.term_stats("u1", "luna", [("kite", 1.0), ("drone", 1.0)])
        )
        assert stats.frequencies == {"kite": 0, "drone": 1}
        assert second.read_now(indexed) == {"docs": 3, "pending": 0, "counted": 3}
    finally:
        for store in (first, second):
            store.close()


async def test_postgres_ranks_and_searches_as_sqlite_does(tmp_path: Any, pg_cluster: Any) -> None:
    pairs = {
        ("u-en", "luna"): fixture_messages("en_luna_companion"),
        ("u-zh", "xiaoyu"): fixture_messages("zh_xiaoyu_tutor"),
        ("u-ko", "minjun"): fixture_messages("ko_minjun_mixed"),
    }
    stores = [
        open_store(Settings(db_path=tmp_path / "m.db")),
        open_store(Settings(db_path=pg_cluster.database())),
    ]

    def fill(tx: Transaction) -> None:
        for number, ((user, character), messages) in enumerate(pairs.items()):
            tx.sessions.insert(session(f"A{number}", user, character))
            tx.messages.insert(spoken(f"A{number}", user, character, *(m["content"] for m in messages)))
        for text in ("Has a cat called Miso", "Preparing for the HSK exam", "Sister's wedding in June"):
            tx.facts.add("u-en", "luna", text, scope="character", pinned=True, origin="manual")

    questions = (
        "What is my cat called?",
        "wedding sister",
        "Miso",
        "考试",
        "西湖边",
        "HSK五级 考试",
        "떡볶이 presentation",
        # Related words (core/related.py) asked beside the question's own: the same on both.
        "Which sport do I do, and what comforts me?",
        "我的宠物叫什么？",
    )

    def answers(view: Any) -> list[Any]:
        found: list[Any] = []
        for user, character in pairs:
            for q in questions:
                stats = view.recall.term_stats(user, character, weighted_terms(q))
                turns = view.recall.turns(stats, 20)
                found.append((stats.idfs, stats.frequencies, stats.documents, round(stats.average_length, 9)))
                found.append([(hit.message.content, round(hit.score, 9)) for hit in turns])
                body = view.search.user(user, q, limit=50)
                found.append((body["method"], body["truncated"], body["terms"]))
                found.append([(r["kind"], r["snippet"], r["score"], r["rank"]) for r in body["results"]])
        found.append(view.search.mentions("miso", role="any"))
        found.append(view.search.mentions("考试"))
        return found

    try:
        for store in stores:
            await store.write(fill)
            while await store.catch_up_search():
                pass
        lite, pg = [await store.read(answers) for store in stores]
        assert any(lite[1::4]) and lite == pg
    finally:
        for store in stores:
            store.close()


def test_a_long_turn_is_shown_as_its_start_and_the_sentences_that_match() -> None:
    turn = (
        "I had such a long day today. First the bus was late and I missed the meeting. Then my boss "
        "called me into the office about the quarterly numbers. Anyway, in the evening I finally went "
        "to the pottery class I signed up for last month, and I made a little bowl! It was wonky but "
        "I loved it. Then I cooked pasta and watched a film."
    )
    asked = frozenset(term for term, _ in weighted_terms("What class did I sign up for?"))
    assert snippet(turn, asked) == (
        "I had such a long day today. … Anyway, in the evening I finally went to the pottery class "
        "I signed up for last month, and I made a little bowl! …"
    )
    assert snippet("Short turn about my pottery class.", asked) == "Short turn about my pottery class."


async def test_a_larger_budget_buys_more_distinct_memories(service) -> None:
    # 30 different turns about the garden: a 1,000-token budget shows more than the 20 that
    # once were all it ever ranked.
    lines = [f"In the garden I planted row {n} of something new, number {n}." for n in range(30)]
    await told(service, lines)
    small = await recall(service, "u1", "luna", "What did I plant in the garden?", max_tokens=500)
    large = await recall(service, "u1", "luna", "What did I plant in the garden?", max_tokens=1000)
    assert len(large["memories"]) > max(len(small["memories"]), CANDIDATES)


def test_how_long_ago_and_what_date_ask_for_a_date_and_name_no_words_to_match() -> None:
    assert "long" not in dict(weighted_terms("How long ago did I move?"))
    assert "ago" not in dict(weighted_terms("How many weeks ago did I move?"))
    assert "date" not in dict(weighted_terms("On what date did I run the race?"))
    assert "哪天" not in dict(weighted_terms("我们哪天住进新家的？"))
    assert "move" in dict(weighted_terms("How long ago did I move?"))
    # Said as a word of its own, "long" is asked for.
    assert "long" in dict(weighted_terms("Did I do the long walk?"))


async def test_a_how_long_ago_question_is_not_answered_by_the_long_way_home(service) -> None:
    moved = "We got the keys to the new flat yesterday, it's all boxes."
    lines = [*small_talk(8), moved, "Congrats!"]
    for name in ("Tom", "Ana", "Gus", "Ravi"):
        lines += [*small_talk(6), f"{name} and I walked the long way home.", "Nice."]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "How long ago did I move?")
    assert body["memories"][0]["text"].startswith(moved)


async def test_near_repeats_of_one_line_do_not_crowd_out_a_different_memory(service) -> None:
    # Thirty short lines say "home" with nearly the same words; the one that says something
    # else about home is longer (BM25 ranks it last) and was said first (recency too).
    different = (
        "Home for me is the little room above the bakery on Mill Street, with the blue door and noisy pipes."
    )
    names = ("Tom", "Ana", "Gus", "Ravi", "Lena", "Kofi")
    times = ("at lunch", "tonight", "after work", "earlier", "around noon")
    lines = [different, "Sounds cosy."]
    for name in names:
        for when in times:
            lines += [f"{name} and I walked the long way home {when}.", "Nice."]
    await told(service, lines)
    body = await recall(service, "u1", "luna", "Tell me about home.", max_tokens=200)
    assert different in texts(body)


async def test_a_memory_shows_the_day_it_was_said_once_not_its_minute_or_a_today_note(service) -> None:
    # The line's day says when; "(today = 8 May 2023)" and "13:56" would only spend the budget.
    climbing = "I'm finally at the climbing gym today, my very first session."
    await seed(service, "u1", "luna", "a1", said(*small_talk(6), climbing, "Enjoy!", start_ms=MAY_8))
    body = await recall(service, "u1", "luna", "How did my first climbing session go?")
    content = body["system_message"]["content"]
    assert f"- [2023-05-08] User: {climbing}" in content.splitlines()
    assert "13:5" not in content and "today =" not in content
    assert body["memories"][0]["at"] == "2023-05-08 13:56 UTC"  # the memory itself keeps its time


async def test_a_budget_left_over_is_spent_on_weaker_matches(service) -> None:
    # One turn says every word asked; another says one common word of it. The weaker is far
    # below the best, but the budget has room: it is shown (after the best), not left out.
    best = "Maya glazed the blue vase at the pottery studio, then fired it in the kiln on Friday."
    weak = "The studio next door was loud again."
    lines = [*small_talk(6), best, "Lovely!", *small_talk(6), weak, "Oh no.", *small_talk(6)]
    lines += [f"Studio {n} had a sale." for n in range(8)]
    await told(service, lines)
    body = await recall(
        service, "u1", "luna", "Did Maya glaze the blue vase in the pottery kiln at her studio?"
    )
    shown = texts(body)
    assert shown[0].startswith(best)  # "on Friday" dated after it
    assert weak in shown and body["tokens"] < 500


# -- a long conversation between two people, asked about from outside (who / what / when) --------

JON = [
    "Hey Gina! Good to hear from you, it has been a hectic week over here with the new job.",
    "Thanks Gina, that means a lot. The commute is long but the people are kind.",
    "Ha, Gina, you always know what to say. I have been reading a lot on the train.",
    "Gina, I have to tell you, I went to an open mic night last Friday and read two of my poems aloud.",
    "Honestly Gina, I was shaking, but the crowd clapped and a stranger bought me a lemonade afterwards.",
    "Not much else, Gina. Laundry, groceries, the usual weekend errands.",
    "Hey Gina! My dog Bruno chewed through another lead, that is the third one this month.",
    "Oh Gina, the weather here turned cold so I dug out the winter coats.",
]
GINA = [
    "Hey Jon! So glad you messaged, I missed our chats.",
    "Jon, that sounds like a lot, I hope you are sleeping enough.",
    "You know Jon, my store finally started selling handmade beeswax candles, they sold out in two days.",
    "Jon, my sister Tess just qualified as a paramedic, the whole family went out to celebrate.",
    "Good for you Jon! I mostly stayed home and reorganised the stockroom.",
    "Jon, the store is busy with the holiday rush, I barely sit down.",
    "That is lovely Jon, tell me more next time.",
    "Jon, I tried a new pasta recipe and burned the sauce, classic me.",
]


def two_people(sessions: int = 4) -> list[list[str]]:
    """Sessions of a conversation between Jon (the user) and Gina, naming each other in most turns."""
    out = []
    for s in range(sessions):
        lines: list[str] = []
        for i in range(12):
            lines += [JON[(i + s) % len(JON)], GINA[(i + 2 * s) % len(GINA)]]
        out.append(lines)
    return out


@pytest.mark.parametrize(
    ("question", "evidence"),
    [
        ("When did Jon go to the open mic night?", "I went to an open mic night last Friday"),
        ("What did Gina start selling in her store?", "started selling handmade beeswax candles"),
        ("What does Gina's sister do for a living?", "my sister Tess just qualified as a paramedic"),
        ("What did Jon's dog chew?", "My dog Bruno chewed through another lead"),
    ],
)
async def test_questions_about_two_speakers_find_what_each_said(
    service, question: str, evidence: str
) -> None:
    # Both speakers call each other by name in most turns: the names asked are in every other
    # line, so the question's other words decide, and the answer is shown within 500 tokens.
    for number, lines in enumerate(two_people()):
        await seed(service, "jon", "gina", f"s{number}", said(*lines, start_ms=MAY_8 + number * 7 * DAY_MS))
    body = await recall(service, "jon", "gina", question, max_tokens=500)
    assert evidence in body["system_message"]["content"]
    assert evidence in texts(body)[0]
    # The name asked is said in half the turns, to its speaker ("Hey Gina!"): those lines say
    # nothing asked but the name, and are not what the budget is spent on.
    named = "Gina" if "Gina" in question else "Jon"
    assert not [text for text in texts(body) if named in text and evidence not in text]


# -- people: one person named by a relation and by a name ---------------------------------------


LONG_DAY = (
    "What a week it has been, the office moved floors on Monday and nobody could find the printer, "
    "the lifts were out until Wednesday so we carried boxes up six flights of stairs, and on top of "
    "that the canteen closed for repairs and we lived on crackers and vending machine coffee."
)


@pytest.mark.parametrize(
    ("question", "evidence"),
    [
        # The question says "my sister", the answer only "Maya": linked by "my sister Maya".
        ("What's the latest about my sister?", "Maya adopted a kitten and named it Pickle."),
        # The question says "Maya", the answer only "my sister".
        ("What has Maya been up to?", "Guess what, my sister got engaged last night!"),
        ("我表姐最近怎么样？", "佳怡上周领养了一只小猫，叫团子。"),
        # Someone else's relation asked in Chinese (阿美的表姐): whoever said 我表姐佳怡 of theirs.
        ("阿美的表姐最近怎么样？", "佳怡上周领养了一只小猫，叫团子。"),
        # A long turn shows the sentence that names her, not only its first one.
        ("Any news about my sister?", "Maya's puppy chewed through my scarf."),
    ],
)
async def test_a_person_asked_by_relation_or_name_reaches_what_was_said_either_way(
    service, question: str, evidence: str
) -> None:
    # A pair says once who is who ("my sister Maya", 我表姐佳怡), later only one or the other.
    first = [*small_talk(10), "My sister Maya is training as a midwife, she starts in June.", "Lovely."]
    first += ["我表姐佳怡在培训当飞行员。", "真厉害。", *small_talk(10)]
    later = [*small_talk(8), "Maya adopted a kitten and named it Pickle.", "Cute!"]
    later += ["Guess what, my sister got engaged last night!", "Congratulations to her!"]
    later += [LONG_DAY + " Maya's puppy chewed through my scarf. Then the bus was late again.", "Oh no."]
    later += ["佳怡上周领养了一只小猫，叫团子。", "好可爱。", *small_talk(8)]
    await seed(service, "u1", "luna", "s1", said(*first, start_ms=MAY_8))
    await seed(service, "u1", "luna", "s2", said(*later, start_ms=MAY_8 + 7 * DAY_MS))
    body = await recall(service, "u1", "luna", question, max_tokens=500)
    assert evidence in body["system_message"]["content"]


def test_links_name_a_person_only_where_a_name_stands() -> None:
    from agent_memory.core.people import asked_relations, linked_terms, links

    assert links("Did I tell you my cousin Priya is training as a nurse?") == ((True, "cousin", "priya"),)
    assert links("My best friend, Hugo, moved away.") == ((True, "friend", "hugo"),)
    assert links("How is your sister Maya?") == ((False, "sister", "maya"),)
    # Not names: a lower-case word, a stop word, a day; in Chinese, what follows a relation in a sentence.
    assert (
        links("my sister said hi") == links("my sister I think") == links("my boss Monday was grumpy") == ()
    )
    assert links("我姐姐说她的面试挺顺利的") == links("我妹妹养的狗是世界上最懒的") == ()
    assert links("我表姐佳怡现在在培训") == ((True, "表姐", "佳怡"),)
    assert asked_relations("What's the name of my cousin's pet?") == {"cousin": True}
    assert asked_relations("我姐姐养的动物叫什么名字？") == {"姐姐": True}
    assert asked_relations("What does Gina's sister do?") == {"sister": False}
    assert asked_relations("阿美的表姐最近怎么样？") == {"表姐": False}
    assert asked_relations("我的表姐和我们的老师") == {"表姐": True}
    # "My sister" asked is the user's: their "my sister Maya", or "your sister Maya" said to them;
    # not the character's own sister. Someone else's sister is whoever says "my sister" of theirs.
    said = [
        ("My sister Maya called.", True),
        ("My sister Tess is a nurse.", False),
        ("Your sister Ann?", False),
    ]
    assert sorted(linked_terms("How is my sister?", ["sister"], said)) == [("ann", 1.0), ("maya", 1.0)]
    assert sorted(linked_terms("How is Gina's sister?", ["gina", "sister"], said)) == [
        ("maya", 1.0),
        ("tess", 1.0),
    ]
    assert linked_terms("How is Tess?", ["tess"], said) == [("sister", 0.6)]
    assert linked_terms("How is Bob?", ["bob"], said) == []
