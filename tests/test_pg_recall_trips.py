"""What a recall over HTTP waits for on PostgreSQL: its round trips (issue 28). On a machine whose
cores are shared, each waits for PostgreSQL's backend to be scheduled, so their count, not any one
statement, makes the p99: a recall of a pair held in memory is answered after one (its figures
guessed as last read, checked with its turns), and its COMMIT is sent while the answer is on its way."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import said, seed, wait_for
from test_embeddings import store_turns
from test_pg_ingest_statements import each_statement
from test_recall import MAY_8, recall, texts
from test_recall_postings import indexed

from agent_memory.store.postgres import recall as pg_recall


@pytest.fixture
def backend() -> str:
    return "postgres"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every query the service's reader threads send, in order, with the thread that sent it."""
    sent: list[tuple[str, str]] = []
    execute = psycopg.Cursor.execute

    def noted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        thread = threading.current_thread().name
        if thread.startswith("pg-read"):
            text = query.decode() if isinstance(query, bytes) else str(query)
            sent.append((thread, " ".join(text.split())))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", noted)
    yield sent


async def recall_trips(service: Any, reads: list[tuple[str, str]], q: str) -> tuple[list[str], list[str]]:
    """The memories recalled for `q` over HTTP, and the round trips of the read that found them
    (from its BEGIN to its COMMIT, on its reader thread)."""
    del reads[:]
    found = texts(await recall(service, "u1", "luna", q))

    def trips() -> list[str] | None:
        sent = list(reads)
        figures = [i for i, (_, text) in enumerate(sent) if "FROM recall_pairs WHERE user_id" in text]
        if not figures:
            return None
        thread = sent[figures[-1]][0]
        begun = max(
            i for i, (name, text) in enumerate(sent[: figures[-1] + 1]) if name == thread and "BEGIN" in text
        )
        own = [text for name, text in sent[begun:] if name == thread]
        return own[: own.index("COMMIT") + 1] if "COMMIT" in own else None

    return found, await wait_for(trips, failure=f"no committed recall among {reads}")


async def held_pair(service: Any) -> None:
    """A pair whose turns are indexed and whose index this process holds."""
    await seed(service, "u1", "luna", "a1", said("My tortoise Zanzibarino is fifty.", "Wow.", start_ms=MAY_8))
    assert texts(await recall(service, "u1", "luna", "Zanzibarino"))
    assert await service.store.read(lambda view: view.recall.held("u1", "luna"))


async def test_a_held_pair_s_recall_is_one_round_trip_and_its_commit(
    service: Any, reads: list[tuple[str, str]]
) -> None:
    await held_pair(service)
    found, trips = await recall_trips(service, reads, "tortoise")
    assert found == ["My tortoise Zanzibarino is fifty."]
    # BEGIN, the bound on statements, the pair's figures (ranked with as last read here, and
    # checked), facts and summary, whether the index is behind (asked after the read, answered
    # in its snapshot), the ranked turns with their neighbours; then COMMIT, after the answer.
    assert len(trips) == 2, trips
    sent = each_statement(trips[:1])
    assert sent[0].startswith("BEGIN ISOLATION LEVEL REPEATABLE READ"), sent
    assert [s for s in sent if "FROM recall_pairs" in s and "FROM recall_pending" not in s], sent
    assert [s for s in sent if "FROM recall_pending" in s], sent
    assert [s for s in sent if "FROM facts" in s] and [s for s in sent if "FROM summaries" in s], sent
    assert [s for s in sent if "FROM messages WHERE id = ANY" in s], sent


async def test_a_guess_at_figures_that_moved_reads_again(service: Any, reads: list[tuple[str, str]]) -> None:
    """Turns indexed since this process last read the pair: its copy is brought up to date."""
    await held_pair(service)
    await store_turns(service.store, "a2", "u1", "luna", "Zanzibarino the tortoise hates lettuce.", "Ha!")
    await indexed(service.store)  # by this process; its copy of the pair is not told
    found, trips = await recall_trips(service, reads, "Zanzibarino tortoise lettuce")
    assert found[0] == "Zanzibarino the tortoise hates lettuce.", found
    assert "My tortoise Zanzibarino is fifty." in found
    # The guess, checked with the turns added after the copy's last; the ranked turns again
    # (from the copy brought up to date) with their neighbours; COMMIT.
    assert len(trips) == 3, trips
    # Guessed right again afterwards.
    found, trips = await recall_trips(service, reads, "lettuce")
    assert found == ["Zanzibarino the tortoise hates lettuce."]
    assert len(trips) == 2, trips


async def test_a_read_is_answered_before_its_commit(service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await held_pair(service)
    released = threading.Event()
    execute = psycopg.Cursor.execute

    def held_commit(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("pg-read") and query == b"COMMIT":
            released.wait(30)  # never on the old code: the answer waited for this COMMIT
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", held_commit)
    try:
        body = await asyncio.wait_for(recall(service, "u1", "luna", "tortoise"), timeout=20)
    finally:
        released.set()
    assert texts(body) == ["My tortoise Zanzibarino is fifty."]
    # The snapshot ends: a forget after it is final (its scrub waits for older snapshots).
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    assert texts(await recall(service, "u1", "luna", "Zanzibarino tortoise")) == []
    assert len(pg_recall.POSTINGS) == 0
    assert not [key for key in pg_recall.FIGURES if key[1] == "u1"]  # nor the pair's figures to guess with


async def test_a_question_asked_again_with_linked_names_reads_the_figures_once(
    service: Any, reads: list[tuple[str, str]]
) -> None:
    """ "my sister" asked, "my sister Maya" found: asked again with "maya", in the same snapshot."""
    lines = [
        "My sister Maya is training as a midwife.",
        "Lovely.",
        "Maya adopted a kitten named Pickle.",
        "Cute!",
    ]
    await seed(service, "u1", "luna", "a1", said(*lines, start_ms=MAY_8))
    for _ in range(2):  # the second is guessed: its figures, as the first read them here
        found, trips = await recall_trips(service, reads, "What's the latest about my sister?")
        assert "Maya adopted a kitten named Pickle." in found, found
    # The guess with the ranked turns; the turns ranked again with the linked name; COMMIT.
    assert len(trips) == 3, trips
    assert sum("FROM recall_pairs WHERE user_id" in trip for trip in trips) == 1, trips
