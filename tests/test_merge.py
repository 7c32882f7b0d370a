"""Window merging: one transcript per agent run, nothing lost, nothing doubled."""

import asyncio
import itertools
import json
import random

import pytest
from conftest import agent_event, load_fixture, turns

from agent_memory.core.alignment import align
from agent_memory.core.domain import Session
from agent_memory.core.events import HistoryWindow, IncomingMessage
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.ingest.arrivals import Arrival, stored_values
from agent_memory.memory.ingest.merge import merge as merge_messages
from agent_memory.platforms.agora.events import parse_callback, session_event
from agent_memory.platforms.agora.payloads import AgentHistory
from agent_memory.settings import Settings
from agent_memory.store import open_store
from agent_memory.store.shared.messages import MESSAGE_COLUMNS

pytestmark = pytest.mark.postgres

LABELS = {"user_id": "u1", "character_id": "c1"}


@pytest.fixture
def ingestor():
    return Ingestor(Settings(summary_delay_s=3600))


async def merge(store, ingestor, agent_id, contents, labels=LABELS):
    event = session_event(
        AgentHistory.model_validate({"agent_id": agent_id, "labels": labels, "contents": contents})
    )

    def run(tx):
        session = ingestor.ensure_session(tx, event, 1_763_690_000_000)
        return merge_messages(tx, ingestor.settings, session, event.messages, 1_763_690_000_000)

    return await store.write(run)


async def transcript(store, agent_id):
    rows = await store.read(lambda view: view.messages.of_session(agent_id))
    return [row.content for row in rows]


@pytest.mark.parametrize(
    ("stored", "window", "expected"),
    [
        ("abc", "bcd", 1),
        ("abc", "abc", 0),
        ("abcd", "zab", -1),  # an older window arriving late
        ("abc", "xyz", None),
        ("", "abc", None),
        ("abab", "ab", 2),  # repeats: the latest consistent place
        ("aab", "abc", 1),
    ],
)
def test_align(stored, window, expected):
    assert align(list(stored), list(window)) == expected


def long_call():
    data = load_fixture("history/long_call_windows.json")
    return data["windows"], data["total_messages"]


def full_conversation():
    windows, _ = long_call()
    seen = []
    for window in windows:
        for message in window["contents"]:
            if message not in seen:
                seen.append(message)
    return [m["content"] for m in seen]


@pytest.mark.parametrize("order", ["in order", "reversed", "shuffled"])
async def test_sliding_windows_merge_into_one_exact_transcript(store, ingestor, order):
    windows, total = long_call()
    if order == "reversed":
        windows = windows[::-1]
    elif order == "shuffled":
        windows = windows[:]
        random.Random(7).shuffle(windows)
    for window in windows:
        await merge(store, ingestor, "LONG", window["contents"])
    assert await transcript(store, "LONG") == full_conversation()
    assert len(full_conversation()) == total == 80
    session = await store.read(lambda view: view.sessions.get("LONG"))
    assert session.message_count == 80
    assert session.gap_count == 0


async def test_windows_merged_by_two_instances_at_once_give_one_exact_transcript(store, db_path, ingestor):
    """Each window reaches both instances at once (a redelivery lands on the other one) while
    the next window races them: one agent run's merges queue behind each other, none doubles."""
    other = open_store(Settings(db_path=db_path))
    try:
        windows, total = long_call()
        for window, following in zip(windows, [*windows[1:], windows[-1]], strict=True):
            outcomes = await asyncio.gather(
                merge(store, ingestor, "LONG", window["contents"]),
                merge(other, ingestor, "LONG", window["contents"]),
                merge(other, ingestor, "LONG", following["contents"]),
            )
            assert all(outcome.status == "done" for outcome in outcomes)
        assert await transcript(other, "LONG") == full_conversation()
        session = await store.read(lambda view: view.sessions.get("LONG"))
        assert (session.message_count, session.gap_count) == (total, 0)
    finally:
        other.close()


async def test_redelivered_window_changes_nothing(store, ingestor):
    contents = turns(10)
    first = await merge(store, ingestor, "A", contents)
    again = await merge(store, ingestor, "A", contents)
    assert (first.new_messages, again.new_messages) == (10, 0)
    assert len(await transcript(store, "A")) == 10


