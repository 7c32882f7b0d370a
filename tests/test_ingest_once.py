"""A callback applied exactly once whatever races it, and stored alike on both backends (issue 28:
PostgreSQL reads the event's session with its inbox check and sends the pair's version with its
COPY, so these guard what that must not change)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from conftest import Service, agent_event, encode, turns

from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.ingest.sessions import Stored
from agent_memory.platforms.agora.events import parse_callback
from agent_memory.settings import Settings
from agent_memory.store import open_store
from agent_memory.web.keys import MEMORY

pytestmark = pytest.mark.postgres

LABELS = {"user_id": "u-once", "character_id": "c"}


async def test_one_callback_delivered_many_times_at_once_is_applied_once(service: Service) -> None:
    envelope = agent_event(103, "A-ONCE", labels=LABELS, contents=turns(32))
    answers = await asyncio.gather(*(service.callback(envelope) for _ in range(8)))
    assert all(status == 200 for status, _ in answers), answers
    assert sorted(body["status"] for _, body in answers) == ["done"] + ["duplicate"] * 7
    session = await service.store.read(lambda view: view.sessions.get("A-ONCE"))
    messages = await service.store.read(lambda view: view.messages.of_session("A-ONCE"))
    assert session is not None and session.message_count == len(messages) == 32


async def test_a_runs_transcript_redelivered_under_new_ids_at_once_is_merged_once(service: Service) -> None:
    """Each delivery is a different event (its own inbox row) of one run: they take turns on the
    run's lock, and only the first stores the messages."""
    contents = turns(32)
    envelopes = [
        agent_event(103, "A-MERGED", notice_id=f"A-MERGED:{number}", labels=LABELS, contents=contents)
        for number in range(6)
    ]
    answers = await asyncio.gather(*(service.callback(envelope) for envelope in envelopes))
    assert [body["status"] for _, body in answers] == ["done"] * 6, answers
    assert sorted(body["new_messages"] for _, body in answers) == [0] * 5 + [32]
    messages = await service.store.read(lambda view: view.messages.of_session("A-MERGED"))
    session = await service.store.read(lambda view: view.sessions.get("A-MERGED"))
    assert session is not None and session.message_count == len(messages) == 32
    assert [message.seq for message in messages] == list(range(32))


async def test_callbacks_racing_a_forget_of_their_user_leave_no_part_of_a_run(service: Service) -> None:
    """A forget among a user's callbacks, round after round: each callback is applied whole before
    it (and forgotten with the rest) or after it (what was said before it left out), never half."""
    memory = service.server.app[MEMORY]
    labels = {"user_id": "u-forget", "character_id": "c"}
    runs = [f"F{round_}-{k}" for round_ in range(4) for k in range(6)]
    forgotten = 0
    for round_ in range(4):
        mine = runs[6 * round_ : 6 * round_ + 6]
        sends = [
            asyncio.ensure_future(service.callback(agent_event(103, agent, labels=labels, contents=turns(8))))
            for agent in mine
        ]
        # The forget starts once the first of them is stored, the others under way.
        while not await service.store.read(lambda view, mine=mine: any(map(view.sessions.get, mine))):
            await asyncio.sleep(0.001)
        receipt = await memory.admin.forget("u-forget", None)
        forgotten += receipt.get("messages", 0)
        answers = await asyncio.gather(*sends)
        assert all(status == 200 and body["status"] == "done" for status, body in answers), answers

    assert forgotten > 0  # the forgets deleted callbacks applied before them

    def held(view: Any) -> list[tuple[str, int, int]]:
        sessions = [view.sessions.get(agent) for agent in runs]
        return [
            (s.agent_id, s.message_count, len(view.messages.of_session(s.agent_id))) for s in sessions if s
        ]

    # What the last forget did not delete was said before it: left out, so every run holds nothing.
    assert all(count == stored == 0 for _, count, stored in await service.store.read(held))
    assert await service.store.read(lambda view: view.messages.after("u-forget", "c", 0, 100)) == []


