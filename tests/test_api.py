"""The `/v1` API and `/healthz` over real HTTP, against a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from typing import Any

import pytest
from conftest import (
    TOKEN,
    agent_event,
    assert_error,
    counts,
    deliver,
    load_conversations,
    load_fixture,
    on_disk,
    said,
    seed,
    turns,
    wait_for,
)
from fakes.openai_server import FakeOpenAI
from test_retention import database_files

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import CONDENSE
from agent_memory.core.tokens import count_message_tokens
from agent_memory.web.keys import JOBS, MEMORY

pytestmark = pytest.mark.postgres

PERSONA = "You are Luna, a warm and curious companion. Keep answers short."
FILLER = "and then we talked for a while about the weather, the city and the weekend plans"


def long_turns(count: int) -> list[dict[str, Any]]:
    messages = turns(count)
    for index, message in enumerate(messages):
        message["content"] = f"{message['content']} {FILLER} (#{index})"
    return messages


async def system_messages(service: Any, user: str, character: str, **params: Any) -> dict[str, Any]:
    status, body = await service.api(
        "GET", f"/v1/users/{user}/characters/{character}/system-messages", params=params
    )
    assert status == 200, body
    return body


# auth, health, routing


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", TOKEN, "Bearer "],
    ids=["none", "wrong", "basic-scheme", "no-scheme", "empty"],
)
async def test_v1_needs_the_bearer_token(service, authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with service.session.get(
        f"{service.url}/v1/users/u/characters/c/messages", headers=headers
    ) as resp:
        message = assert_error(resp.status, await resp.json(), 401, "unauthorized")
    assert "Bearer" in message


async def test_v1_with_the_token_answers(service):
    status, body = await service.api("GET", "/v1/users/u/characters/c/messages", token=TOKEN)
    assert status == 200 and body["messages"] == []


async def test_a_refused_request_writes_nothing(service):
    status, body = await service.api(
        "POST", "/v1/users/u/characters/c/facts", token="wrong", json={"text": "sneaky"}
    )
    assert_error(status, body, 401, "unauthorized")
    assert (await counts(service))["facts"] == 0


async def test_without_a_configured_token_v1_is_open(start_service):
    service = await start_service(api_token=None)
    status, body = await service.api("GET", "/v1/users/u/characters/c/summary", token=None)
    assert status == 200 and body["messages_not_yet_covered"] == 0


@pytest.mark.sqlite_only  # reads SQLite's files or runs its SQL
async def test_healthz_needs_no_token_and_reports_the_schema(service):
    status, body = await service.api("GET", "/healthz", token=None)
    assert status == 200
    assert body["status"] == "ok"
    assert body["schema"] and body["schema"][0] == "m001_initial"
    assert body["database"] == str(service.settings.db_path)


@pytest.mark.parametrize("path", ["/v1/nothing/here", "/nothing", "/v1/users/u/characters/c/nothing"])
async def test_unknown_route_is_a_404_json_error(service, path):
    status, body = await service.api("GET", path)
    message = assert_error(status, body, 404, "not_found")
    assert path in message


async def test_wrong_method_is_a_405_json_error(service):
    status, body = await service.api("GET", "/v1/users/u")  # only DELETE lives there
    assert "GET" in assert_error(status, body, 405, "method_not_allowed")


# system-messages


async def test_system_messages_put_the_persona_first_then_memory(service):
    await seed(service, "u-sm", "luna", "SM-1", said("I have a cat called Miso.", "What a lovely name!"))
    status, _ = await service.api(
        "POST", "/v1/users/u-sm/characters/luna/facts", json={"text": "Has a cat named Miso"}
    )
    assert status == 201
    body = await system_messages(service, "u-sm", "luna", persona=PERSONA, max_tokens=1500)
    contents = [m["content"] for m in body["system_messages"]]
    assert all(m["role"] == "system" for m in body["system_messages"])
    assert len(contents) == 3
    assert contents[0] == PERSONA
    assert (
        contents[1].startswith("What you remember about this user")
        and "- Has a cat named Miso" in contents[1]
    )
    assert contents[2].startswith("The most recent turns")
    assert "User: I have a cat called Miso." in contents[2]
    assert "Assistant: What a lovely name!" in contents[2]
    assert body["tokens"] == sum(count_message_tokens(c) for c in contents)
    assert body["included"]["persona"] is True and body["included"]["facts"] == 1
    assert (body["user_id"], body["character_id"], body["max_tokens"]) == ("u-sm", "luna", 1500)


async def test_system_messages_of_an_unknown_pair_are_empty(service):
    body = await system_messages(service, "nobody", "none")
    assert body["system_messages"] == [] and body["tokens"] == 0
    body = await system_messages(service, "nobody", "none", persona=PERSONA)
    assert [m["content"] for m in body["system_messages"]] == [PERSONA]


async def test_budget_keeps_the_newest_turns_and_drops_the_oldest(start_service):
    # No condensing here: 80 new messages would otherwise make a summary due at once.
    service = await start_service(summary_max_messages=10_000)
    messages = long_turns(80)
    await seed(service, "u-budget", "luna", "BUDGET-1", messages)
    kept = []
    for budget in (100, 300, 1500):
        body = await system_messages(service, "u-budget", "luna", max_tokens=budget, persona=PERSONA)
        contents = [m["content"] for m in body["system_messages"]]
        assert body["tokens"] <= budget
        assert body["tokens"] == sum(count_message_tokens(c) for c in contents)
        assert contents[0] == PERSONA
        transcript = contents[-1]
        count = body["included"]["messages"]
        assert 0 < count < 80, budget
        assert body["included"]["messages_available"] == 80
        # The newest `count` messages are there, every older one is not.
        for message in messages[-count:]:
            assert message["content"] in transcript
        for message in messages[: 80 - count]:  # each content ends its line: "(#7)\n"
            assert f"{message['content']}\n" not in transcript + "\n"
        assert transcript.rstrip().endswith(messages[-1]["content"])
        kept.append(count)
    assert kept[0] < kept[1] < kept[2]


async def test_system_messages_are_deterministic(start_service):
    service = await start_service(summary_max_messages=10_000)
    await seed(service, "u-det", "luna", "DET-1", long_turns(30))
    await service.api("POST", "/v1/users/u-det/characters/luna/facts", json={"text": "Works night shifts"})
    await service.api(
        "POST", "/v1/users/u-det/characters/luna/facts", json={"text": "Speaks French", "scope": "user"}
    )
    first = await system_messages(service, "u-det", "luna", max_tokens=300, persona=PERSONA)
    second = await system_messages(service, "u-det", "luna", max_tokens=300, persona=PERSONA)
    assert first == second
    assert first["included"]["facts"] == 2


@pytest.mark.parametrize("value", ["abc", "1.5", "10", "999999999"])
async def test_bad_max_tokens_is_422(service, value):
    status, body = await service.api(
        "GET", "/v1/users/u/characters/c/system-messages", params={"max_tokens": value}
    )
    message = assert_error(status, body, 422, "invalid_field")
    assert "max_tokens" in message and value in message


async def test_persona_longer_than_the_budget_is_422_saying_so(service):
    persona = "You are a very detailed persona. " * 60
    status, body = await service.api(
        "GET", "/v1/users/u/characters/c/system-messages",
        params={"max_tokens": 100, "persona": persona},
    )  # fmt: skip
    message = assert_error(status, body, 422, "invalid_field")
    assert "persona" in message and "max_tokens=100" in message


# A long persona travels in the query string; URL-encoded it exceeds aiohttp's default 8190-byte
# request line, and still gets through.
async def test_a_long_chinese_persona_fits_through_the_api(service):
    persona = ("你是小雨，一位温柔耐心的中文老师，" * 63)[:1000]
    async with service.session.get(
        f"{service.url}/v1/users/u/characters/c/system-messages",
        params={"persona": persona, "max_tokens": 5000},
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as resp:
        assert resp.content_type == "application/json", await resp.text()
        body = await resp.json()
    assert resp.status == 200, body
    assert body["system_messages"][0]["content"] == persona


async def test_interrupted_reply_is_rendered_with_the_unheard_rest(service):
    await deliver(service, load_fixture("agora/103_short_term_memory_example.json"))
    body = await system_messages(service, "u-1", "luna")
    transcript = body["system_messages"][-1]["content"]
    assert (
        "Assistant: Why did the scarecrow… [interrupted by the user; the unheard rest: "
        "win an award? Because he was outstanding in his field!]"
    ) in transcript
    assert "User: Can you tell me a joke?" in transcript
    # second timestamps became real dates
    assert "— 2023-03-15 —" in transcript


async def test_several_speakers_in_one_channel_are_told_apart(service):
    await load_conversations(service, "multiuser_channel")
    transcript = (await system_messages(service, "u-team", "host"))["system_messages"][-1]["content"]
    assert "User 2001: Hi, it's Jordan." in transcript
    assert "User 2002: Priya here, hi!" in transcript
    assert "\nUser: " not in transcript and "] User: " not in transcript


# messages and summary


async def test_messages_limit_gives_the_latest_oldest_first_with_details(service):
    contents = turns(9)
    contents.append(
        {
            "role": "assistant",
            "content": "Let me tell you ",
            "turn_id": 5,
            "timestamp": 1_763_690_009_000,
            "metadata": {
                "source": "llm",
                "interrupted": True,
                "interrupt_timestamp": 1_763_690_009_500,
                "original": "Let me tell you a story about a fox.",
            },
        }
    )
    await seed(service, "u-msg", "luna", "MSG-1", contents)
    status, body = await service.api("GET", "/v1/users/u-msg/characters/luna/messages", params={"limit": 3})
    assert status == 200
    got = body["messages"]
    assert [m["content"] for m in got] == [m["content"] for m in contents[-3:]]
    assert [m["ts_ms"] for m in got] == sorted(m["ts_ms"] for m in got)
    assert [m["turn_id"] for m in got] == [4, 5, 5]
    last = got[-1]
    assert last["ts_ms"] == 1_763_690_009_000 and last["timestamp_known"] is True
    assert last["source"] == "llm" and last["interrupted"] is True
    assert last["original"] == "Let me tell you a story about a fox."
    assert last["interrupt_ms"] == 1_763_690_009_500
    assert got[0]["interrupted"] is False and got[0]["original"] is None
    assert got[0]["source"] == "llm" and got[1]["source"] == "asr"
    assert all(m["agent_id"] == "MSG-1" for m in got)
    status, body = await service.api("GET", "/v1/users/u-msg/characters/luna/messages")
    assert len(body["messages"]) == 10


@pytest.mark.parametrize("limit", ["0", "-1", "abc", "1001"])
async def test_bad_messages_limit_is_422(service, limit):
    status, body = await service.api("GET", "/v1/users/u/characters/c/messages", params={"limit": limit})
    assert "limit" in assert_error(status, body, 422, "invalid_field")


async def test_summary_before_condensing_is_null_with_uncovered_count(service):
    await seed(service, "u-sum", "luna", "SUM-1", turns(7))
    status, body = await service.api("GET", "/v1/users/u-sum/characters/luna/summary")
    assert status == 200
    assert body["summary"] is None
    assert body["messages_not_yet_covered"] == 7
    status, body = await service.api("GET", "/v1/users/u-sum/characters/other/summary")
    assert (body["summary"], body["messages_not_yet_covered"]) == (None, 0)


# facts


async def test_facts_add_list_render_and_delete(service):
    pair = "/v1/users/u-facts/characters/luna"
    status, body = await service.api("POST", f"{pair}/facts", json={"text": "Has an exam on the 22nd"})
    assert status == 201 and body["created"] is True
    fact = body["fact"]
    assert (fact["text"], fact["scope"], fact["pinned"], fact["origin"]) == (
        "Has an exam on the 22nd", "character", True, "manual",
    )  # fmt: skip
    status, body = await service.api(
        "POST", f"{pair}/facts", json={"text": "Lives in Lisbon", "scope": "user"}
    )
    assert status == 201 and body["fact"]["scope"] == "user" and body["fact"]["pinned"] is True
    user_fact = body["fact"]
    # The same fact again (other spacing and case) is not a second fact.
    status, body = await service.api("POST", f"{pair}/facts", json={"text": "  has an exam on the 22nd. "})
    assert status == 200 and body["created"] is False and body["fact"]["id"] == fact["id"]
    # Another character's fact is not listed here; the user-wide one is.
    status, _ = await service.api(
        "POST", "/v1/users/u-facts/characters/kai/facts", json={"text": "Plays chess with Kai"}
    )
    assert status == 201

    status, body = await service.api("GET", f"{pair}/facts")
    assert status == 200
    assert [(f["text"], f["scope"]) for f in body["facts"]] == [
        ("Has an exam on the 22nd", "character"), ("Lives in Lisbon", "user"),
    ]  # fmt: skip
    status, body = await service.api("GET", "/v1/users/u-facts/characters/kai/facts")
    assert {f["text"] for f in body["facts"]} == {"Plays chess with Kai", "Lives in Lisbon"}
    rows = await service.store.read(lambda v: v.facts.of_pair("u-facts", "luna"))
    assert {(r.character_id, r.text) for r in rows} == {
        ("luna", "Has an exam on the 22nd"), (None, "Lives in Lisbon"),
    }  # fmt: skip

    rendered = (await system_messages(service, "u-facts", "luna"))["system_messages"][0]["content"]
    assert "- Has an exam on the 22nd" in rendered and "- Lives in Lisbon" in rendered
    assert "Plays chess" not in rendered

    status, body = await service.api("DELETE", f"/v1/facts/{fact['id']}")
    assert (status, body) == (200, {"deleted": fact["id"]})
    assert await service.store.read(lambda v: v.facts.get(fact["id"])) is None
    status, body = await service.api("DELETE", f"/v1/facts/{fact['id']}")
    assert str(fact["id"]) in assert_error(status, body, 404, "not_found")
    status, body = await service.api("GET", f"{pair}/facts")
    assert [f["id"] for f in body["facts"]] == [user_fact["id"]]
    rendered = (await system_messages(service, "u-facts", "luna"))["system_messages"][0]["content"]
    assert "exam" not in rendered and "- Lives in Lisbon" in rendered


async def test_delete_fact_with_a_non_numeric_id_is_422(service):
    status, body = await service.api("DELETE", "/v1/facts/abc")
    assert "abc" in assert_error(status, body, 422, "invalid_field")


# An id the database cannot hold (over 2**63-1) or that is not ASCII digits ('²') is a client
# error (404/422), never a 500.
@pytest.mark.parametrize("raw", ["99999999999999999999999", "%C2%B2"], ids=["huge", "superscript"])
async def test_delete_fact_with_an_impossible_id_is_a_client_error(service, raw):
    status, body = await service.api("DELETE", f"/v1/facts/{raw}")
    assert status in (404, 422), body
    assert body["error"]["code"] in ("not_found", "invalid_field")


@pytest.mark.parametrize(
    ("kwargs", "status", "code", "mentions"),
    [
        ({"json": {}}, 422, "invalid_field", "text"),
        ({"json": {"scope": "user"}}, 422, "invalid_field", "text"),
        ({"json": {"text": ""}}, 422, "invalid_field", "text"),
        ({"json": {"text": "   "}}, 422, "invalid_field", "text"),
        ({"json": {"text": "x" * 501}}, 422, "invalid_field", "text"),
        ({"json": {"text": "ok", "scope": "galaxy"}}, 422, "invalid_field", "scope"),
        ({"data": b"text=hello"}, 400, "invalid_json", "JSON"),
        ({"data": b'["text"]'}, 400, "invalid_json", "object"),
        ({"data": b"\xff\xfe"}, 400, "invalid_json", "JSON"),
    ],
    ids=["empty", "no-text", "blank", "spaces", "too-long", "bad-scope", "form", "array", "binary"],
)
async def test_invalid_fact_body_is_refused(service, kwargs, status, code, mentions):
    got, body = await service.api("POST", "/v1/users/u/characters/c/facts", **kwargs)
    assert mentions in assert_error(got, body, status, code)
    assert (await counts(service))["facts"] == 0


# sessions


async def test_unknown_session_is_404(service):
    status, body = await service.api("GET", "/v1/sessions/NOPE")
    assert "NOPE" in assert_error(status, body, 404, "not_found")


async def test_known_session_reports_who_and_how(service):
    for name in ("101_agent_joined", "102_agent_left", "103_agent_history"):
        await deliver(service, load_fixture(f"agora/{name}.json"))
    status, body = await service.api("GET", "/v1/sessions/1NT29X10YHxxxxxWJOXLYHNYB")
    assert status == 200
    s = body["session"]
    assert (s["user_id"], s["character_id"], s["identity_source"]) == ("u-1", "luna", "labels")
    assert (s["status"], s["stop_reason"], s["message_count"]) == ("stopped", "OK", 2)
    assert s["labels"] == {"user_id": "u-1", "character_id": "luna"}
    assert (s["channel"], s["name"]) == ("room-42", "my-agent")


async def test_binding_moves_an_unlabelled_session_to_the_new_pair(service):
    await load_conversations(service, "nolabels")
    agent = "Y4DQXL6904KUVE06GXOQ2AQHB"
    status, body = await service.api("GET", "/v1/users/rtc:3003/characters/default/messages")
    assert len(body["messages"]) == 9
    status, body = await service.api(
        "POST", f"/v1/sessions/{agent}/bind", json={"user_id": "u-carol", "character_id": "luna"}
    )
    assert status == 200
    assert (body["session"]["user_id"], body["session"]["character_id"]) == ("u-carol", "luna")
    assert body["session"]["identity_source"] == "binding"
    status, body = await service.api("GET", "/v1/users/u-carol/characters/luna/messages")
    assert len(body["messages"]) == 9 and all(m["agent_id"] == agent for m in body["messages"])
    status, body = await service.api("GET", "/v1/users/rtc:3003/characters/default/messages")
    assert body["messages"] == []
    rows = await service.store.read(lambda v: v.messages.of_session(agent))
    assert {(r.user_id, r.character_id) for r in rows} == {("u-carol", "luna")}
    status, body = await service.api("GET", f"/v1/sessions/{agent}")
    assert (body["session"]["user_id"], body["session"]["identity_source"]) == ("u-carol", "binding")
    # A later unlabelled callback of the run does not move it back to the fallback.
    await deliver(service, agent_event(102, agent, channel="room-77", status="STOPPED", message="OK"))
    status, body = await service.api("GET", f"/v1/sessions/{agent}")
    assert (body["session"]["user_id"], body["session"]["character_id"]) == ("u-carol", "luna")


async def test_binding_before_any_callback_places_the_session(service):
    status, body = await service.api(
        "POST", "/v1/sessions/EARLY-1/bind", json={"user_id": "u-early", "character_id": "kai"}
    )
    assert status == 200 and body["session"]["user_id"] == "u-early"
    await deliver(service, agent_event(103, "EARLY-1", contents=turns(4)))
    status, body = await service.api("GET", "/v1/users/u-early/characters/kai/messages")
    assert len(body["messages"]) == 4
    session = await service.store.read(lambda v: v.sessions.get("EARLY-1"))
    assert session is not None and session.identity_source == "binding"


@pytest.mark.parametrize("payload", [{}, {"user_id": "u"}, {"user_id": "", "character_id": "c"}])
async def test_invalid_bind_body_is_422(service, payload):
    status, body = await service.api("POST", "/v1/sessions/X/bind", json=payload)
    assert_error(status, body, 422, "invalid_field")
    assert await service.store.read(lambda v: v.bindings.of_agent("X")) is None


# forgetting


def found(data: bytes, marker: str) -> bool:
    """Whether the marker (or its case-folded form, as fact dedup keys keep it) is in `data`."""
    return bool(marker.encode("utf-8") in data or marker.casefold().encode("utf-8") in data)


GONE_EN = "ZebraQuill7731"
GONE_ZH = "紫罗兰暗号七七三一"
GONE_FACT = "SecretFactHeron"
GONE_USER_FACT = "UserWideFactLynx"
KEEP_EN = "OtterKeep4410"
KEEP_ZH = "银杏保留四四一零"


def marked(marker_en: str, marker_zh: str, count: int, *, start_ms: int) -> list[dict[str, Any]]:
    lines = []
    for index in range(count):
        if index % 3 == 0:
            lines.append(f"my code word is {marker_en} number {index}, {FILLER}")
        elif index % 3 == 1:
            lines.append(f"我的暗号是{marker_zh},第{index}次。我们聊了天气和周末的计划。")
        else:
            lines.append(f"{FILLER} (plain {index})")
    return said(*lines, start_ms=start_ms)


async def seed_forget_world(service: Any) -> dict[str, dict[str, Any]]:
    """u-gone talks to luna and kai; u-keep talks to luna. Returns the 103 envelopes."""
    envelopes = {
        "gone-luna": agent_event(103, "GONE-LUNA", labels={"user_id": "u-gone", "character_id": "luna"},
                                 contents=marked(GONE_EN, GONE_ZH, 30, start_ms=1_763_690_000_000)),
        "keep-luna": agent_event(103, "KEEP-LUNA", labels={"user_id": "u-keep", "character_id": "luna"},
                                 contents=marked(KEEP_EN, KEEP_ZH, 30, start_ms=1_763_690_000_000)),
        "gone-kai": agent_event(103, "GONE-KAI", labels={"user_id": "u-gone", "character_id": "kai"},
                                contents=said("kai talk one", "kai talk two", "kai talk three")),
    }  # fmt: skip
    for name, envelope in envelopes.items():
        await deliver(service, agent_event(101, envelope["payload"]["agent_id"],
                                           labels=envelope["payload"]["labels"],
                                           notice_id=f"{name}:101"))  # fmt: skip
        await deliver(service, envelope)
    for path, text, scope in (
        ("/v1/users/u-gone/characters/luna/facts", f"Told luna about {GONE_FACT}", "character"),
        ("/v1/users/u-gone/characters/luna/facts", f"Always {GONE_USER_FACT}", "user"),
        ("/v1/users/u-keep/characters/luna/facts", f"Keeps {KEEP_EN} safe", "character"),
    ):
        status, _ = await service.api("POST", path, json={"text": text, "scope": scope})
        assert status == 201
    data = on_disk(service.settings.db_path)
    for marker in (GONE_EN, GONE_ZH, GONE_FACT, GONE_USER_FACT, KEEP_EN, KEEP_ZH):
        assert found(data, marker), f"{marker} is not on disk"  # the scan can see what is stored
    return envelopes


@pytest.mark.sqlite_only  # reads SQLite's files or runs its SQL
async def test_forget_a_pair_removes_it_and_keeps_the_rest(service):
    envelopes = await seed_forget_world(service)
    status, body = await service.api("DELETE", "/v1/users/u-gone/characters/luna")
    assert status == 200
    assert (body["user_id"], body["character_id"]) == ("u-gone", "luna")
    receipt = body["deleted"]
    assert receipt["messages"] == 30 and receipt["facts"] == 1 and receipt["sessions"] == 1
    assert receipt["raw_callbacks"] == 2  # the 101 and the 103 of GONE-LUNA

    status, body = await service.api("GET", "/v1/users/u-gone/characters/luna/messages")
    assert body["messages"] == []
    status, body = await service.api("GET", "/v1/users/u-gone/characters/kai/messages")
    assert [m["content"] for m in body["messages"]] == ["kai talk one", "kai talk two", "kai talk three"]
    status, body = await service.api("GET", "/v1/users/u-keep/characters/luna/messages")
    assert len(body["messages"]) == 30
    status, body = await service.api("GET", "/v1/users/u-gone/characters/kai/facts")
    assert [f["text"] for f in body["facts"]] == [f"Always {GONE_USER_FACT}"]
    status, body = await service.api("GET", "/v1/sessions/GONE-LUNA")
    assert status == 404
    status, body = await service.api("GET", "/v1/sessions/GONE-KAI")
    assert status == 200

    row = await service.store.read(lambda v: v.inbox.get(envelopes["gone-luna"]["noticeId"]))
    assert row is not None and row.status == "forgotten" and row.body == ""
    data = on_disk(service.settings.db_path)
    for marker in (GONE_EN, GONE_ZH, GONE_FACT):
        assert not found(data, marker), f"{marker} is still on disk"
    for marker in (KEEP_EN, KEEP_ZH, GONE_USER_FACT):
        assert found(data, marker), f"{marker} is not on disk"


@pytest.mark.sqlite_only  # reads SQLite's files or runs its SQL
async def test_forget_a_user_removes_everything_of_theirs_down_to_the_bytes(service):
    envelopes = await seed_forget_world(service)
    status, body = await service.api("DELETE", "/v1/users/u-gone")
    assert status == 200 and body["character_id"] is None
    receipt = body["deleted"]
    assert (receipt["messages"], receipt["facts"], receipt["sessions"]) == (33, 2, 2)
    assert receipt["raw_callbacks"] == 4

    for character in ("luna", "kai"):
        status, body = await service.api("GET", f"/v1/users/u-gone/characters/{character}/messages")
        assert body["messages"] == []
        status, body = await service.api("GET", f"/v1/users/u-gone/characters/{character}/facts")
        assert body["facts"] == []
        body = await system_messages(service, "u-gone", character)
        assert body["system_messages"] == []
    status, body = await service.api("GET", "/v1/users/u-keep/characters/luna/messages")
    assert len(body["messages"]) == 30
    stored = await counts(service)
    assert (stored["messages"], stored["sessions"], stored["facts"], stored["jobs"]) == (30, 1, 1, 1)
    with closing(sqlite3.connect(f"file:{service.settings.db_path}?mode=ro", uri=True)) as conn:
        statuses = dict(
            conn.execute("SELECT agent_id, group_concat(DISTINCT status) FROM inbox GROUP BY agent_id")
        )
        leftovers = conn.execute("SELECT count(*) FROM messages WHERE user_id = 'u-gone'").fetchone()[0]
    assert statuses == {"GONE-LUNA": "forgotten", "GONE-KAI": "forgotten", "KEEP-LUNA": "done"}
    assert leftovers == 0

    data = on_disk(service.settings.db_path)
    for marker in (GONE_EN, GONE_ZH, GONE_FACT, GONE_USER_FACT):
        assert not found(data, marker), f"{marker} is still on disk"
    for marker in (KEEP_EN, KEEP_ZH):
        assert found(data, marker), f"{marker} is not on disk"

    # NCS redelivers a forgotten callback: recognised, and the text does not come back.
    again = json.loads(json.dumps(envelopes["gone-luna"]))
    again["notifyMs"] += 5000
    status, answer = await service.callback(again)
    assert (status, answer["status"], answer["new_messages"]) == (200, "duplicate", 0)
    status, body = await service.api("GET", "/v1/users/u-gone/characters/luna/messages")
    assert body["messages"] == []
    assert await service.store.read(lambda v: v.sessions.get("GONE-LUNA")) is None
    await service.store.checkpoint()
    data = on_disk(service.settings.db_path)
    assert not found(data, GONE_EN), "redelivery brought the text back"
    assert not found(data, GONE_ZH), "redelivery brought the text back"


async def test_a_forget_through_one_instance_empties_the_built_contexts_of_another(start_service):
    """Another instance (or the CLI) sharing the database drops what it keeps of remembered text
    once it sees a forget: none of it could be served (each is checked against its pair's
    version), but it must not stay in that process's memory either."""
    here = await start_service()
    there = await start_service()  # a second instance on the same database
    await seed(here, "u-gone", "luna", "GONE", marked(GONE_EN, GONE_ZH, 6, start_ms=1_763_690_000_000))
    await seed(here, "u-keep", "luna", "KEEP", marked(KEEP_EN, KEEP_ZH, 6, start_ms=1_763_690_000_000))
    for user in ("u-gone", "u-keep"):
        status, body = await there.api("GET", f"/v1/users/{user}/characters/luna/system-messages")
        assert status == 200 and body["system_messages"], body
    built = there.server.app[MEMORY].reading.contexts._built
    assert len(built) == 2

    status, _ = await here.api("DELETE", "/v1/users/u-gone")
    assert status == 200
    await wait_for(lambda: not built, failure="the other instance still holds the forgotten user's context")
    status, body = await there.api("GET", "/v1/users/u-keep/characters/luna/system-messages")
    assert status == 200 and KEEP_EN in json.dumps(body, ensure_ascii=False)


