"""ElevenLabs Agents (platforms/elevenlabs): post-call webhooks and the conversation-initiation webhook,
on ElevenLabs' published examples (fixtures/elevenlabs/SOURCES.md), signed as its SDKs check, sent to
the real service on 127.0.0.1."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import time
from dataclasses import replace
from typing import Any

import pytest
from conftest import TOKEN, Service, assert_error, counts, inbox_of, load_fixture, on_disk, stored

from agent_memory.core.events import IncomingMessage
from agent_memory.platforms.calls import CallTranscript, call_identity, store_transcript
from agent_memory.platforms.elevenlabs.payloads import Conversation
from agent_memory.platforms.elevenlabs.signatures import HEADER, sign, verify
from agent_memory.platforms.elevenlabs.transcripts import conversation_identity
from agent_memory.settings import Settings
from agent_memory.web.keys import MEMORY

SECRET = "whsec-elevenlabs-test"
CALLER = "+14155550123"
START_MS = 1_739_537_297_000  # the published example's metadata.start_time_unix_secs


def published(name: str) -> dict[str, Any]:
    return copy.deepcopy(load_fixture(f"elevenlabs/{name}"))


def as_webhook(conversation: dict[str, Any]) -> dict[str, Any]:
    """A Conversation API example inside the post-call envelope the docs document."""
    return {"type": "post_call_transcription", "event_timestamp": 1739537297, "data": conversation}


def raw(payload: dict[str, Any] | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()


async def post(
    service: Service,
    payload: dict[str, Any] | bytes,
    *,
    secret: str | None = SECRET,
    timestamp: int | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a post-call webhook signed as ElevenLabs signs it; (status, JSON answer)."""
    body = raw(payload)
    sent = {"Content-Type": "application/json"}
    if secret is not None:
        sent[HEADER] = sign(secret, body, timestamp)
    sent.update(headers or {})
    async with service.session.post(f"{service.url}/webhooks/elevenlabs", data=body, headers=sent) as resp:
        return resp.status, await resp.json()


