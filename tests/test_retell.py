"""Retell over real HTTP: its published payloads signed its way, stored, answered and refused.

Each test talks to the real app on a loopback port, with fixtures/retell's payloads (their sources
in fixtures/retell/SOURCES.md) signed as Retell's SDKs verify them.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import time
from dataclasses import replace
from typing import Any

import pytest
from conftest import FIXTURES, Service, assert_error, inbox_of, on_disk, session_of, stored

from agent_memory.core.events import SessionEvent
from agent_memory.errors import BadRequest
from agent_memory.platforms.recorded import reread
from agent_memory.platforms.retell.signatures import HEADER, sign, verify_retell
from agent_memory.web.keys import MEMORY

pytestmark = pytest.mark.postgres

API_KEY = "key_retell_test_0123456789abcdef"
RETELL = FIXTURES / "retell"
# The get-call example's call: inbound from +12137771234 to agent oBeDLo….
DOC_CALL = "Jabr9TXYYJHfvl6Syypi88rdAHYHmcq6"
DOC_AGENT = "oBeDLoLOeuAbiuaMFXRtDOLriTJ5tSxD"
DOC_CALLER = "tel:+12137771234"
DOC_LINES = [
    ("assistant", "hi how are you doing?"),
    ("user", "Doing pretty well. How are you?"),
    ("assistant", "That's great to hear! I'm doing well too, thanks! What's up?"),
    ("user", "I don't have anything in particular."),
    ("assistant", "Got it, just checking in!"),
    ("user", "Alright. See you."),
    ("assistant", "have a nice day"),
]
TOOL_CALL = "call_7f3a9c2e41b84d0e9a65c1d2"
TOOL_AGENT = "agent_3b9e0f6c2d8a4e71b5c4"


def fixture(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((RETELL / name).read_text(encoding="utf-8"))
    return payload


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def post(
    service: Service,
    payload: dict[str, Any] | bytes,
    *,
    key: str | None = API_KEY,
    at_ms: int | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a webhook signed as Retell signs it (over these exact bytes); returns (status, JSON)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent = {"Content-Type": "application/json"}
    if key is not None:
        sent[HEADER] = sign(key, body, now_ms() if at_ms is None else at_ms)
    sent.update(headers or {})
    async with service.session.post(f"{service.url}/webhooks/retell", data=body, headers=sent) as resp:
        return resp.status, await resp.json()


async def post_file(service: Service, name: str) -> tuple[int, dict[str, Any]]:
    """POST a fixture's bytes as published (not re-encoded)."""
    return await post(service, (RETELL / name).read_bytes())


@pytest.fixture
async def retell(start_service: Any) -> Service:
    """The service with Retell's key set and phone identity on."""
    service: Service = await start_service(retell_api_key=API_KEY, phone_identity=True)
    return service


def said(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages if m.kind == "turn"]


# signatures, the scheme itself


def test_the_signature_is_the_sdks_hmac_of_body_and_timestamp() -> None:
    # Retell's SDKs: HMAC-SHA256(api key, body + str(timestamp)), hex, as v=<ms>,d=<hex>.
    import hashlib
    import hmac

    body, stamp = b'{"event":"call_started"}', 1_714_608_475_945
    expected = hmac.new(API_KEY.encode(), body + b"1714608475945", hashlib.sha256).hexdigest()
    assert sign(API_KEY, body, stamp) == f"v=1714608475945,d={expected}"
    assert verify_retell(API_KEY, body, {HEADER: f"v={stamp},d={expected.upper()}"}, stamp + 299_999) == stamp


# transcripts


