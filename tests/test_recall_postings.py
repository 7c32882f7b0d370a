"""SQLite's recall holds the pairs it is asked about in memory: it ranks exactly as the database's
index does, follows every new, edited and deleted turn whoever wrote it, and stays in its budget."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import said, seed
from test_embeddings import store_turns
from test_recall import MAY_8
from test_recall import recall as http_recall

from agent_memory.core import postings
from agent_memory.core.recall import Recall, weighted_terms
from agent_memory.core.textcache import held_texts
from agent_memory.memory.reading import recall_in
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store
from agent_memory.store.sqlite.recall import POSTINGS, forget_held

WORDS = [
    "pottery", "class", "sister", "dog", "walk", "Lisbon", "flight", "exam", "chemistry", "garden",
    "tomatoes", "violin", "lesson", "birthday", "cake", "bakery", "marathon", "knee", "doctor", "rent",
    "landlord", "bicycle", "repair", "novel", "library", "sushi", "dinner", "brother", "wedding",
    "Kyoto", "train", "陶艺", "考试", "妹妹", "生日",
]  # fmt: skip


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(count)]


async def recall(store: Store, q: str, user: str = "u1", character: str = "luna") -> Recall:
    return await store.read(lambda view: recall_in(view, user, character, q, 400))


async def indexed(store: Store) -> None:
    while await store.catch_up_search():
        pass


def turns(found: Recall) -> list[str]:
    return [memory.text for memory in found.memories if memory.kind == "turn"]


def counts() -> tuple[int, int, int]:
    return POSTINGS.hits, POSTINGS.appends, POSTINGS.reads


@pytest.fixture
def budget() -> Iterator[Any]:
    """Sets the copies' budget for one test."""
    saved = POSTINGS.budget_docs

    def set_budget(docs: int) -> None:
        POSTINGS.budget_docs = docs

    yield set_budget
    POSTINGS.budget_docs = saved


async def test_a_pair_held_in_memory_ranks_as_the_database_index_does(store: Store, budget: Any) -> None:
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

    budget(0)  # nothing held: every posting list is read through FTS5
    from_database = [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]
    budget(10_000)
    before = counts()
    held = [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]
    hits, appends, reads = (now - then for now, then in zip(counts(), before, strict=True))
    assert reads == 1 and hits == len(questions) - 1 and appends == 0
    assert held == from_database
    assert all(len(found) == 20 for found in held)

    # Turns said since are taken into the arrays already made of the copy's posting lists.
    await store_turns(store, "A3", "u1", "luna", *sentences(200, seed=3))
    await indexed(store)
    held = [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]
    assert counts()[1:] == (before[1] + 1, before[2] + 1)  # one append, no whole read
    budget(0)
    forget_held()  # the database's document frequencies, not those reused from the first pass
    assert held == [await store.read(lambda view, q=q: ranked(view, q)) for q in questions]


async def test_the_copy_follows_new_edited_and_deleted_turns(store: Store, db_path: Path) -> None:
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
            "UPDATE messages SET content = 'I took up archery.' WHERE id = ?", (pottery,)
        )
    )
    await indexed(store)
    assert turns(await recall(store, "pottery class")) == []
    assert turns(await recall(store, "archery")) == ["I took up archery."]
    assert counts()[2] == before[2] + 1

    await store.write(lambda tx: tx.conn.execute("DELETE FROM messages WHERE id = ?", (pottery,)))
    await indexed(store)
    assert turns(await recall(store, "archery")) == []

    # Another store on the same file (another process, a CLI command) writes: seen at once.
    other = open_store(Settings(db_path=db_path))
    try:
        await store_turns(other, "A3", "u1", "luna", "The tomatoes in my garden are ripe.", "Yum.")
        await indexed(other)
    finally:
        other.close()
    assert turns(await recall(store, "garden tomatoes")) == ["The tomatoes in my garden are ripe."]


