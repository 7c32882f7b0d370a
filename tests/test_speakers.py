"""A shared Agora channel with several speakers: each speaker's own words are theirs too.

The run's session (its labelled user) keeps every turn; a user turn whose `metadata.user` (the
speaker's RTC uid) is not the run's own speaker is also kept in `<agent_id>~<uid>`, under the
pair the label `user_id.<uid>` names (else `rtc:<uid>`), so recall and the call-start memory
of that speaker find it. Driven through the real service: signed 103 callbacks, and the poller
reading the fake Agora's history.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import agent_event, condense, deliver, live, poll, session_of, stored, wait_for
from test_api import GatedOpenAI
from test_retention import database_files

from agent_memory.web.keys import JOBS

pytestmark = pytest.mark.postgres

OWNER, GUEST, CHARACTER = "u-host", "u-guest", "luna"
OWNER_UID, GUEST_UID = "1001", "1002"
AGENT = "SHARED-1"
# Words only one speaker says, to find where each is kept.
OWNER_WORDS = "my cello Wexfordian needs new strings"
GUEST_WORDS = "I collect Quorvaline teapots from Kyoto"
GUEST_MORE = "my Quorvaline teapot cracked last week"
START_MS = 1_763_690_000_000
STOP_S = 1_763_690_100


def line(role: str, content: str, turn: int, uid: str | None = None) -> dict[str, Any]:
    """One message of a shared call at its turn (ms timestamps); a user line names its speaker."""
    item: dict[str, Any] = {
        "role": role,
        "content": content,
        "turn_id": turn,
        "timestamp": START_MS + turn * 10_000 + (0 if role == "user" else 5000),
        "metadata": {"source": "asr", "user": uid} if uid else {"source": "llm"},
    }
    return item


CALL = [
    line("assistant", "Hello both of you!", 0),
    line("user", OWNER_WORDS, 1, OWNER_UID),
    line("assistant", "Strings, noted.", 1),
    line("user", GUEST_WORDS, 2, GUEST_UID),
    line("assistant", "What a lovely hobby.", 2),
    line("user", GUEST_MORE, 3, GUEST_UID),
    line("assistant", "Oh no, sorry to hear it.", 3),
    line("user", "shall we stop here", 4, OWNER_UID),
    line("assistant", "Goodbye!", 4),
]
LABELS = {"user_id": OWNER, "character_id": CHARACTER, f"user_id.{GUEST_UID}": GUEST}


def history(contents: list[dict[str, Any]], labels: dict[str, str], notice: str = "n-103") -> dict[str, Any]:
    return agent_event(103, AGENT, notice_id=notice, labels=labels, contents=contents, stop_ts=STOP_S)


async def held(service: Any, user: str) -> list[str]:
    status, body = await service.api("GET", f"/v1/users/{user}/characters/{CHARACTER}/messages")
    assert status == 200, body
    return [message["content"] for message in body["messages"]]


async def recalled(service: Any, user: str, query: str) -> str:
    status, body = await service.api(
        "GET", f"/v1/users/{user}/characters/{CHARACTER}/recall", params={"q": query}
    )
    assert status == 200, body
    return json.dumps(body, ensure_ascii=False)


async def test_a_guest_labelled_by_uid_recalls_their_own_words_not_the_owners(service) -> None:
    await deliver(service, history(CALL, LABELS), expect="done")
    # The run's session keeps the whole call, under its labelled user.
    assert [m.content for m in await stored(service, AGENT)] == [m["content"] for m in CALL]
    assert (await session_of(service, AGENT)).rtc_uid == OWNER_UID  # type: ignore[union-attr]
    # The guest's own words are theirs: kept in `<agent>~<uid>`, and nothing of the owner's.
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    companion = await session_of(service, f"{AGENT}~{GUEST_UID}")
    assert companion is not None
    assert (companion.user_id, companion.character_id, companion.identity_source) == (
        GUEST,
        CHARACTER,
        "labels",
    )
    assert (companion.status, companion.stop_ms) == ("stopped", STOP_S * 1000)
    found = await recalled(service, GUEST, "Quorvaline teapots")
    assert "Quorvaline" in found and "Wexfordian" not in found
    assert "Wexfordian" in await recalled(service, OWNER, "cello Wexfordian strings")
    # The session's key is a plain URL path segment: it is read (and bound) without encoding.
    status, body = await service.api("GET", f"/v1/sessions/{AGENT}~{GUEST_UID}")
    assert status == 200 and body["session"]["user_id"] == GUEST, body


async def test_redelivery_and_reordering_change_nothing(service) -> None:
    labels = LABELS
    # A later window first (the guest's second line, then the owner's), the whole call after,
    # then the whole call again under another notice id: nothing is doubled or lost.
    await deliver(service, history(CALL[5:], labels, "n-tail"), expect="done")
    await deliver(service, history(CALL, labels, "n-full"), history(CALL, labels, "n-again"), expect="done")
    await deliver(service, history(CALL, labels, "n-full"), expect="duplicate")
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    owner = await held(service, OWNER)
    assert sorted(owner) == sorted(m["content"] for m in CALL)


async def test_an_unlabelled_guest_is_kept_under_their_rtc_uid_and_can_be_bound(service, caplog) -> None:
    labels = {"user_id": OWNER, "character_id": CHARACTER}
    with caplog.at_level("WARNING"):
        await deliver(service, history(CALL, labels), history(CALL, labels, "n-again"), expect="done")
    warned = [r for r in caplog.records if "speaker uid" in r.getMessage()]
    assert len(warned) == 1 and GUEST_WORDS not in warned[0].getMessage()
    assert await held(service, f"rtc:{GUEST_UID}") == [GUEST_WORDS, GUEST_MORE]
    status, body = await service.api("GET", "/v1/stats")
    assert status == 200 and body["unidentified_sessions"]["count"] == 1, body
    # Moved later to the guest's user, like any session.
    status, body = await service.api(
        "POST", f"/v1/sessions/{AGENT}~{GUEST_UID}/bind", json={"user_id": GUEST, "character_id": CHARACTER}
    )
    assert status == 200 and body["session"]["user_id"] == GUEST, body
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    assert await held(service, f"rtc:{GUEST_UID}") == []


async def test_a_single_speaker_call_has_no_speaker_session(service) -> None:
    alone = [item for item in CALL if item["metadata"].get("user") != GUEST_UID]
    await deliver(service, history(alone, LABELS), expect="done")
    assert await session_of(service, f"{AGENT}~{OWNER_UID}") is None
    assert await held(service, OWNER) == [m["content"] for m in alone]
    assert await held(service, GUEST) == []


async def test_a_label_naming_the_owners_uid_keeps_the_owner_out_of_speaker_sessions(service) -> None:
    # The guest speaks first; the label says which uid is the run's own user.
    first = [CALL[0], CALL[3], CALL[4], CALL[1], CALL[2]]
    labels = {**LABELS, f"user_id.{OWNER_UID}": OWNER}
    await deliver(service, history(first, labels), expect="done")
    assert await held(service, GUEST) == [GUEST_WORDS]
    assert await session_of(service, f"{AGENT}~{OWNER_UID}") is None


async def test_forgetting_the_guest_takes_their_words_from_the_shared_call_down_to_the_bytes(
    service, db_path
) -> None:
    await deliver(service, history(CALL, LABELS), expect="done")
    # The owner's memory was condensed from the whole call, the guest's words with it.
    status, _ = await service.api("POST", f"/v1/users/{OWNER}/characters/{CHARACTER}/condense")
    assert status in (200, 202)
    await condense(service)
    status, before = await service.api("GET", f"/v1/users/{OWNER}/characters/{CHARACTER}/summary")
    assert status == 200 and "Quorvaline" in json.dumps(before), before
    status, body = await service.api("DELETE", f"/v1/users/{GUEST}")
    assert status == 200, body
    # Their own session and their two turns in the owner's; the call's raw callback too.
    assert (body["deleted"]["sessions"], body["deleted"]["messages"]) == (1, 2 + 2), body
    assert body["deleted"]["raw_callbacks"] >= 1, body
    assert await held(service, GUEST) == []
    assert await session_of(service, f"{AGENT}~{GUEST_UID}") is None
    owner = await held(service, OWNER)
    assert owner == [m["content"] for m in CALL if m["metadata"].get("user") != GUEST_UID]
    # What was learned from the call goes, and is learned again from what is left.
    status, reset = await service.api("GET", f"/v1/users/{OWNER}/characters/{CHARACTER}/summary")
    assert status == 200 and reset["summary"] is None, reset
    status, _ = await service.api("POST", f"/v1/users/{OWNER}/characters/{CHARACTER}/condense")
    assert status in (200, 202)
    await condense(service)
    status, after = await service.api("GET", f"/v1/users/{OWNER}/characters/{CHARACTER}/summary")
    assert status == 200 and "Quorvaline" not in json.dumps(after) and "Wexfordian" in json.dumps(after)
    status, found = await service.api(
        "GET", f"/v1/users/{OWNER}/characters/{CHARACTER}/recall", params={"q": "Quorvaline teapots"}
    )
    assert status == 200 and found["memories"] == [], found
    # The call delivered again (a retry under another notice id): the guest's words stay out.
    await deliver(service, history(CALL, LABELS, "n-retry"))
    assert await held(service, OWNER) == owner
    assert await held(service, GUEST) == []
    data = database_files(db_path)
    assert OWNER_WORDS.encode() in data  # the scan sees what is still held
    for words in (GUEST_WORDS, GUEST_MORE):
        assert words.encode() not in data, words


# The owner had no summary yet, so its watermark cannot tell that the condense under way read
# words that are gone: the reset does, and the job runs again from what is left.
async def test_a_condense_under_way_when_the_guest_is_forgotten_keeps_none_of_their_words(
    start_service, db_path
) -> None:
    async with GatedOpenAI() as llm:
        # What a model makes of the whole call, the guest's words with it.
        llm.script(
            {"summary": f"Two speakers; one said: {GUEST_WORDS}.",
             "add_facts": [{"text": GUEST_MORE, "scope": "user"}], "update_facts": [], "remove_facts": []}
        )  # fmt: skip
        service = await start_service(openai_base_url=llm.base_url, openai_api_key="test", job_sweep_s=0.05)
        await deliver(service, history(CALL, LABELS), expect="done")
        status, _ = await service.api("POST", f"/v1/users/{OWNER}/characters/{CHARACTER}/condense")
        assert status == 202
        await asyncio.wait_for(llm.arrived.wait(), 10)  # the owner's job has read the whole call
        assert GUEST_WORDS in llm.sent_text(0)
        status, body = await service.api("DELETE", f"/v1/users/{GUEST}")
        assert status == 200, body
        llm.release.set()

        async def covered() -> dict[str, Any] | None:
            _, body = await service.api("GET", f"/v1/users/{OWNER}/characters/{CHARACTER}/summary")
            return body if body["summary"] is not None and body["messages_not_yet_covered"] == 0 else None

        summary = await wait_for(covered, 60, failure="the owner was not condensed")
        await asyncio.wait_for(service.server.app[JOBS].drained(), 10)
        facts = await service.store.read(lambda view: view.facts.of_pair(OWNER, CHARACTER))
        held_now = json.dumps([summary, [fact.text for fact in facts]])
        assert "Quorvaline" not in held_now, held_now
        assert llm.calls == 2 and "Quorvaline" not in llm.sent_text(1)
    data = database_files(db_path)
    assert OWNER_WORDS.encode() in data  # the scan sees what is still held
    for words in (GUEST_WORDS, GUEST_MORE):
        assert words.encode() not in data, words


async def test_forgetting_the_owner_leaves_nothing_of_the_owner_with_the_guest(service, db_path) -> None:
    await deliver(service, history(CALL, LABELS), expect="done")
    status, body = await service.api("DELETE", f"/v1/users/{OWNER}")
    assert status == 200, body
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    data = database_files(db_path)
    assert OWNER_WORDS.encode() not in data
    assert GUEST_WORDS.encode() in data  # the scan sees what is still held


async def test_stats_count_a_shared_call_and_each_spoken_turn_once(service) -> None:
    await deliver(service, history(CALL, LABELS), expect="done")
    status, owner = await service.api("GET", f"/v1/users/{OWNER}/stats")
    assert status == 200 and owner["sessions"] == 1, owner
    for path, users in (("/v1/stats", "users"), (f"/v1/characters/{CHARACTER}/stats", "active_users")):
        status, body = await service.api("GET", path)
        assert status == 200, body
        # The guest's own session holds copies of turns the call's session holds: one call,
        # each turn once, and both speakers are users.
        assert (body["sessions"], body[users]) == (1, 2), body
        assert body["messages"] == body["messages_stored"] == len(CALL), body
        assert body["user_messages"] == 4 and body["talk_ms"] == owner["talk_ms"], body
    _, overall = await service.api("GET", "/v1/stats")
    top = overall["top_characters"][0]
    assert (top["sessions"], top["messages"], top["active_users"]) == (1, len(CALL), 2), top
    # A user's own figures are their own session's: the guest said two turns.
    status, guest = await service.api("GET", f"/v1/users/{GUEST}/stats")
    assert (guest["sessions"], guest["messages"], guest["user_messages"]) == (1, 2, 2), guest
    # With the call's session gone (its owner forgotten), the guest's is the only copy: it counts.
    status, _ = await service.api("DELETE", f"/v1/users/{OWNER}")
    assert status == 200
    _, overall = await service.api("GET", "/v1/stats")
    assert (overall["sessions"], overall["messages"], overall["users"]) == (1, 2, 1), overall


async def test_polled_windows_keep_each_speakers_words_too(start_service, fake) -> None:
    service = await live(start_service, fake)
    fake.add_agent(AGENT, max_history=4)
    status, _ = await service.callback(agent_event(101, AGENT, labels=LABELS))
    assert status == 200
    # The history window slides (4 messages): polls overlap, and the last one comes again as the 103.
    for end in (3, 5, 7, 9):
        fake.say(AGENT, CALL[len(fake.agents[AGENT].messages) : end])
        await poll(service)
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    await deliver(service, history(CALL, LABELS), expect="done")
    assert await held(service, GUEST) == [GUEST_WORDS, GUEST_MORE]
    assert [m.content for m in await stored(service, AGENT)] == [m["content"] for m in CALL]