async def initiation(
    service: Service, payload: dict[str, Any] | bytes, *, token: str | None = TOKEN
) -> tuple[int, dict[str, Any]]:
    """POST the conversation-initiation webhook, with the secret header ElevenLabs is set to send."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    url = f"{service.url}/webhooks/elevenlabs/initiation"
    async with service.session.post(url, data=raw(payload), headers=headers) as resp:
        return resp.status, await resp.json()


async def start(start_service: Any, **overrides: Any) -> Service:
    service: Service = await start_service(elevenlabs_secret=SECRET, **overrides)
    return service


def phone_call(
    caller: str = CALLER, agent: str = "agent_luna", conversation: str = "conv_1"
) -> dict[str, Any]:
    """The published transcription example, as a phone call from `caller` with no explicit user."""
    payload = published("post_call_transcription.json")
    data = payload["data"]
    data.pop("user_id")
    data["agent_id"], data["conversation_id"] = agent, conversation
    data["conversation_initiation_client_data"]["dynamic_variables"].update(
        {"system__caller_id": caller, "system__called_number": "+14155550999"}
    )
    return payload


# The signature.


def sdk_header(secret: str, body: str, timestamp: int) -> str:
    """The header as elevenlabs-python's construct_event expects it, written from its code."""
    return (
        f"t={timestamp},v0="
        + hmac.new(secret.encode("utf-8"), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    )


def test_the_signature_is_the_sdks() -> None:
    body = (load_fixture.__globals__["FIXTURES"] / "elevenlabs" / "post_call_transcription.json").read_text()
    now = int(time.time())
    assert sign(SECRET, body.encode(), now) == sdk_header(SECRET, body, now)
    assert verify(SECRET, body.encode(), sdk_header(SECRET, body, now)) == now
    # 29 minutes old passes, 31 does not (the SDKs allow 30); nor does as far ahead.
    assert verify(SECRET, body.encode(), sdk_header(SECRET, body, now - 29 * 60))
    for stale in (now - 31 * 60, now + 31 * 60):
        with pytest.raises(Exception, match="min allowed"):
            verify(SECRET, body.encode(), sdk_header(SECRET, body, stale))
    with pytest.raises(Exception, match="AGENT_MEMORY_ELEVENLABS_SECRET"):
        verify(SECRET, body.encode() + b" ", sdk_header(SECRET, body, now))
    # A rotated secret: either v0 is enough.
    both = sdk_header("old", body, now) + "," + sdk_header(SECRET, body, now).split(",")[1]
    assert verify(SECRET, body.encode(), both) == now
    for header in (None, "", "v0=abc", f"t={now}", "t=soon,v0=abc"):
        with pytest.raises(Exception, match=HEADER):
            verify(SECRET, body.encode(), header)


# The transcript.


@pytest.mark.postgres
async def test_the_published_transcription_is_kept_under_its_pair_once(start_service: Any) -> None:
    service = await start(start_service)
    payload = published("post_call_transcription.json")
    status, answer = await post(service, payload)
    assert status == 200, answer
    assert answer == {
        "type": "post_call_transcription",
        "conversation_id": "abc",
        "status": "done",
        "new_messages": 3,
    }
    memory = service.server.app[MEMORY]
    kept = await memory.reading.messages("user123", "xyz", 10)
    assert [(m.role, m.content[:20]) for m in kept] == [
        ("assistant", "Hey there angelo. Ho"),
        ("user", "Hey, can you tell me"),
        ("assistant", "I do not have access"),
    ]
    assert [m.ts_ms for m in kept] == [START_MS, START_MS + 2000, START_MS + 9000]
    assert {m.agent_id for m in kept} == {"elevenlabs:abc"}
    # A redelivery (ElevenLabs retries until it gets a 200) is a duplicate and stores nothing.
    status, again = await post(service, payload)
    assert (status, again["status"], again["new_messages"]) == (200, "duplicate", 0)
    assert len(await stored(service, "elevenlabs:abc")) == 3


async def test_tool_calls_and_results_are_kept_as_their_own_kind(start_service: Any) -> None:
    service = await start(start_service)
    status, answer = await post(service, as_webhook(published("conversation_api_example.json")))
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 3)
    items = await stored(service, "elevenlabs:conv_7401k5m9x2p8ec3rqv6dtnhb0fzw")
    assert [(m.kind, m.role) for m in items] == [
        ("turn", "user"),
        ("tool_call", "assistant"),
        ("tool_result", "tool"),
    ]
    assert items[0].content == "Hello, how are you?" and items[0].interrupted
    # Tool traffic was never said: its text is kept beside, not as what anyone said.
    assert items[1].content == items[2].content == ""
    call, result = json.loads(items[1].extra_json or "{}"), json.loads(items[2].extra_json or "{}")
    assert call["tool_calls"][0]["tool_name"] == "tool_name"
    assert (result["tool_call_id"], result["content"], result["tool_result"]["is_error"]) == (
        "request_id",
        "result_value",
        True,
    )
    # data.user_id names the user (its value in this example is the literal "user_id").
    assert {(m.user_id, m.character_id) for m in items} == {("user_id", "agent_3701k3ttaq12ewp8b7qv5rfyszkz")}