async def test_copies_stay_within_their_budget_and_a_larger_pair_is_read_from_the_database(
    store: Store, budget: Any
) -> None:
    budget(100)
    await store_turns(store, "B1", "u-big", "luna", *sentences(150, seed=3), "My violin is a 1920 Hofner.")
    for user in ("u-a", "u-b", "u-c"):
        await store_turns(
            store, f"S-{user}", user, "luna", *sentences(40, seed=4), f"{user} owns a red bicycle."
        )
    await indexed(store)

    before = counts()
    # Too large to hold: answered through FTS5, the same answer.
    assert turns(await recall(store, "Hofner violin", "u-big"))[0] == "My violin is a 1920 Hofner."
    assert counts() == before
    for user in ("u-a", "u-b", "u-c"):
        assert f"{user} owns a red bicycle." in turns(await recall(store, "red bicycle", user))
    # Two pairs of 41 fit in 100: the third read dropped the least recently asked (u-a).
    assert counts()[2] == before[2] + 3
    await recall(store, "red bicycle", "u-c")
    await recall(store, "red bicycle", "u-a")
    assert counts()[2] == before[2] + 4


async def test_a_large_pair_is_read_into_memory_in_the_background_while_sql_answers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postings, "READ_AT_ONCE_DOCS", 50)
    await store_turns(store, "A1", "u1", "luna", *sentences(120, seed=5), "My violin is a 1920 Hofner.")
    await indexed(store)
    before = counts()
    first = turns(await recall(store, "Hofner violin"))
    assert first[0] == "My violin is a 1920 Hofner."
    POSTINGS.wait_for_reads()
    assert counts()[2] == before[2] + 1  # read once, in the background
    assert turns(await recall(store, "Hofner violin")) == first
    assert counts()[0] == before[0] + 1  # the copy answered


async def test_a_database_put_in_the_place_of_another_is_never_answered_from_the_old_copy(
    db_path: Path,
) -> None:
    first = open_store(Settings(db_path=db_path))
    try:
        await store_turns(first, "A1", "u1", "luna", "I signed up for a pottery class.", "Nice!")
        await indexed(first)
        assert turns(await recall(first, "pottery class"))  # held for (this file, pair 1)
    finally:
        first.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    second = open_store(Settings(db_path=db_path))
    try:
        # Pair 1 is u9's here, and message 1 is u2's: the old copy's turn 1 is somebody else's.
        await second.write(
            lambda tx: tx.conn.execute(
                "INSERT INTO search_pairs (user_id, character_id) VALUES ('u9', 'luna')"
            )
        )
        await store_turns(second, "B1", "u2", "luna", "My pottery wheel arrived.", "Fun!")
        await store_turns(second, "B2", "u9", "luna", "I play chess on Sundays.", "Cool.")
        await indexed(second)
        assert turns(await recall(second, "pottery class", "u9")) == []
        assert turns(await recall(second, "chess", "u9")) == ["I play chess on Sundays."]
    finally:
        second.close()


async def test_a_forget_leaves_none_of_the_words_in_the_process(service: Any) -> None:
    await seed(
        service,
        "u1",
        "luna",
        "a1",
        said("My tortoise Zanzibarino turned 50 yesterday.", "Wow.", start_ms=MAY_8),
    )
    assert (await http_recall(service, "u1", "luna", "Zanzibarino"))["memories"]
    assert len(POSTINGS) >= 1 and held_texts() > 0
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    # The copies of pairs, the cached terms, dates and token counts held that text: all gone.
    assert len(POSTINGS) == 0 and held_texts() == 0
    assert (await http_recall(service, "u1", "luna", "Zanzibarino"))["memories"] == []


def test_a_copy_answers_while_another_thread_adds_turns_to_it() -> None:
    copy = postings.PairPostings(0)
    said = sentences(3_000, seed=4)
    copy.add((doc, len(text.split()), text.split()) for doc, text in enumerate(said[:500], start=1))
    weights = [("Lisbon", 2.0), ("exam", 1.5), ("sister", 1.0)]

    def ask() -> dict[int, float]:
        return copy.scores(weights, k1=1.2, b=0.75, average=6.0, limit=20, shortlist=80)

    def add_the_rest() -> None:
        for doc, text in enumerate(said[500:], start=501):
            with copy.lock:
                copy.add([(doc, len(text.split()), text.split())])

    with ThreadPoolExecutor(max_workers=4) as pool:
        adding = pool.submit(add_the_rest)
        answers = [pool.submit(lambda: [ask() for _ in range(200)]) for _ in range(3)]
        adding.result()
        assert all(len(found) == 20 for answer in answers for found in answer.result())

    whole = postings.PairPostings(0)
    whole.add((doc, len(text.split()), text.split()) for doc, text in enumerate(said, start=1))
    assert ask() == whole.scores(weights, k1=1.2, b=0.75, average=6.0, limit=20, shortlist=80)