# Forgetting a user wipes the raw callbacks labelled with them, also those that never became a
# session (a 103 that failed validation): they hold the user's words.
@pytest.mark.sqlite_only  # reads SQLite's files or runs its SQL
async def test_forget_a_user_also_wipes_raw_callbacks_applied_in_part(service):
    contents = said(f"remember {GONE_EN} please", "sure")
    contents.append({"content": "a message without a role"})
    envelope = agent_event(103, "GONE-FAILED", labels={"user_id": "u-gone", "character_id": "luna"},
                           contents=contents)  # fmt: skip
    answer = await deliver(service, envelope)
    assert answer["status"] == "partial"
    assert found(on_disk(service.settings.db_path), GONE_EN), "the raw body is stored"
    status, _ = await service.api("DELETE", "/v1/users/u-gone")
    assert status == 200
    row = await service.store.read(lambda v: v.inbox.get(envelope["noticeId"]))
    assert row is not None and GONE_EN not in row.body
    assert not found(on_disk(service.settings.db_path), GONE_EN), (
        "the failed callback's text is still on disk"
    )


class GatedOpenAI(FakeOpenAI):
    """The fake LLM, holding each request until the test lets it answer."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def before_answer(self, body: dict[str, Any]) -> None:
        self.arrived.set()
        await self.release.wait()


# A condense result whose pair was forgotten while the model answered is dropped, not stored.
async def test_forgetting_while_a_first_condense_runs_does_not_bring_memory_back(start_service):
    async with GatedOpenAI() as llm:
        llm.script(
            {"summary": f"The user's code word is {GONE_EN}.",
             "add_facts": [{"text": f"Code word {GONE_EN}", "scope": "user"}],
             "update_facts": [], "remove_facts": []}
        )  # fmt: skip
        service = await start_service(openai_base_url=llm.base_url, openai_api_key="test", job_sweep_s=0.05)
        await seed(service, "u-race", "luna", "RACE-1", said(f"my code word is {GONE_EN}", "noted"))
        status, _ = await service.api("POST", "/v1/users/u-race/characters/luna/condense")
        assert status == 202
        await asyncio.wait_for(llm.arrived.wait(), 10)  # the job has read the messages
        status, body = await service.api("DELETE", "/v1/users/u-race")
        assert status == 200 and body["deleted"]["messages"] == 2
        # The user talks again: the pair's new job may have the forgotten one's id (SQLite reuses it).
        await seed(
            service, "u-race", "luna", "RACE-2", said("a new start", "welcome back", start_ms=now_ms())
        )
        llm.release.set()
        # Until the job has committed or given up.
        await asyncio.wait_for(service.server.app[JOBS].drained(), 10)
        assert llm.calls == 1
        stored = await service.store.read(
            lambda v: (v.summaries.get("u-race", "luna"), v.facts.of_pair("u-race", "luna"))
        )
        assert stored == (None, [])
        status, body = await service.api("GET", "/v1/users/u-race/characters/luna/system-messages")
        assert GONE_EN not in json.dumps(body)


async def condensed(service: Any, user: str, character: str) -> dict[str, Any]:
    """Ask for the pair's condense now and wait until its summary is committed."""
    status, _ = await service.api("POST", f"/v1/users/{user}/characters/{character}/condense")
    assert status == 202

    async def covered() -> dict[str, Any] | None:
        _status, body = await service.api("GET", f"/v1/users/{user}/characters/{character}/summary")
        return body if body["summary"] is not None and body["messages_not_yet_covered"] == 0 else None

    # A deadline, not a timing: the first condense starts the worker process, which loads the
    # tokenizer (seconds of CPU on a loaded two-core machine).
    body: dict[str, Any] = await wait_for(covered, 60, failure=f"{user}/{character} was not condensed")
    return body