@pytest.mark.postgres
@pytest.mark.parametrize("live_first", [True, False])
async def test_turns_recorded_live_and_the_transcript_merge_in_any_order(
    start_service: Any, live_first: bool
) -> None:
    service = await start(start_service)
    memory = service.server.app[MEMORY]
    identity = call_identity(service.settings, user_id="user123", agent_id="xyz")
    live = CallTranscript(
        platform="elevenlabs",
        call_id="abc",
        event="live",
        identity=identity,
        messages=[
            IncomingMessage("assistant", "Hey there angelo. How are you?", ts_ms=START_MS),
            IncomingMessage(
                "user", "Hey, can you tell me, like, a fun fact about 11 Labs?", ts_ms=START_MS + 2000
            ),
        ],
    )
    if live_first:
        await store_transcript(memory, service.settings, live, body="{}", received_ms=START_MS)
    status, answer = await post(service, published("post_call_transcription.json"))
    assert (status, answer["new_messages"]) == (200, 1 if live_first else 3)
    if not live_first:
        outcome = await store_transcript(memory, service.settings, live, body="{}", received_ms=START_MS)
        assert outcome.new_messages == 0
    assert len(await stored(service, "elevenlabs:abc")) == 3


# Everything else ElevenLabs sends: acknowledged, never kept.