async def test_a_cut_off_read_ahead_for_another_pair_than_the_sessions_is_not_used(store: Any) -> None:
    """The forget cut-off read with the inbox check is for the pair the labels name: when the
    session ends up under another pair, that pair's cut-off is read."""
    await store.write(lambda tx: tx.maintenance.forget("u-forgotten", "c"))
    envelope = agent_event(
        103, "A-AHEAD", labels={"user_id": "u-forgotten", "character_id": "c"}, contents=turns(2)
    )
    _, event = parse_callback(encode(envelope), 1_763_700_000_000, follow=False)
    ingestor = Ingestor(Settings(db_path=":memory:"))
    ahead = Stored(None, ("u-elsewhere", "c"), None)  # as if read for a pair it did not end under
    session, cutoff = await store.write(
        lambda tx: ingestor.sessions.session_to_write(tx, event, 1_763_700_000_000, ahead)
    )
    assert (session.user_id, cutoff is not None) == ("u-forgotten", True)


# Text a literal or a COPY row could get wrong: quotes, backslashes, tabs and newlines, a percent
# sign (a placeholder's), non-ASCII, and what looks like the next statement.
AWKWARD = ["it's 100% \\ back\\slash", 'tab\there, "quoted"\nnext line', "日本語 — ü; SELECT 1", "%s %% ?"]


def events() -> list[bytes]:
    """Callbacks of two pairs: new runs, a run's transcript again (longer), one of another pair."""
    awkward = turns(8)
    for message, text in zip(awkward, AWKWARD * 2, strict=True):
        message["content"] = text
    awkward[3]["metadata"] = {"source": "llm", "interrupted": True, "original": "it's \\ cut"}
    other = {"user_id": "u-other", "character_id": "d"}
    return [
        encode(agent_event(103, "R-1", labels=LABELS, contents=turns(20))),
        encode(agent_event(103, "R-2", labels=LABELS, contents=awkward)),
        encode(agent_event(103, "R-1", notice_id="R-1:again", labels=LABELS, contents=turns(26))),
        encode(agent_event(103, "R-3", labels=other, contents=turns(6, prefix="other "))),
        encode(agent_event(103, "R-1", labels=LABELS, contents=turns(20))),  # a duplicate
    ]


def stored_rows(view: Any) -> dict[str, list[dict[str, Any]]]:
    """What ingest stored, without what the clock or the database assigns (ids, times)."""
    runs = ("R-1", "R-2", "R-3")
    messages = [asdict(m) for agent_id in runs for m in view.messages.of_session(agent_id)]
    sessions = [asdict(s) for s in map(view.sessions.get, runs) if s is not None]
    inbox = [asdict(e) for e in map(view.inbox.get, ("R-1:103", "R-2:103", "R-1:again", "R-3:103")) if e]
    for row in messages:
        del row["id"]
    for row in sessions:
        del row["first_seen_ms"], row["updated_ms"]
    return {"messages": messages, "sessions": sessions, "inbox": inbox}


async def test_both_backends_store_the_same_rows(tmp_path: Path, pg_cluster: Any) -> None:
    stores = {
        "sqlite": open_store(Settings(db_path=tmp_path / "memory.db")),
        "postgres": open_store(Settings(db_path=pg_cluster.database())),
    }
    try:
        outcomes: dict[str, list[tuple[str, int]]] = {}
        ingestor = Ingestor(Settings(db_path=tmp_path / "unused.db"))
        for name, store in stores.items():
            outcomes[name] = []
            for body in events():
                raw, event = parse_callback(body, 1_763_700_000_000, follow=False)
                outcome = await store.write(lambda tx, raw=raw, event=event: ingestor.accept(tx, raw, event))
                outcomes[name].append((outcome.status, outcome.new_messages))
        expected = [("done", 20), ("done", 8), ("done", 6), ("done", 6), ("duplicate", 0)]
        assert outcomes["sqlite"] == outcomes["postgres"] == expected
        rows = {name: await store.read(stored_rows) for name, store in stores.items()}
        assert len(rows["sqlite"]["messages"]) == 40
        assert [
            row["content"] for row in rows["sqlite"]["messages"] if row["agent_id"] == "R-2"
        ] == AWKWARD * 2
        assert rows["sqlite"] == rows["postgres"]
    finally:
        for store in stores.values():
            store.close()
