"""PostgreSQL's recall holds the pairs it is asked about in memory, as SQLite's does: it ranks exactly
as the GIN index does, follows every new, edited, moved and deleted turn whichever instance wrote
it, and a forget through any instance leaves nothing recallable, nor held, in any other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import TOKEN, said, seed, wait_for
from served import Server, servers
from test_embeddings import store_turns
from test_recall import MAY_8, texts
from test_recall import recall as http_recall
from test_recall_postings import indexed, recall, sentences, turns

from agent_memory.core.recall import weighted_terms
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store
from agent_memory.store.postgres import recall as pg_recall


@pytest.fixture
def backend() -> str:
    return "postgres"


@pytest.fixture
def budget() -> Iterator[Any]:
    saved = pg_recall.POSTINGS.budget_docs

    def set_budget(docs: int) -> None:
        pg_recall.POSTINGS.budget_docs = docs

    yield set_budget
    pg_recall.POSTINGS.budget_docs = saved


def counts() -> tuple[int, int, int]:
    return pg_recall.POSTINGS.hits, pg_recall.POSTINGS.appends, pg_recall.POSTINGS.reads


async def test_a_pair_held_in_memory_ranks_as_the_gin_index_does(store: Store, budget: Any) -> None:
    await store_turns(store, "A1", "u1", "luna", *sentences(400, seed=1))
    await store_turns(store, "A2", "u1", "luna", *sentences(400, seed=2))
    await indexed(store)
    questions = [
        "When is my chemistry exam?", "What did my sister bake for the birthday?", "the flight to Lisbon",
        "violin lesson with my brother", "knee doctor after the marathon", "妹妹的生日", "陶艺课",
    ]  # fmt: skip

    def ranked(view: Any, q: str) -> list[tuple[int, float]]:
        stats = view.recall.term_stats("u1", "luna", weighted_terms(q))
        return [(hit.message.id, round(hit.score, 9)) for hit in view.recall.turns(stats, 20)]

    budget(0)  # nothing held: every question is ranked by the shortlist query
    from_database = [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]
    whole = [turns(await recall(store, q)) for q in questions]
    budget(10_000)
    pg_recall.forget_held()
    before = counts()
    held = [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]
    hits, appends, reads = (now - then for now, then in zip(counts(), before, strict=True))
    assert reads == 1 and hits == len(questions) - 1 and appends == 0
    assert held == from_database
    assert all(len(found) == 20 for found in held)
    # The whole recall (facts, summary, neighbours read with the figures and the turns) alike.
    assert [turns(await recall(store, q)) for q in questions] == whole


async def test_the_copy_follows_new_edited_moved_and_deleted_turns(store: Store) -> None:
    (pottery, *_) = await store_turns(store, "A1", "u1", "luna", "I signed up for a pottery class.", "Nice!")
    await indexed(store)
    assert turns(await recall(store, "pottery class")) == ["I signed up for a pottery class."]

    before = counts()
    await store_turns(store, "A2", "u1", "luna", "My saxophone recital is on Monday.", "Great.")
    await indexed(store)
    assert turns(await recall(store, "saxophone recital")) == ["My saxophone recital is on Monday."]
    assert counts()[1:] == (before[1] + 1, before[2])  # taken in as an append, not read again

    # An edited turn is indexed again under its new words: the copy is read again whole.
    await store.write(
        lambda tx: tx.conn.execute(
            "UPDATE messages SET content = 'I took up archery.' WHERE id = %s", (pottery,)
        )
    )
    await indexed(store)
    assert turns(await recall(store, "pottery class")) == []
    assert turns(await recall(store, "archery")) == ["I took up archery."]
    assert counts()[2] == before[2] + 1

    # A message given a new id takes its doc along (ON UPDATE CASCADE): the copy names the old one.
    moved = await store.write(
        lambda tx: tx.conn.execute(
            "UPDATE messages SET id = DEFAULT WHERE id = %s RETURNING id",
            (pottery,),
        ).fetchone()["id"]
    )
    found = await recall(store, "archery")
    assert [memory.id for memory in found.memories if memory.kind == "turn"] == [moved]

    await store.write(lambda tx: tx.conn.execute("DELETE FROM messages WHERE id = %s", (moved,)))
    await indexed(store)
    assert turns(await recall(store, "archery")) == []


async def test_a_populated_database_migrated_counts_each_pair_s_changes_from_its_docs(db_path: str) -> None:
    store = open_store(Settings(db_path=db_path))
    try:
        await store_turns(store, "A1", "u1", "luna", "My violin is a 1920 Hofner.", "Lovely.")
        await indexed(store)
    finally:
        store.close()
    # Back to m013's schema, the turn indexed: what a database made before m014 holds.
    with psycopg.connect(db_path, autocommit=True) as conn:
        conn.execute("DELETE FROM agent_memory_migrations WHERE name = 'm014_recall_changes'")
        conn.execute("DELETE FROM store_state WHERE name = 'database_id'")
        conn.execute("DROP TRIGGER recall_docs_au ON recall_docs")
        conn.execute("DROP FUNCTION recall_docs_changed")
        conn.execute("ALTER TABLE recall_pairs DROP COLUMN changes")
        conn.execute(
            "CREATE OR REPLACE FUNCTION recall_docs_gone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "UPDATE recall_pairs p SET docs = p.docs - g.docs, total_length = p.total_length - g.length "
            "FROM (SELECT pair, count(*) AS docs, sum(length) AS length FROM gone_docs GROUP BY pair) g "
            "WHERE p.pair = g.pair; RETURN NULL; END $$"
        )
        conn.execute("DROP INDEX recall_docs_pair_id")
        conn.execute("CREATE INDEX recall_docs_pair ON recall_docs (pair)")
    pg_recall.forget_held()
    store = open_store(Settings(db_path=db_path))
    try:
        rows = await store.read(
            lambda view: view.conn.execute("SELECT changes, docs FROM recall_pairs").fetchall()
        )
        assert [(row["changes"], row["docs"]) for row in rows] == [(2, 2)]  # both turns
        assert turns(await recall(store, "Hofner violin")) == ["My violin is a 1920 Hofner."]
        assert await store.read(lambda view: view.recall.held("u1", "luna"))
        await store.write(lambda tx: tx.conn.execute("DELETE FROM messages"))
        assert turns(await recall(store, "Hofner violin")) == []
    finally:
        store.close()


async def test_a_forget_here_leaves_none_of_the_pair_s_words_held(service: Any) -> None:
    await seed(service, "u1", "luna", "a1", said("My tortoise Zanzibarino is fifty.", "Wow.", start_ms=MAY_8))
    assert texts(await http_recall(service, "u1", "luna", "Zanzibarino"))
    assert await service.store.read(lambda view: view.recall.held("u1", "luna"))
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    assert len(pg_recall.POSTINGS) == 0 and not pg_recall.FREQUENCIES
    assert texts(await http_recall(service, "u1", "luna", "Zanzibarino")) == []


@pytest.mark.slow
async def test_another_instance_s_turns_and_forget_reach_the_copy_this_instance_holds(
    service: Any, db_path: str, tmp_path: Path
) -> None:
    """Two instances on one database: this test's service, and `agent-memory serve` in a process of its own."""
    await seed(service, "u1", "luna", "a1", said("My sister Maya bakes sourdough.", "Yum.", start_ms=MAY_8))
    assert texts(await http_recall(service, "u1", "luna", "sourdough"))
    assert await service.store.read(lambda view: view.recall.held("u1", "luna"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    pair = "/v1/users/u1/characters/luna"
    with servers() as started:
        other = Server(db_path, tmp_path / "other.log")
        started.append(other)
        async with aiohttp.ClientSession(headers=headers) as session:
            await other.wait_healthy(session, timeout_s=60)
            said_there = "My tortoise Zanzibarino is fifty years old."
            message = {"role": "user", "content": said_there, "timestamp": MAY_8 + 60_000}
            body = {"session_id": "s-other", "messages": [message]}
            async with session.post(f"{other.url}{pair}/messages", json=body) as resp:
                assert resp.status == 200, await resp.text()
            # Indexed by the other instance (its recall catches the index up first).
            async with session.get(f"{other.url}{pair}/recall", params={"q": "Zanzibarino"}) as resp:
                assert said_there in texts(await resp.json())
            before = counts()
            # Recalled here right after, from the copy held here, brought up to date.
            assert said_there in texts(await http_recall(service, "u1", "luna", "Zanzibarino tortoise"))
            assert counts()[1] == before[1] + 1
            assert await service.store.read(lambda view: view.recall.held("u1", "luna"))

            async with session.delete(f"{other.url}/v1/users/u1") as resp:
                assert resp.status == 200, await resp.text()
            # Nothing recallable here at once, and the copy held here is dropped.
            assert texts(await http_recall(service, "u1", "luna", "Zanzibarino sourdough")) == []
            here = await service.store.read(lambda view: view.sql.database()) + "#"
            await wait_for(
                lambda: not [key for key in pg_recall.POSTINGS.held_keys() if key[0].startswith(here)],
                failure="the forgotten pair's copy is still held",
            )
