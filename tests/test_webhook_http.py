"""The Agora NCS receiver over real HTTP: signatures, envelope errors, ordering, fixtures.

Every test talks to the real app on a loopback port and checks what the real SQLite
file holds afterwards.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from conftest import (
    FIXTURES,
    SECRET,
    agent_event,
    assert_error,
    counts,
    deliver,
    encode,
    inbox_of,
    load_conversations,
    load_fixture,
    session_of,
    stored,
    turns,
)

from agent_memory.platforms.agora.signatures import V1_HEADER, V2_HEADER, sign
from agent_memory.platforms.agora.webhook import WebhookAnswer

pytestmark = pytest.mark.postgres

LABELS = {"user_id": "u-hook", "character_id": "c-hook"}
# Every NCS envelope of fixtures/agora (other files there are REST bodies).
AGORA_EXAMPLES = sorted(
    path.name for path in (FIXTURES / "agora").glob("*.json")
    if "noticeId" in json.loads(path.read_text(encoding="utf-8"))
)  # fmt: skip
CONVERSATIONS = sorted(path.name for path in (FIXTURES / "conversations").glob("*.json"))


async def post_raw(service: Any, body: Any, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """POST anything to the receiver; returns (status, content type, text) without assuming JSON."""
    async with service.session.post(
        f"{service.url}/webhooks/agora", data=body, headers=headers or {}
    ) as resp:
        return resp.status, resp.content_type, await resp.text()


def history(agent_id: str, count: int = 4, **kwargs: Any) -> dict[str, Any]:
    return agent_event(103, agent_id, labels=LABELS, contents=turns(count), **kwargs)


# signatures


async def test_v2_signature_alone_is_accepted_and_stored(service):
    envelope = history("SIG-V2")
    body = encode(envelope)
    status, answer = await service.callback(
        body, secret=None, headers={"Content-Type": "application/json", V2_HEADER: sign(SECRET, body)}
    )
    assert status == 200
    assert answer["status"] == "done" and answer["new_messages"] == 4
    assert answer["noticeId"] == envelope["noticeId"]
    # The answer is written out field by field (webhook.py): it is still WebhookAnswer, whole.
    assert WebhookAnswer.model_validate(answer).model_dump() == answer
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.status == "done"
    assert len(await stored(service, "SIG-V2")) == 4


async def test_v2_signature_in_upper_case_hex_is_accepted(service):
    body = encode(history("SIG-V2-UPPER"))
    signature = sign(SECRET, body).upper()
    assert signature != sign(SECRET, body)
    status, answer = await service.callback(body, secret=None, headers={V2_HEADER: signature})
    assert (status, answer["status"]) == (200, "done")
    assert len(await stored(service, "SIG-V2-UPPER")) == 4


async def test_v1_signature_alone_is_accepted(service):
    body = encode(history("SIG-V1"))
    status, answer = await service.callback(
        body, secret=None, headers={V1_HEADER: sign(SECRET, body, "sha1")}
    )
    assert (status, answer["status"]) == (200, "done")
    assert len(await stored(service, "SIG-V1")) == 4


async def test_wrong_v2_signature_is_401_and_nothing_is_stored(service):
    envelope = history("SIG-BAD")
    body = encode(envelope)
    wrong = sign("the-rest-customer-secret", body)
    status, answer = await service.callback(
        body, secret=None, headers={V2_HEADER: wrong, V1_HEADER: sign("nope", body, "sha1")}
    )
    message = assert_error(status, answer, 401, "bad_signature")
    assert V2_HEADER in message
    assert await inbox_of(service, envelope["noticeId"]) is None
    assert await counts(service) == {
        "messages": 0, "sessions": 0, "facts": 0, "summaries": 0, "jobs": 0, "inbox": 0,
    }  # fmt: skip


async def test_signature_of_another_body_is_401(service):
    body = encode(history("SIG-TAMPERED"))
    tampered = body.replace(b"user line 0", b"user line X")
    status, answer = await service.callback(tampered, secret=None, headers=_both(body))
    assert_error(status, answer, 401, "bad_signature")
    assert (await counts(service))["inbox"] == 0


async def test_wrong_v2_with_right_v1_is_still_401(service):
    body = encode(history("SIG-V2-WINS"))
    headers = {V2_HEADER: sign("wrong-secret", body), V1_HEADER: sign(SECRET, body, "sha1")}
    status, answer = await service.callback(body, secret=None, headers=headers)
    assert V2_HEADER in assert_error(status, answer, 401, "bad_signature")
    assert (await counts(service))["inbox"] == 0


async def test_missing_signature_is_401(service):
    status, answer = await service.callback(history("SIG-NONE"), secret=None)
    message = assert_error(status, answer, 401, "bad_signature")
    assert "missing" in message
    assert (await counts(service))["inbox"] == 0


async def test_empty_signature_header_is_401(service):
    status, answer = await service.callback(history("SIG-EMPTY"), secret=None, headers={V2_HEADER: ""})
    assert_error(status, answer, 401, "bad_signature")
    assert (await counts(service))["inbox"] == 0


def _both(body: bytes) -> dict[str, str]:
    return {V2_HEADER: sign(SECRET, body), V1_HEADER: sign(SECRET, body, "sha1")}


async def test_without_a_secret_callbacks_are_refused_with_503(start_service):
    service = await start_service(webhook_secret=None)
    # Even a callback signed with some secret is refused: nothing can verify it.
    status, answer = await service.callback(history("NOSECRET"))
    message = assert_error(status, answer, 503, "not_configured")
    assert "AGORA_WEBHOOK_SECRET" in message
    assert (await counts(service))["inbox"] == 0


async def test_insecure_mode_without_a_secret_accepts_unsigned_callbacks(start_service):
    service = await start_service(webhook_secret=None, insecure_webhooks=True)
    status, answer = await service.callback(history("INSECURE"), secret=None)
    assert (status, answer["status"]) == (200, "done")
    assert len(await stored(service, "INSECURE")) == 4


async def test_insecure_flag_does_not_disable_a_configured_secret(start_service):
    service = await start_service(insecure_webhooks=True)
    status, answer = await service.callback(history("INSECURE-SECRET"), secret=None)
    assert_error(status, answer, 401, "bad_signature")
    assert (await counts(service))["inbox"] == 0


# body size


async def test_body_over_the_limit_is_413_json(start_service):
    service = await start_service(max_body_bytes=2048)
    envelope = agent_event(103, "BIG", labels=LABELS, contents=turns(200))
    body = encode(envelope)
    assert len(body) > 2048
    status, answer = await service.callback(body)
    message = assert_error(status, answer, 413, "payload_too_large")
    assert "2048" in message
    assert (await counts(service))["inbox"] == 0


async def test_chunked_body_under_the_limit_is_accepted(start_service):
    service = await start_service(max_body_bytes=4096)
    body = encode(history("CHUNKED-SMALL"))
    assert len(body) < 4096

    async def chunks():
        for start in range(0, len(body), 100):
            yield body[start : start + 100]

    status, _content_type, text = await post_raw(
        service, chunks(), {"Content-Type": "application/json", **_both(body)}
    )
    assert status == 200, text
    assert json.loads(text)["status"] == "done"
    assert len(await stored(service, "CHUNKED-SMALL")) == 4


# A chunked body (no Content-Length) over the limit gets the same JSON 413 as a declared one.
async def test_chunked_body_over_the_limit_is_413_json(start_service):
    service = await start_service(max_body_bytes=2048)
    body = encode(agent_event(103, "CHUNKED-BIG", labels=LABELS, contents=turns(200)))
    assert len(body) > 2048

    async def chunks():  # no Content-Length: aiohttp sends Transfer-Encoding: chunked
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    status, content_type, text = await post_raw(
        service, chunks(), {"Content-Type": "application/json", **_both(body)}
    )
    assert (await counts(service))["inbox"] == 0
    assert (status, content_type) == (413, "application/json"), text
    assert_error(status, json.loads(text), 413, "payload_too_large")


# malformed bodies (signed correctly, so only the body is at fault)


async def test_invalid_json_is_400_saying_why(service):
    status, answer = await service.callback(b'{"noticeId": "x", "eventType": ')
    message = assert_error(status, answer, 400, "invalid_json")
    assert "not valid JSON" in message
    assert "line 1" in message  # the decoder's position is passed on
    assert (await counts(service))["inbox"] == 0


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b'"a string"', b"42", b"null"])
async def test_json_that_is_not_an_object_is_400(service, body):
    status, answer = await service.callback(body)
    message = assert_error(status, answer, 400, "invalid_json")
    assert "object" in message
    assert (await counts(service))["inbox"] == 0


@pytest.mark.parametrize("field", ["noticeId", "eventType"])
async def test_missing_envelope_field_is_400_naming_it(service, field):
    envelope = history("NOFIELD")
    del envelope[field]
    status, answer = await service.callback(envelope)
    message = assert_error(status, answer, 400, "invalid_json")
    assert field in message
    assert (await counts(service))["inbox"] == 0


async def test_non_integer_event_type_is_400_naming_it(service):
    envelope = history("BADTYPE")
    envelope["eventType"] = "agent-history"
    status, answer = await service.callback(envelope)
    assert "eventType" in assert_error(status, answer, 400, "invalid_json")


async def test_non_utf8_body_is_400(service):
    body = b'{"noticeId": "\xff\xfe", "eventType": 103, "productId": 17, "payload": {}}'
    status, answer = await service.callback(body)
    message = assert_error(status, answer, 400, "invalid_json")
    assert "UTF-8" in message
    assert (await counts(service))["inbox"] == 0


async def test_wrong_method_on_the_receiver_is_405_json(service):
    async with service.session.get(f"{service.url}/webhooks/agora") as resp:
        assert_error(resp.status, await resp.json(), 405, "method_not_allowed")


# event kinds


async def test_console_test_callback_gets_200_test(service):
    envelope = load_fixture("agora/test_webhook.json")
    status, answer = await service.callback(envelope)
    assert status == 200
    assert answer["code"] == 0 and answer["status"] == "test"
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.status == "test"
    assert (await counts(service))["sessions"] == 0


async def test_unknown_event_type_is_kept_raw_and_answered_200(service):
    envelope = load_fixture("agora/201_unknown_telephony.json")
    body = encode(envelope)
    status, answer = await service.callback(body)
    assert (status, answer["status"]) == (200, "ignored")
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None
    assert row.event_type == 201 and row.status == "ignored"
    assert row.body == body.decode()  # the raw text, byte for byte
    assert json.loads(row.body)["payload"]["call_id"] == envelope["payload"]["call_id"]


async def test_other_product_is_answered_200_and_ignored(service):
    envelope = history("OTHER-PRODUCT")
    envelope["productId"] = 8
    status, answer = await service.callback(envelope)
    assert (status, answer["status"], answer["new_messages"]) == (200, "ignored", 0)
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.status == "ignored" and row.product_id == 8
    held = await counts(service)
    assert (held["sessions"], held["messages"]) == (0, 0)


async def test_redelivery_is_a_duplicate_and_changes_nothing(service):
    first = history("REDELIVER", count=6, notify_ms=1_763_700_000_000)
    status, answer = await service.callback(first)
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 6)
    before_row = await inbox_of(service, first["noticeId"])
    before_counts = await counts(service)

    again = json.loads(json.dumps(first))
    again["notifyMs"] = 1_763_700_009_999  # NCS rewrites notifyMs on each retry
    status, answer = await service.callback(again)
    assert status == 200
    assert answer["status"] == "duplicate" and answer["new_messages"] == 0
    assert await counts(service) == before_counts
    assert await inbox_of(service, first["noticeId"]) == before_row
    assert len(await stored(service, "REDELIVER")) == 6


async def test_same_window_under_a_new_notice_id_adds_nothing(service):
    await service.callback(history("REWINDOW", count=6, notice_id="n-1"))
    status, answer = await service.callback(history("REWINDOW", count=6, notice_id="n-2"))
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 0)
    assert len(await stored(service, "REWINDOW")) == 6
    assert (await counts(service))["inbox"] == 2


async def _stop_events(agent_id: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = {"user_id": user, "character_id": "c-order"}
    left = agent_event(
        102, agent_id, labels=labels, stop_ts=1_763_690_300, status="STOPPED",
        message="Idle for too long", notify_ms=1_763_690_301_000,
    )  # fmt: skip
    hist = agent_event(
        103, agent_id, labels=labels, stop_ts=1_763_690_300, contents=turns(6),
        notify_ms=1_763_690_302_000,
    )  # fmt: skip
    return left, hist


async def test_103_before_102_gives_the_same_session_as_102_before_103(service):
    left_a, hist_a = await _stop_events("ORDER-A", "u-order-a")
    left_b, hist_b = await _stop_events("ORDER-B", "u-order-b")
    await deliver(service, left_a, hist_a, hist_b, left_b)  # A in order, B reversed
    a, b = await session_of(service, "ORDER-A"), await session_of(service, "ORDER-B")
    assert a is not None and b is not None
    for s in (a, b):
        assert s.status == "stopped"
        assert s.stop_reason == "Idle for too long"
        assert s.stop_ms == 1_763_690_300_000
        assert s.start_ms == 1_763_690_000_000
        assert s.message_count == 6
    keys = lambda m: (m.seq, m.role, m.content, m.turn_id, m.ts_ms)  # noqa: E731
    messages_a = [keys(m) for m in await stored(service, "ORDER-A")]
    messages_b = [keys(m) for m in await stored(service, "ORDER-B")]
    assert messages_a == messages_b and len(messages_a) == 6


async def test_102_failed_marks_the_session_failed_even_when_103_follows(service):
    labels = {"user_id": "u-fail", "character_id": "c"}
    await service.callback(agent_event(101, "FAILED-1", labels=labels))
    status, _ = await service.callback(
        agent_event(102, "FAILED-1", labels=labels, status="FAILED", message="RTC connection error")
    )
    assert status == 200
    s = await session_of(service, "FAILED-1")
    assert s is not None
    assert (s.status, s.stop_reason) == ("failed", "RTC connection error")
    assert s.stop_ms is not None
    await service.callback(agent_event(103, "FAILED-1", labels=labels, contents=turns(2)))
    s = await session_of(service, "FAILED-1")
    assert s is not None and s.status == "failed" and s.message_count == 2


async def test_seconds_and_milliseconds_timestamps_store_the_same_ms(service):
    def contents(scale: int) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "what time is it", "timestamp": 1_763_690_001 * scale},
            {"role": "assistant", "content": "tea time", "timestamp": 1_763_690_002 * scale,
             "metadata": {"interrupted": True, "interrupt_timestamp": 1_763_690_003 * scale,
                          "original": "tea time, of course"}},
        ]  # fmt: skip

    seconds = agent_event(103, "TS-SECONDS", labels={"user_id": "u-ts-s", "character_id": "c"},
                          start_ts=1_763_690_000, contents=contents(1))  # fmt: skip
    millis = agent_event(103, "TS-MILLIS", labels={"user_id": "u-ts-ms", "character_id": "c"},
                         start_ts=1_763_690_000_000, contents=contents(1000))  # fmt: skip
    assert len(str(seconds["payload"]["contents"][0]["timestamp"])) == 10
    assert len(str(millis["payload"]["contents"][0]["timestamp"])) == 13
    await deliver(service, seconds, millis)
    stored_s = await stored(service, "TS-SECONDS")
    stored_ms = await stored(service, "TS-MILLIS")
    assert [m.ts_ms for m in stored_s] == [1_763_690_001_000, 1_763_690_002_000]
    assert [m.ts_ms for m in stored_s] == [m.ts_ms for m in stored_ms]
    assert [m.interrupt_ms for m in stored_s] == [m.interrupt_ms for m in stored_ms]
    assert stored_s[1].interrupt_ms == 1_763_690_003_000
    s_session, ms_session = await session_of(service, "TS-SECONDS"), await session_of(service, "TS-MILLIS")
    assert s_session.start_ms == ms_session.start_ms == 1_763_690_000_000
    status, body = await service.api("GET", "/v1/users/u-ts-s/characters/c/messages")
    assert status == 200, body
    assert [m["ts_ms"] for m in body["messages"]] == [1_763_690_001_000, 1_763_690_002_000]


async def test_empty_content_is_kept_but_never_rendered(service):
    contents = turns(5)
    contents[2]["content"] = ""  # the user said nothing ASR could hear
    contents[2]["metadata"] = {"source": "asr", "user": "1001"}
    labels = {"user_id": "u-empty", "character_id": "c"}
    status, answer = await service.callback(agent_event(103, "EMPTY", labels=labels, contents=contents))
    assert (status, answer["new_messages"]) == (200, 5)
    status, body = await service.api("GET", "/v1/users/u-empty/characters/c/messages")
    assert status == 200
    assert [m["content"] for m in body["messages"]] == [m["content"] for m in contents]
    assert body["messages"][2]["content"] == ""
    status, body = await service.api("GET", "/v1/users/u-empty/characters/c/system-messages")
    assert status == 200
    transcript = body["system_messages"][-1]["content"]
    lines = [line for line in transcript.splitlines() if line.startswith("[")]
    assert len(lines) == 4  # five stored, four rendered
    assert all(not line.rstrip().endswith(":") for line in lines)
    assert "assistant line 3" in transcript and "user line 4" in transcript


# a payload that does not validate is kept, never lost


@pytest.mark.parametrize(
    "contents",
    [5, "hello", [5], [{"content": "no role"}]],
    ids=["number", "string", "list-of-number", "no-role"],
)
async def test_103_with_unreadable_contents_is_kept_raw_and_answered_200(service, contents):
    envelope = agent_event(103, "INVALID-103", labels=LABELS, contents=contents)
    body = encode(envelope)
    status, answer = await service.callback(body)
    assert (status, answer["status"]) == (200, "partial")
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None
    assert row.status == "partial"
    assert row.body == body.decode()
    assert "contents" in (row.error or "")
    assert (await counts(service))["messages"] == 0
    # What could be applied was: the session is known, its identity from the labels.
    s = await session_of(service, "INVALID-103")
    assert s is not None and (s.user_id, s.status) == ("u-hook", "stopped")
    # A redelivery is recognised; the raw event stays as it was.
    status, answer = await service.callback(body)
    assert (status, answer["status"]) == (200, "duplicate")


# A signed callback whose payload is not an object is kept raw and answered 200 (failed): a 4xx
# would make NCS retry it three times and then drop it, and the raw event would be lost.
async def test_callback_with_a_non_object_payload_is_kept_raw(service):
    envelope = {"noticeId": "odd-payload-1", "productId": 17, "eventType": 103,
                "notifyMs": 1_763_700_000_000, "payload": ["not", "an", "object"]}  # fmt: skip
    status, answer = await service.callback(envelope)
    row = await inbox_of(service, "odd-payload-1")
    assert status == 200, answer
    assert answer["status"] == "failed"
    assert row is not None and json.loads(row.body) == envelope
    assert row.status == "failed"
    assert (await counts(service))["sessions"] == 0


# An envelope integer too large for a 64-bit column (eventType, notifyMs over 2**63-1) still
# leaves the signed callback kept raw and answered 200.
@pytest.mark.parametrize("field", ["eventType", "notifyMs"])
async def test_envelope_with_an_oversized_integer_is_kept_raw(service, field):
    envelope = history("OVERSIZED")
    envelope[field] = 10**25
    body = encode(envelope)
    status, answer = await service.callback(body)
    assert status == 200, answer
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.body == body.decode()


# the fixtures


@pytest.mark.parametrize("name", AGORA_EXAMPLES)
async def test_every_agora_example_gets_200(service, name):
    envelope = load_fixture(f"agora/{name}")
    status, answer = await service.callback(envelope)
    assert status == 200, answer
    assert answer["code"] == 0 and answer["noticeId"] == envelope["noticeId"]
    assert answer["status"] in {"done", "test", "ignored"}, answer
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.status == answer["status"]


async def test_agora_examples_together_make_one_session(service):
    await deliver(service, *(load_fixture(f"agora/{name}") for name in AGORA_EXAMPLES))
    s = await session_of(service, "1NT29X10YHxxxxxWJOXLYHNYB")
    assert s is not None
    assert (s.user_id, s.character_id, s.identity_source) == ("u-1", "luna", "labels")
    assert (s.status, s.stop_reason, s.error_count) == ("stopped", "OK", 2)
    assert (s.start_ms, s.stop_ms) == (1_715_000_000_000, 1_715_000_060_000)
    messages = await stored(service, "1NT29X10YHxxxxxWJOXLYHNYB")
    assert [m.content for m in messages] == ["hello.", "hi, how can I help you?"]
    example = await stored(service, "1E4A9H9XMR60YQ6Q0O1YLU8UB")
    assert len(example) == 6
    assert example[1].ts_ms == 1_678_901_235_000 and example[1].speaker == "user123"
    assert example[2].interrupted == 1 and example[2].interrupt_ms == 1_678_905_225_000
    assert (await counts(service))["inbox"] == len(AGORA_EXAMPLES)


def expected_per_pair(envelopes: list[dict[str, Any]]) -> tuple[Counter[tuple[str, str]], dict]:
    """Messages per (user, character) and per agent from the distinct 103 callbacks of a file."""
    per_pair: Counter[tuple[str, str]] = Counter()
    per_agent: dict[str, list[str]] = {}
    seen: set[str] = set()
    for envelope in envelopes:
        if envelope["eventType"] != 103 or envelope["noticeId"] in seen:
            continue
        seen.add(envelope["noticeId"])
        payload = envelope["payload"]
        labels = payload.get("labels") or {}
        if labels.get("user_id"):
            pair = (labels["user_id"], labels.get("character_id") or "default")
        else:
            uid = next(m["metadata"]["user"] for m in payload["contents"]
                       if m["role"] == "user" and m.get("metadata", {}).get("user"))  # fmt: skip
            pair = (f"rtc:{uid}", "default")
        per_pair[pair] += len(payload["contents"])
        per_agent[payload["agent_id"]] = [m["content"] for m in payload["contents"]]
        # A shared channel: each later speaker's own words are kept under `rtc:<uid>` too
        # (docs/memory.md, shared channels).
        spoken = [m for m in payload["contents"] if m["role"] == "user" and m.get("metadata", {}).get("user")]
        for message in spoken:
            uid = message["metadata"]["user"]
            if uid != spoken[0]["metadata"]["user"]:
                per_pair[(f"rtc:{uid}", pair[1])] += 1
                per_agent.setdefault(f"{payload['agent_id']}~{uid}", []).append(message["content"])
    return per_pair, per_agent


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_conversation_replay_stores_each_message_once(service, name):
    envelopes = load_fixture(f"conversations/{name}")
    notice_ids = set()
    for envelope in envelopes:
        status, answer = await service.callback(envelope)
        assert status == 200, answer
        expected_status = "duplicate" if envelope["noticeId"] in notice_ids else "done"
        assert answer["status"] == expected_status
        notice_ids.add(envelope["noticeId"])
    per_pair, per_agent = expected_per_pair(envelopes)
    assert per_pair and sum(per_pair.values()) > 0
    for (user, character), count in per_pair.items():
        status, body = await service.api(
            "GET", f"/v1/users/{user}/characters/{character}/messages?limit=1000"
        )
        assert status == 200
        assert len(body["messages"]) == count, (user, character)
    for agent_id, contents in per_agent.items():
        assert [m.content for m in await stored(service, agent_id)] == contents
    for envelope in envelopes:  # the last word of each run is its 102, whatever came after
        if envelope["eventType"] == 102:
            payload = envelope["payload"]
            s = await session_of(service, payload["agent_id"])
            expected = "failed" if payload["status"] == "FAILED" else "stopped"
            assert (s.status, s.stop_reason) == (expected, payload["message"])
            assert s.stop_ms == payload["stop_ts"] * 1000
    held = await counts(service)
    assert held["messages"] == sum(per_pair.values())
    assert held["inbox"] == len(notice_ids)
    assert held["sessions"] == len({e["payload"]["agent_id"] for e in envelopes} | set(per_agent))


async def test_nolabels_falls_back_to_the_rtc_uid(service):
    await load_conversations(service, "nolabels")
    s = await session_of(service, "Y4DQXL6904KUVE06GXOQ2AQHB")
    assert s is not None
    assert (s.user_id, s.character_id, s.identity_source) == ("rtc:3003", "default", "rtc")
    assert s.rtc_uid == "3003" and s.channel == "room-77"
    assert s.status == "stopped"  # no 102 came, but a 103 is only sent after the stop
    status, body = await service.api("GET", "/v1/users/rtc:3003/characters/default/messages")
    assert status == 200 and len(body["messages"]) == 9


async def test_an_undated_item_is_dated_by_its_place_in_the_list(service):
    # Agora's custom-vendor 103: the last item ("[think API injected] …") has no speech_* fields.
    envelope = load_fixture("agora/103_custom_llm_think_injected.json")
    status, answer = await service.callback(envelope)
    assert status == 200 and answer["status"] == "done", answer
    said = [item["content"] for item in envelope["payload"]["contents"]]
    rows = await stored(service, "CUSTOMLLM000000000000002")
    assert [m.content for m in rows] == said
    # Said after the reply before it: never before the greeting.
    assert [m.at_ms for m in rows] == sorted(m.at_ms for m in rows)
    assert rows[-1].at_ms >= rows[-2].at_ms == 1_715_009_208_040
    assert rows[-1].ts_ms is None  # when exactly is unknown: only its place is evidence
    status, body = await service.api("GET", "/v1/users/u-custom-think/characters/luna/messages")
    assert status == 200, body
    assert [m["content"] for m in body["messages"]] == said
