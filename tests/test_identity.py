"""Calls that name no user: the warning, the count in stats, and binding a channel.

Built on Agora's documented payloads (fixtures/identity/: the 101 and 103 examples of the
event-types page, whose labels are `campaign_id` / `customer_group` and name no user, and
whose history items carry no `metadata.user`), sent signed to the real app over HTTP; what
the SQLite file holds is checked afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import Any

import pytest
from conftest import agent_event, deliver, load_fixture, poll, session_of

from agent_memory.cli import main
from agent_memory.logs import user_ref
from agent_memory.platforms.agora.keys import POLLER

pytestmark = pytest.mark.postgres

DOCS_101 = load_fixture("identity/101_docs_campaign_labels.json")
DOCS_103 = load_fixture("identity/103_docs_campaign_labels.json")
DOCS_LABELS = {"campaign_id": "test_campaign", "customer_group": "vip"}
AGENT_101 = DOCS_101["payload"]["agent_id"]  # in channel "xxxxx"
AGENT_103 = DOCS_103["payload"]["agent_id"]  # in channel "xxxx"
DOCS_TEXTS = ["hello.", "hi, how can I help you?"]
PAIR = {"user_id": "u-42", "character_id": "luna"}
# Each callback here is applied, or recognised as a redelivery.
send = partial(deliver, expect=("done", "duplicate"))


def history_in(channel: str, agent_id: str, contents: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """A 103 of another call in `channel`, shaped like the documented example."""
    return agent_event(103, agent_id, channel=channel, contents=contents, **kwargs)


def hello(tag: str, uid: str | None = None) -> list[dict[str, Any]]:
    """Two turns as real history carries them: role and content (and the speaker's uid if given)."""
    user: dict[str, Any] = {"role": "user", "content": f"{tag}: hello"}
    if uid is not None:
        user["metadata"] = {"source": "asr", "user": uid}
    return [user, {"role": "assistant", "content": f"{tag}: hi there"}]


async def identity(service: Any, agent_id: str) -> tuple[str, str, str]:
    row = await session_of(service, agent_id)
    assert row is not None, agent_id
    return row.user_id, row.character_id, row.identity_source


async def texts_of(service: Any, user_id: str, character_id: str) -> list[str]:
    status, body = await service.api(
        "GET", f"/v1/users/{user_id}/characters/{character_id}/messages?limit=1000"
    )
    assert status == 200, body
    return [m["content"] for m in body["messages"]]


async def bind(service: Any, channel: str, pair: dict[str, str] = PAIR) -> dict[str, Any]:
    status, body = await service.api("POST", f"/v1/channels/{channel}/bind", json=pair)
    assert status == 200, body
    return body


def unidentified_warnings(caplog: pytest.LogCaptureFixture, agent_id: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING
        and record.name == "agent_memory.memory.ingest"
        and "names no user" in record.getMessage()
        and agent_id in record.getMessage()
    ]


# the warning


async def test_a_call_without_a_user_label_warns_once_naming_the_fix(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    await send(service, DOCS_101)
    await send(service, DOCS_101)  # a redelivery
    later = {"labels": DOCS_LABELS, "channel": "xxxxx", "name": "my-agent", "start_ts": 1737111452}
    await send(service, agent_event(110, AGENT_101, errors=[{"module": "llm", "code": 503}], **later))
    await send(
        service, agent_event(102, AGENT_101, status="STOPPED", message="OK", stop_ts=1737111455, **later)
    )
    await send(service, agent_event(103, AGENT_101, contents=hello("docs"), **later))

    (warning,) = unidentified_warnings(caplog, AGENT_101)
    for part in (
        f"agent {AGENT_101} (name my-agent, channel xxxxx)",
        "labels (keys: campaign_id, customer_group)",
        "'user_id'",
        f"kept under {user_ref('channel:xxxxx')}/default",  # a user id, even made up, is hashed
        "properties.labels.user_id (and .character_id)",
        "AGENT_MEMORY_LABEL_USER / AGENT_MEMORY_LABEL_CHARACTER",
        f"POST /v1/sessions/{AGENT_101}/bind",
        "POST /v1/channels/xxxxx/bind",
    ):
        assert part in warning, (part, warning)
    # Keys only: label values may be personal.
    assert "test_campaign" not in warning and "vip" not in warning
    assert await identity(service, AGENT_101) == ("channel:xxxxx", "default", "channel")
    assert await texts_of(service, "channel:xxxxx", "default") == ["docs: hello", "docs: hi there"]


async def test_a_call_identified_by_its_speaker_uid_also_warns_once(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    await send(service, history_in("room-uid", "UID-CALL", hello("uid", "3003"), labels=DOCS_LABELS))
    await send(service, history_in("room-uid", "UID-CALL", hello("uid", "3003"), notice_id="again"))
    (warning,) = unidentified_warnings(caplog, "UID-CALL")
    # The pair by its user's hash: a uid can be a user's id, which no log line holds.
    assert f"kept under {user_ref('rtc:3003')}/default" in warning and "channel room-uid" in warning
    assert await identity(service, "UID-CALL") == ("rtc:3003", "default", "rtc")


async def test_label_keys_set_to_the_integrators_own_identify_the_call(start_service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    service = await start_service(label_user_key="campaign_id", label_character_key="customer_group")
    await send(service, DOCS_101)
    await send(service, DOCS_103)
    assert await identity(service, AGENT_101) == ("test_campaign", "vip", "labels")
    assert await identity(service, AGENT_103) == ("test_campaign", "vip", "labels")
    assert unidentified_warnings(caplog, AGENT_101) == unidentified_warnings(caplog, AGENT_103) == []
    assert await texts_of(service, "test_campaign", "vip") == DOCS_TEXTS


# the count in stats


async def test_stats_count_the_sessions_no_label_or_binding_identified(service, capsys) -> None:
    await send(service, DOCS_101)  # channel:xxxxx
    await send(service, DOCS_103)  # channel:xxxx
    await send(service, history_in("room-uid", "UID-CALL", hello("uid", "3003")))  # rtc:3003
    await send(service, history_in("room-9", "LABELLED", hello("ok"), labels={**DOCS_LABELS, **PAIR}))
    status, stats = await service.api("GET", "/v1/stats")
    assert status == 200
    assert stats["sessions"] == 4
    assert stats["unidentified_sessions"] == {"count": 3, "of": 4, "rate": 0.75}

    await bind(service, "xxxx")
    status, body = await service.api(
        "POST", "/v1/sessions/UID-CALL/bind", json={"user_id": "u-uid", "character_id": "luna"}
    )
    assert status == 200, body
    _, stats = await service.api("GET", "/v1/stats")
    assert stats["unidentified_sessions"] == {"count": 1, "of": 4, "rate": 0.25}

    db = service.settings.postgres_url or str(service.settings.db_path)
    assert await asyncio.to_thread(main, ["stats", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unidentified_sessions"] == stats["unidentified_sessions"]
    assert await asyncio.to_thread(main, ["stats", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "unidentified_sessions  1 of 4 (25.0%)" in out
    assert "no user label: kept under rtc:<uid> or channel:<name>" in out


async def test_an_empty_service_counts_no_unidentified_sessions(service) -> None:
    _, stats = await service.api("GET", "/v1/stats")
    assert stats["unidentified_sessions"] == {"count": 0, "of": 0, "rate": None}


# binding a channel


async def test_binding_a_channel_moves_its_earlier_calls_and_ties_later_ones(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    await send(service, DOCS_103)  # channel:xxxx
    await send(service, history_in("xxxx", "UID-IN-XXXX", hello("uid", "3003")))  # rtc:3003
    await send(service, history_in("xxxx", "LABELLED-IN-XXXX", hello("labelled"),
                                   labels={"user_id": "u-other", "character_id": "mira"}))  # fmt: skip
    status, _ = await service.api(
        "POST", "/v1/sessions/BOUND-IN-XXXX/bind", json={"user_id": "u-bound", "character_id": "mira"}
    )
    assert status == 200
    await send(service, history_in("xxxx", "BOUND-IN-XXXX", hello("bound")))

    body = await bind(service, "xxxx")
    assert {k: body["binding"][k] for k in ("channel", "user_id", "character_id")} == {
        "channel": "xxxx", **PAIR,
    }  # fmt: skip
    assert body["moved_sessions"] == [AGENT_103, "UID-IN-XXXX"]  # by start time
    assert await identity(service, AGENT_103) == ("u-42", "luna", "channel_binding")
    assert await identity(service, "UID-IN-XXXX") == ("u-42", "luna", "channel_binding")
    # A label or a binding of the run itself says more than the channel: those stay.
    assert await identity(service, "LABELLED-IN-XXXX") == ("u-other", "mira", "labels")
    assert await identity(service, "BOUND-IN-XXXX") == ("u-bound", "mira", "binding")
    assert sorted(await texts_of(service, "u-42", "luna")) == sorted(
        [*DOCS_TEXTS, "uid: hello", "uid: hi there"]
    )
    assert await texts_of(service, "channel:xxxx", "default") == []
    assert await texts_of(service, "rtc:3003", "default") == []

    # A later call in the channel, labelled as the docs show, goes to the pair at once.
    caplog.clear()
    later = {"labels": DOCS_LABELS, "channel": "xxxx", "start_ts": 1_763_800_000}
    await send(service, agent_event(101, "LATER-IN-XXXX", **later))
    await send(service, agent_event(103, "LATER-IN-XXXX", contents=hello("later"), **later))
    assert await identity(service, "LATER-IN-XXXX") == ("u-42", "luna", "channel_binding")
    assert (await texts_of(service, "u-42", "luna"))[-2:] == ["later: hello", "later: hi there"]
    assert unidentified_warnings(caplog, "LATER-IN-XXXX") == []

    status, got = await service.api("GET", "/v1/channels/xxxx/bind")
    assert status == 200 and got["binding"] == body["binding"]
    again = await bind(service, "xxxx")
    assert again["moved_sessions"] == []
    assert again["binding"]["created_ms"] == body["binding"]["created_ms"]


async def test_rebinding_moves_what_the_channel_tied_and_unbinding_leaves_it(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    await send(service, DOCS_103)
    assert (await bind(service, "xxxx", {"user_id": "u-a", "character_id": "luna"}))["moved_sessions"] == [
        AGENT_103
    ]
    assert (await bind(service, "xxxx", {"user_id": "u-b", "character_id": "luna"}))["moved_sessions"] == [
        AGENT_103
    ]
    assert await texts_of(service, "u-b", "luna") == DOCS_TEXTS
    assert await texts_of(service, "u-a", "luna") == []

    status, body = await service.api("DELETE", "/v1/channels/xxxx/bind")
    assert status == 200 and body["deleted"]["user_id"] == "u-b"
    status, body = await service.api("GET", "/v1/channels/xxxx/bind")
    assert status == 404 and "xxxx is not bound" in body["error"]["message"]
    # What the binding tied stays, even when a late callback of that call arrives.
    await send(service, agent_event(102, AGENT_103, channel="xxxx", labels=DOCS_LABELS, status="STOPPED"))
    assert await identity(service, AGENT_103) == ("u-b", "luna", "channel_binding")
    # A new call in the unbound channel falls back again, and says so.
    await send(service, history_in("xxxx", "AFTER-UNBIND", hello("after"), labels=DOCS_LABELS))
    assert await identity(service, "AFTER-UNBIND") == ("channel:xxxx", "default", "channel")
    assert len(unidentified_warnings(caplog, "AFTER-UNBIND")) == 1
    status, body = await service.api("DELETE", "/v1/channels/xxxx/bind")
    assert status == 404 and body["error"]["code"] == "not_found"


async def test_a_channel_name_in_another_script_binds(service) -> None:
    channel = "房间" * 10  # 60 bytes: within Agora's 64
    await send(service, history_in(channel, "CJK-CHANNEL", hello("cjk")))
    assert (await bind(service, channel))["moved_sessions"] == ["CJK-CHANNEL"]
    assert await identity(service, "CJK-CHANNEL") == ("u-42", "luna", "channel_binding")


# forgetting


async def test_forgetting_a_pair_or_a_user_deletes_their_channel_bindings(service) -> None:
    await send(service, DOCS_103)
    await bind(service, "xxxx", {"user_id": "u-f", "character_id": "luna"})
    await bind(service, "room-b", {"user_id": "u-f", "character_id": "mira"})
    await bind(service, "room-c", {"user_id": "u-keep", "character_id": "luna"})

    status, body = await service.api("DELETE", "/v1/users/u-f/characters/luna")
    assert status == 200
    assert body["deleted"]["channel_bindings"] == 1
    assert body["deleted"]["messages"] == 2 and body["deleted"]["sessions"] == 1
    assert (await service.api("GET", "/v1/channels/xxxx/bind"))[0] == 404
    assert (await service.api("GET", "/v1/channels/room-b/bind"))[0] == 200

    status, body = await service.api("DELETE", "/v1/users/u-f")
    assert status == 200 and body["deleted"]["channel_bindings"] == 1
    assert (await service.api("GET", "/v1/channels/room-b/bind"))[0] == 404
    assert (await service.api("GET", "/v1/channels/room-c/bind"))[0] == 200
    # The forgotten user's channel no longer gathers anything for them.
    await send(service, history_in("xxxx", "AFTER-FORGET", hello("after")))
    assert await identity(service, "AFTER-FORGET") == ("channel:xxxx", "default", "channel")
    assert await texts_of(service, "u-f", "luna") == []


# bad requests


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code", "words"),
    [
        ("POST", "/v1/channels/room/bind", {"data": b"{not json"}, 400, "invalid_json", "not valid JSON"),
        ("POST", "/v1/channels/room/bind", {"json": [PAIR]}, 400, "invalid_json", "JSON object"),
        ("POST", "/v1/channels/room/bind", {"json": {"user_id": "u"}}, 422, "invalid_field", "character_id"),
        (
            "POST",
            "/v1/channels/room/bind",
            {"json": {**PAIR, "user_id": ""}},
            422,
            "invalid_field",
            "user_id",
        ),
        ("POST", "/v1/channels/room/bind", {"json": {**PAIR, "user_id": 5}}, 422, "invalid_field", "user_id"),
        ("POST", "/v1/channels/" + "r" * 65 + "/bind", {"json": PAIR}, 422, "invalid_field", "64 bytes"),
        ("POST", "/v1/channels/" + "房" * 22 + "/bind", {"json": PAIR}, 422, "invalid_field", "got 66"),
        ("GET", "/v1/channels/room/bind", {}, 404, "not_found", "room is not bound"),
        ("DELETE", "/v1/channels/room/bind", {}, 404, "not_found", "room is not bound"),
        ("POST", "/v1/channels/room/bind", {"json": PAIR, "token": None}, 401, "unauthorized", "Bearer"),
    ],
)
async def test_bad_channel_binding_requests_get_a_clear_4xx(
    service, method, path, kwargs, status, code, words
) -> None:
    await send(service, history_in("room", "IN-ROOM", hello("room")))
    got, body = await service.api(method, path, **kwargs)
    assert got == status, body
    assert body["error"]["code"] == code and words in body["error"]["message"], body
    # Nothing was bound and nothing moved.
    assert (await service.api("GET", "/v1/channels/room/bind"))[0] == 404
    assert await identity(service, "IN-ROOM") == ("channel:room", "default", "channel")


# the command line


async def test_cli_binds_shows_and_unbinds_a_channel(service, capsys) -> None:
    await send(service, DOCS_103)
    db = service.settings.postgres_url or str(service.settings.db_path)

    def cli(*args: str) -> int:
        return main(["bind-channel", "--db", db, *args])

    assert await asyncio.to_thread(cli, "xxxx", "u-cli", "luna") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["moved_sessions"] == [AGENT_103] and out["binding"]["user_id"] == "u-cli"
    assert await identity(service, AGENT_103) == ("u-cli", "luna", "channel_binding")
    assert await asyncio.to_thread(cli, "xxxx") == 0
    assert json.loads(capsys.readouterr().out)["binding"]["character_id"] == "luna"
    assert await asyncio.to_thread(cli, "xxxx", "--delete") == 0
    assert json.loads(capsys.readouterr().out)["deleted"]["user_id"] == "u-cli"
    assert await asyncio.to_thread(cli, "xxxx") == 1
    assert "channel xxxx is not bound" in capsys.readouterr().err
    assert await asyncio.to_thread(cli, "xxxx", "u-cli") == 2
    assert "give USER and CHARACTER" in capsys.readouterr().err


# a running call followed through Agora's history


async def test_polled_history_of_an_unlabelled_call_follows_its_channel(start_service, fake) -> None:
    service = await start_service(
        agora_app_id="app", agora_customer_id="cid", agora_customer_secret="csec",
        agora_api_base=fake.base_url, agora_max_retries=0, poll_interval_s=3600,
        refresh_interval_s=3600, job_sweep_s=3600,
    )  # fmt: skip
    service.server.app[POLLER].scheduler.pause()
    agent = "POLLED000000000000000001"
    fake.add_agent(agent)
    await send(service, agent_event(101, agent, channel="solo-room", labels=DOCS_LABELS))
    fake.say(agent, hello("first"))
    await poll(service)
    # A history read names no channel: the session keeps the one its 101 gave.
    assert await identity(service, agent) == ("channel:solo-room", "default", "channel")
    assert await texts_of(service, "channel:solo-room", "default") == ["first: hello", "first: hi there"]

    assert (await bind(service, "solo-room"))["moved_sessions"] == [agent]
    fake.say(agent, hello("second"))
    await poll(service)
    assert await identity(service, agent) == ("u-42", "luna", "channel_binding")
    assert await texts_of(service, "u-42", "luna") == [
        "first: hello", "first: hi there", "second: hello", "second: hi there",
    ]  # fmt: skip