NOLABELS_AGENT = "Y4DQXL6904KUVE06GXOQ2AQHB"
NOLABELS_PHRASE = "Edinburgh every Friday"


# Binding a condensed session to a pair takes its summary's memory along: forgetting the pair
# leaves nothing of it under the session's earlier (fallback) pair.
async def test_binding_a_condensed_session_takes_its_memory_along(start_service, db_path):
    service = await start_service(job_sweep_s=0.05)
    await load_conversations(service, "nolabels")
    summary = await condensed(service, "rtc:3003", "default")
    assert NOLABELS_PHRASE in summary["summary"]["text"]  # the fallback pair was condensed
    status, _ = await service.api(
        "POST", f"/v1/sessions/{NOLABELS_AGENT}/bind", json={"user_id": "u-carol", "character_id": "luna"}
    )
    assert status == 200
    status, body = await service.api("DELETE", "/v1/users/u-carol")
    assert status == 200 and body["deleted"]["messages"] == 9
    # Whoever talks next as uid 3003 must not be told what u-carol said ...
    rendered = await system_messages(service, "rtc:3003", "default")
    assert NOLABELS_PHRASE not in json.dumps(rendered)
    # ... and u-carol's words are gone from the database's files, the old pair's summary (deleted
    # by the move, before the forget) included.
    await service.store.checkpoint()
    assert not found(database_files(db_path), NOLABELS_PHRASE), f"{NOLABELS_PHRASE!r} is still on disk"


