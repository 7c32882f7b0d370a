"""Vapi's server messages (platforms/vapi) through the real app on 127.0.0.1, on Vapi's published examples.

Each request is signed as Vapi signs it (the shared secret, or an HMAC credential) and posted to
`POST /webhooks/vapi`; what it kept is read back through the HTTP API and the database file.
The fixtures and their sources: fixtures/vapi/SOURCES.md.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import hmac
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, TOKEN, Service, assert_error, inbox_of, load_fixture, on_disk

from agent_memory.core.events import SessionEvent
from agent_memory.errors import BadRequest, BadSignature, InvalidField, StoreUnavailable
from agent_memory.platforms.calls import CallIdentity
from agent_memory.platforms.recorded import reread
from agent_memory.platforms.vapi.events import identity_from, read_items, read_text, time_ms
from agent_memory.platforms.vapi.signatures import hmac_headers, sign, verify_vapi
from agent_memory.platforms.vapi.webhook import with_memory
from agent_memory.settings import Settings
from agent_memory.web.keys import MEMORY

VAPI_SECRET = "test-vapi-secret"
ASSISTANT_ID = "5b0a4a08-133c-4146-9315-0984f8c6be80"
CALLER = "+14155550123"
CALLER_USER = f"tel:{CALLER}"
CALL_ID = "6f1c2a9e-8b3d-4e57-a0c4-1d2e3f4a5b6c"
REPORT = "vapi/end_of_call_report_inbound.json"
# The report's spoken items (its system prompt is left out) and its tool call and result.
SPOKEN = [
    ("assistant", "Hi, it's Luna. How was your day?"),
    ("user", "Long. My dog Biscuit turned nine today, so we had a little party."),
    ("assistant", "Happy birthday to Biscuit! Nine is a good age. Did she get a treat?"),
    ("user", "A whole sausage. Can you remind me to book her vet check next week?"),
    ("assistant", "Done: a reminder for her vet check next Tuesday."),
]
ROOT = Path(__file__).resolve().parent.parent


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def report(**call: Any) -> dict[str, Any]:
    """The published-shape report, its call's fields replaced by `call` (None removes one)."""
    body: dict[str, Any] = copy.deepcopy(load_fixture(REPORT))
    for key, value in call.items():
        if value is None:
            body["message"]["call"].pop(key, None)
        else:
            body["message"]["call"][key] = value
    return body


def assistant_request(call: dict[str, Any] | None = None, **message: Any) -> dict[str, Any]:
    """Vapi's assistant-request sample, its call replaced by `call` and message fields by `message`."""
    body: dict[str, Any] = copy.deepcopy(load_fixture("vapi/assistant_request_doc.json"))
    if call is not None:
        body["message"]["call"] = call
    body["message"].update(message)
    return body


def status_update(status: str, call_id: str = CALL_ID, **fields: Any) -> dict[str, Any]:
    """The events page's status-update, about the report's call."""
    body: dict[str, Any] = copy.deepcopy(load_fixture("vapi/events_doc_status_update.json"))
    body["message"]["status"] = status
    body["message"]["call"] = {"id": call_id, "type": "inboundPhoneCall", "customer": {"number": CALLER}}
    body["message"].update(fields)
    return body


