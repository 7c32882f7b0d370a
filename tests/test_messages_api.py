"""The generic write API (`POST …/messages`, platforms/api) over real HTTP, on both backends."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import TOKEN, Service, assert_error
from test_api import condensed, found
from test_retention import database_files

from agent_memory.cli import main
from agent_memory.client import ApiError, AsyncMemoryClient, MemoryClient
from agent_memory.core.alignment import place_items
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import MessageFingerprint
from agent_memory.platforms.api.messages import epoch_ms
from agent_memory.web.answers import MessagesAdded

pytestmark = pytest.mark.postgres

PAIR = "/v1/users/u-alice/characters/luna"
START_MS = 1_763_690_000_000  # 2025-11-21 01:53:20 UTC
ISO = "2025-11-21T01:53:21Z"  # START_MS + 1 s


def chat() -> list[dict[str, Any]]:
    """One exchange, its times in each accepted form."""
    return [
        {"role": "user", "content": "My sister Maya visits next weekend", "timestamp": START_MS},
        {"role": "assistant", "content": "Lovely! What will you do together?", "timestamp": ISO},
        {
            "role": "user",
            "content": "We are going kayaking on the lake",
            "timestamp": (START_MS + 2000) / 1000,
        },
    ]


async def post(service: Service, session: str, messages: list[dict[str, Any]], pair: str = PAIR) -> Any:
    return await service.api("POST", f"{pair}/messages", json={"session_id": session, "messages": messages})


async def stored(service: Service, pair: str = PAIR) -> list[dict[str, Any]]:
    status, body = await service.api("GET", f"{pair}/messages")
    assert status == 200, body
    return list(body["messages"])


async def test_posting_the_same_messages_again_stores_nothing_new(service: Service) -> None:
    status, body = await post(service, "chat-1", chat())
    assert status == 200, body
    assert (body["stored"], body["already_held"], body["left_out"]) == (3, 0, 0)
    assert body["session_id"] == "chat-1"
    status, body = await post(service, "chat-1", chat())
    assert status == 200 and (body["stored"], body["already_held"]) == (0, 3), body
    # A part of it, in another order, is held too.
    status, body = await post(service, "chat-1", [chat()[2], chat()[0]])
    assert (body["stored"], body["already_held"]) == (0, 2), body
    messages = await stored(service)
    assert [m["content"] for m in messages] == [m["content"] for m in chat()]
    assert [m["ts_ms"] for m in messages] == [START_MS, START_MS + 1000, START_MS + 2000]
    assert {m["agent_id"] for m in messages} == {"api:chat-1"}
    assert not any(m["gap_before"] for m in messages)


async def test_the_same_words_at_another_time_are_a_new_message(service: Service) -> None:
    ok = {"role": "user", "content": "ok", "timestamp": START_MS}
    assert (await post(service, "chat-2", [ok]))[1]["stored"] == 1
    later = {**ok, "timestamp": START_MS + 60_000}
    _status, body = await post(service, "chat-2", [ok, later])
    assert (body["stored"], body["already_held"]) == (1, 1), body
    # Said twice in the same second (one post), it is two messages, and held as two.
    twice = [{**ok, "timestamp": START_MS + 120_000}] * 2
    assert (await post(service, "chat-2", twice))[1]["stored"] == 2
    assert (await post(service, "chat-2", twice))[1]["already_held"] == 2
    assert [m["ts_ms"] - START_MS for m in await stored(service)] == [0, 60_000, 120_000, 120_000]


async def test_a_message_with_an_id_is_that_id(service: Service) -> None:
    first = {"role": "user", "content": "I adopted a cat", "timestamp": START_MS, "id": "m-1"}
    assert (await post(service, "chat-3", [first]))[1]["stored"] == 1
    # Posted again with its id, it is held, whatever its words now ...
    edited = {**first, "content": "I adopted a kitten"}
    _status, body = await post(service, "chat-3", [edited])
    assert (body["stored"], body["already_held"]) == (0, 1), body
    # ... and another id with the same words and time is another message.
    assert (await post(service, "chat-3", [{**first, "id": "m-2"}]))[1]["stored"] == 1
    assert [m["content"] for m in await stored(service)] == ["I adopted a cat", "I adopted a cat"]


async def test_posts_continue_the_session_without_gaps(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # A chat sends each turn as it is said: no post overlaps another, and none is a gap.
    for message in chat():
        status, body = await post(service, "chat-4", [message])
        assert (status, body["stored"]) == (200, 1), body
    assert not any(m["gap_before"] for m in await stored(service))
    status, body = await service.api("GET", "/v1/sessions/api:chat-4")
    session = body["session"]
    assert status == 200 and (session["gap_count"], session["message_count"]) == (0, 3), session
    assert (session["user_id"], session["character_id"]) == ("u-alice", "luna")
    assert "gap" not in caplog.text


async def test_a_session_id_belongs_to_one_pair(service: Service) -> None:
    assert (await post(service, "shared", chat()[:1]))[0] == 200
    status, body = await post(service, "shared", chat()[1:], pair="/v1/users/u-bob/characters/luna")
    message = assert_error(status, body, 409, "session_conflict")
    assert "u-alice" not in message and "another user or character" in message
    # Nothing of it was stored anywhere: not under bob, not moved away from alice.
    assert await stored(service, "/v1/users/u-bob/characters/luna") == []
    assert len(await stored(service)) == 1
    status, body = await post(service, "shared", chat()[:1], pair="/v1/users/u-alice/characters/sol")
    assert_error(status, body, 409, "session_conflict")


async def test_a_session_id_never_meets_a_platforms_call_id(service: Service) -> None:
    # `vapi:call-9` is a session_id like any other: kept as api:vapi:call-9, not as Vapi's call.
    assert (await post(service, "vapi:call-9", chat()))[1]["stored"] == 3
    assert {m["agent_id"] for m in await stored(service)} == {"api:vapi:call-9"}
    status, _ = await service.api("GET", "/v1/sessions/vapi:call-9")
    assert status == 404


def message_with(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "hello", "timestamp": START_MS, **fields}


@pytest.mark.parametrize(
    ("messages", "names"),
    [
        ([message_with(), message_with(timestamp="2025-11-21 01:53:20")], ["messages.1.timestamp", "offset"]),
        ([message_with(timestamp="next tuesday")], ["messages.0.timestamp", "ISO 8601"]),
        ([message_with(timestamp=True)], ["messages.0.timestamp"]),
        ([message_with(timestamp=-5)], ["messages.0.timestamp", "no time"]),
        ([message_with(timestamp=10**20)], ["messages.0.timestamp", "no time"]),
        ([message_with(timestamp=now_ms() + 86_400_000)], ["messages.0.timestamp", "ahead"]),
        ([{"role": "user", "content": "hello"}], ["messages.0.timestamp", "required"]),
        ([message_with(role="system")], ["messages.0.role"]),
        ([message_with(content="   ")], ["messages.0.content"]),
        ([message_with(content="x" * 32_001)], ["messages.0.content", "32000"]),
        ([message_with(id="a"), message_with(id="a", timestamp=START_MS + 1)], ["messages.1.id repeats"]),
        ([message_with(id=7)], ["messages.0.id"]),
        ([], ["messages"]),
        ([message_with()] * 1001, ["messages", "1000"]),
    ],
    ids=[
        "local-time",
        "not-a-date",
        "bool",
        "negative",
        "too-large",
        "future",
        "no-timestamp",
        "role",
        "blank",
        "too-long",
        "repeated-id",
        "numeric-id",
        "none",
        "too-many",
    ],
)
async def test_bad_messages_are_refused_naming_what_to_fix(
    service: Service, messages: list[dict[str, Any]], names: list[str]
) -> None:
    status, body = await post(service, "bad", messages)
    message = assert_error(status, body, 422, "invalid_field")
    for name in names:
        assert name in message, message
    assert await stored(service) == []


@pytest.mark.parametrize(
    "body",
    [{"messages": [message_with()]}, {"session_id": "", "messages": [message_with()]}, {"session_id": "s"}],
    ids=["no-session", "blank-session", "no-messages"],
)
async def test_a_body_without_its_session_or_messages_is_refused(
    service: Service, body: dict[str, Any]
) -> None:
    status, answer = await service.api("POST", f"{PAIR}/messages", json=body)
    assert_error(status, answer, 422, "invalid_field")


async def test_recall_condensing_and_the_next_call_see_the_messages_at_once(start_service: Any) -> None:
    service = await start_service(job_sweep_s=0.05)
    assert (await post(service, "chat-5", chat()))[1]["stored"] == 3
    status, body = await service.api("GET", f"{PAIR}/recall", params={"q": "kayaking"})
    assert status == 200 and "kayaking" in body["system_message"]["content"], body
    status, body = await service.api("GET", f"{PAIR}/system-messages")
    assert status == 200 and "Maya" in json.dumps(body), body
    summary = await condensed(service, "u-alice", "luna")
    assert "kayak" in summary["summary"]["text"].lower(), summary


async def test_forget_covers_posted_messages_for_good(service: Service, db_path: Any) -> None:
    marker = "QuokkaLantern4417"
    said = [message_with(content=f"my locker code is {marker}", id="secret-1")]
    assert (await post(service, "chat-6", said))[1]["stored"] == 1
    status, body = await service.api("DELETE", PAIR)
    assert status == 200 and body["deleted"]["messages"] == 1, body
    # Posted again (a client retrying), what was said before the forget is never stored again.
    status, body = await post(service, "chat-6", said)
    assert status == 200 and (body["stored"], body["left_out"]) == (0, 1), body
    assert await stored(service) == []
    await service.store.checkpoint()
    assert not found(database_files(db_path), marker), f"{marker!r} is still on disk"
    # What is said after the forget is kept.
    later = message_with(content="a fresh start", timestamp=now_ms())
    assert (await post(service, "chat-6", [later]))[1]["stored"] == 1


async def test_the_write_api_needs_a_write_key(service: Service) -> None:
    status, body = await service.api("POST", "/v1/keys", json={"scope": "read"})
    assert status == 201, body
    status, answer = await service.api(
        "POST",
        f"{PAIR}/messages",
        token=body["key"],
        json={"session_id": "s", "messages": [message_with()]},
    )
    assert_error(status, answer, 403, "forbidden")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (START_MS, START_MS),
        (START_MS // 1000, START_MS),
        (START_MS / 1000 + 0.25, START_MS + 250),
        ("2025-11-21T01:53:20Z", START_MS),
        ("2025-11-21T02:53:20.5+01:00", START_MS + 500),
        (99_999_999_999, 99_999_999_999_000),  # below 10^11: seconds
        (100_000_000_000, 100_000_000_000),  # from 10^11: milliseconds
    ],
)
def test_timestamps_in_ms_seconds_and_iso_8601(value: Any, expected: int) -> None:
    assert epoch_ms(value, now=10**15) == expected


async def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """Run `agent-memory argv` in a thread (the service answers on this loop meanwhile)."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.sqlite_only
async def test_cli_add_here_and_through_the_service_is_one_path(
    service: Service, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(service.settings.db_path)
    there = ("--url", service.url, "--api-key", TOKEN)
    lines = tmp_path / "chat.jsonl"
    lines.write_text("".join(json.dumps(message) + "\n" for message in chat()), encoding="utf-8")
    code, out, err = await cli(
        capsys, "add", "u-alice", "luna", "--session", "cli-1", "--file", str(lines), *there
    )
    assert code == 0, err
    assert json.loads(out) | {"session_id": ""} == {
        "user_id": "u-alice", "character_id": "luna", "session_id": "", "stored": 3, "already_held": 0,
        "left_out": 0,
    }  # fmt: skip
    # The same file here (a JSON list this time, on standard input): held already, the same answer.
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(chat())))
    code, here, err = await cli(capsys, "add", "u-alice", "luna", "--session", "cli-1", "--db", db)
    assert code == 0 and json.loads(here)["already_held"] == 3, err
    code, out, err = await cli(
        capsys, "add", "u-alice", "luna", "--session", "cli-1", "--user", "I passed my driving test",
        "--assistant", "Congratulations!", *there,
    )  # fmt: skip
    assert code == 0 and json.loads(out)["stored"] == 2, err
    contents = [m["content"] for m in await stored(service)]
    assert contents[-2:] == ["I passed my driving test", "Congratulations!"]
    # Bad input says what to fix, here and there alike.
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps([{"role": "user", "content": "hi", "timestamp": "yesterday"}]), encoding="utf-8"
    )
    for where in (("--db", db), there):
        code, _, err = await cli(
            capsys, "add", "u-alice", "luna", "--session", "cli-1", "--file", str(bad), *where
        )
        assert code == 2 and "messages.0.timestamp" in err, err
    code, _, err = await cli(capsys, "add", "u-bob", "luna", "--session", "cli-1", "--user", "hi", *there)
    assert code == 2 and "another user or character" in err, err


