"""The `Memory` service in process, on a real SQLite file: the use-cases HTTP and CLI both call."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from conftest import on_disk, seed_sqlite

from agent_memory.condense import make_condenser
from agent_memory.core.events import IncomingMessage, RawEvent, SessionEvent
from agent_memory.errors import InvalidField, NotFound
from agent_memory.memory.admin import EXPORT_FORMAT
from agent_memory.memory.condensing import Condensing
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.memory.reading import SummaryState
from agent_memory.memory.retention import Retention
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store

pytestmark = pytest.mark.postgres

START_MS = 1_763_690_000_000
SECRET_WORD = "MarmaladeHeron5521"
KEPT_WORD = "PineconeOtter8830"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "memory.db", summary_delay_s=3600)


@pytest.fixture
def store(settings: Settings, migrated_sqlite: bytes) -> Iterator[Store]:
    """A fresh database (a copy of a migrated one: running the migrations costs ten times more)."""
    seed_sqlite(settings, migrated_sqlite)
    store = open_store(settings)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
async def jobs(settings: Settings, store: Store) -> AsyncIterator[CondenseJobs]:
    """An offline job runner (stopped before the store closes)."""
    jobs = CondenseJobs(settings, store, make_condenser(settings))
    try:
        yield jobs
    finally:
        await jobs.stop()


@pytest.fixture
def memory(settings: Settings, store: Store) -> Memory:
    """A Memory over the fresh database."""
    return Memory(settings, store)


def history(agent_id: str, user: str, character: str, *lines: str) -> tuple[RawEvent, SessionEvent]:
    """A finished run's whole transcript (alternating user/assistant), as a platform reports it."""
    labels = {"user_id": user, "character_id": character}
    messages = [
        IncomingMessage(
            role="user" if index % 2 == 0 else "assistant",
            content=line,
            turn_id=index // 2 + 1,
            ts_ms=START_MS + index * 1000,
        )
        for index, line in enumerate(lines)
    ]
    raw = RawEvent(
        event_id=f"{agent_id}:history",
        event_type=103,
        body=json.dumps({"agent_id": agent_id, "labels": labels, "contents": lines}),
        received_ms=START_MS,
        agent_id=agent_id,
        labels=labels,
    )
    event = SessionEvent(
        kind="history", agent_id=agent_id, start_ms=START_MS, labels=labels, messages=messages
    )
    return raw, event


async def seed(memory: Memory, agent_id: str, user: str, character: str, *lines: str) -> None:
    outcome = await memory.accept_event(*history(agent_id, user, character, *lines))
    assert outcome.status == "done" and outcome.new_messages == len(lines), outcome


async def test_an_event_is_taken_in_once(memory: Memory) -> None:
    raw, event = history("A1", "u-ann", "luna", "hello there", "hi Ann")
    assert (await memory.accept_event(raw, event)).new_messages == 2
    again = await memory.accept_event(raw, event)
    assert again.status == "duplicate" and again.new_messages == 0
    assert [m.content for m in await memory.reading.messages("u-ann", "luna", 10)] == [
        "hello there",
        "hi Ann",
    ]
    assert (await memory.identity.session("A1")).user_id == "u-ann"


async def test_system_messages_hold_facts_and_turns_and_can_leave_out_a_run(
    memory: Memory, settings: Settings
) -> None:
    await seed(memory, "EARLIER", "u-ann", "luna", "my cat is Miso", "what a lovely name")
    await seed(memory, "RUNNING", "u-ann", "luna", "I am calling again", "welcome back")
    await memory.facts.add("u-ann", "luna", "Ann's cat is called Miso")
    context = await memory.reading.system_messages("u-ann", "luna", persona="You are Luna.")
    text = "\n".join(m["content"] for m in context.system_messages)
    assert context.system_messages[0]["content"] == "You are Luna."
    assert "Ann's cat is called Miso" in text and "welcome back" in text
    assert context.max_tokens == settings.context_max_tokens
    without = await memory.reading.system_messages("u-ann", "luna", exclude_agent_id="RUNNING")
    text = "\n".join(m["content"] for m in without.system_messages)
    assert "welcome back" not in text and "my cat is Miso" in text
    assert without.included["excluded_agent_id"] == "RUNNING"


