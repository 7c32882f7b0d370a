"""Full-text search over HTTP: English, Chinese (including two-character words), Korean,
per character, facts and summaries, ranking, the operator's mention query, and the index
following every change (moves, deletes, migration of an existing database)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import integrity_check, load_conversations, load_fixture, on_disk, said, seed
from sqlite_utils import Database

from agent_memory.core.domain import Summary
from agent_memory.settings import Settings
from agent_memory.store.factory import open_store
from agent_memory.store.postgres import migrations as pg_migrations
from agent_memory.store.sqlite import SQLiteStore
from agent_memory.store.sqlite.migrations import migrations
from agent_memory.store.sqlite.search import SQLiteSearch

# The conversation fixtures whose callbacks name their user.
LABELLED = ("en_luna_companion", "zh_xiaoyu_tutor", "ko_minjun_mixed", "multiuser_channel")
pytestmark = pytest.mark.postgres


def fixture_messages(name: str) -> list[dict[str, Any]]:
    """The distinct messages of a conversation fixture (redeliveries once)."""
    seen: set[str] = set()
    messages: list[dict[str, Any]] = []
    for envelope in load_fixture(f"conversations/{name}.json"):
        if envelope["eventType"] != 103 or envelope["noticeId"] in seen:
            continue
        seen.add(envelope["noticeId"])
        messages.extend(envelope["payload"]["contents"])
    return messages


async def search(service: Any, user: str, q: str, **params: Any) -> dict[str, Any]:
    status, body = await service.api("GET", f"/v1/users/{user}/search", params={"q": q, **params})
    assert status == 200, body
    return body


async def test_english_search_finds_what_was_said_with_marked_snippets(service) -> None:
    await load_conversations(service, *LABELLED)
    body = await search(service, "u-alice", "Miso")
    expected = [m for m in fixture_messages("en_luna_companion") if "miso" in m["content"].lower()]
    messages = [r for r in body["results"] if r["kind"] == "message"]
    assert body["method"] == "fts" and len(messages) == len(expected) == 11
    assert {r["text"] for r in messages} == {m["content"] for m in expected}
    first = messages[0]
    assert set(first) >= {
        "kind",
        "id",
        "character_id",
        "snippet",
        "text",
        "at_ms",
        "agent_id",
        "role",
        "rank",
        "score",
    }
    assert first["character_id"] == "luna" and first["rank"] == 1
    assert all("[Miso]" in r["snippet"] for r in messages)
    assert [r["rank"] for r in body["results"]] == list(range(1, len(body["results"]) + 1))
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    # Several words are ranked like recall: any of them matches, the texts with all come first.
    body = await search(service, "u-alice", "wedding sister's")
    both = {
        m["content"] for m in fixture_messages("en_luna_companion")
        if "wedding" in m["content"] and "sister" in m["content"]
    }  # fmt: skip
    assert body["method"] == "words" and both
    assert {r["text"] for r in body["results"][: len(both)]} == both
    assert any("wedding" in r["text"] and "sister" not in r["text"] for r in body["results"])
    assert all("[wedding]" in r["snippet"] for r in body["results"] if "wedding" in r["text"])
    # Case does not matter; other users' words are not found.
    assert (await search(service, "u-alice", "MISO"))["results"]
    assert (await search(service, "u-alice", "Lisbon"))["results"] == []
    assert (await search(service, "u-team", "Lisbon"))["results"]


async def test_chinese_is_found_by_substring_including_two_character_words(service) -> None:
    await load_conversations(service, *LABELLED)
    zh = [m["content"] for m in fixture_messages("zh_xiaoyu_tutor")]
    for q, method in (
        ("西湖边", "fts"),
        ("HSK五级", "fts"),
        ("考试", "substring"),
        ("杭州", "substring"),
        ("豆", "substring"),
    ):
        body = await search(service, "u-wang", q, limit=100)
        assert body["method"] == method, q
        texts = sorted(r["text"] for r in body["results"] if r["kind"] == "message")
        assert texts == sorted(text for text in zh if q.lower() in text.lower()), q
        assert texts, q
        assert all(f"[{q}]" in r["snippet"] for r in body["results"] if r["kind"] == "message"), q
    # Two words: the messages with both rank first.
    body = await search(service, "u-wang", "22号 考试")
    both = {t for t in zh if "22号" in t and "考试" in t}
    assert body["method"] == "words" and both
    assert {r["text"] for r in body["results"][: len(both)]} == both
    assert (await search(service, "u-alice", "考试"))["results"] == []


async def test_korean_and_mixed_words_are_found(service) -> None:
    await load_conversations(service, *LABELLED)
    ko = [m["content"] for m in fixture_messages("ko_minjun_mixed")]
    for q in ("떡볶이", "presentation", "민준", "great job"):
        body = await search(service, "u-kim", q)
        words = q.split()
        assert sorted(r["text"] for r in body["results"]) == sorted(
            t for t in ko if all(w in t for w in words)
        ), q
        assert body["results"], q


async def test_search_per_character_and_user_wide_facts(service) -> None:
    await seed(service, "u-1", "luna", "AGENT-L", said("I love hiking in the Alps", "The Alps are lovely"))
    await seed(service, "u-1", "atlas", "AGENT-A", said("Hiking tomorrow with Bob", "Have fun hiking"))
    for scope, text in (
        ("user", "Hiking boots are size 42"),
        ("character", "Prefers hiking at dawn"),
    ):
        status, body = await service.api(
            "POST", "/v1/users/u-1/characters/atlas/facts", json={"text": text, "scope": scope}
        )
        assert status == 201, body
    everything = await search(service, "u-1", "hiking")
    assert {(r["kind"], r["character_id"]) for r in everything["results"]} == {
        ("message", "luna"), ("message", "atlas"), ("fact", ""), ("fact", "atlas")
    }  # fmt: skip
    luna = await search(service, "u-1", "hiking", character_id="luna")
    # The user-wide fact belongs to every character's memory; atlas's fact does not.
    assert {(r["kind"], r["character_id"]) for r in luna["results"]} == {
        ("message", "luna"),
        ("fact", ""),
    }
    facts = await search(service, "u-1", "hiking", kinds="fact")
    assert {r["kind"] for r in facts["results"]} == {"fact"}
    assert {r["scope"] for r in facts["results"]} == {"user", "character"}
    other = await search(service, "u-1", "hiking", character_id="nobody")
    assert [(r["kind"], r["character_id"]) for r in other["results"]] == [("fact", "")]


async def test_summaries_are_searched_and_a_replaced_summary_leaves_the_index(service) -> None:
    await seed(service, "u-2", "luna", "AGENT-S", said("hello there", "hi there"))
    await service.store.catch_up_search()  # messages are indexed after they commit
    # The owner tokens of the user's pairs (SQLite's index detail), kept through replacements.
    sqlite = isinstance(service.store, SQLiteStore)
    pairs = await service.store.read(lambda view: view.search.pair_tokens("u-2")) if sqlite else None
    assert pairs or not sqlite

    def summary(text: str) -> Summary:
        return Summary(user_id="u-2", character_id="luna", text=text, watermark_id=1,
                       covered_until_ms=0, message_count=1, method="offline", model="test",
                       created_ms=1, updated_ms=2)  # fmt: skip

    await service.store.write(lambda tx: tx.summaries.put(summary("Alice plans a trip to Kyoto in spring.")))
    body = await search(service, "u-2", "Kyoto")
    assert [(r["kind"], r["snippet"]) for r in body["results"]] == [
        ("summary", "Alice plans a trip to [Kyoto] in spring.")
    ]
    await service.store.write(lambda tx: tx.summaries.put(summary("Alice now plans a trip to Osaka.")))
    assert (await search(service, "u-2", "Kyoto"))["results"] == []
    assert [r["kind"] for r in (await search(service, "u-2", "Osaka"))["results"]] == ["summary"]
    # Replacing the summary (INSERT OR REPLACE) leaves the pair's token, so its messages stay found.
    if sqlite:
        assert await service.store.read(lambda view: view.search.pair_tokens("u-2")) == pairs
    assert len((await search(service, "u-2", "there"))["results"]) == 2
    await integrity_check(service.store)
    _status, _ = await service.api("DELETE", "/v1/users/u-2")
    assert (await search(service, "u-2", "there"))["results"] == []
    await integrity_check(service.store)


async def test_ranking_prefers_more_and_denser_matches(service) -> None:
    await seed(service, "u-3", "luna", "AGENT-R", said(
        "coffee",
        "I had a long day at work and then, much later in the evening, some coffee with a friend",
        "coffee coffee, more coffee please",
        "nothing to see here",
    ))  # fmt: skip
    body = await search(service, "u-3", "coffee")
    assert [r["text"] for r in body["results"]] == [
        "coffee coffee, more coffee please",
        "coffee",
        "I had a long day at work and then, much later in the evening, some coffee with a friend",
    ]
    assert body["results"][2]["snippet"].startswith("…") or "[coffee]" in body["results"][2]["snippet"]
    assert len((await search(service, "u-3", "coffee", limit=1))["results"]) == 1


async def test_a_search_of_several_words_ranks_a_turn_above_a_whole_summary_that_says_them(service) -> None:
    # A summary is searched as one row, a whole life long: its length counts against it (recall
    # scores its lines one by one, without length normalisation).
    turn = "I won the raffle at the school fair!"
    await seed(service, "u-4", "luna", "AGENT-W", said(turn, "Wow, lucky you."))
    lines = [f"- [2025-03-{day:02d}] Day {day} at the allotment with the neighbours." for day in range(1, 29)]
    fairs = [f"- [2025-04-0{day}] The school fair raffle, won again, year {day}." for day in range(1, 4)]
    summary = Summary(
        user_id="u-4",
        character_id="luna",
        text="\n".join([*lines, *fairs]),
        watermark_id=1,
        covered_until_ms=0,
        message_count=2,
        method="offline",
        model="test",
        created_ms=1,
        updated_ms=2,
    )
    await service.store.write(lambda tx: tx.summaries.put(summary))
    await service.store.catch_up_search()
    body = await search(service, "u-4", "won the raffle at the school fair")
    assert [(r["kind"], r["kind"] == "summary" or r["text"] == turn) for r in body["results"]] == [
        ("message", True),
        ("summary", True),
    ]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({}, "q is required"),
        ({"q": ""}, "q is required"),
        ({"q": "   \t "}, "q is required"),
        ({"q": "x" * 501}, "at most 500"),
        ({"q": "hello", "limit": "0"}, "limit"),
        ({"q": "hello", "limit": "101"}, "limit"),
        ({"q": "hello", "limit": "many"}, "limit"),
        ({"q": "hello", "kinds": "message,diary"}, "kinds"),
    ],
)
async def test_bad_search_requests_are_422(service, params, needle) -> None:
    status, body = await service.api("GET", "/v1/users/u-1/search", params=params)
    assert status == 422, body
    assert body["error"]["code"] == "invalid_field" and needle in body["error"]["message"]


async def test_unknown_user_gets_an_empty_answer_and_the_token_is_required(service) -> None:
    body = await search(service, "nobody-at-all", "anything")
    assert body["results"] == [] and body["truncated"] is False
    assert (await search(service, "nobody-at-all", "ab"))["results"] == []
    status, _ = await service.api("GET", "/v1/users/u-1/search", params={"q": "x"}, token=None)
    assert status == 401


async def test_fts_syntax_in_a_query_is_just_text(service) -> None:
    await seed(service, "u-4", "luna", "AGENT-Q", said('she said "NEAR(a b)" OR maybe *stars*', "ok"))
    for q in ('"NEAR(a', "OR maybe", "*stars*", 'said "NEAR'):
        body = await search(service, "u-4", q)
        assert [r["text"] for r in body["results"]] == ['she said "NEAR(a b)" OR maybe *stars*'], q
    assert (await search(service, "u-4", "%"))["results"] == []
    assert (await search(service, "u-4", "_"))["results"] == []


async def test_operators_see_who_mentioned_a_keyword(service) -> None:
    await load_conversations(service, *LABELLED)
    await seed(
        service, "u-bob", "atlas", "AGENT-B1", said("My cat Miso? No, my cat is called Pixel.", "Nice")
    )
    status, body = await service.api("GET", "/v1/search/mentions", params={"q": "miso"})
    assert status == 200, body
    alice_user_lines = [
        m for m in fixture_messages("en_luna_companion")
        if m["role"] == "user" and "miso" in m["content"].lower()
    ]  # fmt: skip
    by_user = {row["user_id"]: row for row in body["users"]}
    assert set(by_user) == {"u-alice", "u-bob"}
    assert by_user["u-alice"]["messages"] == len(alice_user_lines) == 4
    assert by_user["u-alice"]["characters"] == ["luna"]
    assert by_user["u-alice"]["last_ms"] == max(m["timestamp"] for m in alice_user_lines)
    assert by_user["u-bob"]["messages"] == 1 and body["users"][0]["user_id"] == "u-alice"
    assert body["total_users"] == 2 and body["total_messages"] == 5
    status, body = await service.api("GET", "/v1/search/mentions", params={"q": "Miso", "role": "any"})
    everyone = [m for m in fixture_messages("en_luna_companion") if "miso" in m["content"].lower()]
    assert {r["user_id"]: r["messages"] for r in body["users"]} == {
        "u-alice": len(everyone),
        "u-bob": 1,
    }
    # A short word: substring scan, with how much it read.
    status, body = await service.api("GET", "/v1/search/mentions", params={"q": "考试"})
    zh_user = [
        m for m in fixture_messages("zh_xiaoyu_tutor") if m["role"] == "user" and "考试" in m["content"]
    ]
    assert body["method"] == "substring" and body["complete"] is True
    assert [(r["user_id"], r["messages"]) for r in body["users"]] == [("u-wang", len(zh_user))]
    status, body = await service.api("GET", "/v1/search/mentions", params={"q": " "})
    assert status == 422
    status, body = await service.api("GET", "/v1/search/mentions", params={"q": "miso", "role": "bot"})
    assert status == 422 and "role" in body["error"]["message"]


async def test_the_index_follows_moves_and_deletes(service) -> None:
    await seed(service, "u-5", "luna", "AGENT-M", said("the password is swordfish", "noted"))
    assert (await search(service, "u-5", "swordfish"))["results"]
    status, _ = await service.api(
        "POST", "/v1/sessions/AGENT-M/bind", json={"user_id": "u-6", "character_id": "atlas"}
    )
    assert status == 200
    assert (await search(service, "u-5", "swordfish"))["results"] == []
    moved = (await search(service, "u-6", "swordfish"))["results"]
    assert [(r["character_id"], r["agent_id"]) for r in moved] == [("atlas", "AGENT-M")]
    status, body = await service.api(
        "POST", "/v1/users/u-6/characters/atlas/facts", json={"text": "Likes swordfish steaks"}
    )
    fact_id = body["fact"]["id"]
    assert {r["kind"] for r in (await search(service, "u-6", "swordfish"))["results"]} == {
        "message",
        "fact",
    }
    status, _ = await service.api("DELETE", f"/v1/facts/{fact_id}")
    assert status == 200
    assert {r["kind"] for r in (await search(service, "u-6", "swordfish"))["results"]} == {"message"}
    await integrity_check(service.store)


def test_migration_indexes_an_existing_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    migrations.apply(Database(conn), stop_before="m003_search_index")
    conn.execute(
        "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, at_ms) "
        "VALUES ('A', 'u-old', 'luna', 0, 'user', '我下个月去东京旅行', 1), "
        "('A', 'u-old', 'luna', 1, 'assistant', 'Tokyo in spring is wonderful', 2)"
    )
    conn.execute(
        "INSERT INTO facts (user_id, character_id, text, norm) VALUES ('u-old', '', 'Flies to Tokyo', 'flies to tokyo')"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    store.open()
    try:
        found = store.read_now(lambda view: view.search.user("u-old", "tokyo"))
        assert sorted(r["kind"] for r in found["results"]) == ["fact", "message"]
        found = store.read_now(lambda view: view.search.user("u-old", "东京"))
        assert [r["text"] for r in found["results"]] == ["我下个月去东京旅行"]
        assert store.read_now(lambda view: view.maintenance.storage_stats()).get("auto_vacuum") == 2
    finally:
        store.close()
    names = [row[0] for row in sqlite3.connect(path).execute("SELECT name FROM _sqlite_migrations")]
    assert names[2:5] == ["m003_search_index", "m004_agent_metrics", "m005_incremental_vacuum"]
    assert json.dumps(names)  # recorded once each


# A user's facts (two characters) and summary, as an upgraded database of either backend holds them.
OLD_FACTS = (
    "INSERT INTO facts (user_id, character_id, text, norm) VALUES "
    "('u-old', 'luna', 'Studied at the ÉCOLE Quxvornique', 'x'), ('u-old', 'atlas', 'Ate a quxvornique pie', 'y')"
)
OLD_SUMMARY = (
    "INSERT INTO summaries (user_id, character_id, text, watermark_id, updated_ms) "
    "VALUES ('u-old', 'luna', 'They met at the École Quxvornique in 2019.', 1, 1)"
)


async def test_an_upgraded_database_searches_facts_and_summaries_without_an_index_of_them(
    tmp_path: Path,
) -> None:
    # m023: facts and summaries leave the trigram index (each job rewrote a summary through it);
    # search reads a user's few rows of them, matching as the index did: a substring, any case.
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    migrations.apply(Database(conn), stop_before="m023_facts_summaries_unindexed")
    conn.execute(
        "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, at_ms) "
        "VALUES ('A', 'u-old', 'luna', 0, 'user', 'Polytechnique was hard work', 1)"
    )
    conn.execute(OLD_FACTS)
    conn.execute(OLD_SUMMARY)
    conn.commit()
    conn.close()
    assert b"vorniq" in on_disk(path)  # the old index holds the facts' and summary's trigrams
    store = SQLiteStore(path)
    store.open()
    try:
        tables = store.read_now(
            lambda view: {row[0] for row in view.conn.execute("SELECT name FROM sqlite_master")}
        )
        assert "messages_fts" in tables and not {"facts_fts", "summaries_fts"} & tables
        found = store.read_now(lambda view: view.search.user("u-old", "école"))
        assert found["method"] == "fts"
        assert sorted((r["kind"], r["text"]) for r in found["results"]) == [
            ("fact", "Studied at the ÉCOLE Quxvornique"),
            ("summary", "They met at the École Quxvornique in 2019."),
        ]
        found = store.read_now(lambda view: view.search.user("u-old", "QUXVORN", kinds=["fact"]))
        assert sorted(r["character_id"] for r in found["results"]) == ["atlas", "luna"]
        found = store.read_now(lambda view: view.search.user("u-old", "quxvorn", character_id="atlas"))
        assert [r["text"] for r in found["results"]] == ["Ate a quxvornique pie"]
        await store.catch_up_search()  # messages are indexed after they commit
        found = store.read_now(lambda view: view.search.user("u-old", "polytech"))
        assert [r["kind"] for r in found["results"]] == ["message"]
        await store.write(lambda tx: tx.maintenance.forget("u-old", None))
        await store.checkpoint()
        assert b"vorniq" not in on_disk(path)  # the dropped index's pages were zeroed
    finally:
        store.close()


async def test_the_messages_index_keeps_rows_not_places_and_confirms_longer_words(tmp_path: Path) -> None:
    # m024: the trigram index of messages keeps which rows hold a trigram (detail=none), rebuilt
    # from the old one on upgrade; a word's trigrams found apart ("zzap pizz" for "pizza") are not it.
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    migrations.apply(Database(conn), stop_before="m024_messages_trigram_rows")
    conn.executemany(
        "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            ("A", "u-old", "luna", 0, "user", "I ate PIZZA in Napoli", 1),
            ("A", "u-old", "luna", 1, "assistant", "zzap pizz", 2),
            ("B", "u-old", "atlas", 0, "user", "Pizza again tonight", 3),
            ("C", "u-x", "luna", 0, "user", "pizza for me too", 4),
        ],
    )
    SQLiteSearch(conn).catch_up(100)  # the old index holds them (as the idle writer indexes)
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    store.open()
    try:
        schema = store.read_now(
            lambda view: view.conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'messages_fts'"
            ).fetchone()[0]
        )
        assert "detail=none" in schema
        found = store.read_now(lambda view: view.search.user("u-old", "pizza"))
        assert found["method"] == "fts"
        assert sorted(r["text"] for r in found["results"]) == ["I ate PIZZA in Napoli", "Pizza again tonight"]
        found = store.read_now(lambda view: view.search.user("u-old", "Pizza", character_id="atlas"))
        assert [r["text"] for r in found["results"]] == ["Pizza again tonight"]
        found = store.read_now(lambda view: view.search.user("u-old", "piz"))
        assert len(found["results"]) == 3  # one trigram: every row that holds it
        mentions = store.read_now(lambda view: view.search.mentions("izza", role="any"))
        assert [(u["user_id"], u["messages"]) for u in mentions["users"]] == [("u-old", 2), ("u-x", 1)]
        await store.write(lambda tx: tx.maintenance.forget("u-old", None))
        await store.checkpoint()
        assert b"Napoli" not in on_disk(path) and b"apo" not in on_disk(path)
    finally:
        store.close()


async def test_postgres_upgrade_searches_facts_and_summaries_without_their_trigram_indexes(
    pg_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # m013, as SQLite's m023: a user's facts and summaries are read through their keys.
    url = pg_cluster.create("facts_summaries_unindexed")
    names = [name for name, _ in pg_migrations.MIGRATIONS]
    monkeypatch.setattr(
        pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[: names.index("m013_facts_summaries_unindexed")]
    )
    with psycopg.connect(url) as conn:
        pg_migrations.apply(conn)
        conn.execute(OLD_FACTS)
        conn.execute(OLD_SUMMARY)
    monkeypatch.undo()
    store = open_store(Settings(db_path=url))
    try:
        found = store.read_now(lambda view: view.search.user("u-old", "école"))
        assert sorted((r["kind"], r["text"]) for r in found["results"]) == [
            ("fact", "Studied at the ÉCOLE Quxvornique"),
            ("summary", "They met at the École Quxvornique in 2019."),
        ]
        found = store.read_now(lambda view: view.search.user("u-old", "quxvorn", character_id="atlas"))
        assert [r["text"] for r in found["results"]] == ["Ate a quxvornique pie"]
    finally:
        store.close()
    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%%trgm'").fetchall()
    assert left == [("messages_trgm",)]


async def test_a_word_said_more_than_the_candidates_ranks_its_newest_rows(tmp_path: Path) -> None:
    # The index is read newest first and stopped at MAX_CANDIDATES (1,000): a plain join let the
    # planner read the user's messages by their pair's index, oldest first, and ask the index per row.
    store = SQLiteStore(tmp_path / "many.db")
    store.open()
    try:
        rows = [("A", "u-many", "luna", i, "user", f"pizza night number {i:05d}", i) for i in range(1005)]
        await store.write(
            lambda tx: tx.conn.executemany(
                "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        )
        while await store.catch_up_search():
            pass
        found = store.read_now(lambda view: view.search.user("u-many", "pizza", limit=3))
        assert found["truncated"] is True
        assert [r["text"] for r in found["results"]] == [
            f"pizza night number {i:05d}" for i in (1004, 1003, 1002)
        ]
    finally:
        store.close()