async def test_recall_can_leave_out_a_running_conversations_own_turns(service: Service) -> None:
    # A framework integration recalls for the turn just said, which it may have stored already.
    assert (await post(service, "earlier", chat()))[1]["stored"] == 3
    now = [message_with(content="Tell me again about the kayaking trip", timestamp=now_ms())]
    assert (await post(service, "live", now))[1]["stored"] == 1
    params = {"q": "the kayaking trip", "exclude_agent_id": "api:live"}
    status, body = await service.api("GET", f"{PAIR}/recall", params=params)
    assert status == 200, body
    recalled = [memory["text"] for memory in body["memories"]]
    assert any("going kayaking on the lake" in text for text in recalled), recalled
    assert not any("Tell me again" in text for text in recalled), recalled


def test_place_items_matches_each_message_once_and_appends_the_rest_without_gaps() -> None:
    def row(row_id: int, seq: int, fp: str, ts_ms: int | None) -> MessageFingerprint:
        return MessageFingerprint(row_id, seq, "user", fp, False, None, ts_ms, None, None, False, None, None)

    @dataclass
    class Item:
        fp: str
        ts_ms: int | None
        keyed: bool = False
        role: str = "user"
        source: str | None = None
        turn_id: int | None = None

    stored = [row(1, 0, "ok", 100), row(2, 1, "ok", 100), row(3, 2, "m-1", 50)]
    placed = place_items(
        stored,
        [
            Item("ok", 100),  # the first stored "ok"
            Item("ok", 100),  # the second: each stored message is matched once
            Item("ok", 100),  # a third, new
            Item("ok", 200),  # the same words at another time: new
            Item("m-1", 999, keyed=True),  # an id is itself, whatever its time
        ],
    )
    assert [(seq, row.id if row else None, gap) for seq, row, gap in placed.positions] == [
        (0, 1, False),
        (1, 2, False),
        (3, None, False),
        (4, None, False),
        (2, 3, False),
    ]
    assert (placed.gap_count, placed.new_gap, placed.gap_after_id) == (0, False, None)


