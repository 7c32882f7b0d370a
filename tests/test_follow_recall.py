"""Memory that follows a running call: the real service on a real port against the fake Agora.

An agent started through the service (so that its system messages are known) talks; the
poller reads its history; the user's new turns are recalled for after a debounce and what the
agent does not hold yet is pushed with Agora's update endpoint. The poller is driven as in
test_live (paused scheduler, `poll`, `run_due_now`); the debounce's clock is the follower's
own, moved forward by the test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import TOKEN, live, poll, pushed_list, said, seed, watch_of

from agent_memory.core.clock import now_ms
from agent_memory.core.tokens import count_message_tokens
from agent_memory.platforms.agora.keys import FOLLOW, POLLER

pytestmark = pytest.mark.postgres

USER, CHARACTER = "u-follow", "luna"
OWN = [{"role": "system", "content": "Answer in two sentences."}]
DEBOUNCE_S = 60
# An earlier call: what the user said about their sister is too old for the start context
# (which keeps only the last two turns here), so only a recall brings it into the call.
EARLIER = (
    "I started pottery classes on Tuesdays.",
    "Pottery sounds relaxing.",
    "My sister Mara moved to Lisbon last spring to teach piano.",
    "That must be a big change for her.",
    "The weather here has been grey all week.",
    "Grey weeks are hard.",
    "I bought a new bike for the commute.",
    "A bike is a good idea.",
)
MARA = "My sister Mara moved to Lisbon last spring to teach piano."


class Call:
    """One running agent of the pair, and the clock of the follower's debounce."""

    def __init__(self, service: Any, fake: Any, agent_id: str) -> None:
        self.service = service
        self.fake = fake
        self.agent_id = agent_id
        self.turn = 0
        self.offset_ms = 0
        follow = service.server.app[FOLLOW]
        follow.clock = lambda: now_ms() + self.offset_ms

    async def says(self, *lines: str) -> None:
        """The user says each line (the agent answers it), and a poll reads the history."""
        items = []
        for line in lines:
            self.turn += 1
            # Said just now (a forget's cut-off leaves out what was said before it).
            pair = said(line, f"reply {self.turn}", start_ms=now_ms())
            for item in pair:
                item["turn_id"] = self.turn
            items.extend(pair)
        self.fake.say(self.agent_id, items)
        await poll(self.service)

    async def debounce_passes(self) -> None:
        """The debounce is over: a sweep pushes what waited for it."""
        self.offset_ms += DEBOUNCE_S * 1000 + 1
        await self.service.server.app[POLLER].run_due_now()


async def start_call(service: Any, fake: Any, name: str = "luna-follow", **extra: Any) -> Call:
    """The pair's earlier call is stored, then an agent is started through the service."""
    await seed(service, USER, CHARACTER, f"OLD-{name}", said(*EARLIER, start_ms=1_790_000_000_000))
    join = {
        "name": name,
        "properties": {
            "channel": f"room-{name}",
            "token": "rtc-token",
            "agent_rtc_uid": "0",
            "remote_rtc_uids": ["*"],
            "llm": {
                "url": "https://llm.example/v1/chat/completions",
                "max_history": 8,
                "system_messages": OWN,
                "api_key": "sk-caller",
                "params": {"model": "gpt-4o-mini"},
            },
        },
    }
    status, answer = await service.api(
        "POST", "/v1/agents", json={"user_id": USER, "character_id": CHARACTER, "join": join, **extra}
    )
    assert status == 201, answer
    assert MARA not in json.dumps(answer["system_messages"])  # not in the start context
    return Call(service, fake, answer["agent_id"])


async def follow_service(start_service: Any, fake: Any, **overrides: Any) -> Any:
    settings = {"context_recent_messages": 2, "follow_recall_debounce_s": DEBOUNCE_S, **overrides}
    return await live(start_service, fake, **settings)


