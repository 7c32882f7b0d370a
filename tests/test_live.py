"""Live calls end to end: the real service on a real port against a fake Agora REST server.

The poller is driven deterministically: its scheduler is paused, every followed agent
is made due, and `Poller.run_due_now()` sweeps and waits. Condensing is driven the same
way through `CondenseJobs.run_due_now()` with the offline condenser (no OpenAI settings).
One test (the restart) lets the real schedulers run and waits for outcomes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import (
    agent_event,
    agora_settings,
    condense,
    conversation,
    counts,
    inbox_of,
    live,
    load_fixture,
    poll,
    pushed_list,
    session_of,
    stored,
    wait_for,
    watch_of,
)
from fakes.agora_server import FakeAgent

from agent_memory.platforms.agora.keys import POLLER

pytestmark = pytest.mark.postgres

BASE_MS = 1_795_000_000_000
HOUR_MS = 3_600_000


async def sweep(service: Any) -> None:
    """One sweep (due polls and due pushes) without making anything due."""
    await service.server.app[POLLER].run_due_now()


async def contents_of(service: Any, agent_id: str) -> list[str]:
    return [row.content for row in await stored(service, agent_id)]


async def pair_messages(service: Any, user: str, character: str) -> list[dict[str, Any]]:
    status, body = await service.api("GET", f"/v1/users/{user}/characters/{character}/messages?limit=1000")
    assert status == 200
    return body["messages"]


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


LABELS = {"user_id": "u-live", "character_id": "luna"}


# -- (a) 101 → polling → stored while running → 102 and 103 → nothing doubled --------------


async def test_call_is_followed_from_its_101_and_every_turn_is_kept(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEA0000000000000000001"
    fake.add_agent(agent, max_history=8)
    status, body = await service.callback(agent_event(101, agent, labels=LABELS))
    assert status == 200 and body.get("status", "done") == "done"
    watch = await watch_of(service, agent)
    assert watch is not None and watch.status == "watching" and watch.origin == "callback"

    full = conversation(30)
    # 30 messages in steps of at most 7, so each window of 8 overlaps what is stored.
    for upto in (5, 12, 19, 26, 30):
        fake.say(agent, full[len(fake.agents[agent].messages) : upto])
        await poll(service)
        assert await contents_of(service, agent) == texts(full[:upto])
    assert fake.count(f"/agents/{agent}/history") == 5

    # Everything is stored before the agent stops, in order, with its details.
    messages = await pair_messages(service, "u-live", "luna")
    assert texts(messages) == texts(full)
    assert [m["turn_id"] for m in messages] == [m["turn_id"] for m in full]
    assert [m["ts_ms"] for m in messages] == [m["timestamp"] for m in full]
    assert not any(m["gap_before"] for m in messages)
    session = await session_of(service, agent)
    assert session.status == "running" and session.message_count == 30

    # The agent stops: 102 ends following, the late 103 carries only the last 8.
    fake.stop(agent)
    status, _ = await service.callback(
        agent_event(102, agent, labels=LABELS, status="STOPPED", message="OK", stop_ts=1_795_000_100)
    )
    assert status == 200
    watch = await watch_of(service, agent)
    assert watch.status == "stopped" and "left" in watch.stop_reason
    status, _ = await service.callback(
        agent_event(103, agent, labels=LABELS, contents=full[-8:], stop_ts=1_795_000_100)
    )
    assert status == 200

    rows = await stored(service, agent)
    assert [row.content for row in rows] == texts(full)
    assert len({row.id for row in rows}) == 30
    session = await session_of(service, agent)
    assert session.status == "stopped" and session.message_count == 30
    assert session.gap_count == 0
    assert (await watch_of(service, agent)).status == "stopped"

    # Nothing polls a stopped agent any more.
    before = fake.count("/history")
    await poll(service)
    assert fake.count("/history") == before


async def test_long_call_fixture_windows_merge_into_the_whole_call(start_service, fake):
    recorded = load_fixture("history/long_call_windows.json")
    agent, size = recorded["agent_id"], recorded["max_history"]
    full: list[dict[str, Any]] = []
    for window, count in zip(recorded["windows"], recorded["polled_at_message_count"], strict=True):
        full.extend(window["contents"][len(full) - (count - size) :])
    assert len(full) == recorded["total_messages"]

    service = await live(start_service, fake)
    fake.add_agent(agent, max_history=size)
    await service.callback(agent_event(101, agent, labels=recorded["labels"]))
    for window, count in zip(recorded["windows"], recorded["polled_at_message_count"], strict=True):
        fake.say(agent, full[len(fake.agents[agent].messages) : count])
        assert fake.agents[agent].messages[-size:] == window["contents"]
        await poll(service)
    rows = await stored(service, agent)
    assert [row.content for row in rows] == texts(full)
    interrupted = [row for row in rows if row.interrupted]
    assert [row.turn_id for row in interrupted] == [9, 19, 29, 39]
    assert all(row.original and row.original.startswith(row.content) for row in interrupted)
    assert {row.speaker for row in rows if row.role == "user"} == {"1001"}

    await service.callback(agent_event(103, agent, labels=recorded["labels"], contents=full[-size:]))
    assert await contents_of(service, agent) == texts(full)
    session = await session_of(service, agent)
    assert session.message_count == 80 and session.gap_count == 0


async def test_101_without_agora_settings_is_not_followed(start_service):
    service = await start_service(summary_delay_s=3600)
    await service.callback(agent_event(101, "NOAGORA", labels=LABELS))
    assert await session_of(service, "NOAGORA") is not None
    assert await watch_of(service, "NOAGORA") is None


# -- (b) a gap ------------------------------------------------------------------------------


async def test_window_that_overlaps_nothing_records_a_gap_and_doubles_nothing(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEGAP00000000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    full = conversation(24, tag="gap")

    fake.say(agent, full[:6])
    await poll(service)
    # 12 new messages between two polls: the window (messages 10..17) misses 6..9.
    fake.say(agent, full[6:18])
    await poll(service)
    expected = texts(full[:6] + full[10:18])
    assert await contents_of(service, agent) == expected
    session = await session_of(service, agent)
    assert session.gap_count == 1 and session.message_count == 14
    rows = await stored(service, agent)
    assert [row.content for row in rows if row.gap_before] == ["gap user message 10"]

    # Polling goes on normally after the gap, and the 103 doubles nothing.
    fake.say(agent, full[18:24])
    await poll(service)
    await service.callback(agent_event(102, agent, labels=LABELS, status="STOPPED"))
    await service.callback(agent_event(103, agent, labels=LABELS, contents=full[-8:]))
    assert await contents_of(service, agent) == texts(full[:6] + full[10:24])
    session = await session_of(service, agent)
    assert session.gap_count == 1 and session.message_count == 20

    messages = await pair_messages(service, "u-live", "luna")
    assert [m["content"] for m in messages if m["gap_before"]] == ["gap user message 10"]
    status, context = await service.api("GET", "/v1/users/u-live/characters/luna/system-messages")
    assert status == 200
    recent = context["system_messages"][-1]["content"]
    assert "not recorded" in recent and "gap assistant message 23" in recent


async def test_repeated_idle_reminders_are_all_kept(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEIDLE0000000000000001"
    fake.add_agent(agent, max_history=4)
    await service.callback(agent_event(101, agent, labels=LABELS))
    full = conversation(2, tag="idle") + [
        {
            "role": "assistant",
            "content": "Are you still there?",
            "turn_id": 2 + index,
            "timestamp": BASE_MS + 30_000 * (index + 1),
            "metadata": {"source": "command"},
        }
        for index in range(6)
    ]
    for upto in (3, 6, 8):  # each window overlaps the stored part by at least one message
        fake.say(agent, full[len(fake.agents[agent].messages) : upto])
        await poll(service)
    rows = await stored(service, agent)
    assert [row.ts_ms for row in rows] == [m["timestamp"] for m in full]


# -- (c) 404, 429, 503 ----------------------------------------------------------------------


async def test_404_while_polling_stops_following_and_the_session(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVE404000000000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    fake.say(agent, conversation(4, tag="gone"))
    await poll(service)
    assert len(await stored(service, agent)) == 4

    fake.stop(agent)  # no 102 ever comes: the callback was lost
    await poll(service)
    watch = await watch_of(service, agent)
    assert watch.status == "stopped" and "404" in watch.stop_reason
    session = await session_of(service, agent)
    assert session.status == "stopped" and "not found" in session.stop_reason
    assert len(await stored(service, agent)) == 4

    requests = fake.count("/history")
    await poll(service)
    assert fake.count("/history") == requests


async def test_429_with_retry_after_is_retried_within_one_poll(start_service, fake):
    service = await live(start_service, fake, agora_max_retries=1)
    agent = "LIVE429000000000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    fake.say(agent, conversation(3, tag="busy"))
    fake.fail_next("/history", 429, times=1, retry_after=0)
    await poll(service)
    assert fake.count(f"/agents/{agent}/history") == 2
    assert await contents_of(service, agent) == texts(conversation(3, tag="busy"))
    watch = await watch_of(service, agent)
    assert watch.failures == 0 and watch.last_error is None and watch.polls == 1


async def test_failed_polls_back_off_and_polling_resumes(start_service, fake):
    service = await live(start_service, fake, poll_interval_s=10, agora_max_retries=0)
    agent = "LIVE503000000000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    full = conversation(8, tag="flaky")  # never more than one window: nothing is missed
    fake.say(agent, full[:4])

    fake.fail_next("/history", 503, times=1)
    await poll(service)
    watch = await watch_of(service, agent)
    assert watch.status == "watching" and watch.failures == 1
    assert "503" in watch.last_error
    # Doubled once: at least 0.8 × 20 s away, where a plain interval is at most 12 s.
    assert watch.next_poll_ms - watch.updated_ms >= 16_000
    assert await stored(service, agent) == []

    fake.fail_next("/history", 429, times=1)
    await poll(service)
    watch = await watch_of(service, agent)
    assert watch.failures == 2 and "429" in watch.last_error
    # Doubled again (40 s) but capped at 30 s, less the jitter: never a minute of lost turns.
    assert 24_000 <= watch.next_poll_ms - watch.updated_ms <= 36_000

    fake.say(agent, full[4:8])
    await poll(service)
    watch = await watch_of(service, agent)
    assert watch.failures == 0 and watch.last_error is None and watch.polls == 1
    assert watch.next_poll_ms - watch.updated_ms <= 12_000
    assert await contents_of(service, agent) == texts(full)


# -- (d) restart mid-call ---------------------------------------------------------------------


async def test_following_survives_a_restart_without_a_new_101(start_service, fake):
    settings = {"poll_interval_s": 0.05}  # the real schedulers run in this test
    agent = "LIVERESTART0000000000001"
    fake.add_agent(agent, max_history=8)
    full = conversation(18, tag="restart")

    first = await start_service(**agora_settings(fake, **settings))
    await first.callback(agent_event(101, agent, labels=LABELS))
    fake.say(agent, full[:6])
    await wait_for(lambda: has_stored(first, agent, 6))
    await first.session.close()
    await first.server.close()  # the poller stops, the store closes

    fake.say(agent, full[6:12])  # the call goes on while the service is down
    requests = fake.count("/history")
    second = await start_service(**agora_settings(fake, **settings))
    await wait_for(lambda: has_stored(second, agent, 12))
    assert fake.count("/history") > requests
    assert (await watch_of(second, agent)).status == "watching"

    fake.say(agent, full[12:18])
    await wait_for(lambda: has_stored(second, agent, 18))
    fake.stop(agent)
    await second.callback(agent_event(102, agent, labels=LABELS, status="STOPPED"))
    await second.callback(agent_event(103, agent, labels=LABELS, contents=full[-8:]))
    assert await contents_of(second, agent) == texts(full)
    session = await session_of(second, agent)
    assert session.gap_count == 0 and session.message_count == 18
    inbox = [await inbox_of(second, f"{agent}:{event_type}") for event_type in (101, 102, 103)]
    assert all(inbox) and sorted(inbox, key=lambda entry: entry.received_ms) == inbox


async def followed(service: Any) -> list[str]:
    """Every agent the service has followed (watching or not), read from the table itself."""
    rows = await service.store.read(
        lambda view: view.conn.execute("SELECT agent_id FROM watched_agents ORDER BY agent_id").fetchall()
    )
    return [row["agent_id"] for row in rows]


async def has_stored(service: Any, agent_id: str, count: int) -> bool:
    return len(await stored(service, agent_id)) >= count


# -- (e) POST /v1/agents: start with memory -------------------------------------------------


def join_body(name: str, **llm: Any) -> dict[str, Any]:
    return {
        "name": name,
        "properties": {
            "channel": f"room-{name}",
            "token": "rtc-token",
            "agent_rtc_uid": "0",
            "remote_rtc_uids": ["*"],
            "labels": {"team": "blue", "user_id": "someone-else"},
            "llm": {
                "url": "https://llm.example/v1/chat/completions",
                "max_history": 8,
                "system_messages": [{"role": "system", "content": "Answer in two sentences."}],
                **llm,
            },
        },
    }


async def remember(service: Any, user: str, character: str) -> None:
    """Earlier memory for the pair: a finished call and a pinned fact."""
    labels = {"user_id": user, "character_id": character}
    earlier = conversation(6, tag="earlier")
    status, _ = await service.callback(agent_event(103, f"OLD-{user}", labels=labels, contents=earlier))
    assert status == 200
    status, _ = await service.api(
        "POST", f"/v1/users/{user}/characters/{character}/facts",
        json={"text": "Alice has an orange tabby cat named Miso"},
    )  # fmt: skip
    assert status == 201


async def test_start_agent_joins_with_labels_and_memory_and_follows_it(start_service, fake):
    service = await live(start_service, fake)
    await remember(service, "u-e", "luna")
    persona = "You are Luna, a warm companion."
    status, memory = await service.api(
        "GET", "/v1/users/u-e/characters/luna/system-messages", params={"persona": persona}
    )
    assert status == 200

    body = join_body("luna-e1")
    status, answer = await service.api(
        "POST", "/v1/agents",
        json={"user_id": "u-e", "character_id": "luna", "persona": persona, "join": body},
    )  # fmt: skip
    assert status == 201, answer
    assert len(fake.joins) == 1
    sent = fake.joins[0]
    agent_id = answer["agent_id"]
    assert agent_id in fake.agents

    # Agora got the caller's body with our labels (ours win) and memory after its own messages.
    assert sent["name"] == "luna-e1" and sent["properties"]["channel"] == "room-luna-e1"
    assert sent["properties"]["remote_rtc_uids"] == ["*"]
    assert sent["properties"]["labels"] == {"team": "blue", "user_id": "u-e", "character_id": "luna"}
    llm = sent["properties"]["llm"]
    assert llm["url"] == body["properties"]["llm"]["url"] and llm["max_history"] == 8
    own = body["properties"]["llm"]["system_messages"]
    assert llm["system_messages"] == own + memory["system_messages"]
    assert llm["system_messages"][1]["content"] == persona
    assert "Miso" in llm["system_messages"][2]["content"]
    assert "earlier assistant message 5" in json.dumps(llm["system_messages"])

    # The answer: Agora's own answer and the list that was sent.
    assert answer["agora"] == {"agent_id": agent_id, "create_ts": fake.agents[agent_id].start_ts,
                               "status": "RUNNING"}  # fmt: skip
    assert answer["system_messages"] == llm["system_messages"]

    # Bound and followed.
    status, session = await service.api("GET", f"/v1/sessions/{agent_id}")
    assert status == 200
    assert session["session"]["user_id"] == "u-e" and session["session"]["character_id"] == "luna"
    assert session["session"]["status"] == "running"
    watch = await watch_of(service, agent_id)
    assert watch.status == "watching" and watch.origin == "join"
    assert watch.base_system_messages == own and watch.persona == persona

    now = conversation(4, tag="now", base_ms=BASE_MS + HOUR_MS)
    fake.say(agent_id, now)
    await poll(service)
    assert texts(await pair_messages(service, "u-e", "luna")) == texts(conversation(6, tag="earlier") + now)
    assert len(await stored(service, agent_id)) == 4


async def test_start_agent_without_agora_settings_is_503(start_service):
    service = await start_service(summary_delay_s=3600)
    status, answer = await service.api(
        "POST", "/v1/agents",
        json={"user_id": "u-e", "character_id": "luna", "join": join_body("luna-x")},
    )  # fmt: skip
    assert status == 503
    assert answer["error"]["code"] == "not_configured" and "AGORA_APP_ID" in answer["error"]["message"]
    assert await followed(service) == []


async def test_agora_refusing_the_join_is_a_clear_error_and_nothing_is_followed(start_service, fake):
    service = await live(start_service, fake)
    request = {"user_id": "u-e", "character_id": "luna", "join": join_body("luna-dup")}
    status, first = await service.api("POST", "/v1/agents", json=request)
    assert status == 201
    status, refused = await service.api("POST", "/v1/agents", json=request)
    assert status == 409  # the caller's to fix (another name), not a broken gateway
    assert refused["error"]["code"] == "agora_conflict"
    assert "409" in refused["error"]["message"] and "already running" in refused["error"]["message"]

    fake.fail_next("/join", 400)
    status, bad = await service.api("POST", "/v1/agents", json={**request, "join": join_body("luna-bad")})
    assert status == 502 and "400" in bad["error"]["message"]

    assert await followed(service) == [first["agent_id"]]
    assert (await counts(service))["sessions"] == 1


async def test_start_agent_rejects_a_bad_body_before_calling_agora(start_service, fake):
    service = await live(start_service, fake)
    status, answer = await service.api("POST", "/v1/agents", json={"user_id": "u-e", "join": {}})
    assert status == 422 and "character_id" in answer["error"]["message"]
    assert fake.joins == []


async def test_start_agent_keeps_refresh_when_its_101_arrives_first(start_service, fake):
    service = await live(start_service, fake)

    async def deliver_101(agent: FakeAgent) -> None:
        labels = {"user_id": "u-race", "character_id": "luna"}
        status, _ = await service.callback(agent_event(101, agent.agent_id, labels=labels))
        assert status == 200

    fake.on_join = deliver_101
    body = join_body("luna-race")
    status, answer = await service.api(
        "POST", "/v1/agents", json={"user_id": "u-race", "character_id": "luna", "join": body}
    )
    assert status == 201
    agent_id = answer["agent_id"]
    inbox = await service.store.read(lambda view: view.inbox.get(f"{agent_id}:101"))
    assert inbox is not None and inbox.status == "done"  # the 101 really came first
    own = body["properties"]["llm"]["system_messages"]
    watch = await watch_of(service, agent_id)
    assert watch.status == "watching" and watch.base_system_messages == own
    status, refreshed = await service.api("POST", f"/v1/agents/{agent_id}/refresh")
    assert status == 200, refreshed
    assert pushed_list(fake.updates[-1]) == refreshed["system_messages"]
    assert refreshed["system_messages"][: len(own)] == own


# A join body of the wrong shape is refused with 422 before anything is sent to Agora.
@pytest.mark.parametrize("where", ["system_messages", "properties", "labels", "llm"])
async def test_start_agent_rejects_a_malformed_join_body(start_service, fake, where):
    service = await live(start_service, fake)
    body = join_body(f"luna-bad-{where}")
    if where == "system_messages":
        body["properties"]["llm"]["system_messages"] = "You are Luna."
    elif where == "properties":
        body["properties"] = ["not", "an", "object"]
    else:
        body["properties"][where] = "not an object"
    status, answer = await service.api(
        "POST", "/v1/agents", json={"user_id": "u-e", "character_id": "luna", "join": body}
    )
    assert status == 422, answer
    assert fake.joins == []


# -- (f) live refresh -------------------------------------------------------------------------


async def start_agent(service: Any, user: str, name: str, persona: str | None = None) -> str:
    request: dict[str, Any] = {"user_id": user, "character_id": "luna", "join": join_body(name)}
    if persona:
        request["persona"] = persona
    status, answer = await service.api("POST", "/v1/agents", json=request)
    assert status == 201, answer
    return answer["agent_id"]


async def memory_now(
    service: Any, user: str, persona: str, exclude_agent_id: str | None = None
) -> list[dict[str, Any]]:
    params = {"persona": persona}
    if exclude_agent_id:
        params["exclude_agent_id"] = exclude_agent_id
    status, body = await service.api(
        "GET", f"/v1/users/{user}/characters/luna/system-messages", params=params
    )
    assert status == 200
    return body["system_messages"]


async def test_condensing_during_a_call_pushes_the_full_list_once_per_interval(start_service, fake):
    service = await live(start_service, fake)
    persona = "You are Luna."
    own = join_body("x")["properties"]["llm"]["system_messages"]
    agent = await start_agent(service, "u-f", "luna-f1", persona)
    full = conversation(18, tag="refresh")

    fake.say(agent, full[:6])
    await poll(service)
    assert fake.updates == []  # new turns alone push nothing
    await condense(service)
    # The agent holds all 6 (max_history 8): nothing to condense, nothing to push back.
    assert await service.store.read(lambda view: view.summaries.get("u-f", "luna")) is None
    fake.say(agent, full[6:12])
    await poll(service)
    await condense(service)
    summary = await service.store.read(lambda view: view.summaries.get("u-f", "luna"))
    assert summary is not None and summary.method == "offline" and summary.message_count == 12 - 8
    watch = await watch_of(service, agent)
    assert watch.push_due_ms is not None and watch.last_push_ms is None
    await sweep(service)

    assert len(fake.updates) == 1 and fake.updates[0][0] == agent
    first = pushed_list(fake.updates[0])
    # The running call's own turns are left out: the agent holds them already.
    assert first == own + await memory_now(service, "u-f", persona, exclude_agent_id=agent)
    assert "The most recent turns" not in json.dumps(first)
    assert first[1]["content"] == persona
    assert any(m["content"].startswith("Summary of your earlier") for m in first)
    watch = await watch_of(service, agent)
    assert watch.push_due_ms is None and watch.last_pushed == first

    # Two more condenses inside the interval: no update, one push waiting for the interval.
    for upto in (15, 18):
        fake.say(agent, full[len(fake.agents[agent].messages) : upto])
        await poll(service)
        await condense(service)
        await sweep(service)
        assert len(fake.updates) == 1
    watch = await watch_of(service, agent)
    assert watch.push_due_ms >= watch.last_push_ms + HOUR_MS

    # The interval passes (the clock is moved back for this agent): the waiting push goes.
    def an_hour_ago(tx: Any) -> None:  # the same SQL on either backend
        tx.conn.execute(
            f"UPDATE watched_agents SET last_push_ms = last_push_ms - {HOUR_MS}, "
            f"push_due_ms = push_due_ms - {HOUR_MS} WHERE agent_id = '{agent}'"
        )

    await service.store.write(an_hour_ago)
    await sweep(service)
    assert len(fake.updates) == 2
    second = pushed_list(fake.updates[1])
    assert second == own + await memory_now(service, "u-f", persona, exclude_agent_id=agent)
    # Newer memory (the summary now covers the call's later turns, up to the agent's window),
    # still without the turns.
    assert second != first and "refresh user message 8" in json.dumps(second)
    assert "refresh user message 10" not in json.dumps(second)
    assert "The most recent turns" not in json.dumps(second)

    # On demand: at once, inside the interval, the same full list.
    status, answer = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 200
    assert len(fake.updates) == 3
    assert pushed_list(fake.updates[2]) == answer["system_messages"] == second

    # Once the agent stopped there is nothing to refresh.
    await service.callback(agent_event(102, agent, status="STOPPED"))
    status, stopped = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 409 and "not running" in stopped["error"]["message"]
    assert len(fake.updates) == 3


async def test_condensing_during_a_call_starts_after_n_new_messages(start_service, fake):
    service = await live(
        start_service, fake, summary_delay_s=3600, summary_max_wait_s=3600, summary_max_messages=10
    )
    agent = await start_agent(service, "u-n", "luna-n1")
    full = conversation(12, tag="count")
    fake.say(agent, full[:6])
    await poll(service)
    await condense(service)
    await sweep(service)
    assert await service.store.read(lambda view: view.summaries.get("u-n", "luna")) is None
    assert fake.updates == []

    fake.say(agent, full[6:12])  # 12 new messages: over summary_max_messages, due at once
    await poll(service)
    await condense(service)
    summary = await service.store.read(lambda view: view.summaries.get("u-n", "luna"))
    # All but the 8 (max_history) the agent still holds itself.
    assert summary is not None and summary.message_count == 12 - 8
    await sweep(service)
    assert [agent_id for agent_id, _ in fake.updates] == [agent]


async def test_condense_pushes_into_every_running_agent_of_the_pair_only(start_service, fake):
    service = await live(start_service, fake)
    mine = await start_agent(service, "u-g1", "luna-g1")
    other = await start_agent(service, "u-g2", "luna-g2")
    # Past each agent's window (max_history 8), so that some of each call is condensed.
    mine_said, other_said = conversation(12, tag="mine"), conversation(10, tag="other")
    fake.say(mine, mine_said[:6])
    fake.say(other, other_said[:6])
    await poll(service)
    fake.say(mine, mine_said[6:])
    fake.say(other, other_said[6:])
    await poll(service)
    await condense(service)
    await sweep(service)
    assert sorted(agent for agent, _ in fake.updates) == sorted([mine, other])
    by_agent = {agent: json.dumps(pushed_list((agent, body))) for agent, body in fake.updates}
    assert "mine user message" in by_agent[mine] and "other" not in by_agent[mine]
    assert "other user message" in by_agent[other] and "mine" not in by_agent[other]


async def test_a_refresh_never_pushes_back_what_the_running_agent_still_holds(start_service, fake):
    service = await live(start_service, fake)
    window = 6  # the join's llm.max_history
    request = {
        "user_id": "u-held",
        "character_id": "luna",
        "join": join_body("luna-held", max_history=window),
    }
    status, answer = await service.api("POST", "/v1/agents", json=request)
    assert status == 201, answer
    agent = answer["agent_id"]
    assert (await watch_of(service, agent)).max_history == window
    call = conversation(20, tag="held")
    for upto in range(5, 21, 5):  # a long call, condensed as it goes
        fake.say(agent, call[upto - 5 : upto])
        await poll(service)
        await condense(service)
        status, _ = await service.api("POST", f"/v1/agents/{agent}/refresh")
        assert status == 200
        pushed = json.dumps(pushed_list(fake.updates[-1]))
        cut = max(upto - window, 0)
        held, older = call[cut:upto], call[:cut]
        assert not [m["content"] for m in held if m["content"] in pushed], "pushed back what the agent holds"
        # Older turns of the call may come back condensed.
        assert all(m["content"] in pushed for m in older), pushed
    # The call ends: what its agent held is condensed now.
    await service.callback(agent_event(102, agent, labels={"user_id": "u-held", "character_id": "luna"},
                                       status="STOPPED"))  # fmt: skip
    await condense(service)
    summary = await service.store.read(lambda view: view.summaries.get("u-held", "luna"))
    assert summary is not None and summary.message_count == len(call)
    assert call[-1]["content"] in summary.text


async def test_a_join_with_an_impossible_max_history_is_refused_before_agora(start_service, fake):
    service = await live(start_service, fake)
    request = {"user_id": "u-held", "character_id": "luna", "join": join_body("luna-bad", max_history=0)}
    status, answer = await service.api("POST", "/v1/agents", json=request)
    assert status == 422 and "max_history" in answer["error"]["message"], answer
    assert fake.agents == {}


async def test_refresh_of_an_agent_not_started_through_the_service_is_409(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEFOREIGN000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    status, answer = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 409
    assert answer["error"]["code"] == "conflict"
    assert "not started through this service" in answer["error"]["message"]
    assert fake.updates == []

    # A condense for the pair does not push into it either.
    fake.say(agent, conversation(4, tag="foreign"))
    await poll(service)
    await condense(service)
    await sweep(service)
    assert fake.updates == []

    status, answer = await service.api("POST", "/v1/agents/NOSUCHAGENT/refresh")
    assert status == 404


# -- (g) following by hand ----------------------------------------------------------------------


async def test_manual_watch_follows_and_binds_and_delete_stops(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEMANUAL00000000000001"
    fake.add_agent(agent, max_history=8)
    full = conversation(12, tag="manual")
    fake.say(agent, full[:5])

    status, answer = await service.api("POST", f"/v1/sessions/{agent}/watch", json={"user_id": "u-m"})
    assert status == 422 and await watch_of(service, agent) is None

    status, answer = await service.api(
        "POST", f"/v1/sessions/{agent}/watch", json={"user_id": "u-m", "character_id": "luna"}
    )
    assert status == 201
    assert answer == {"agent_id": agent, "following": True, "created": True, "refresh_enabled": False}
    await poll(service)
    status, session = await service.api("GET", f"/v1/sessions/{agent}")
    assert status == 200
    assert (session["session"]["user_id"], session["session"]["character_id"]) == ("u-m", "luna")
    assert session["session"]["identity_source"] == "binding"
    assert texts(await pair_messages(service, "u-m", "luna")) == texts(full[:5])

    status, again = await service.api(
        "POST", f"/v1/sessions/{agent}/watch", json={"user_id": "u-m", "character_id": "luna"}
    )
    assert status == 200 and again["created"] is False and again["following"] is True

    status, stopped = await service.api("DELETE", f"/v1/sessions/{agent}/watch")
    assert status == 200 and stopped == {"agent_id": agent, "stopped": True}
    watch = await watch_of(service, agent)
    assert watch.status == "stopped" and watch.stop_reason == "stopped by request"
    requests = fake.count("/history")
    fake.say(agent, full[5:12])
    await poll(service)
    assert fake.count("/history") == requests
    assert len(await stored(service, agent)) == 5
    status, stopped = await service.api("DELETE", f"/v1/sessions/{agent}/watch")
    assert status == 200 and stopped["stopped"] is False


async def test_manual_watch_with_system_messages_enables_refresh(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEMANUALREFRESH0000001"
    fake.add_agent(agent, max_history=8)
    own = [{"role": "system", "content": "You are Atlas, a hiking guide."}]
    status, answer = await service.api(
        "POST", f"/v1/sessions/{agent}/watch",
        json={"user_id": "u-h", "character_id": "atlas", "system_messages": own},
    )  # fmt: skip
    assert status == 201 and answer["refresh_enabled"] is True
    fake.say(agent, conversation(4, tag="trail"))
    await poll(service)
    status, refreshed = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 200
    assert pushed_list(fake.updates[-1]) == refreshed["system_messages"]
    assert refreshed["system_messages"][0] == own[0]
    # The call's own turns stay out of the refresh: the agent holds them already.
    assert "trail user message 2" not in json.dumps(refreshed["system_messages"])


async def test_manual_watch_of_a_finished_call_is_409(start_service, fake):
    service = await live(start_service, fake)
    await service.callback(agent_event(103, "LIVEDONE", labels=LABELS, contents=conversation(2)))
    status, answer = await service.api(
        "POST", "/v1/sessions/LIVEDONE/watch", json={"user_id": "u-live", "character_id": "luna"}
    )
    assert status == 409 and "already stopped" in answer["error"]["message"]


async def test_manual_watch_after_the_101_still_takes_the_system_messages(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVEAFTER101000000000001"
    fake.add_agent(agent, max_history=8)
    await service.callback(agent_event(101, agent, labels=LABELS))
    own = [{"role": "system", "content": "You are Luna."}]
    status, answer = await service.api("POST", f"/v1/sessions/{agent}/watch", json={"system_messages": own})
    assert status in (200, 201)
    assert answer["refresh_enabled"] is True and answer["following"] is True
    status, refreshed = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 200 and refreshed["system_messages"][0] == own[0]


async def test_manual_watch_can_resume_after_delete(start_service, fake):
    service = await live(start_service, fake)
    agent = "LIVERESUME00000000000001"
    fake.add_agent(agent, max_history=8)
    body = {"user_id": "u-r", "character_id": "luna"}
    assert (await service.api("POST", f"/v1/sessions/{agent}/watch", json=body))[0] == 201
    assert (await service.api("DELETE", f"/v1/sessions/{agent}/watch"))[0] == 200
    fake.say(agent, conversation(3, tag="resumed"))
    await poll(service)
    assert await stored(service, agent) == []  # not followed while stopped
    status, answer = await service.api("POST", f"/v1/sessions/{agent}/watch", json=body)
    assert status in (200, 201) and answer["following"] is True
    assert (await watch_of(service, agent)).status == "watching"
    await poll(service)
    assert await contents_of(service, agent) == texts(conversation(3, tag="resumed"))


@pytest.mark.parametrize("bare", [False, True], ids=["full-fields", "role-and-content-only"])
async def test_a_long_call_through_a_small_window_with_outages_and_a_restart(start_service, fake, bare):
    """400 messages through a 32-message window, interruptions, 429s and 503s, a restart
    halfway, then the late 102 and a 103 carrying only the last window: one exact transcript."""
    agent = "LONGCALL0000000000000000" + ("B" if bare else "F")
    fake.add_agent(agent, max_history=32)
    full = conversation(400, tag="long")
    for index, message in enumerate(full):
        if message["role"] == "assistant" and index % 14 == 1:
            message["metadata"] = {"source": "llm", "interrupted": True,
                                   "original": message["content"] + " and then more",
                                   "interrupt_timestamp": message["timestamp"] + 400}  # fmt: skip
    said = [{"role": m["role"], "content": m["content"]} for m in full] if bare else full
    service = await live(start_service, fake)
    await service.callback(agent_event(101, agent, labels=LABELS))
    step, position = 12, 0
    for round_number in range(400 // step + 1):
        if position == 200:  # a restart in the middle of the call
            await service.server.close()
            service = await live(start_service, fake)
        fake.say(agent, said[position : position + step])
        position = min(400, position + step)
        if round_number % 5 == 3:
            # An outage: this poll fails, the next one reads two steps at once (24 <= 32).
            fake.fail_next("/history", 503 if round_number % 2 else 429, times=1)
            await poll(service)
            continue
        await poll(service)
    await service.callback(agent_event(102, agent, labels=LABELS, status="STOPPED", message="OK"))
    await service.callback(agent_event(103, agent, labels=LABELS, contents=said[-32:]))
    rows = await stored(service, agent)
    assert [r.content for r in rows] == [m["content"] for m in full]
    session = await session_of(service, agent)
    assert (session.message_count, session.gap_count, session.status) == (400, 0, "stopped")
    interrupted = [r for r in rows if r.interrupted]
    if not bare:
        assert len(interrupted) == len([m for m in full if m["metadata"].get("interrupted")])
        assert all(r.original.endswith(" and then more") for r in interrupted)
    assert (await watch_of(service, agent)).status == "stopped"