# A session bound to another pair while its first pair's first condense runs: that pair had no
# summary to reset, yet the result read the session's words and is dropped all the same.
async def test_binding_a_session_while_its_pair_condenses_keeps_its_words_out_of_that_pair(
    start_service, db_path
):
    async with GatedOpenAI() as llm:
        llm.script(
            {"summary": f"The user is in {NOLABELS_PHRASE}.",
             "add_facts": [{"text": f"In {NOLABELS_PHRASE}", "scope": "user"}], "update_facts": [], "remove_facts": []}
        )  # fmt: skip
        service = await start_service(openai_base_url=llm.base_url, openai_api_key="test", job_sweep_s=0.05)
        await load_conversations(service, "nolabels")
        status, _ = await service.api("POST", "/v1/users/rtc:3003/characters/default/condense")
        assert status == 202
        await asyncio.wait_for(llm.arrived.wait(), 10)  # the job has read the session
        status, _ = await service.api(
            "POST", f"/v1/sessions/{NOLABELS_AGENT}/bind", json={"user_id": "u-carol", "character_id": "luna"}
        )
        assert status == 200
        llm.release.set()
        # It runs again, finds nothing left to condense, and is done.
        await wait_for(
            lambda: service.store.read(lambda v: v.jobs.get(CONDENSE, "rtc:3003", "default") is None),
            60,
            failure="the job of rtc:3003 did not finish",
        )
        await asyncio.wait_for(service.server.app[JOBS].drained(), 10)
        stored = await service.store.read(
            lambda v: (v.summaries.get("rtc:3003", "default"), v.facts.of_pair("rtc:3003", "default"))
        )
        assert stored == (None, []), stored
        assert llm.calls == 1
    status, body = await service.api("DELETE", "/v1/users/u-carol")
    assert status == 200 and body["deleted"]["messages"] == 9
    await service.store.checkpoint()
    assert NOLABELS_PHRASE.encode() not in database_files(db_path)


# Messages bound into a pair whose summary is past their ids still count as not yet covered.
async def test_messages_bound_into_a_condensed_pair_are_not_counted_as_covered(start_service):
    service = await start_service(job_sweep_s=0.05)
    await load_conversations(service, "nolabels")  # ids 1..9, at rtc:3003
    await seed(service, "u-carol", "luna", "CAROL-LATER", turns(6))  # ids 10..15
    await condensed(service, "u-carol", "luna")
    status, _ = await service.api(
        "POST", f"/v1/sessions/{NOLABELS_AGENT}/bind", json={"user_id": "u-carol", "character_id": "luna"}
    )
    assert status == 200
    status, body = await service.api("GET", "/v1/users/u-carol/characters/luna/messages?limit=1000")
    assert len(body["messages"]) == 15
    status, body = await service.api("GET", "/v1/users/u-carol/characters/luna/summary")
    assert body["messages_not_yet_covered"] == 9