async def test_a_fact_said_by_hand_is_pinned_deduplicated_and_scoped(memory: Memory) -> None:
    added = await memory.facts.add("u-ann", "luna", "  Ann is  vegetarian ")
    assert added.created and added.fact.pinned and added.fact.origin == "manual"
    assert added.fact.text == "Ann is vegetarian"
    same = await memory.facts.add("u-ann", "luna", "ann is vegetarian.")
    assert not same.created and same.fact.id == added.fact.id
    await memory.facts.add("u-ann", "luna", "Ann lives in Lisbon", scope="user")
    # A user-wide fact is remembered with every character; a character's fact with that one only.
    assert [f.text for f in await memory.facts.of_pair("u-ann", "kai")] == ["Ann lives in Lisbon"]
    assert len(await memory.facts.of_pair("u-ann", "luna")) == 2
    with pytest.raises(InvalidField):
        await memory.facts.add("u-ann", "luna", " ... ")
    await memory.facts.delete(added.fact.id)
    with pytest.raises(NotFound):
        await memory.facts.delete(added.fact.id)


async def test_forgetting_a_user_leaves_nothing_readable_on_disk(
    memory: Memory, settings: Settings, store: Store, jobs: CondenseJobs
) -> None:
    await seed(memory, "GONE", "u-gone", "luna", f"my password is {SECRET_WORD}", "noted")
    await seed(memory, "KEEP", "u-keep", "luna", f"my word is {KEPT_WORD}", "noted")
    await memory.facts.add("u-gone", "luna", f"The code word is {SECRET_WORD}", scope="user")
    await memory.identity.bind_channel("room-gone", "u-gone", "luna")
    await Condensing(store, jobs).condense("u-gone", "luna")
    assert (await memory.reading.summary("u-gone", "luna")).summary is not None
    assert SECRET_WORD.encode() in on_disk(settings.db_path)

    receipt = await memory.admin.forget("u-gone")

    assert receipt["messages"] == 2 and receipt["facts"] == 1 and receipt["summaries"] == 1
    assert receipt["sessions"] == 1 and receipt["channel_bindings"] == 1 and receipt["raw_callbacks"] == 1
    assert await memory.reading.messages("u-gone", "luna", 100) == []
    assert await memory.facts.of_pair("u-gone", "luna") == []
    assert await memory.reading.summary("u-gone", "luna") == SummaryState(None, 0)
    assert await memory.identity.channel_binding("room-gone") is None
    with pytest.raises(NotFound):
        await memory.admin.export("u-gone")
    # The WAL was checkpointed into the file and truncated, and the words are nowhere in either.
    wal = Path(settings.db_path).with_name("memory.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    data = on_disk(settings.db_path)
    assert SECRET_WORD.encode() not in data and SECRET_WORD.casefold().encode() not in data
    # Someone else's memory stays.
    assert KEPT_WORD.encode() in data
    assert len(await memory.reading.messages("u-keep", "luna", 100)) == 2


async def test_forgetting_a_pair_keeps_the_users_other_pairs_and_user_wide_facts(memory: Memory) -> None:
    await seed(memory, "A-LUNA", "u-ann", "luna", "luna talk", "yes")
    await seed(memory, "A-KAI", "u-ann", "kai", "kai talk", "yes")
    await memory.facts.add("u-ann", "luna", "likes tea", scope="user")
    receipt = await memory.admin.forget("u-ann", "luna")
    assert receipt["messages"] == 2 and receipt["facts"] == 0
    assert await memory.reading.messages("u-ann", "luna", 10) == []
    assert len(await memory.reading.messages("u-ann", "kai", 10)) == 2
    assert [f.text for f in await memory.facts.of_pair("u-ann", "kai")] == ["likes tea"]


async def test_export_is_one_versioned_document_of_everything_held(memory: Memory) -> None:
    await seed(memory, "A1", "u-ann", "luna", "export me", "sure")
    await memory.facts.add("u-ann", "luna", "Ann likes exports")
    document = await memory.admin.export("u-ann")
    assert document["format"] == EXPORT_FORMAT and document["exported_ms"] > START_MS
    assert document["counts"]["messages"] == 2 and document["counts"]["facts"] == 1
    with pytest.raises(NotFound, match="nothing is held about user nobody"):
        await memory.admin.export("nobody")


async def test_condense_now_makes_the_job_due_and_condense_runs_it(
    memory: Memory, store: Store, jobs: CondenseJobs
) -> None:
    await seed(memory, "A1", "u-ann", "luna", "I adopted a dog named Biscuit", "congratulations")
    assert (await memory.reading.summary("u-ann", "luna")).uncovered == 2
    job = await memory.queue.condense_now("u-ann", "luna")
    assert job is not None and job.status == "pending" and job.updated_ms is not None
    assert job.due_ms <= job.updated_ms + 1
    assert [row.id for row in await memory.queue.list_jobs("pending")] == [job.id]
    condensed = await Condensing(store, jobs).condense("u-ann", "luna")
    assert condensed.summary is not None and condensed.summary.method == "offline"
    # A finished job with nothing left to condense is gone; one that failed would say why.
    assert condensed.job is None or condensed.job.last_error is None
    state = await memory.reading.summary("u-ann", "luna")
    assert state.summary is not None and state.uncovered == 0


async def test_the_job_runner_drains(memory: Memory, jobs: CondenseJobs) -> None:
    await seed(memory, "A1", "u-ann", "luna", "drain me", "ok")
    await seed(memory, "B1", "u-bob", "luna", "and me", "ok")
    await memory.queue.condense_now("u-ann", "luna")
    await memory.queue.condense_now("u-bob", "luna")
    assert await jobs.sweep() == 2
    await jobs.drained()
    for user in ("u-ann", "u-bob"):
        assert (await memory.reading.summary(user, "luna")).uncovered == 0


async def test_only_a_dead_job_can_be_retried(memory: Memory, store: Store) -> None:
    await seed(memory, "A1", "u-ann", "luna", "hello", "hi")
    job = await memory.queue.condense_now("u-ann", "luna")
    assert job is not None
    with pytest.raises(NotFound, match="no dead job"):
        await memory.queue.retry_job(job.id)
    await store.write(lambda tx: tx.jobs.fail(job.id, "boom", retry_at_ms=None))
    assert [row.id for row in await memory.queue.list_jobs("dead")] == [job.id]
    revived = await memory.queue.retry_job(job.id)
    assert revived.status == "pending" and revived.id == job.id


async def test_search_sees_what_was_just_taken_in(memory: Memory) -> None:
    await seed(memory, "A1", "u-ann", "luna", "we planned the wedding in June", "how exciting")
    await memory.facts.add("u-ann", "luna", "Ann's wedding is in June")
    answer = await memory.admin.search("u-ann", "wedding")
    assert {item["kind"] for item in answer["results"]} == {"message", "fact"}
    only_facts = await memory.admin.search("u-ann", "wedding", kinds=("fact",))
    assert [item["kind"] for item in only_facts["results"]] == ["fact"]
    mentions = await memory.admin.mentions("wedding")
    assert [row["user_id"] for row in mentions["users"]] == ["u-ann"]


async def test_bindings_move_sessions_and_can_be_read_and_removed(memory: Memory) -> None:
    await seed(memory, "A1", "u-ann", "luna", "hello", "hi")
    moved = await memory.identity.bind("A1", "u-zoe", "luna")
    assert moved is not None and moved.user_id == "u-zoe" and moved.identity_source == "binding"
    assert await memory.identity.bind("NOT-YET", "u-zoe", "luna") is None  # it starts there when it comes
    assert len(await memory.reading.messages("u-zoe", "luna", 10)) == 2
    bound = await memory.identity.bind_channel("room-7", "u-zoe", "kai")
    assert bound.binding.user_id == "u-zoe" and bound.moved == []
    binding = await memory.identity.channel_binding("room-7")
    assert binding is not None and binding.character_id == "kai"
    unbound = await memory.identity.unbind_channel("room-7")
    assert unbound is not None and unbound.channel == "room-7"
    assert await memory.identity.unbind_channel("room-7") is None
    with pytest.raises(NotFound):
        await memory.identity.session("NOBODY")


async def test_following_a_run_binds_it_starts_its_session_and_can_be_undone(memory: Memory) -> None:
    with pytest.raises(InvalidField):
        await memory.follows.follow("A1", origin="manual", user_id="u-ann")
    joined = SessionEvent(kind="joined", agent_id="A1", channel="room", start_ms=START_MS)
    following = await memory.follows.follow(
        "A1", origin="join", user_id="u-ann", character_id="luna",
        base_system_messages=[{"role": "system", "content": "You are Luna."}], style="gemini", event=joined,
    )  # fmt: skip
    assert following.result == "created" and following.session is not None
    assert (following.session.user_id, following.session.identity_source) == ("u-ann", "binding")
    assert following.watch is not None and following.watch.refreshes and following.watch.style == "gemini"
    # Asked again (not by a platform event): the watch is updated, the session found as it is.
    again = await memory.follows.follow("A1", origin="manual", base_system_messages=[], persona="Luna")
    assert again.result == "updated" and again.session == following.session
    assert again.watch is not None and again.watch.persona == "Luna"
    assert await memory.follows.unfollow("A1") is True
    assert await memory.follows.unfollow("A1") is False


async def test_a_run_naming_no_user_warns_with_the_fix_in_neutral_terms(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    _raw, event = history("A9", "u-ann", "luna", "hello")
    # A platform that says nothing of where its labels go: the warning names the label keys.
    event.labels = {}
    await memory.accept_event(
        RawEvent(event_id="A9:history", event_type=103, body="{}", received_ms=1), event
    )
    (warning,) = [r.getMessage() for r in caplog.records if "names no user" in r.getMessage()]
    assert "Start agents with the labels 'user_id' (and 'character_id')" in warning
    assert "properties.labels" not in warning and "POST /v1/sessions/A9/bind" in warning


async def test_statistics_answer_not_found_for_strangers(memory: Memory) -> None:
    await seed(memory, "A1", "u-ann", "luna", "hello", "hi")
    assert (await memory.admin.user_stats("u-ann"))["sessions"] == 1
    assert (await memory.admin.character_stats("luna"))["sessions"] == 1
    assert "sessions" in await memory.admin.overall_stats()
    with pytest.raises(NotFound):
        await memory.admin.user_stats("nobody")
    with pytest.raises(NotFound):
        await memory.admin.character_stats("nobody")


async def test_purge_runs_retention_and_reports(memory: Memory, settings: Settings, store: Store) -> None:
    await seed(memory, "A1", "u-ann", "luna", "hello", "hi")
    report = await Retention(settings, store).purge_once()
    assert report.messages == 0  # nothing is covered by a summary yet, so nothing may go
    assert len(await memory.reading.messages("u-ann", "luna", 10)) == 2


async def test_recorded_events_can_be_applied_again(memory: Memory, store: Store) -> None:
    raw, event = history("A1", "u-ann", "luna", "hello", "hi")
    await memory.accept_event(raw, event)
    await store.write(lambda tx: tx.inbox.set_status(raw.event_id, "failed", "test"))
    [entry] = await memory.recorded_events(["failed", "partial"], 10)
    assert entry.event_id == raw.event_id
    outcome = await memory.reapply_event(raw, event)
    assert outcome.status == "done" and outcome.new_messages == 0  # already merged: nothing doubles
    assert await memory.recorded_events(["failed"], 10) == []