async def test_the_python_clients_post_messages(service: Service) -> None:
    async with AsyncMemoryClient(service.url, TOKEN) as client:
        answer = await client.add_messages("u-alice", "luna", "py-1", chat())
        assert (answer.stored, answer.already_held, answer.session_id) == (3, 0, "py-1")

    def blocking() -> MessagesAdded:
        with MemoryClient(service.url, TOKEN) as memory:
            return memory.add_messages("u-alice", "luna", "py-1", chat())

    again = await asyncio.to_thread(blocking)
    assert (again.stored, again.already_held) == (0, 3)
    async with AsyncMemoryClient(service.url, TOKEN) as client:
        with pytest.raises(ApiError) as refused:
            await client.add_messages("u-bob", "luna", "py-1", chat())
    assert (refused.value.status, refused.value.code) == (409, "session_conflict")


async def test_a_user_id_with_braces_and_a_backslash_is_read_and_forgotten_by_its_path(
    service: Service,
) -> None:
    # Any character but "/" may be in an id (a webhook's label stores it): its routes must match.
    odd = quote("u-}{odd\\1", safe="")
    pair = f"/v1/users/{odd}/characters/luna"
    assert (await post(service, "chat-braces", [message_with(content="braces hello")], pair=pair))[1][
        "stored"
    ] == 1
    assert [m["content"] for m in await stored(service, pair)] == ["braces hello"]
    status, body = await service.api("DELETE", pair.split("/characters")[0])
    assert status == 200 and body["deleted"]["messages"] == 1, body