async def test_audio_failures_and_unknown_types_are_acknowledged_and_not_kept(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start(start_service)
    caplog.set_level(logging.INFO, logger="agent_memory.platforms.elevenlabs.webhook")
    for name in (
        "post_call_audio.json",
        "call_initiation_failure_twilio.json",
        "call_initiation_failure_sip.json",
    ):
        status, answer = await post(service, published(name))
        assert (status, answer["status"], answer["conversation_id"]) == (200, "ignored", "abc"), name
    for event_type in ("voice_removal_notice", "something_new", "something_new"):
        status, answer = await post(service, {"type": event_type, "event_timestamp": 1, "data": {"x": 1}})
        assert (status, answer["status"]) == (200, "ignored")
    unknown = [r for r in caplog.records if "acknowledged and not kept: only" in r.getMessage()]
    assert len(unknown) == 1  # logged once, whatever the type and however often
    assert await inbox_of(service, "elevenlabs:abc:post_call_audio") is None
    assert (await counts(service))["inbox"] == 0
    assert await stored(service, "elevenlabs:abc") == []


# Refusals.


async def test_a_wrong_stale_or_missing_signature_is_401_and_keeps_nothing(start_service: Any) -> None:
    service = await start(start_service)
    payload = published("post_call_transcription.json")
    status, answer = await post(service, payload, secret="not-the-secret")
    assert "AGENT_MEMORY_ELEVENLABS_SECRET" in assert_error(status, answer, 401, "bad_signature")
    status, answer = await post(service, payload, timestamp=int(time.time()) - 31 * 60)
    assert "min allowed" in assert_error(status, answer, 401, "bad_signature")
    status, answer = await post(service, payload, secret=None)
    assert HEADER in assert_error(status, answer, 401, "bad_signature")
    # Signed, then changed on the way: the signature is over the raw bytes.
    body = raw(payload)
    headers = {HEADER: sign(SECRET, body)}
    status, answer = await post(service, body.replace(b"angelo", b"Angelo"), secret=None, headers=headers)
    assert_error(status, answer, 401, "bad_signature")
    assert await stored(service, "elevenlabs:abc") == []


async def test_without_the_secret_every_delivery_is_refused_naming_the_setting(start_service: Any) -> None:
    service = await start_service()
    status, answer = await post(service, published("post_call_transcription.json"))
    assert "AGENT_MEMORY_ELEVENLABS_SECRET" in assert_error(status, answer, 503, "not_configured")


@pytest.mark.parametrize(
    ("body", "status", "code", "names"),
    [
        (b"{not json", 400, "invalid_json", "JSON"),
        (b"[1, 2]", 400, "invalid_json", "object"),
        (b'{"data": {}}', 422, "invalid_field", "type"),
        (b'{"type": 7, "data": {}}', 422, "invalid_field", "type"),
        (b'{"type": "post_call_transcription", "data": "abc"}', 422, "invalid_field", "data"),
        (b'{"type": "post_call_transcription"}', 422, "invalid_field", "data"),
        (
            b'{"type": "post_call_transcription", "data": {"transcript": []}}',
            422,
            "invalid_field",
            "data.conversation_id",
        ),
        (
            b'{"type": "post_call_transcription", "data": {"conversation_id": 5}}',
            422,
            "invalid_field",
            "data.conversation_id",
        ),
        (
            b'{"type": "post_call_transcription", "data": {"conversation_id": "c", "transcript": {"a": 1}}}',
            422,
            "invalid_field",
            "data.transcript",
        ),
        (
            b'{"type": "post_call_transcription", "data": {"conversation_id": "c", "metadata": {"start_time_unix_secs": "x"}}}',
            422,
            "invalid_field",
            "data.metadata.start_time_unix_secs",
        ),
    ],
)
async def test_everyday_mistakes_are_4xx_naming_what_to_fix(
    start_service: Any, body: bytes, status: int, code: str, names: str
) -> None:
    service = await start(start_service)
    got, answer = await post(service, body)
    assert names in assert_error(got, answer, status, code)


async def test_a_huge_body_is_413_and_a_bad_item_costs_only_itself(start_service: Any) -> None:
    service = await start(start_service, max_body_bytes=64 * 1024)
    status, answer = await post(service, b'{"type": "x", "pad": "' + b"a" * 70_000 + b'"}')
    assert_error(status, answer, 413, "payload_too_large")
    payload = published("post_call_transcription.json")
    payload["data"]["transcript"][1]["role"] = "narrator"
    payload["data"]["transcript"].append("not an entry")
    status, answer = await post(service, payload)
    assert (status, answer["status"], answer["new_messages"]) == (200, "partial", 2)


# Whose call it is.


def identity_of(payload: dict[str, Any], **settings: Any) -> tuple[str | None, str, str]:
    found = conversation_identity(Settings(**settings), Conversation.model_validate(payload["data"]))
    return found.user_id, found.character_id, found.via


def test_identity_explicit_ids_then_the_number() -> None:
    call = phone_call()
    assert identity_of(call) == (None, "agent_luna", "none")
    assert identity_of(call, phone_identity=True) == (f"tel:{CALLER}", "agent_luna", "phone")
    variables = call["data"]["conversation_initiation_client_data"]["dynamic_variables"]
    variables.update({"user_id": "u-angelo", "character_id": "luna"})
    assert identity_of(call, phone_identity=True) == ("u-angelo", "luna", "ids")
    # The post-call page's examples read data.metadata.user_id; the field table, data.user_id.
    published_call = published("post_call_transcription.json")
    assert identity_of(published_call) == ("user123", "xyz", "ids")
    published_call["data"].pop("user_id")
    published_call["data"]["metadata"]["user_id"] = "user456"
    assert identity_of(published_call) == ("user456", "xyz", "ids")


def test_a_user_id_that_is_the_callers_number_is_the_number() -> None:
    call = phone_call()
    call["data"]["user_id"] = CALLER
    assert identity_of(call) == (None, "agent_luna", "none")
    assert identity_of(call, phone_identity=True) == (f"tel:{CALLER}", "agent_luna", "phone")


def test_an_outbound_call_belongs_to_the_callee() -> None:
    call = phone_call(caller="+14155550999")
    variables = call["data"]["conversation_initiation_client_data"]["dynamic_variables"]
    variables["system__called_number"] = CALLER
    call["data"]["metadata"]["phone_call"] = {"direction": "outbound", "agent_number": "+14155550999"}
    assert identity_of(call, phone_identity=True)[0] == f"tel:{CALLER}"
    # external_number is the other party whatever the direction.
    call["data"]["metadata"]["phone_call"]["external_number"] = "+442079460958"
    assert identity_of(call, phone_identity=True)[0] == "tel:+442079460958"


# The call's start.


@pytest.mark.postgres
async def test_the_next_call_from_the_number_starts_with_its_memory(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True)
    status, answer = await post(service, phone_call())
    assert (status, answer["new_messages"]) == (200, 3)
    # The session says its user came from the number, not from ids the call was given.
    status, body = await service.api("GET", "/v1/sessions/elevenlabs:conv_1")
    assert (status, body["session"]["user_id"]) == (200, f"tel:{CALLER}")
    assert body["session"]["identity_source"] == "phone"
    request = published("initiation_request.json")
    request.update({"caller_id": CALLER, "agent_id": "agent_luna"})
    status, answer = await initiation(service, request)
    assert status == 200, answer
    assert set(answer) == {"type", "dynamic_variables"}
    assert answer["type"] == "conversation_initiation_client_data"
    assert "fun fact about 11 Labs" in answer["dynamic_variables"]["memory"]
    # Another agent is another character; another number, another user: nothing of this call.
    for other in ({"agent_id": "agent_kai"}, {"caller_id": "+14155550100"}):
        status, answer = await initiation(service, {**request, **other})
        assert (status, answer["dynamic_variables"]) == (200, {"memory": ""})


async def test_without_phone_identity_the_number_names_no_one(start_service: Any) -> None:
    service = await start(start_service)
    await post(service, phone_call())
    request = {**published("initiation_request.json"), "caller_id": CALLER, "agent_id": "agent_luna"}
    status, answer = await initiation(service, request)
    assert (status, answer["dynamic_variables"]) == (200, {"memory": ""})
    # Explicit ids: the app that starts the call reads the pair's memory itself (docs).
    call = phone_call()
    call["data"]["conversation_id"] = "conv_2"
    call["data"]["conversation_initiation_client_data"]["dynamic_variables"]["user_id"] = "u-angelo"
    await post(service, call)
    status, body = await service.api("GET", "/v1/users/u-angelo/characters/agent_luna/system-messages")
    assert status == 200 and "fun fact about 11 Labs" in json.dumps(body)
    status, body = await service.api("GET", "/v1/sessions/elevenlabs:conv_2")
    assert (status, body["session"]["identity_source"]) == (200, "labels")


async def test_the_prompt_override_only_when_asked(start_service: Any) -> None:
    service = await start(start_service, phone_identity=True, elevenlabs_prompt="You are Luna.\n\n{memory}")
    await post(service, phone_call())
    request = {**published("initiation_request.json"), "caller_id": CALLER, "agent_id": "agent_luna"}
    status, answer = await initiation(service, request)
    assert status == 200
    prompt = answer["conversation_config_override"]["agent"]["prompt"]["prompt"]
    assert prompt.startswith("You are Luna.\n\n") and answer["dynamic_variables"]["memory"] in prompt
    assert "fun fact" in prompt
    # The answer is the published one's shape: the same keys, the prompt where ElevenLabs reads it.
    example = published("initiation_response_example.json")
    assert set(answer) <= set(example) and answer["type"] == example["type"]
    assert isinstance(example["conversation_config_override"]["agent"]["prompt"]["prompt"], str)


async def test_the_initiation_webhook_needs_a_key(start_service: Any) -> None:
    service = await start(start_service)
    request = published("initiation_request.json")
    status, answer = await initiation(service, request, token=None)
    assert "Bearer" in assert_error(status, answer, 401, "unauthorized")
    status, answer = await initiation(service, request, token="wrong")
    assert_error(status, answer, 401, "unauthorized")
    status, created = await service.api("POST", "/v1/keys", json={"name": "elevenlabs", "scope": "read"})
    assert status == 201, created
    status, answer = await initiation(service, request, token=created["key"])
    assert (status, answer["dynamic_variables"]) == (200, {"memory": ""})
    # Amazon Connect's variant (call_id for call_sid), and bad bodies.
    status, _ = await initiation(service, {"caller_id": CALLER, "agent_id": "a", "call_id": "contact-1"})
    assert status == 200
    status, answer = await initiation(service, b"[]")
    assert_error(status, answer, 400, "invalid_json")
    status, answer = await initiation(service, {"caller_id": 4155550123})
    assert "caller_id" in assert_error(status, answer, 422, "invalid_field")


# Forget is final.


async def test_forget_removes_the_transcript_and_its_raw_delivery(start_service: Any) -> None:
    service = await start(start_service)
    payload = published("post_call_transcription.json")
    await post(service, payload)
    assert b"fun fact about 11 Labs" in on_disk(service.settings.db_path)
    status, _ = await service.api("DELETE", "/v1/users/user123")
    assert status == 200
    row = await inbox_of(service, "elevenlabs:abc:post_call_transcription")
    assert row is not None and row.status == "forgotten" and row.body == ""
    assert b"fun fact about 11 Labs" not in on_disk(service.settings.db_path)
    # ElevenLabs redelivers it: recognised, and the words do not come back.
    status, answer = await post(service, payload)
    assert (status, answer["new_messages"]) == (200, 0)
    assert await stored(service, "elevenlabs:abc") == []


# Counted, and text the databases cannot hold.


async def test_deliveries_are_counted_by_type_and_outcome(start_service: Any) -> None:
    service = await start(start_service)
    payload = published("post_call_transcription.json")
    for _ in range(2):
        await post(service, payload)
    await post(service, published("post_call_audio.json"))
    await post(service, {"type": "something_new", "data": {}})
    await post(service, payload, secret="wrong")
    async with service.session.get(
        f"{service.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as resp:
        text = await resp.text()
    for event_type, outcome, count in (
        ("elevenlabs:post_call_transcription", "done", 1),
        ("elevenlabs:post_call_transcription", "duplicate", 1),
        ("elevenlabs:post_call_audio", "ignored", 1),
        ("elevenlabs:other", "ignored", 1),
        # Refused before its type is read.
        ("elevenlabs:other", "rejected_signature", 1),
    ):
        line = f'agent_memory_callbacks_total{{event_type="{event_type}",outcome="{outcome}"}} {count:.1f}'
        assert line in text, (line, [row for row in text.splitlines() if "elevenlabs" in row])


@pytest.mark.postgres
async def test_a_nul_in_a_message_is_no_500(start_service: Any) -> None:
    service = await start(start_service)
    payload = published("post_call_transcription.json")
    payload["data"]["transcript"][1]["message"] = "before\u0000after"
    status, answer = await post(service, payload)
    assert status < 500, answer


async def test_a_recorded_transcription_is_rebuilt_from_its_raw_body_for_reprocess(
    start_service: Any,
) -> None:
    # What `agent-memory reprocess` needs: the raw body alone gives the same event again.
    from agent_memory.core.events import SessionEvent
    from agent_memory.errors import BadRequest
    from agent_memory.platforms.recorded import reread

    service = await start(start_service)
    status, _ = await post(service, published("post_call_transcription.json"))
    assert status == 200
    entry = await inbox_of(service, "elevenlabs:abc:post_call_transcription")
    assert entry is not None and entry.status == "done"
    raw_event, event = reread(entry, service.settings)
    assert isinstance(event, SessionEvent)
    assert (raw_event.event_id, event.agent_id, len(event.messages)) == (entry.event_id, "elevenlabs:abc", 3)
    outcome = await service.server.app[MEMORY].reapply_event(raw_event, event)
    assert (outcome.status, outcome.new_messages) == ("done", 0)
    # A body that is no transcription cannot be read as one.
    with pytest.raises(BadRequest, match="no transcript"):
        reread(replace(entry, body=json.dumps({"type": "post_call_audio", "data": {}})), service.settings)


def test_starting_without_the_secret_says_which_setting_to_set(caplog: pytest.LogCaptureFixture) -> None:
    from agent_memory.web.app import create_app

    with caplog.at_level(logging.INFO, logger="agent_memory.platforms.elevenlabs.install"):
        create_app(Settings(db_path=":memory:"))
    assert "AGENT_MEMORY_ELEVENLABS_SECRET is not set" in caplog.text
