"""A 103's plain messages are read without MemoryMessage, exactly as MemoryMessage reads them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from conftest import FIXTURES, agent_event, deliver, inbox_of, stored, turns

from agent_memory.platforms.agora import events
from agent_memory.platforms.agora.events import (
    incoming,
    plain_history,
    plain_message,
    plain_messages,
    session_event,
)
from agent_memory.platforms.agora.payloads import AgentHistory, MemoryMessage

LABELS = {"user_id": "u-plain", "character_id": "c-plain"}


def fixture_messages() -> list[Any]:
    """Every message item of the Agora and conversation fixtures' 103s."""
    items: list[Any] = []
    for path in sorted([*(FIXTURES / "agora").glob("*.json"), *(FIXTURES / "conversations").glob("*.json")]):
        data = json.loads(path.read_text(encoding="utf-8"))
        for envelope in data if isinstance(data, list) else [data]:
            payload = envelope.get("payload") if isinstance(envelope, dict) else None
            if isinstance(payload, dict) and isinstance(payload.get("contents"), list):
                items.extend(payload["contents"])
    return items


BASE = {
    "role": "assistant",
    "content": "hello",
    "turn_id": 3,
    "timestamp": 1_763_690_000_000,
    "metadata": {"source": "llm", "user": "1234", "interrupted": True,
                 "interrupt_timestamp": 1_763_690_001_500, "original": "hello there"},
}  # fmt: skip


def variant(path: str, value: Any) -> dict[str, Any]:
    """BASE with one field (`metadata.x` inside the metadata) set, or removed for `...`."""
    item = copy.deepcopy(BASE)
    holder, name = (item["metadata"], path[9:]) if path.startswith("metadata.") else (item, path)
    if value is ...:
        holder.pop(name, None)
    else:
        holder[name] = value
    return item


# Each field with values the engine sends and values MemoryMessage normalises or refuses.
VARIANTS = [
    variant(path, value)
    for path, values in {
        "role": ["user", "tool", "", "  ", 7, None, ...],
        "content": ["", None, 5, [{"type": "text", "text": "hi"}], ...],
        "turn_id": [0, -1, 2**63 - 1, 2**63, True, "4", 4.0, None, ...],
        "timestamp": [0, 1, 10**11, 10**11 - 1, 10**14, 10**14 + 1, 1_763_690_000, 1.5e12, "1763690000000",
                      True, -5, None, ...],
        "metadata": [None, {}, [], "x", ...],
        "metadata.source": [None, 5, {"a": 1}, ...],
        "metadata.user": [None, 1234, ...],
        "metadata.original": [None, ["x"], ...],
        "metadata.interrupted": [False, "true", 1, None, ...],
        "metadata.interrupt_timestamp": [None, 1_763_690_001, 10**20, "5", ...],
        "metadata.other": ["kept"],
        "tool_calls": [[{"id": "t"}]],
        "speech_start_ms": [1_763_690_000_000],
        "anything": [1],
    }.items()
    for value in values
]  # fmt: skip


@pytest.mark.parametrize("item", fixture_messages() + VARIANTS)
def test_a_plain_message_reads_as_memory_message_reads_it(item):
    fast = plain_message(item)
    if fast is not None:
        assert fast == incoming(MemoryMessage.model_validate(item))


PAYLOAD = {
    "agent_id": "A-PLAIN",
    "name": "agent-1",
    "channel": "room-1",
    "start_ts": 1_763_690_000,
    "stop_ts": 1_763_690_100,
    "labels": {"user_id": "u-1", "character_id": "c-1"},
}

# Each of a 103's other fields with values the engine sends and values AgentHistory normalises,
# sets aside or refuses; `...` leaves the field out.
PAYLOAD_VARIANTS = [
    {**{k: v for k, v in PAYLOAD.items() if k != path}, **({} if value is ... else {path: value})}
    for path, values in {
        "agent_id": ["", None, 5, True, ["A"], ...],
        "channel": [None, "", 7, "test_webhook", ...],
        "name": [None, 1.5, {"a": 1}, ...],
        "start_ts": [0, 1, 10**11, 10**14, 10**14 + 1, 1_763_690_000_000, 1.5e9, "1763690000", True, -5, 10**20,
                     None, ...],
        "stop_ts": [1_763_690_100_000, "x", 10**20, None, ...],
        "labels": [{}, {"user_id": None}, {"user_id": 5}, {"user_id": ""}, [], None, "u", ...],
        "start_ms": [1_763_690_000_000],
        "skipped": [["x"]],
        "anything": [1],
    }.items()
    for value in values
]  # fmt: skip


@pytest.mark.parametrize("payload", [PAYLOAD, *PAYLOAD_VARIANTS])
def test_a_plain_103_payload_reads_as_agent_history_reads_it(payload):
    messages = plain_messages(turns(3))
    assert messages is not None
    fast = plain_history({**payload, "contents": turns(3)}, messages)
    if fast is not None:
        assert fast == session_event(AgentHistory.model_validate(payload), messages=messages)


def test_the_engines_103_payload_is_read_plain():
    messages = plain_messages(turns(2))
    assert messages is not None
    assert plain_history({**PAYLOAD, "contents": turns(2)}, messages) is not None
    assert plain_history({**PAYLOAD, "labels": {"user_id": 5}}, messages) is None
    assert plain_history({**PAYLOAD, "start_ts": "1763690000"}, messages) is None


def test_the_engines_messages_are_read_plain():
    assert plain_messages(turns(6)) is not None
    assert plain_message(BASE) is not None
    # Any one item that is not plain sends the whole list the model's way (set aside, noted).
    assert plain_messages([*turns(2), variant("turn_id", "4")]) is None
    assert plain_messages({"0": BASE}) is None


async def test_a_plain_103_is_stored_without_memory_message(service, monkeypatch):
    def refuse(message: MemoryMessage) -> Any:
        raise AssertionError("a plain message went through MemoryMessage")

    monkeypatch.setattr(events, "incoming", refuse)
    contents = [*turns(4), BASE]
    envelope = agent_event(103, "PLAIN-1", labels=LABELS, contents=contents)
    answer = await deliver(service, envelope, expect="done")
    assert answer["new_messages"] == 5
    rows = await stored(service, "PLAIN-1")
    assert [(row.role, row.content, row.turn_id, row.ts_ms) for row in rows] == [
        (item["role"], item["content"], item["turn_id"], item["timestamp"]) for item in contents
    ]
    last = rows[-1]
    assert (last.source, last.speaker, last.interrupted, last.interrupt_ms, last.original) == (
        "llm", "1234", True, 1_763_690_001_500, "hello there"
    )  # fmt: skip
    entry = await inbox_of(service, envelope["noticeId"])
    assert entry is not None and json.loads(entry.body) == envelope