async def test_a_signed_call_ended_is_stored_under_the_callers_number(retell: Service) -> None:
    status, body = await post_file(retell, "call_ended.json")
    assert status == 200, body
    assert body == {"event": "call_ended", "call_id": DOC_CALL, "status": "done", "new_messages": 7}
    session = await session_of(retell, f"retell:{DOC_CALL}")
    assert session is not None
    assert (session.user_id, session.character_id) == (DOC_CALLER, DOC_AGENT)
    messages = await stored(retell, f"retell:{DOC_CALL}")
    assert said(messages) == DOC_LINES
    # The listed utterance is dated by its first word: 0.7 s after the call's start.
    assert messages[0].ts_ms == 1_703_302_407_333 + 700
    raw = await inbox_of(retell, f"retell:{DOC_CALL}:call_ended")
    assert raw is not None and raw.body == (RETELL / "call_ended.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("order", [("call_ended", "call_analyzed"), ("call_analyzed", "call_ended")])
async def test_redelivery_and_reordering_change_nothing(retell: Service, order: tuple[str, str]) -> None:
    first, second = order
    status, body = await post_file(retell, f"{first}.json")
    assert (status, body["status"], body["new_messages"]) == (200, "done", 7)
    status, body = await post_file(retell, f"{first}.json")
    assert (status, body["status"]) == (200, "duplicate")
    status, body = await post_file(retell, f"{second}.json")
    assert (status, body["status"], body["new_messages"]) == (200, "done", 0)
    status, body = await post_file(retell, f"{second}.json")
    assert (status, body["status"]) == (200, "duplicate")
    assert said(await stored(retell, f"retell:{DOC_CALL}")) == DOC_LINES


async def test_tool_calls_are_kept_as_their_own_kind(retell: Service) -> None:
    status, body = await post_file(retell, "call_analyzed_tool_calls.json")
    assert (status, body["status"], body["new_messages"]) == (200, "done", 7)
    messages = await stored(retell, f"retell:{TOOL_CALL}")
    assert [(m.role, m.kind) for m in messages] == [
        ("assistant", "turn"),
        ("user", "turn"),
        ("assistant", "turn"),
        ("user", "turn"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "turn"),
    ]
    call, result = messages[4], messages[5]
    assert call.content == "" and result.content == ""  # never said: kept out of transcripts
    assert call.extra is not None and result.extra is not None
    assert call.extra["tool_calls"][0]["function"]["name"] == "set_reminder"
    assert call.extra["tool_calls"][0]["id"] == result.extra["tool_call_id"] == "tool_9d1c2b7e"
    assert (result.extra["content"], result.extra["successful"]) == ('{"ok":true}', True)
    # Utterances dated by their first word: seconds after the call's start.
    assert [m.ts_ms for m in messages if m.kind == "turn"] == [
        1_764_324_000_000 + offset for offset in (520, 4100, 9300, 15000, 21400)
    ]


async def test_the_call_under_data_is_read_as_under_call(retell: Service) -> None:
    # Retell's own demo servers read the call object under `data` (fixtures/retell/SOURCES.md).
    payload = fixture("call_ended.json")
    payload["data"] = payload.pop("call")
    status, body = await post(retell, payload)
    assert (status, body["status"], body["new_messages"]) == (200, "done", 7)
    status, body = await post_file(retell, "call_analyzed.json")
    assert (status, body["status"], body["new_messages"]) == (200, "done", 0)


async def test_explicit_ids_win_over_the_number(retell: Service) -> None:
    by_metadata = fixture("call_ended.json")
    by_metadata["call"]["metadata"] = {"user_id": "u-ret", "character_id": "luna"}
    status, _ = await post(retell, by_metadata)
    assert status == 200
    by_variables = fixture("call_analyzed_tool_calls.json")
    by_variables["call"]["retell_llm_dynamic_variables"] = {"user_id": "u-var", "customer_name": "Ann"}
    status, _ = await post(retell, by_variables)
    assert status == 200
    session = await session_of(retell, f"retell:{DOC_CALL}")
    assert session is not None and (session.user_id, session.character_id) == ("u-ret", "luna")
    session = await session_of(retell, f"retell:{TOOL_CALL}")
    assert session is not None and (session.user_id, session.character_id) == ("u-var", TOOL_AGENT)


async def test_an_outbound_call_belongs_to_the_callee(retell: Service) -> None:
    outbound = fixture("call_ended.json")
    outbound["call"]["direction"] = "outbound"
    assert (await post(retell, outbound))[0] == 200
    session = await session_of(retell, f"retell:{DOC_CALL}")
    assert session is not None and session.user_id == "tel:+12137771235"


async def test_without_phone_identity_a_call_is_unidentified(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    service: Service = await start_service(retell_api_key=API_KEY)
    with caplog.at_level(logging.WARNING):
        status, body = await post_file(service, "call_ended.json")
    assert (status, body["status"]) == (200, "done")
    # The warning says where Retell takes the ids.
    assert any("call.metadata.user_id" in record.getMessage() for record in caplog.records)
    session = await session_of(service, f"retell:{DOC_CALL}")
    assert session is not None and session.user_id == f"agent:retell:{DOC_CALL}"
    status, body = await post_file(service, "call_inbound.json")
    assert (status, body) == (200, {"call_inbound": {"dynamic_variables": {"memory": ""}}})


async def test_the_docs_overview_example_is_acknowledged_and_stores_no_turns(retell: Service) -> None:
    status, body = await post_file(retell, "call_ended_webhook_overview.json")
    assert status == 200 and body["new_messages"] == 0
    assert await stored(retell, f"retell:{DOC_CALL}") == []


# call start


async def test_the_inbound_call_starts_with_the_callers_earlier_call(retell: Service) -> None:
    status, _ = await post_file(retell, "call_analyzed_tool_calls.json")
    assert status == 200
    # The docs' inbound sample, from the same caller to the same agent (fixtures/retell/SOURCES.md).
    inbound = fixture("call_inbound.json")
    inbound["call_inbound"].update(from_number="+14155550123", agent_id=TOOL_AGENT)
    status, body = await post(retell, inbound)
    assert status == 200
    assert set(body) == {"call_inbound"} and set(body["call_inbound"]) == {"dynamic_variables"}
    assert "Biscuit" in body["call_inbound"]["dynamic_variables"]["memory"]
    # Another caller, and the same caller to another agent, hear nothing of it.
    for number, agent in (("+14155550999", TOOL_AGENT), ("+14155550123", "agent_12345")):
        inbound["call_inbound"].update(from_number=number, agent_id=agent)
        status, body = await post(retell, inbound)
        assert (status, body) == (200, {"call_inbound": {"dynamic_variables": {"memory": ""}}})


async def test_the_docs_inbound_sample_is_answered(retell: Service) -> None:
    status, body = await post_file(retell, "call_inbound.json")
    assert (status, body) == (200, {"call_inbound": {"dynamic_variables": {"memory": ""}}})


# events memory does not read


async def test_other_events_are_acknowledged_and_an_unknown_one_logged_once(
    retell: Service, caplog: pytest.LogCaptureFixture
) -> None:
    started = {"event": "call_started", "call": fixture("call_ended_webhook_overview.json")["call"]}
    assert await post(retell, started) == (
        200,
        {"event": "call_started", "call_id": DOC_CALL, "status": "noted", "new_messages": 0},
    )
    transfer = {"event": "transfer_started", "call": fixture("call_ended.json")["call"]}
    assert await post(retell, transfer) == (
        200,
        {"event": "transfer_started", "status": "ignored", "new_messages": 0},
    )
    with caplog.at_level(logging.WARNING, logger="agent_memory.platforms.retell.webhook"):
        for _ in range(3):
            status, body = await post(retell, {"event": "call_teleported", "call": {"call_id": DOC_CALL}})
            assert (status, body["status"]) == (200, "ignored")
    assert sum("call_teleported" in record.getMessage() for record in caplog.records) == 1
    assert await stored(retell, f"retell:{DOC_CALL}") == []


# refusals


async def test_a_wrong_signature_is_refused_and_nothing_stored(retell: Service) -> None:
    status, body = await post(retell, fixture("call_ended.json"), key="key_not_the_one")
    assert "AGENT_MEMORY_RETELL_API_KEY" in assert_error(status, body, 401, "bad_signature")
    status, body = await post(retell, fixture("call_ended.json"), key=None)
    assert "x-retell-signature" in assert_error(status, body, 401, "bad_signature")
    status, body = await post(retell, fixture("call_ended.json"), key=None, headers={HEADER: "sha256=abc"})
    assert_error(status, body, 401, "bad_signature")
    # Signed over other bytes than those sent (re-serialised JSON): refused.
    raw = (RETELL / "call_ended.json").read_bytes()
    stamp = now_ms()
    header = {HEADER: sign(API_KEY, json.dumps(json.loads(raw)).encode(), stamp)}
    status, body = await post(retell, raw, key=None, headers=header)
    assert_error(status, body, 401, "bad_signature")
    assert await session_of(retell, f"retell:{DOC_CALL}") is None


@pytest.mark.parametrize("minutes", [-6, 6])
async def test_a_signature_more_than_five_minutes_off_is_refused(retell: Service, minutes: int) -> None:
    status, body = await post(retell, fixture("call_ended.json"), at_ms=now_ms() + minutes * 60_000)
    assert "5 minutes" in assert_error(status, body, 401, "bad_signature")
    status, body = await post(retell, fixture("call_ended.json"), at_ms=now_ms() - 4 * 60_000)
    assert (status, body["status"]) == (200, "done")


async def test_insecure_dev_webhooks_take_unsigned_requests_when_no_key_is_set(start_service: Any) -> None:
    service: Service = await start_service(insecure_webhooks=True, phone_identity=True)
    status, body = await post(service, fixture("call_ended.json"), key=None)
    assert (status, body["status"], body["new_messages"]) == (200, "done", 7)


async def test_without_the_api_key_webhooks_are_refused_naming_the_setting(start_service: Any) -> None:
    service: Service = await start_service(phone_identity=True)
    status, body = await post(service, fixture("call_ended.json"))
    assert "AGENT_MEMORY_RETELL_API_KEY" in assert_error(status, body, 503, "not_configured")
    status, body = await post(service, fixture("call_inbound.json"))
    assert_error(status, body, 503, "not_configured")


def without_call_id() -> dict[str, Any]:
    payload = fixture("call_ended.json")
    del payload["call"]["call_id"]
    return payload


def with_call(**fields: Any) -> dict[str, Any]:
    payload = fixture("call_ended.json")
    payload["call"].update(fields)
    return payload


@pytest.mark.parametrize(
    ("payload", "expected", "code", "says"),
    [
        (b'{"event": "call_ended", "call": ', 400, "invalid_json", "not valid JSON"),
        (b"[1, 2]", 400, "invalid_json", "JSON object"),
        ({"call": {"call_id": "x"}}, 422, "invalid_field", "event"),
        ({"event": 7}, 422, "invalid_field", "event"),
        ({"event": "call_ended"}, 422, "invalid_field", "call"),
        ({"event": "call_ended", "call": "Jabr9"}, 422, "invalid_field", "call"),
        (without_call_id(), 422, "invalid_field", "call.call_id"),
        (with_call(call_id=""), 422, "invalid_field", "call.call_id"),
        (with_call(start_timestamp="yesterday"), 422, "invalid_field", "call.start_timestamp"),
        (with_call(transcript_object="Agent: hi"), 422, "invalid_field", "call.transcript_object"),
        ({"event": "call_inbound", "call_inbound": None}, 422, "invalid_field", "call_inbound"),
        (with_call(transcript="Agent: a\u0000b"), 422, "invalid_field", "NUL"),
    ],
)
async def test_bad_bodies_get_a_4xx_naming_what_to_fix(
    retell: Service, payload: Any, expected: int, code: str, says: str
) -> None:
    status, body = await post(retell, payload)
    assert says in assert_error(status, body, expected, code)
    assert await session_of(retell, f"retell:{DOC_CALL}") is None


async def test_a_huge_body_is_refused(start_service: Any) -> None:
    service: Service = await start_service(retell_api_key=API_KEY, max_body_bytes=64 * 1024)
    huge = with_call(transcript="User: " + "la " * 40_000)
    status, body = await post(service, huge)
    assert_error(status, body, 413, "payload_too_large")


async def test_unreadable_transcript_items_are_set_aside_the_rest_kept(retell: Service) -> None:
    payload = copy.deepcopy(fixture("call_analyzed_tool_calls.json"))
    items = payload["call"]["transcript_with_tool_calls"]
    items[1]["content"] = ["not", "text"]
    items.insert(0, "hello")
    items.append({"role": "narrator", "content": "meanwhile"})
    status, body = await post(retell, payload)
    assert (status, body["status"], body["new_messages"]) == (200, "partial", 6)
    contents = [m.content for m in await stored(retell, f"retell:{TOOL_CALL}") if m.kind == "turn"]
    assert "meanwhile" not in contents and len(contents) == 4


async def test_a_recorded_webhook_is_rebuilt_from_its_raw_body(retell: Service) -> None:
    # What `agent-memory reprocess` needs: the raw body alone gives the same event again.
    payload = fixture("call_analyzed_tool_calls.json")
    payload["call"]["transcript_with_tool_calls"].append({"role": "narrator", "content": "meanwhile"})
    status, body = await post(retell, payload)
    assert (status, body["status"]) == (200, "partial")
    entry = await inbox_of(retell, f"retell:{TOOL_CALL}:call_analyzed")
    assert entry is not None and entry.status == "partial"
    raw, event = reread(entry, retell.settings)
    assert isinstance(event, SessionEvent)
    assert (raw.event_id, event.agent_id, len(event.messages)) == (entry.event_id, f"retell:{TOOL_CALL}", 7)
    outcome = await retell.server.app[MEMORY].reapply_event(raw, event)
    assert (outcome.status, outcome.new_messages) == ("partial", 0)
    # A recorded event that carries no transcript is said to be unreadable, not applied.
    inbound = replace(
        entry, event_id="retell:x:call_inbound", body=(RETELL / "call_inbound.json").read_text()
    )
    with pytest.raises(BadRequest):
        reread(inbound, retell.settings)


# forget


@pytest.mark.sqlite_only  # reads SQLite's files
async def test_forgetting_the_caller_removes_the_call_and_its_raw_webhooks(retell: Service) -> None:
    for name in ("call_analyzed_tool_calls.json",):
        assert (await post_file(retell, name))[0] == 200
    assert b"Biscuit" in on_disk(retell.settings.db_path)
    status, body = await retell.api("DELETE", "/v1/users/tel:+14155550123")
    assert status == 200, body
    row = await inbox_of(retell, f"retell:{TOOL_CALL}:call_analyzed")
    assert row is not None and row.body == ""
    assert b"Biscuit" not in on_disk(retell.settings.db_path)


# metrics


async def test_deliveries_are_counted_by_event_and_outcome(retell: Service) -> None:
    assert (await post_file(retell, "call_ended.json"))[0] == 200
    assert (await post_file(retell, "call_ended.json"))[0] == 200
    assert (await post_file(retell, "call_inbound.json"))[0] == 200
    assert (await post(retell, {"event": "call_teleported"}))[0] == 200
    assert (await post(retell, fixture("call_ended.json"), key="key_not_the_one"))[0] == 401
    headers = {"Authorization": f"Bearer {retell.settings.api_token}"}
    async with retell.session.get(f"{retell.url}/metrics", headers=headers) as resp:
        text = await resp.text()
    counted = {
        (event, outcome): float(value)
        for event, outcome, value in re.findall(
            r'^agent_memory_callbacks_total\{event_type="(retell:[^"]+)",outcome="([^"]+)"\} (\S+)$',
            text,
            re.M,
        )
    }
    assert counted == {
        ("retell:call_ended", "done"): 1.0,
        ("retell:call_ended", "duplicate"): 1.0,
        ("retell:call_inbound", "answered"): 1.0,
        ("retell:other", "ignored"): 1.0,
        ("retell:unknown", "rejected_signature"): 1.0,
    }