async def post(
    service: Service,
    message: dict[str, Any] | bytes,
    *,
    headers: dict[str, str] | None = None,
    secret: str | None = VAPI_SECRET,
) -> tuple[int, Any]:
    """POST a server message as Vapi does, with the shared secret unless `headers` say otherwise."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    sent = {"Content-Type": "application/json"}
    if headers is None and secret is not None:
        sent["X-Vapi-Secret"] = secret
    sent.update(headers or {})
    async with service.session.post(f"{service.url}/webhooks/vapi", data=body, headers=sent) as resp:
        return resp.status, await resp.json()


async def stored(service: Service, user_id: str, character_id: str = "default") -> list[dict[str, Any]]:
    status, body = await service.api("GET", f"/v1/users/{user_id}/characters/{character_id}/messages")
    assert status == 200, body
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def spoken(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages if m["kind"] == "turn"]


async def start(start_service: Any, **overrides: Any) -> Service:
    """The service with Vapi configured (secret, assistant id) and `overrides`."""
    settings = {"vapi_secret": VAPI_SECRET, "vapi_assistant_id": ASSISTANT_ID, **overrides}
    service: Service = await start_service(**settings)
    return service


# what a call leaves, and what the next call starts with


@pytest.mark.postgres
async def test_a_signed_report_is_kept_under_the_callers_number_and_starts_their_next_call(
    start_service: Any,
) -> None:
    service = await start(start_service, phone_identity=True)
    status, answer = await post(service, load_fixture(REPORT))
    assert status == 200, answer
    assert answer == {"type": "end-of-call-report", "call_id": CALL_ID, "status": "done", "new_messages": 7}

    messages = await stored(service, CALLER_USER)
    assert spoken(messages) == SPOKEN
    assert {m["agent_id"] for m in messages} == {f"vapi:{CALL_ID}"}
    status, body = await service.api("GET", f"/v1/sessions/vapi:{CALL_ID}")
    assert (status, body["session"]["identity_source"]) == (200, "phone")
    # The tool call and its result are kept as their own kinds, never as said text.
    tools = [(m["role"], m["kind"], m["tool"]) for m in messages if m["kind"] != "turn"]
    assert [(role, kind) for role, kind, _ in tools] == [("assistant", "tool_call"), ("tool", "tool_result")]
    assert tools[0][2]["tool_calls"][0]["function"]["name"] == "create_reminder"
    assert tools[1][2]["tool_call_id"] == "call_Kp3RwQ9"
    assert tools[1][2]["content"] == '{"status":"created"}'
    # Each item is dated by its `time` (epoch ms).
    assert messages[0]["ts_ms"] == 1763690401440 and messages[0]["timestamp_known"]
    # The system prompt (where the call-start memory went) is not a message of the call.
    assert not any("{{memory}}" in m["content"] for m in messages)

    # The same caller's next call: the assistant-request is answered with their memory.
    status, answer = await post(service, assistant_request(customer={"number": CALLER}))
    assert status == 200, answer
    assert answer["assistantId"] == ASSISTANT_ID and "assistant" not in answer
    variables = answer["assistantOverrides"]["variableValues"]
    assert "Biscuit" in variables["memory"]
    assert (variables["user_id"], variables["character_id"]) == (CALLER_USER, "default")


@pytest.mark.postgres
async def test_explicit_ids_win_over_the_number_at_both_ends_of_a_call(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    ids = {"user_id": "u-ada", "character_id": "luna"}
    status, answer = await post(service, report(metadata=ids))
    assert (status, answer["status"]) == (200, "done")
    assert spoken(await stored(service, "u-ada", "luna")) == SPOKEN
    assert await stored(service, CALLER_USER) == []

    # Ids in the call's variables (what an outbound call's assistantOverrides sets) are read too.
    call = {"id": "call-2", "assistantOverrides": {"variableValues": ids}}
    status, answer = await post(service, assistant_request(call))
    assert status == 200, answer
    variables = answer["assistantOverrides"]["variableValues"]
    assert "Biscuit" in variables["memory"]
    assert (variables["user_id"], variables["character_id"]) == ("u-ada", "luna")


async def test_without_phone_identity_a_call_with_no_ids_is_unidentified(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start(start_service)
    status, answer = await post(service, load_fixture(REPORT))
    assert (status, answer["status"]) == (200, "done")
    warned = [r.getMessage() for r in caplog.records if "names no user" in r.getMessage()]
    assert len(warned) == 1 and "call.metadata.user_id (and .character_id)" in warned[0]
    assert await stored(service, CALLER_USER) == []
    assert spoken(await stored(service, f"agent:vapi:{CALL_ID}")) == SPOKEN
    status, answer = await post(service, assistant_request(customer={"number": CALLER}))
    assert status == 200
    assert answer["assistantOverrides"]["variableValues"] == {"memory": ""}


async def test_the_customer_is_the_callee_of_an_outbound_call_and_no_one_on_a_web_call(
    start_service: Any,
) -> None:
    service = await start(start_service, phone_identity=True)
    callee = "+442079460958"
    outbound = report(id="call-out", type="outboundPhoneCall", customer={"number": callee})
    assert (await post(service, outbound))[0] == 200
    assert spoken(await stored(service, f"tel:{callee}")) == SPOKEN
    # A web call's customer number is whatever the web client said: not an identity.
    web = report(id="call-web", type="webCall", customer={"number": "+15550001111"})
    assert (await post(service, web))[0] == 200
    assert await stored(service, "tel:+15550001111") == []
    assert spoken(await stored(service, "agent:vapi:call-web")) == SPOKEN


@pytest.mark.postgres
async def test_redelivery_and_any_order_of_a_calls_messages_change_nothing(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    # The call ends (status-update) before its report arrives, and opens after it (out of order).
    status, answer = await post(service, status_update("ended", endedReason="customer-ended-call"))
    assert (status, answer["status"]) == (200, "done")
    assert (await post(service, load_fixture(REPORT)))[1]["new_messages"] == 7
    status, answer = await post(service, status_update("in-progress"))
    assert (status, answer["status"]) == (200, "done")
    status, answer = await post(service, status_update("ringing"))
    assert (status, answer["status"]) == (200, "ignored")
    # Vapi redelivers the report (its presigned URLs differ: another body) and a status.
    again = load_fixture(REPORT)
    again["message"]["artifact"]["presignedMonoUrl"] = "https://example.com/another-url"
    assert (await post(service, again))[1] == {
        "type": "end-of-call-report",
        "call_id": CALL_ID,
        "status": "duplicate",
        "new_messages": 0,
    }
    assert (await post(service, status_update("ended")))[1]["status"] == "duplicate"
    messages = await stored(service, CALLER_USER)
    assert spoken(messages) == SPOKEN and len(messages) == 7
    status, answer = await service.api("GET", f"/v1/sessions/vapi:{CALL_ID}")
    assert status == 200, answer
    session = answer["session"]
    assert (session["user_id"], session["character_id"]) == (CALLER_USER, "default")
    assert (session["status"], session["stop_reason"]) == ("stopped", "customer-ended-call")


async def test_a_bare_message_without_its_envelope_is_read_too(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    status, answer = await post(service, load_fixture(REPORT)["message"])
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 7)


async def test_the_transcript_text_is_read_when_a_report_has_no_messages(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    body = load_fixture(REPORT)
    del body["message"]["artifact"]["messages"]
    status, answer = await post(service, body)
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 5)
    assert spoken(await stored(service, CALLER_USER)) == SPOKEN


async def test_a_recorded_report_is_rebuilt_from_its_raw_body_for_reprocess(start_service: Any) -> None:
    # What `agent-memory reprocess` needs: the raw body alone gives the same event again.
    service = await start(start_service, phone_identity=True)
    body = load_fixture(REPORT)
    body["message"]["artifact"]["messages"].insert(2, {"role": "narrator", "message": "meanwhile"})
    status, answer = await post(service, body)
    assert (status, answer["status"]) == (200, "partial")
    entry = await inbox_of(service, f"vapi:{CALL_ID}:end-of-call-report")
    assert entry is not None and entry.status == "partial"
    assert (entry.label_user, entry.label_character) == (CALLER_USER, "default")
    raw, event = reread(entry, service.settings)
    assert isinstance(event, SessionEvent)
    assert (raw.event_id, event.agent_id, len(event.messages)) == (entry.event_id, f"vapi:{CALL_ID}", 7)
    outcome = await service.server.app[MEMORY].reapply_event(raw, event)
    assert (outcome.status, outcome.new_messages) == ("partial", 0)
    # A status-update carries no transcript: unreadable for reprocess, not applied.
    await post(service, status_update("ended"))
    ended = await inbox_of(service, f"vapi:{CALL_ID}:status-update:ended")
    assert ended is not None and ended.status == "done"
    with pytest.raises(BadRequest, match="no transcript"):
        reread(ended, service.settings)


def test_a_calls_identity_is_read_from_any_of_the_places_vapi_puts_ids() -> None:
    on = Settings(phone_identity=True)
    inbound = {"id": "c", "type": "inboundPhoneCall", "customer": {"number": CALLER}}
    assert identity_from(on, inbound) == CallIdentity(CALLER_USER, "default", "phone")
    assert identity_from(Settings(), inbound) == CallIdentity(None, "default", "none")
    # The assistant-request sample: no type, the number only beside the call.
    assert identity_from(on, {"id": "c"}, {"number": CALLER}).user_id == CALLER_USER
    overrides = {
        "metadata": {"user_id": "u-meta"},
        "variableValues": {"user_id": "u-var", "character_id": "kai"},
    }
    assert identity_from(on, {**inbound, "assistantOverrides": overrides}) == CallIdentity(
        "u-var", "kai", "ids"
    )
    called = {**inbound, "assistantOverrides": overrides, "metadata": {"user_id": "u-call"}}
    assert identity_from(on, called) == CallIdentity("u-call", "kai", "ids")
    assert identity_from(on, {**inbound, "assistantOverrides": {"metadata": {"user_id": 7}}}).user_id == "7"
    # What is not Vapi's shape names no one, and is no error.
    assert identity_from(on, "call", ["x"]) == CallIdentity(None, "default", "none")
    assert identity_from(on, {"customer": "+14155550123"}) == CallIdentity(None, "default", "none")


async def test_deliveries_are_counted_per_type_and_outcome(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    await post(service, load_fixture(REPORT))
    await post(service, load_fixture(REPORT))
    await post(service, load_fixture(REPORT), secret="wrong")
    await post(service, load_fixture("vapi/events_doc_transcript.json"))
    async with service.session.get(
        f"{service.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as resp:
        assert resp.status == 200
        text = await resp.text()
    for series in (
        'event_type="vapi:end-of-call-report",outcome="done"} 1.0',
        'event_type="vapi:end-of-call-report",outcome="duplicate"} 1.0',
        'event_type="vapi:unknown",outcome="rejected_signature"} 1.0',
        'event_type="vapi:other",outcome="ignored"} 1.0',
    ):
        assert series in text, series


def test_transcript_items_and_text_are_read_as_vapi_documents_them() -> None:
    items = [
        {"role": "system", "message": "You are Luna.", "time": 1763690400000, "secondsFromStart": 0},
        {"role": "assistant", "message": "How can I help?"},  # the events page's role for the bot
        {"role": "user", "message": "Hi", "secondsFromStart": 4.86},  # no `time`: seconds into the call
        {"role": "bot", "message": "Hello", "time": 1763690401.5},  # `time` in seconds: told by magnitude
        {"role": "narrator", "message": "?"},
        {"message": "no role"},
        "not an object",
    ]
    messages, skipped = read_items(items)
    assert [(m.role, m.content, m.ts_ms, m.elapsed_ms) for m in messages] == [
        ("assistant", "How can I help?", None, None),
        ("user", "Hi", None, 4860),
        ("assistant", "Hello", 1763690401500, None),
    ]
    assert len(skipped) == 3 and "narrator" in skipped[0]
    assert read_items({"not": "a list"})[1] == [
        "artifact.messages is not a list (got dict); the transcript text is not used"
    ]
    lines, skipped = read_text("AI: Hello.\nUser: Yes,\nand more.\n\nnobody: x\n")
    assert [(m.role, m.content) for m in lines] == [
        ("assistant", "Hello."),
        ("user", "Yes,\nand more.\nnobody: x"),
    ]
    assert read_text("no speaker\nAI: hi")[1] == ["transcript line 1 names no speaker (AI: or User:)"]
    assert time_ms("2025-11-21T02:00:00.000Z") == 1763690400000
    assert time_ms("2025-11-21T02:00:00") == 1763690400000
    assert time_ms(1723595100000) == 1723595100000
    assert time_ms("not a time") is None


async def test_items_without_a_time_are_dated_by_seconds_from_the_calls_start(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    body = load_fixture(REPORT)
    for item in body["message"]["artifact"]["messages"]:
        del item["time"]
    assert (await post(service, body))[1]["new_messages"] == 7
    messages = await stored(service, CALLER_USER)
    # startedAt 2025-11-21T02:00:00Z, and 1.44 s, 5.1 s … into the call.
    assert [m["ts_ms"] - 1763690400000 for m in messages] == [1440, 5100, 11000, 17000, 22300, 23100, 24000]


async def test_a_report_with_odd_items_keeps_the_rest_and_says_what_it_left_out(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    body = load_fixture(REPORT)
    body["message"]["artifact"]["messages"].insert(2, {"role": 42, "message": "?"})
    status, answer = await post(service, body)
    assert (status, answer["status"], answer["new_messages"]) == (200, "partial", 7)


async def test_a_report_without_any_transcript_is_acknowledged(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    body = load_fixture(REPORT)
    body["message"]["artifact"] = {"recording": {}}
    assert await post(service, body) == (
        200,
        {"type": "end-of-call-report", "call_id": CALL_ID, "status": "ignored", "new_messages": 0},
    )


# the call-start answer


async def test_a_transient_assistant_carries_the_memory_in_its_system_message(start_service: Any) -> None:
    assistant = {
        "name": "Luna",
        "model": {
            "provider": "openai",
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "You are Luna, a warm companion."}],
        },
    }
    service = await start(
        start_service, phone_identity=True, vapi_assistant_id=None, vapi_assistant=assistant
    )
    await post(service, load_fixture(REPORT))
    status, answer = await post(service, assistant_request(customer={"number": CALLER}))
    assert status == 200, answer
    assert "assistantId" not in answer
    system = answer["assistant"]["model"]["messages"][0]["content"]
    assert system.startswith("You are Luna, a warm companion.\n\n") and "Biscuit" in system
    assert "Biscuit" in answer["assistantOverrides"]["variableValues"]["memory"]


def test_memory_goes_where_a_transient_assistant_can_read_it() -> None:
    with_variable = {"model": {"messages": [{"role": "system", "content": "Remember: {{ memory }}"}]}}
    assert with_memory(with_variable, "likes tea") == with_variable
    bare: dict[str, Any] = {"model": {"provider": "openai"}}
    assert with_memory(bare, "likes tea")["model"]["messages"] == [{"role": "system", "content": "likes tea"}]
    assert bare == {"model": {"provider": "openai"}}  # the setting itself is never changed
    assert with_memory(bare, "") == bare


def test_the_assistant_settings_are_one_or_the_other() -> None:
    with pytest.raises(ValueError, match="not both"):
        Settings(vapi_assistant_id="a", vapi_assistant={"name": "b"})
    env = {"AGENT_MEMORY_VAPI_ASSISTANT": '{"name": "Luna", "model": {"provider": "openai"}}'}
    assert Settings.from_env(env).vapi_assistant == {"name": "Luna", "model": {"provider": "openai"}}
    with pytest.raises(InvalidField, match=r"AGENT_MEMORY_VAPI_ASSISTANT: .*JSON object"):
        Settings.from_env({"AGENT_MEMORY_VAPI_ASSISTANT": "[1, 2]"})


async def test_a_call_starts_without_memory_when_it_cannot_be_read(
    start_service: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start(start_service, phone_identity=True)
    await post(service, load_fixture(REPORT))

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database could not commit")

    monkeypatch.setattr(service.server.app[MEMORY].reading, "system_messages", down)
    status, answer = await post(service, assistant_request(customer={"number": CALLER}))
    assert status == 200, answer
    assert answer["assistantId"] == ASSISTANT_ID
    assert answer["assistantOverrides"]["variableValues"]["memory"] == ""
    assert any("starts without it" in r.getMessage() for r in caplog.records)


async def test_an_assistant_request_without_an_assistant_to_answer_names_the_settings(
    start_service: Any,
) -> None:
    service = await start(start_service, vapi_assistant_id=None)
    status, body = await post(service, assistant_request())
    message = assert_error(status, body, 503, "not_configured")
    assert "AGENT_MEMORY_VAPI_ASSISTANT_ID" in message


# signatures


def test_the_shared_secret_and_every_hmac_encoding_vapi_offers_are_accepted() -> None:
    body = b'{"message": {"type": "status-update"}}'
    now = now_ms()
    assert verify_vapi(VAPI_SECRET, body, {"X-Vapi-Secret": VAPI_SECRET}, now) == "X-Vapi-Secret"
    assert verify_vapi(VAPI_SECRET, body, {"Authorization": f"Bearer {VAPI_SECRET}"}, now) == "Authorization"
    assert verify_vapi(VAPI_SECRET, body, {"X-Vapi-Signature": VAPI_SECRET}, now) == "X-Vapi-Signature"
    assert verify_vapi(VAPI_SECRET, body, hmac_headers(VAPI_SECRET, body, now), now) == "x-signature"
    # The timestamp in seconds, the digest in base64 after a prefix, SHA-512, no timestamp at all.
    stamp = str(now // 1000)
    digest = hmac.new(VAPI_SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256).digest()
    prefixed = {"x-signature": "sha256=" + base64.b64encode(digest).decode(), "x-timestamp": stamp}
    assert verify_vapi(VAPI_SECRET, body, prefixed, now) == "x-signature"
    sha512 = {"x-signature": sign(VAPI_SECRET, body, stamp, "sha512"), "x-timestamp": stamp}
    assert verify_vapi(VAPI_SECRET, body, sha512, now) == "x-signature"
    body_only = {"X-Vapi-Signature": sign(VAPI_SECRET, body, None)}
    assert verify_vapi(VAPI_SECRET, body, body_only, now) == "X-Vapi-Signature"
    # The body alone signed (payload format `{body}`) while a timestamp is sent all the same.
    unsigned_stamp = {"x-signature": sign(VAPI_SECRET, body, None), "x-timestamp": stamp}
    assert verify_vapi(VAPI_SECRET, body, unsigned_stamp, now) == "x-signature"


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"X-Vapi-Secret": "wrong"}, "X-Vapi-Secret does not match AGENT_MEMORY_VAPI_SECRET"),
        ({"Authorization": "Bearer wrong"}, "bearer token does not match AGENT_MEMORY_VAPI_SECRET"),
        ({"x-signature": "00" * 32, "x-timestamp": "NOW"}, "x-signature does not match the body"),
        ({"x-signature": "not a signature"}, "x-signature does not match the body"),
        ({}, "missing credential"),
    ],
)
def test_a_wrong_or_missing_credential_is_refused_with_what_to_fix(
    headers: dict[str, str], says: str
) -> None:
    now = now_ms()
    headers = {key: value.replace("NOW", str(now)) for key, value in headers.items()}
    with pytest.raises(BadSignature, match=says):
        verify_vapi(VAPI_SECRET, b"{}", headers, now)


def test_a_stale_or_unreadable_timestamp_is_refused() -> None:
    body = b"{}"
    now = now_ms()
    stale = hmac_headers(VAPI_SECRET, body, now - 10 * 60 * 1000)
    with pytest.raises(BadSignature, match=r"600 s from this service's clock.*replayed"):
        verify_vapi(VAPI_SECRET, body, stale, now)
    unreadable = {"x-signature": sign(VAPI_SECRET, body, "soon"), "x-timestamp": "soon"}
    with pytest.raises(BadSignature, match="not a Unix time"):
        verify_vapi(VAPI_SECRET, body, unreadable, now)


@pytest.mark.postgres
async def test_through_the_app_a_wrong_signature_is_401_and_keeps_nothing(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    body = json.dumps(load_fixture(REPORT)).encode()
    status, answer = await post(service, body, secret="not-the-secret")
    assert "AGENT_MEMORY_VAPI_SECRET" in assert_error(status, answer, 401, "bad_signature")
    stale = hmac_headers(VAPI_SECRET, body, now_ms() - 10 * 60 * 1000)
    status, answer = await post(service, body, headers=stale)
    assert "replayed" in assert_error(status, answer, 401, "bad_signature")
    assert await stored(service, CALLER_USER) == []
    # Signed with the HMAC credential, as Vapi's defaults do: kept.
    status, answer = await post(service, body, headers=hmac_headers(VAPI_SECRET, body, now_ms()))
    assert (status, answer["status"]) == (200, "done")
    assert spoken(await stored(service, CALLER_USER)) == SPOKEN


async def test_without_the_secret_every_message_is_refused_naming_the_setting(start_service: Any) -> None:
    service = await start(start_service, vapi_secret=None)
    status, body = await post(service, load_fixture(REPORT))
    assert "AGENT_MEMORY_VAPI_SECRET is not set" in assert_error(status, body, 503, "not_configured")


# everyday mistakes: a clear 4xx, never a 500


@pytest.mark.parametrize(
    ("body", "expected", "code", "says"),
    [
        (b"{not json", 400, "invalid_json", ""),
        (b"[1, 2]", 400, "invalid_json", "JSON object"),
        (b'{"type": "end-of-call-report"}', 422, "invalid_field", "message"),
        (b'{"message": {"type": 7}}', 422, "invalid_field", "message.type"),
        (b'{"message": {"type": "end-of-call-report", "call": "c-1"}}', 422, "invalid_field", "message.call"),
        (
            b'{"message": {"type": "end-of-call-report", "call": {"id": " "}}}',
            422,
            "invalid_field",
            "call.id",
        ),
    ],
)
async def test_malformed_messages_are_a_clear_4xx(
    start_service: Any, body: bytes, expected: int, code: str, says: str
) -> None:
    service = await start(start_service)
    status, answer = await post(service, body)
    assert says in assert_error(status, answer, expected, code)


@pytest.mark.parametrize("name", ["events_doc_end_of_call_report.json", "events_doc_status_update.json"])
async def test_the_docs_examples_without_a_call_id_say_so(start_service: Any, name: str) -> None:
    service = await start(start_service)
    status, answer = await post(service, load_fixture(f"vapi/{name}"))
    message = assert_error(status, answer, 422, "invalid_field")
    kind = load_fixture(f"vapi/{name}")["message"]["type"]
    assert message == f"message.call.id is missing: every {kind} message names the call it is about"


async def test_a_huge_body_is_413(start_service: Any) -> None:
    service = await start(start_service, max_body_bytes=64 * 1024)
    body = load_fixture(REPORT)
    body["message"]["artifact"]["transcript"] = "AI: " + "la " * 40_000
    status, answer = await post(service, json.dumps(body).encode())
    assert_error(status, answer, 413, "payload_too_large")


async def test_an_unknown_type_is_acknowledged_and_logged_once(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start(start_service)
    caplog.set_level(logging.INFO, logger="agent_memory.platforms.vapi.webhook")
    transcript = load_fixture("vapi/events_doc_transcript.json")
    for _ in range(3):
        status, answer = await post(service, transcript)
        assert (status, answer) == (
            200,
            {"type": "transcript", "call_id": None, "status": "ignored", "new_messages": 0},
        )
    said = [r for r in caplog.records if "'transcript' is acknowledged and not used" in r.getMessage()]
    assert len(said) == 1
    # Nothing of it was kept: it holds the user's words, and Vapi sends many.
    assert "I'd like to book" not in on_disk(service.settings.db_path).decode("utf-8", "replace")


# forget is final


async def test_forgetting_the_caller_leaves_no_byte_of_their_call(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    await post(service, status_update("in-progress"))
    await post(service, load_fixture(REPORT))
    await post(service, status_update("ended"))
    await service.store.checkpoint()
    assert b"Biscuit" in on_disk(service.settings.db_path)
    status, body = await service.api("DELETE", f"/v1/users/{CALLER_USER}")
    assert status == 200, body
    await service.store.checkpoint()
    assert b"Biscuit" not in on_disk(service.settings.db_path)
    # Vapi redelivers the report: recognised, and the words do not come back.
    assert (await post(service, load_fixture(REPORT)))[1]["status"] == "duplicate"
    await service.store.checkpoint()
    assert b"Biscuit" not in on_disk(service.settings.db_path)


# webhooks/vapi: the guide's samples


async def test_the_guides_samples_are_accepted(start_service: Any) -> None:
    service = await start(start_service)
    samples = sorted((ROOT / "webhooks" / "vapi").glob("*.json"))
    assert samples
    for sample in samples:
        status, answer = await post(service, sample.read_bytes())
        assert status == 200, (sample.name, answer)
    status, recalled = await service.api(
        "GET", "/v1/users/u-demo/characters/luna/recall?q=What is my dog called?"
    )
    assert status == 200 and "Biscuit" in recalled["memories"][0]["text"]


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
async def test_the_guides_curl_lines_are_accepted(start_service: Any) -> None:
    service = await start(start_service)
    guide = (ROOT / "webhooks" / "vapi.md").read_text(encoding="utf-8")
    blocks = [block for block in re.findall(r"```bash\n(.*?)```", guide, re.S) if "/webhooks/vapi" in block]
    assert len(blocks) == 2  # the shared secret, then the HMAC
    script = re.sub(r"^URL=.*$", f"URL={service.url}", "\n".join(blocks), flags=re.M)
    env = {"PATH": os.environ["PATH"], "AGENT_MEMORY_VAPI_SECRET": VAPI_SECRET}
    shell = await asyncio.create_subprocess_exec(
        "bash", "-euc", script, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await shell.communicate()
    assert shell.returncode == 0
    answers = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert [answer["status"] for answer in answers] == ["done", "done", "done", "duplicate"]
    assert answers[1]["new_messages"] == 7


def test_every_fixture_names_its_source() -> None:
    sources = (FIXTURES / "vapi" / "SOURCES.md").read_text(encoding="utf-8")
    for fixture in (FIXTURES / "vapi").glob("*.json"):
        assert f"`{fixture.name}`" in sources, fixture.name
