"""The platform-neutral call helpers (platforms/calls.py): session keys, identity, transcripts, call start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_memory.core.events import IncomingMessage
from agent_memory.memory.service import Memory
from agent_memory.platforms.calls import (
    CallIdentity,
    CallTranscript,
    call_identity,
    e164,
    session_key,
    start_memory,
    store_transcript,
)
from agent_memory.settings import Settings
from agent_memory.store import open_store

pytestmark = pytest.mark.postgres

START_MS = 1_763_690_000_000


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(phone_identity=True)


@pytest.fixture
async def memory(settings: Settings) -> AsyncIterator[Memory]:
    store = open_store(settings)
    try:
        yield Memory(settings, store)
    finally:
        store.close()


def said(*lines: str, start_ms: int = START_MS) -> list[IncomingMessage]:
    return [
        IncomingMessage(role="user" if i % 2 == 0 else "assistant", content=line, ts_ms=start_ms + i * 1000)
        for i, line in enumerate(lines)
    ]


def transcript(call_id: str, identity: CallIdentity, *lines: str, **fields: Any) -> CallTranscript:
    return CallTranscript(
        platform="vapi",
        call_id=call_id,
        event="end-of-call-report",
        identity=identity,
        messages=said(*lines),
        **fields,
    )


def test_session_keys_are_namespaced_per_platform() -> None:
    assert session_key("vapi", "abc") == "vapi:abc"
    assert session_key("vapi", "abc") != session_key("retell", "abc")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("+14155550123", "+14155550123"),
        ("+1 (415) 555-0123", "+14155550123"),
        ("0044 20 7946 0958", "+442079460958"),
        ("4155550123", None),  # no country code: not E.164, so never a user
        ("sip:alice@example.com", None),
        ("+0123456789", None),
        ("", None),
        (None, None),
    ],
)
def test_e164(given: str | None, expected: str | None) -> None:
    assert e164(given) == expected


def test_identity_rules() -> None:
    on = Settings(phone_identity=True)
    off = Settings()
    # Explicit ids win over the number.
    assert call_identity(on, user_id="u1", character_id="luna", phone="+14155550123") == CallIdentity(
        "u1", "luna", "ids"
    )
    # The number, only when the setting is on; the character is the platform's agent id.
    assert call_identity(on, phone="+14155550123", agent_id="agent_9") == CallIdentity(
        "tel:+14155550123", "agent_9", "phone"
    )
    assert call_identity(off, phone="+14155550123", agent_id="agent_9") == CallIdentity(
        None, "agent_9", "none"
    )
    # No agent id at call start: the default character.
    assert call_identity(on, phone="+14155550123").character_id == "default"
    # Numbers sent as numbers are ids too; blanks are not.
    assert call_identity(off, user_id=42).user_id == "42"  # type: ignore[arg-type]
    assert call_identity(off, user_id="  ").user_id is None


async def test_a_transcript_is_stored_once_and_found_at_the_next_call(
    memory: Memory, settings: Settings
) -> None:
    caller = call_identity(settings, phone="+14155550123", agent_id="luna")
    first = transcript("call-1", caller, "My dog Biscuit turned nine today", "Happy birthday, Biscuit!")
    outcome = await store_transcript(memory, settings, first, body="{}", received_ms=START_MS + 10_000)
    assert (outcome.status, outcome.new_messages) == ("done", 2)
    assert (outcome.user_id, outcome.character_id) == ("tel:+14155550123", "luna")
    # A redelivery of the same event of the same call is a duplicate.
    again = await store_transcript(memory, settings, first, body="{}", received_ms=START_MS + 20_000)
    assert again.status == "duplicate"
    # Another event of the same call carrying the same turns merges: nothing doubled.
    analyzed = CallTranscript(
        platform="vapi",
        call_id="call-1",
        event="call-analyzed",
        identity=caller,
        messages=said("My dog Biscuit turned nine today", "Happy birthday, Biscuit!"),
    )
    merged = await store_transcript(memory, settings, analyzed, body="{}", received_ms=START_MS + 30_000)
    assert (merged.status, merged.new_messages) == ("done", 0)
    stored = await memory.reading.messages("tel:+14155550123", "luna", 10)
    assert [m.content for m in stored] == ["My dog Biscuit turned nine today", "Happy birthday, Biscuit!"]
    assert {m.agent_id for m in stored} == {"vapi:call-1"}
    # The caller's next call starts with it.
    assert "Biscuit" in await start_memory(memory, caller)


async def test_an_unidentified_call_is_kept_apart_and_starts_empty(
    memory: Memory, settings: Settings
) -> None:
    nobody = call_identity(settings, agent_id="luna")
    outcome = await store_transcript(
        memory, settings, transcript("call-2", nobody, "hello there"), body="{}", received_ms=START_MS
    )
    assert outcome.status == "done"
    assert outcome.user_id == "agent:vapi:call-2"
    assert await start_memory(memory, nobody) == ""
