"""The store's repositories on a real SQLite file: domain objects in and out, the one place a
user-wide fact is encoded, the one list of tables forget clears, and the search index's upkeep."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent_memory.core import postings
from agent_memory.core.domain import (
    CONDENSE,
    ChannelBinding,
    Fact,
    InboxEntry,
    Message,
    MessageFingerprint,
    Session,
    Summary,
)
from agent_memory.core.recall import weighted_terms
from agent_memory.settings import Settings
from agent_memory.store import NotBrief, ReadsHere, Store, Transaction, open_store
from agent_memory.store.shared.facts import fact_character
from agent_memory.store.sqlite import SQLiteStore, SQLiteView
from agent_memory.store.sqlite.maintenance import HELD, NOT_HELD
from agent_memory.store.sqlite.recall import forget_held
from agent_memory.store.types import NewMessage

pytestmark = pytest.mark.postgres


def session(agent_id: str = "A1", user_id: str = "u1", character_id: str = "luna") -> Session:
    return Session(
        agent_id=agent_id, user_id=user_id, character_id=character_id, identity_source="labels",
        status="running", channel="room", start_ms=1_000, labels={"user_id": user_id},
    )  # fmt: skip


def message(seq: int, content: str, agent_id: str = "A1", user_id: str = "u1", **more: object) -> NewMessage:
    row: NewMessage = {
        "agent_id": agent_id, "user_id": user_id, "character_id": "luna", "seq": seq,
        "role": "user" if seq % 2 == 0 else "assistant", "content": content, "at_ms": 1_000 + seq,
        "fp": f"fp{seq}", "created_ms": 5,
    }  # fmt: skip
    row.update(more)  # type: ignore[typeddict-item]
    return row


@pytest.mark.sqlite_only
async def test_every_table_is_cleared_by_forget_or_holds_nothing_of_a_user(store: Store) -> None:
    def tables(view: SQLiteView) -> set[str]:
        rows = view.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        # The search indexes (and their shadow tables) follow their tables by trigger.
        return {row[0] for row in rows if "_fts" not in row[0]}

    found = await store.read(tables)  # type: ignore[arg-type]
    assert found == {held.table for held in HELD} | set(NOT_HELD)


async def test_a_write_asked_of_a_read_is_refused_and_the_reader_reads_on(store: Store) -> None:
    # A read's repositories are the ones a write has (one class per table): its connection refuses
    # the write (SQLite's readers are query_only, PostgreSQL's reads READ ONLY), not the types; and
    # the refusal leaves the reader in no transaction, whose snapshot would hide every later write.
    await store.write(lambda tx: tx.inbox.insert(InboxEntry("n1", 101, 1, "{}", "received")))
    with pytest.raises(Exception, match=r"read-only|readonly"):
        store.read_now(lambda view: view.inbox.set_status("n1", "applied"))
    before = store.read_now(lambda view: view.inbox.get("n1"))
    await store.write(lambda tx: tx.inbox.set_status("n1", "failed"))
    after = store.read_now(lambda view: view.inbox.get("n1"))
    assert (before and before.status, after and after.status) == ("received", "failed")


async def test_repositories_give_back_what_they_were_given(store: Store) -> None:
    original = session()
    await store.write(lambda tx: tx.sessions.insert(original))
    assert await store.read(lambda view: view.sessions.get("A1")) == original
    await store.write(lambda tx: tx.sessions.update("A1", {"status": "stopped", "turns_truncated": True}))
    changed = await store.read(lambda view: view.sessions.get("A1"))
    assert changed is not None and changed.status == "stopped" and changed.turns_truncated is True

    summary = Summary(
        user_id="u1", character_id="luna", text="They met.", watermark_id=3, covered_until_ms=9,
        message_count=3, method="offline", model=None, created_ms=1, updated_ms=2,
        meta={"tokens_sent": 0},
    )  # fmt: skip
    await store.write(lambda tx: tx.summaries.put(summary))
    assert await store.read(lambda view: view.summaries.get("u1", "luna")) == summary

    entry = InboxEntry(event_id="n1", event_type=103, received_ms=7, body="{}", status="done", agent_id="A1")
    assert await store.write(lambda tx: tx.inbox.insert(entry)) is True
    assert await store.write(lambda tx: tx.inbox.insert(entry)) is False  # a redelivery
    assert await store.read(lambda view: view.inbox.get("n1")) == entry

    bound = await store.write(lambda tx: tx.bindings.bind_channel("room", "u1", "luna"))
    assert isinstance(bound, ChannelBinding) and bound.user_id == "u1"
    assert await store.read(lambda view: view.sessions.in_channel("room", ("labels",))) == [changed]


async def test_messages_come_back_typed_and_in_conversation_order(store: Store) -> None:
    rows = [
        message(0, "hello"),
        message(1, "hi", interrupted=1, original="hi there", extra='{"speech_start_ms": 5}'),
        message(2, "", kind="tool_call", extra='{"tool_calls": [{"id": "c1"}]}'),
    ]
    await store.write(lambda tx: tx.messages.insert(rows))
    spoken = await store.read(lambda view: view.messages.latest("u1", "luna", 10))
    assert [m.content for m in spoken] == ["hello", "hi"]
    assert all(isinstance(m, Message) and m.spoken for m in spoken)
    assert spoken[1].interrupted is True and spoken[1].extra == {"speech_start_ms": 5}
    everything = await store.read(lambda view: view.messages.latest("u1", "luna", 10, spoken_only=False))
    assert everything[-1].kind == "tool_call" and everything[-1].extra["tool_calls"] == [{"id": "c1"}]
    assert await store.read(lambda view: view.messages.count_after("u1", "luna", 0)) == 2
    tail = await store.read(lambda view: view.messages.tail("A1", 2))
    assert [f.seq for f in tail] == [1, 2] and isinstance(tail[0], MessageFingerprint)
    await store.write(lambda tx: tx.messages.update(tail[0].id, {"gap_before": 1}))
    assert (await store.read(lambda view: view.messages.fingerprints("A1")))[1].gap_before is True


async def test_a_user_wide_fact_belongs_to_every_character(store: Store) -> None:
    def remember(tx: Transaction) -> tuple[Fact, Fact]:
        wide, _ = tx.facts.add("u1", "luna", "Lives in Oslo", scope="user", pinned=False, origin="llm")
        own, _ = tx.facts.add(
            "u1", "luna", "Calls Luna 'moon'", scope="character", pinned=False, origin="llm"
        )
        return wide, own

    wide, own = await store.write(remember)
    assert (wide.scope, wide.character_id) == ("user", None)
    assert (own.scope, own.character_id) == ("character", "luna")
    assert await store.read(lambda view: view.facts.of_pair("u1", "atlas")) == [wide]
    assert await store.read(lambda view: view.facts.of_pair("u1", "luna")) == [wide, own]
    # Said again by hand: the same fact, now pinned.
    again, created = await store.write(
        lambda tx: tx.facts.add("u1", "atlas", "lives in oslo.", scope="user", pinned=True, origin="manual")
    )
    assert not created and again.id == wide.id and again.pinned
    # A pair's model-made facts go when its memory is rebuilt; the user-wide ones stay.
    assert await store.write(lambda tx: tx.facts.delete_unpinned("u1", "luna")) == 1
    assert [f.id for f in await store.read(lambda view: view.facts.of_pair("u1", "luna"))] == [wide.id]
    with pytest.raises(ValueError):
        fact_character("character", "")


async def test_a_fact_reworded_into_another_goes_instead(store: Store) -> None:
    def remember(tx: Transaction) -> tuple[Fact, Fact]:
        tea, _ = tx.facts.add("u1", "luna", "Likes tea", scope="character", pinned=False, origin="llm")
        coffee, _ = tx.facts.add("u1", "luna", "Likes coffee", scope="character", pinned=False, origin="llm")
        return tea, coffee

    tea, coffee = await store.write(remember)
    assert await store.write(lambda tx: tx.facts.update(coffee.id, "Likes strong coffee")) is True
    # Now it says what `tea` says: the transaction goes on, without the reworded fact.
    assert await store.write(lambda tx: (tx.facts.update(coffee.id, "likes tea."), tx.facts.get(tea.id))) == (
        True,
        tea,
    )
    assert await store.read(lambda view: view.facts.of_pair("u1", "luna")) == [tea]


async def test_two_instances_saying_one_thing_at_once_store_it_once(store: Store, db_path: Path) -> None:
    """The same fact added, and the same event recorded, by two processes at once: one row,
    one creation, and no error for the other."""
    other = open_store(Settings(db_path=db_path))
    try:
        both = (store, other) * 4
        added = await asyncio.gather(
            *(
                instance.write(
                    lambda tx: tx.facts.add(
                        "u1", "luna", "Likes tea", scope="character", pinned=False, origin="llm"
                    )
                )
                for instance in both
            )
        )
        assert sorted(created for _, created in added) == [False] * 7 + [True]
        assert len({fact.id for fact, _ in added}) == 1
        entry = InboxEntry(event_id="n1", event_type=103, received_ms=7, body="{}", status="done")
        recorded = await asyncio.gather(
            *(instance.write(lambda tx: tx.inbox.insert(entry)) for instance in both)
        )
        assert sorted(recorded) == [False] * 7 + [True]
    finally:
        other.close()


async def test_a_moved_session_takes_its_messages_in_order_under_new_ids(store: Store) -> None:
    await store.write(lambda tx: tx.sessions.insert(session()))
    await store.write(lambda tx: tx.messages.insert([message(seq, f"line {seq}") for seq in (0, 1, -2, 2)]))
    await store.write(lambda tx: tx.sessions.insert(session("B1", "u2")))
    await store.write(lambda tx: tx.messages.insert([message(0, "other", "B1", "u2")]))
    before = await store.read(lambda view: view.messages.of_session("A1"))
    newest = max(m.id for m in await store.read(lambda view: view.messages.of_session("B1")))
    versions = await store.read(
        lambda view: (view.versions.of_pair("u1", "luna"), view.versions.of_pair("u9", "luna"))
    )
    assert await store.write(lambda tx: tx.sessions.move("A1", "u9", "luna")) == 4
    after = await store.read(lambda view: view.messages.of_session("A1"))
    assert [(m.seq, m.content, m.user_id) for m in after] == [(m.seq, m.content, "u9") for m in before]
    # New ids above every other, given in the order of the old ones.
    assert min(m.id for m in after) > newest
    assert sorted(after, key=lambda m: m.id) == [
        next(a for a in after if a.seq == b.seq) for b in sorted(before, key=lambda m: m.id)
    ]
    moved = await store.read(lambda view: view.sessions.get("A1"))
    assert moved is not None and moved.user_id == "u9"
    assert await store.read(lambda view: view.messages.latest("u1", "luna", 10)) == []
    changed = await store.read(
        lambda view: (view.versions.of_pair("u1", "luna"), view.versions.of_pair("u9", "luna"))
    )
    assert changed[0][0] > versions[0][0] and changed[1][0] > versions[1][0]


async def test_an_update_that_changes_nothing_counts_no_change_of_its_pair(store: Store) -> None:
    await store.write(lambda tx: tx.sessions.insert(session()))
    await store.write(lambda tx: tx.messages.insert([message(0, "hello")]))
    (stored,) = await store.read(lambda view: view.messages.of_session("A1"))
    version = await store.read(lambda view: view.versions.of_pair("u1", "luna"))
    # What a window overlapping stored turns asks, turn after turn: the pair's cached
    # context must not be built again for it.
    await store.write(lambda tx: tx.messages.update(stored.id, {}))
    assert await store.read(lambda view: view.versions.of_pair("u1", "luna")) == version
    await store.write(lambda tx: tx.messages.update(stored.id, {"interrupted": True}))
    assert await store.read(lambda view: view.versions.of_pair("u1", "luna")) > version


async def test_the_queue_claims_postpones_and_finishes(store: Store) -> None:
    timing = {"delay_ms": 0, "max_wait_ms": 0, "max_messages": 1, "new_messages": 3}
    await store.write(lambda tx: tx.jobs.schedule(CONDENSE, "u1", "luna", **timing))
    (job,) = await store.read(lambda view: view.jobs.due(CONDENSE, 2**62, 10))
    claimed = await store.write(lambda tx: tx.jobs.claim(job.id))
    assert claimed is not None and claimed.status == "running"
    assert await store.write(lambda tx: tx.jobs.claim(job.id)) is None  # one claim at a time
    # Superseded: pending again, and not counted as an attempt.
    await store.write(lambda tx: tx.jobs.postpone(job.id, 0))
    postponed = await store.read(lambda view: view.jobs.by_id(job.id))
    assert postponed is not None and (postponed.status, postponed.attempts) == ("pending", 0)
    claimed = await store.write(lambda tx: tx.jobs.claim(job.id))
    assert claimed is not None
    assert await store.write(lambda tx: tx.jobs.finish(claimed, again_at_ms=0)) is True
    assert await store.read(lambda view: view.jobs.by_status()) == []


async def test_forget_clears_every_held_table_and_keeps_the_index_watermark(store: Store) -> None:
    await store.write(lambda tx: tx.sessions.insert(session("B1", "u2")))
    await store.write(lambda tx: tx.messages.insert([message(0, "bye osaka", "B1", "u2")]))
    await store.write(lambda tx: tx.sessions.insert(session()))
    await store.write(lambda tx: tx.messages.insert([message(0, "hello kyoto"), message(1, "kyoto again")]))
    await store.catch_up_search()
    indexed = (await store.read(lambda view: view.maintenance.search_state()))["messages_indexed_upto"]
    receipt = await store.write(lambda tx: tx.maintenance.forget("u2", None))
    assert list(receipt) == [held.receipt for held in HELD] + [
        "search_index_rows", "search_index_scrub_pending"
    ]  # fmt: skip
    assert (receipt["messages"], receipt["sessions"], receipt["search_index_rows"]) == (1, 1, 1)
    # The forget (with the checkpoint Memory.forget runs after it) rewrote what was small
    # enough; what was already indexed is not indexed again.
    await store.checkpoint()
    state = await store.read(lambda view: view.maintenance.search_state())
    assert state == {"dead_rows": 0, "scrub_owed": 0, "messages_indexed_upto": indexed}
    assert await store.catch_up_search() == 0
    found = await store.read(lambda view: view.search.user("u1", "kyoto"))
    assert len(found["results"]) == 2


async def test_a_write_waits_for_another_process_writing_the_same_file(tmp_path: Path) -> None:
    """A CLI command beside the running service: neither's write fails with "database is locked",
    even when one transaction reads before it writes while the other writes in between."""
    settings = Settings(db_path=tmp_path / "shared.db")
    service, cli = open_store(settings), open_store(settings)
    inside = threading.Event()

    def read_then_write(tx: Transaction) -> None:
        tx.sessions.get("S1")  # a read first, as the search catch-up does
        inside.set()
        time.sleep(0.3)  # the other writer tries to commit meanwhile
        tx.sessions.insert(session("S1"))

    async def other_write() -> None:
        await asyncio.to_thread(inside.wait, 5)
        await cli.write(lambda tx: tx.sessions.insert(session("C1")))

    try:
        await asyncio.gather(service.write(read_then_write), other_write())
        found = await cli.read(lambda view: (view.sessions.get("S1"), view.sessions.get("C1")))
        assert all(found)
    finally:
        service.close()
        cli.close()


async def test_a_read_here_runs_on_the_calling_thread_in_sqlite_and_postgres_cannot_read_here(
    store: Store,
) -> None:
    await store.write(lambda tx: tx.messages.insert([message(0, "hello there")]))

    def latest(view: Any) -> tuple[int, list[Message]]:
        return threading.get_ident(), view.messages.latest("u1", "luna", 5)

    if isinstance(store, SQLiteStore):
        assert isinstance(store, ReadsHere)
        thread, found = store.read_here(latest)
        assert thread == threading.get_ident()
        assert [m.content for m in found] == ["hello there"] and found == (await store.read(latest))[1]
    else:  # over the network: never on the event loop, so not a capability it has
        assert not isinstance(store, ReadsHere) and not hasattr(store, "read_here")


@pytest.mark.sqlite_only
async def test_a_read_here_that_would_search_sqlite_is_declined_and_answered_on_a_thread(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.write(
        lambda tx: tx.messages.insert([message(i, f"my dog Biscuit number {i}") for i in range(6)])
    )
    await store.catch_up_search()
    # The pair is not held in memory, and is read into it in the background: a question now
    # would be searched in SQLite.
    forget_held()
    monkeypatch.setattr(postings, "READ_AT_ONCE_DOCS", 0)
    threads: list[int] = []

    def ask(view: Any) -> list[int]:
        threads.append(threading.get_ident())
        stats = view.recall.term_stats("u1", "luna", weighted_terms("what is my dog called"))
        return [hit.message.id for hit in view.recall.turns(stats, 3)]

    with pytest.raises(NotBrief):
        store.read_here(ask)
    assert threads == [threading.get_ident()]
    assert len(await store.read(ask)) == 3
    assert threads[-1] != threading.get_ident()


async def test_a_populated_database_of_the_previous_schema_gains_forget_cut_offs(db_path: Path) -> None:
    """The forgets table is a migration of its own on either backend, run over what is held."""
    opened = open_store(Settings(db_path=db_path))
    try:
        message: NewMessage = {"agent_id": "A", "user_id": "u", "character_id": "c", "seq": 0,
                               "role": "user", "content": "kept across the upgrade", "at_ms": 1, "fp": "f"}  # fmt: skip
        await opened.write(lambda tx: tx.messages.insert([message]))

        def back_to_the_previous_schema(tx: Any) -> None:
            # As a database the previous version left: no forgets table, its migration not run.
            tx.conn.execute("DROP TABLE forgets")
            table = "_sqlite_migrations" if isinstance(opened, SQLiteStore) else "agent_memory_migrations"
            tx.conn.execute(f"DELETE FROM {table} WHERE name IN ('m018_forgets', 'm008_forgets')")

        await opened.write(back_to_the_previous_schema)
    finally:
        opened.close()
    upgraded = open_store(Settings(db_path=db_path))
    try:
        assert {"m018_forgets", "m008_forgets"} & set(await upgraded.read(lambda v: v.maintenance.schema()))
        assert [m.content for m in await upgraded.read(lambda v: v.messages.of_session("A"))] == [
            "kept across the upgrade"
        ]
        assert await upgraded.read(lambda v: v.maintenance.forget_cutoff("u", "c")) is None
        await upgraded.write(lambda tx: tx.maintenance.forget("u", "c"))
        assert await upgraded.read(lambda v: v.maintenance.forget_cutoff("u", "c")) is not None
        assert await upgraded.read(lambda v: v.maintenance.forget_cutoff("u", "other")) is None
    finally:
        upgraded.close()


def test_opening_a_database_already_set_up_writes_nothing(tmp_path: Path) -> None:
    """Each open of SQLite's writer committed a transaction (auto_vacuum set again), each a
    write and an fsync: a service started on an existing database writes nothing until it is told."""
    path = tmp_path / "memory.db"
    made = SQLiteStore(path)
    made.open()
    made.close()
    again = SQLiteStore(path)
    again.open()
    try:
        wal = path.with_name("memory.db-wal")
        assert wal.exists() and wal.stat().st_size == 0, "opening wrote to the WAL"
        assert again.read_now(lambda view: view.maintenance.storage_stats()).get("auto_vacuum") == 2
    finally:
        again.close()


async def test_a_write_that_arrives_while_a_batch_runs_joins_its_commit(tmp_path: Path) -> None:
    """SQLite's writer commits a batch once its writes ran; writes queued meanwhile run in the
    same transaction before the commit (one fsync), rather than waiting for it and then
    committing alone. Each is still answered only once committed, and a failing one still rolls
    back alone."""
    store = SQLiteStore(tmp_path / "memory.db")
    store.open()
    sent: list[str] = []
    first_runs, second_queued = threading.Event(), threading.Event()

    def first(tx: Any) -> str:
        first_runs.set()
        assert second_queued.wait(10)
        tx.conn.execute("CREATE TABLE t (x)")
        tx.conn.execute("INSERT INTO t VALUES (1)")
        return "first"

    def failing(tx: Any) -> None:
        tx.conn.execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("this write fails")

    def second(tx: Any) -> int:
        tx.conn.execute("INSERT INTO t VALUES (3)")
        return int(tx.conn.execute("SELECT count(*) FROM t").fetchone()[0])

    try:
        await store.write(lambda tx: tx.conn.set_trace_callback(sent.append))
        sent.clear()
        one = asyncio.ensure_future(store.write(first))
        await asyncio.get_running_loop().run_in_executor(None, first_runs.wait, 10)
        others = asyncio.gather(store.write(failing), store.write(second), return_exceptions=True)
        await asyncio.sleep(0.05)  # both are queued (the writer is inside `first`)
        assert not one.done()
        second_queued.set()
        assert await one == "first"
        failed, counted = await others
        assert isinstance(failed, RuntimeError) and counted == 2
        # The transactions that wrote to t (the writer may also index between batches).
        transactions = " ".join(sent).split("BEGIN IMMEDIATE")
        assert [tx for tx in transactions if "INTO t" in tx] == [
            tx for tx in transactions if "INTO t VALUES (1)" in tx and "INTO t VALUES (3)" in tx
        ], sent
        assert sum("INTO t" in tx for tx in transactions) == 1, sent
        assert store.read_now(lambda view: [row[0] for row in view.conn.execute("SELECT x FROM t")]) == [1, 3]
    finally:
        await store.write(lambda tx: tx.conn.set_trace_callback(None))
        store.close()