async def stats(service: Any) -> dict[str, float]:
    """The follower's counters, as /metrics shows them."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with service.session.get(f"{service.url}/metrics", headers=headers) as resp:
        assert resp.status == 200
        text = await resp.text()
    prefix = "agent_memory_follow_recall_"
    found = {}
    for line in text.splitlines():
        if line.startswith(prefix) and "_total " in line:
            name, value = line.split(" ")
            found[name.removeprefix(prefix).removesuffix("_total")] = float(value)
    return found


def block_of(update: tuple[str, dict[str, Any]]) -> str:
    """The recalled block a push ends with."""
    return pushed_list(update)[-1]["content"]


async def test_new_user_turns_make_one_debounced_push_carrying_the_recalled_memory(start_service, fake):
    service = await follow_service(start_service, fake)
    call = await start_call(service, fake)

    await call.says("How is Mara getting on these days?")
    await call.says("Is she happy over there?")
    assert fake.updates == []  # the debounce is not over: nothing pushed yet
    assert (await stats(service))["debounced"] == 1

    await call.debounce_passes()
    assert len(fake.updates) == 1 and fake.updates[0][0] == call.agent_id
    pushed = pushed_list(fake.updates[0])
    # The agent's own messages, then its memory as a refresh sends it, then the recalled block.
    assert pushed[: len(OWN)] == OWN
    block = block_of(fake.updates[0])
    assert MARA in block and block.startswith("Memories recalled")
    assert count_message_tokens(block) <= service.settings.follow_recall_max_tokens
    # Nothing of the running call comes back to the agent that holds it.
    assert "How is Mara getting on" not in json.dumps(pushed)
    watch = await watch_of(service, call.agent_id)
    assert watch.last_pushed == pushed
    counted = await stats(service)
    assert counted["pushes"] == 1 and counted["memories_pushed"] >= 1 and counted["failed"] == 0

    # Another sweep with no new turn pushes nothing.
    await call.debounce_passes()
    assert len(fake.updates) == 1


async def test_a_second_turn_on_the_same_topic_pushes_nothing_again(start_service, fake):
    service = await follow_service(start_service, fake)
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    assert len(fake.updates) == 1 and MARA in block_of(fake.updates[0])

    await call.says("Is Mara still teaching piano in Lisbon?")
    await call.debounce_passes()
    assert len(fake.updates) == 1, "pushed again what the agent holds"
    assert (await stats(service))["skipped_repeat"] == 1

    # A new topic pushes the new memory, and the agent keeps the one it held (the update
    # replaces the whole list).
    await call.says("Did I ever tell you about my pottery classes?")
    await call.debounce_passes()
    assert len(fake.updates) == 2
    block = block_of(fake.updates[1])
    assert "pottery classes on Tuesdays" in block and MARA in block
    assert block.index("pottery classes") < block.index(MARA)  # newest first

    # A refresh (after a condense, or asked for) keeps the block the agent holds.
    status, answer = await service.api("POST", f"/v1/agents/{call.agent_id}/refresh")
    assert status == 200 and answer["system_messages"][-1]["content"] == block


async def test_the_block_keeps_within_its_budget_newest_first(start_service, fake):
    budget = 60  # the heading and one memory
    service = await follow_service(start_service, fake, follow_recall_max_tokens=budget)
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    await call.says("Did I ever tell you about my pottery classes?")
    await call.debounce_passes()
    assert len(fake.updates) == 2
    first, second = block_of(fake.updates[0]), block_of(fake.updates[1])
    assert MARA in first and count_message_tokens(first) <= budget
    # Both do not fit: the newer memory crowds the older out (the agent no longer holds it).
    assert "pottery classes on Tuesdays" in second and MARA not in second
    assert count_message_tokens(second) <= budget
    assert (await stats(service))["memories_pushed"] == 2


async def test_with_the_setting_off_new_turns_push_nothing(start_service, fake):
    service = await follow_service(start_service, fake, follow_recall=False)
    assert service.server.app[FOLLOW].settings.follow_recall is False
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    await call.says("Is she still teaching piano in Lisbon?")
    await call.debounce_passes()
    assert fake.updates == []
    counted = await stats(service)
    assert counted["pushes"] == 0 and counted["debounced"] == 0


async def test_an_agent_on_the_custom_llm_endpoint_gets_no_pushes(start_service, fake):
    service = await follow_service(start_service, fake, public_url="https://memory.example.com")
    call = await start_call(service, fake, memory_llm=True)  # recalled for at every turn already
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    await call.says("Is she still teaching piano in Lisbon?")
    await call.debounce_passes()
    assert fake.updates == []
    counted = await stats(service)
    assert counted["custom_llm"] == 1 and counted["pushes"] == 0


async def test_a_failed_update_is_counted_and_the_next_turn_tries_again(start_service, fake):
    service = await follow_service(start_service, fake)
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    fake.fail_next("/update", 503)
    await call.debounce_passes()
    assert fake.updates == [] and fake.count("/update") == 1
    counted = await stats(service)
    assert counted["failed"] == 1 and counted["pushes"] == 0
    assert (await watch_of(service, call.agent_id)).status == "watching"

    # The call goes on: the next turn on the topic pushes what never reached the agent.
    await call.says("Is she happy in Lisbon?")
    await call.debounce_passes()
    assert len(fake.updates) == 1 and MARA in block_of(fake.updates[0])
    counted = await stats(service)
    assert counted["pushes"] == 1 and counted["skipped_repeat"] == 0


async def rewatch(service: Any, call: Call) -> None:
    """Follow the agent again after a forget (which ended following it), with its system messages."""
    status, answer = await service.api(
        "POST",
        f"/v1/sessions/{call.agent_id}/watch",
        json={"user_id": USER, "character_id": CHARACTER, "system_messages": OWN, "max_history": 8},
    )
    assert status == 201 and answer["refresh_enabled"], answer


async def after_forget(service: Any, call: Call) -> None:
    """Memory said after the forget, about the same sister (then something else, so that the start
    context's last two turns leave her out); the call goes on about her."""
    later = said(
        "My sister Mara now runs a music school in Porto.", "How exciting.",
        "I need to fix my kitchen tap.", "Call a plumber.", start_ms=now_ms() + 1000,
    )  # fmt: skip
    await seed(service, USER, CHARACTER, "AFTER-FORGET", later)
    await call.says("What is Mara up to now?")
    await call.debounce_passes()


async def test_a_forget_mid_call_drops_what_is_held_and_nothing_pushed_after_carries_it(start_service, fake):
    service = await follow_service(start_service, fake)
    follow = service.server.app[FOLLOW]
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    assert len(fake.updates) == 1 and MARA in block_of(fake.updates[0])
    await call.says("Is she teaching piano?")  # waiting for its push when the forget comes

    status, _ = await service.api("DELETE", f"/v1/users/{USER}/characters/{CHARACTER}")
    assert status == 200
    assert call.agent_id not in follow._followed  # what was held for the pair is gone

    await rewatch(service, call)
    await after_forget(service, call)
    assert len(fake.updates) == 2
    pushed = json.dumps(pushed_list(fake.updates[1]))
    assert "music school in Porto" in pushed
    for before in ("Lisbon", "piano", "pottery", "How is Mara getting on"):
        assert before not in pushed, before


async def test_a_forget_made_by_another_instance_drops_the_block_before_any_push(start_service, fake):
    service = await follow_service(start_service, fake)
    call = await start_call(service, fake)
    await call.says("How is Mara getting on these days?")
    await call.debounce_passes()
    assert len(fake.updates) == 1 and MARA in block_of(fake.updates[0])

    # The forget goes straight to the database, as another instance's would: this one is not told.
    await service.store.write(lambda tx: tx.maintenance.forget(USER, CHARACTER))
    await rewatch(service, call)
    await call.says("Are you there?")  # its session starts again
    status, answer = await service.api("POST", f"/v1/agents/{call.agent_id}/refresh")
    assert status == 200 and "Lisbon" not in json.dumps(answer["system_messages"])

    await after_forget(service, call)
    assert "music school in Porto" in block_of(fake.updates[-1])
    for _, body in fake.updates[1:]:
        assert "Lisbon" not in json.dumps(body)
    assert (await stats(service))["dropped_by_forget"] >= 1