async def test_text_only_poll_then_detailed_103_enriches_instead_of_doubling(store, ingestor):
    detailed = turns(6)
    detailed[3]["metadata"] = {
        "source": "llm",
        "interrupted": True,
        "original": "assistant line 3 and more",
        "interrupt_timestamp": 1_763_690_003_500,
    }
    bare = [{"role": m["role"], "content": m["content"]} for m in detailed[:4]]
    await merge(store, ingestor, "A", bare)
    outcome = await merge(store, ingestor, "A", detailed)
    assert outcome.new_messages == 2
    rows = await store.read(lambda view: view.messages.of_session("A"))
    assert [r.content for r in rows] == [m["content"] for m in detailed]
    assert [r.turn_id for r in rows] == [1, 1, 2, 2, 3, 3]
    assert rows[3].interrupted and rows[3].original == "assistant line 3 and more"
    assert rows[3].ts_ms == detailed[3]["timestamp"]


async def test_window_that_overlaps_nothing_records_a_gap(store, ingestor):
    messages = turns(100)
    await merge(store, ingestor, "A", messages[:32])
    outcome = await merge(store, ingestor, "A", messages[60:92])
    assert outcome.gap and outcome.new_messages == 32
    rows = await store.read(lambda view: view.messages.of_session("A"))
    assert len(rows) == 64
    assert [r.gap_before for r in rows].count(True) == 1 and rows[32].gap_before
    session = await store.read(lambda view: view.sessions.get("A"))
    assert session.gap_count == 1


async def test_older_window_without_overlap_goes_before_by_time(store, ingestor):
    messages = turns(100)
    await merge(store, ingestor, "A", messages[60:92])
    await merge(store, ingestor, "A", messages[:32])
    contents = await transcript(store, "A")
    assert contents == [m["content"] for m in messages[:32] + messages[60:92]]


async def test_repeated_contents_are_not_collapsed(store, ingestor):
    window = [
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "ok"},
    ]
    await merge(store, ingestor, "A", window[:3])
    await merge(store, ingestor, "A", window)
    assert await transcript(store, "A") == ["ok", "", "ok", "", "ok"]


async def test_every_split_of_a_conversation_into_overlapping_windows_merges_exactly(store, ingestor):
    messages = turns(40)
    for index, (start, size) in enumerate(itertools.product([0, 5, 17], [8, 20])):
        agent = f"S{index}"
        for window_start in range(start, 40, size // 2):
            await merge(
                store, ingestor, agent, messages[max(0, window_start - size // 2) : window_start + size]
            )
        await merge(store, ingestor, agent, messages[:size])
        expected = [m["content"] for m in messages[max(0, start - size // 2) :]]
        if start - size // 2 > 0:
            expected = [m["content"] for m in messages[:size]] + [
                m["content"] for m in messages[start - size // 2 :] if m not in messages[:size]
            ]
        got = await transcript(store, agent)
        assert len(got) == len(set(got)) == len(expected), agent
        assert got == sorted(got, key=lambda c: int(c.rsplit(" ", 1)[1])), agent


async def test_binding_moves_a_fallback_session_and_labels_win_later(store, ingestor):
    await merge(
        store, ingestor, "A", [{"role": "user", "content": "hi", "metadata": {"user": "42"}}], labels={}
    )
    session = await store.read(lambda view: view.sessions.get("A"))
    assert (session.user_id, session.identity_source) == ("rtc:42", "rtc")
    await store.write(lambda tx: ingestor.bind(tx, "A", "alice", "luna"))
    rows = await store.read(lambda view: view.messages.latest("alice", "luna", 10))
    assert [r.content for r in rows] == ["hi"]
    assert await store.read(lambda view: view.messages.latest("rtc:42", "default", 10)) == []


async def test_unreadable_contents_keep_the_raw_callback_and_say_so(store, ingestor):
    body = json.dumps(agent_event(103, "BAD", contents=5))
    raw, event = parse_callback(body, 1, follow=False)
    outcome = await store.write(lambda tx: ingestor.accept(tx, raw, event))
    assert outcome.status == "partial"
    row = await store.read(lambda view: view.inbox.get("BAD:103"))
    assert row.body == body and row.status == "partial" and "contents" in row.error


@pytest.mark.parametrize("seed", range(25))
async def test_random_windows_in_random_order_give_the_union_in_order(store, ingestor, seed):
    rng = random.Random(seed)
    messages = turns(120)
    if seed % 2:  # half the runs look like the bare history endpoint: role and content only
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    windows = []
    for _ in range(rng.randint(2, 9)):
        start = rng.randrange(0, 110)
        windows.append((start, min(120, start + rng.randint(4, 40))))
    covered = sorted({i for start, stop in windows for i in range(start, stop)})
    if seed % 2:
        windows.sort()  # without times, only arrival order can place windows: polls come in order
    else:
        rng.shuffle(windows)
    for start, stop in windows:
        await merge(store, ingestor, "R", messages[start:stop])
    assert await transcript(store, "R") == [messages[i]["content"] for i in covered]
    rows = await store.read(lambda view: view.messages.of_session("R"))
    # Continuity is known only where one window held both neighbours.
    breaks = [
        not any(start <= covered[i - 1] and covered[i] < stop for start, stop in windows)
        for i in range(1, len(covered))
    ]
    assert [r.gap_before for r in rows[1:]] == breaks
    session = await store.read(lambda view: view.sessions.get("R"))
    assert session.gap_count == sum(breaks)


async def test_message_ids_are_never_reused_after_the_newest_are_forgotten(store, ingestor):
    await merge(store, ingestor, "B", turns(4), labels={"user_id": "b", "character_id": "c"})
    await merge(store, ingestor, "A", turns(4, prefix="a "), labels={"user_id": "a", "character_id": "c"})
    highest = max(r.id for r in await store.read(lambda view: view.messages.of_session("A")))
    await store.write(lambda tx: tx.maintenance.forget("a", None))
    await merge(store, ingestor, "B2", turns(2, prefix="new "), labels={"user_id": "b", "character_id": "c"})
    fresh = await store.read(lambda view: view.messages.of_session("B2"))
    # A reused id would sit under a watermark that covered the forgotten messages.
    assert min(r.id for r in fresh) > highest


async def test_after_a_forget_a_window_keeps_only_what_was_said_after_it(store, ingestor):
    labels = {"user_id": "u-f", "character_id": "c"}
    early = HistoryWindow("F1", messages=[IncomingMessage("user", "said early")], labels=labels)
    await store.write(lambda tx: ingestor.merge_window(tx, early, 1_000))
    await store.write(lambda tx: tx.maintenance.forget("u-f", None))  # the run F1 is under way
    forgot = await store.read(lambda view: view.maintenance.forget_cutoff("u-f", "any character", "F1"))
    assert forgot is not None and forgot.run
    cutoff = forgot.at_ms
    said = [
        IncomingMessage("user", "said early"),  # undated, nothing after the forget before it
        IncomingMessage("assistant", "dated before", ts_ms=cutoff - 1000),
        IncomingMessage("user", "dated after", ts_ms=cutoff + 1000),
        IncomingMessage("assistant", "undated, after it"),
        IncomingMessage("user", "relayed after", seen_ms=cutoff + 2000),
    ]
    window = HistoryWindow("F1", messages=said, labels=labels)
    kept = ["dated after", "undated, after it", "relayed after"]
    for new in (3, 0):  # the same window again: what is stored is evidence, nothing doubles
        outcome = await store.write(lambda tx: ingestor.merge_window(tx, window, cutoff + 5000))
        assert (outcome.new_messages, outcome.forgotten, outcome.gap) == (new, 2, False)
        assert await transcript(store, "F1") == kept
    # A run the forget did not find is taken as begun after it: only its dated past is left out.
    later = HistoryWindow("F2", messages=said, labels=labels)
    outcome = await store.write(lambda tx: ingestor.merge_window(tx, later, cutoff + 5000))
    assert (outcome.new_messages, outcome.forgotten) == (4, 1)
    # Another user's windows are not touched.
    other = HistoryWindow("F3", messages=said, labels={"user_id": "u-other", "character_id": "c"})
    outcome = await store.write(lambda tx: ingestor.merge_window(tx, other, cutoff + 5000))
    assert (outcome.new_messages, outcome.forgotten) == (5, 0)


def test_a_new_rows_values_are_in_the_stores_column_order():
    # merge hands the store each new row as its values (no NewMessage dict per row): each value
    # must land in its own column, the flags as integers.
    item = Arrival(
        "user", "turn", "hello", 7, 1_000, 1_001, "asr", "4321", True, 1_500, "hello there", "fp-1",
        '{"x":1}', '[{"url":"u"}]', False,
    )  # fmt: skip
    session = Session(
        agent_id="A-COLS", user_id="u-cols", character_id="c-cols", identity_source="labels", status="running"
    )
    assert dict(zip(MESSAGE_COLUMNS, stored_values(item, session, 5, True, 2_000), strict=True)) == {
        "agent_id": "A-COLS", "user_id": "u-cols", "character_id": "c-cols", "seq": 5, "role": "user",
        "kind": "turn", "content": "hello", "turn_id": 7, "ts_ms": 1_000, "at_ms": 1_001, "source": "asr",
        "speaker": "4321", "interrupted": 1, "interrupt_ms": 1_500, "original": "hello there", "fp": "fp-1",
        "gap_before": 1, "extra": '{"x":1}', "created_ms": 2_000, "images": '[{"url":"u"}]',
    }  # fmt: skip
