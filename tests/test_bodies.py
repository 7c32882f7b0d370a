"""Bodies that are mutated, malformed or stalled (issue 23 items 7, 8, 9), at the HTTP boundary.

A bad part of a signed callback costs only that part; a body the JSON reader cannot take is a
400 that says why, on every route that reads JSON; a body that stops arriving is dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from conftest import (
    SECRET,
    TOKEN,
    Service,
    agent_event,
    assert_error,
    counts,
    deliver,
    inbox_of,
    said,
    session_of,
    stored,
)
from fakes.upstream_llm import FakeUpstreamLLM

from agent_memory.core.jsonutil import MAX_JSON_DEPTH
from agent_memory.platforms.agora.signatures import agora_headers

LABELS = {"user_id": "u-body", "character_id": "luna"}
LLM_TOKEN = "agora-llm-key"


def ascii_json(value: Any) -> bytes:
    """JSON with every non-ASCII character escaped, as Agora may send it: a lone surrogate stays `\\udXXX`."""
    return json.dumps(value, ensure_ascii=True).encode()


def nested(depth: int) -> bytes:
    """An envelope whose arrays and objects nest `depth` levels in all (the envelope is the first)."""
    inner = b"[" * (depth - 2) + b"]" * (depth - 2)
    return b'{"noticeId": "deep", "eventType": 201, "productId": 17, "payload": {"x": ' + inner + b"}}"


# -- item 7: one bad field costs only itself (both backends) -----------------------------------


@pytest.mark.postgres
async def test_a_lone_surrogate_is_kept_as_a_replacement_character(service: Service) -> None:
    """A reply cut mid-emoji ("\\ud800") is stored with U+FFFD; every other item is stored as sent."""
    contents = said("hello there", "a reply cut mid-emoji \ud83d", "ok \udc00 then", "bye now")
    contents[1]["metadata"] = {"source": "llm", "original": "full reply \ud800"}
    envelope = agent_event(103, "SURROGATE", labels=LABELS, contents=contents)
    status, answer = await service.callback(ascii_json(envelope))
    assert (status, answer["status"], answer["new_messages"]) == (200, "done", 4), answer
    messages = await stored(service, "SURROGATE")
    assert [m.content for m in messages] == [
        "hello there",
        "a reply cut mid-emoji \ufffd",
        "ok \ufffd then",
        "bye now",
    ]
    assert messages[1].original == "full reply \ufffd"
    # Read back over HTTP too: the answer is valid UTF-8 JSON.
    status, body = await service.api("GET", "/v1/users/u-body/characters/luna/messages")
    assert status == 200, body
    assert [m["content"] for m in body["messages"]][1] == "a reply cut mid-emoji \ufffd"


@pytest.mark.postgres
async def test_an_impossible_time_is_ignored_logged_and_the_rest_stored(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    """start_ts, a message's timestamp and notifyMs of 10^30 cost nothing but themselves."""
    contents = said("first words", "an answer", "more words", "last answer", start_ms=1_763_690_000_000)
    contents[2]["timestamp"] = 10**30
    contents[1]["metadata"] = {"interrupted": True, "interrupt_timestamp": 10**30}
    envelope = agent_event(103, "BADTIME", labels=LABELS, contents=contents, start_ts=10**30)
    envelope["notifyMs"] = 10**30
    with caplog.at_level(logging.WARNING):
        status, answer = await service.callback(envelope)
    assert (status, answer["status"], answer["new_messages"]) == (200, "partial", 4), answer
    messages = await stored(service, "BADTIME")
    assert [m.content for m in messages] == ["first words", "an answer", "more words", "last answer"]
    assert [m.ts_ms for m in messages] == [1_763_690_000_000, 1_763_690_001_000, None, 1_763_690_003_000]
    assert messages[1].interrupted and messages[1].interrupt_ms is None
    session = await session_of(service, "BADTIME")
    assert session is not None and session.start_ms == 1_763_690_000_000  # dated by its items
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and row.status == "partial" and row.notify_ms is None
    assert "start_ts" in (row.error or "") and "contents[2].timestamp" in (row.error or "")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for field in (
        "notifyMs",
        "start_ts",
        "contents[2].timestamp",
        "contents[1].metadata.interrupt_timestamp",
    ):
        assert field in logged, (field, logged)
    assert "words" not in logged and "answer" not in logged  # no user text in the log


@pytest.mark.postgres
async def test_an_impossible_turn_time_keeps_the_turn_metrics(service: Service) -> None:
    """A 112 turn whose start_at is 10^30 keeps its latencies, dated by the callback."""
    turns = [
        {"turn_id": 1, "start": {"start_at": 10**30}, "end": {"end_at": 10**30},
         "metrics": {"e2e_latency_ms": 900, "segmented_latency_ms": {"asr_ttlw": 210}}},
        {"turn_id": 2, "start": {"start_at": 1_763_690_005_000}, "end": {"end_at": 1_763_690_007_000},
         "metrics": {"e2e_latency_ms": 1100}},
    ]  # fmt: skip
    status, answer = await service.callback(agent_event(112, "BADTURN", labels=LABELS, turns=turns))
    assert (status, answer["status"]) == (200, "partial"), answer
    status, stats = await service.api("GET", "/v1/characters/luna/stats")
    assert status == 200, stats
    assert stats["latency_ms"]["e2e_latency_ms"]["count"] == 2
    assert stats["latency_ms"]["asr_ttlw"]["count"] == 1


@pytest.mark.postgres
async def test_a_field_of_the_wrong_type_costs_only_itself(service: Service) -> None:
    """Found by bench/fuzz_bodies.py: a `channel` object or a `turn_id` of 2^64 failed the whole 103;
    a message whose `metadata.source`, `name` or `speech_start_ms` had the wrong type was set aside."""
    contents = said("hello there", "hi, what can I do", "tell me a joke", "why did the chicken")
    contents[0]["metadata"] = {"source": {}, "user": ["1001"]}
    contents[1]["name"] = {"a": 1}
    contents[2]["speech_start_ms"] = "soon"
    contents[3]["turn_id"] = 2**64  # past a 64-bit column: the message is kept without a turn
    envelope = agent_event(103, "WRONGTYPE", labels=LABELS, contents=contents, channel={"": None})
    status, answer = await service.callback(envelope)
    assert (status, answer["status"], answer["new_messages"]) == (200, "partial", 4), answer
    messages = await stored(service, "WRONGTYPE")
    assert [m.content for m in messages] == [item["content"] for item in contents]
    assert messages[0].source is None and messages[0].speaker is None
    assert messages[3].turn_id is None
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None and "channel" in (row.error or "")
    # Without a usable agent id nothing can be applied: ignored (kept raw), not failed.
    no_agent = agent_event(102, "X", notice_id="no-agent")
    no_agent["payload"]["agent_id"] = [None]
    status, answer = await service.callback(no_agent)
    assert (status, answer["status"]) == (200, "ignored"), answer


async def test_custom_llm_metadata_of_the_wrong_type_is_relayed_not_a_500(start_service: Any) -> None:
    """Found by bench/fuzz_bodies.py: `metadata.source` as an object made the custom-LLM endpoint 500."""
    async with FakeUpstreamLLM() as upstream:
        service = await start_service(llm_token=LLM_TOKEN, upstream_base_url=upstream.base_url)
        body = {
            "model": "m", "stream": True, "user_id": "u-body", "character_id": "luna",
            "messages": [
                {"role": "user", "content": "hello", "turn_id": 1, "metadata": {"source": {"x": 1}}},
                {"role": "assistant", "content": "hi", "turn_id": 1, "metadata": {"source": ["llm"]}},
                {"role": "user", "content": "how are you", "turn_id": 2, "metadata": {"user": {}}},
            ],
        }  # fmt: skip
        status, _answer = await post_text(service, "/v1/llm/chat/completions", ascii_json(body))
        assert status == 200
        assert len(upstream.requests) == 1


# -- item 8: JSON the reader cannot take is a 400, on every JSON route ------------------------

HUGE_INT = b"1" * 5000  # past Python's 4,300-digit limit of int()
PAST_FLOAT = b"9" * 400  # an integer past the float range (OverflowError where used as a float)
MALFORMED = {
    "deep": (b"[" * 3000 + b"]" * 3000, "deeper than 128"),
    "huge_int": (b'{"x": ' + HUGE_INT + b"}", "too large"),
    "past_float_int": (b'{"x": ' + PAST_FLOAT + b"}", "too large"),
    "past_float_exponent": (b'{"x": 1e400}', "too large"),
    "nan": (b'{"x": NaN}', "NaN"),
}


async def json_routes(service: Service) -> list[tuple[str, str]]:
    """(method, path) of every route whose OpenAPI operation takes a request body."""
    async with service.session.get(f"{service.url}/openapi.json") as resp:
        document = await resp.json()
    routes = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "path":
                        path = path.replace("{" + parameter["name"] + "}", "x1")
                routes.append((method.upper(), path))
    return routes


async def post_text(service: Service, path: str, body: bytes) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {LLM_TOKEN}", "Content-Type": "application/json"}
    async with service.session.post(f"{service.url}{path}", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


async def post(service: Service, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    # Every platform's custom-LLM route takes the LLM key.
    key = LLM_TOKEN if path.endswith("/chat/completions") else TOKEN
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with service.session.request(method, f"{service.url}{path}", data=body, headers=headers) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_malformed_json_is_400_on_every_json_route(start_service: Any, kind: str) -> None:
    service = await start_service(llm_token=LLM_TOKEN)
    body, says = MALFORMED[kind]
    routes = await json_routes(service)
    assert ("POST", "/v1/llm/chat/completions") in routes and ("POST", "/v1/keys") in routes
    for method, path in routes:
        status, answer = await post(service, method, path, body)
        assert status == 400, (path, answer)
        assert says in answer["error"]["message"], (path, answer)
    # The webhook, signed: NCS would retry a 5xx; a 400 says what is wrong and nothing is kept.
    status, answer = await service.callback(body)
    assert says in assert_error(status, answer, 400, "invalid_json")
    assert (await counts(service))["inbox"] == 0


@pytest.mark.parametrize("notify", [b"9" * 400, b"1e400", b"-1e400"])
async def test_notify_ms_past_the_float_range_is_400(service: Service, notify: bytes) -> None:
    body = (
        b'{"noticeId": "n-1", "productId": 17, "eventType": 101, "notifyMs": ' + notify + b', "payload": {}}'
    )
    status, answer = await service.callback(body)
    assert "too large" in assert_error(status, answer, 400, "invalid_json")
    assert (await counts(service))["inbox"] == 0


async def test_the_stated_depth_limit_is_where_bodies_are_refused(service: Service) -> None:
    """MAX_JSON_DEPTH levels are read; one more is a 400 naming the limit (brackets in strings do not count)."""
    assert MAX_JSON_DEPTH == 128
    status, answer = await service.callback(nested(MAX_JSON_DEPTH))
    assert (status, answer["status"]) == (200, "ignored"), answer
    status, answer = await service.callback(nested(MAX_JSON_DEPTH + 1))
    assert "128" in assert_error(status, answer, 400, "invalid_json")
    in_strings = agent_event(103, "BRACKETS", labels=LABELS, contents=said("[" * 500 + '\\"{' * 300, "ok"))
    await deliver(service, in_strings, expect="done")


# -- item 9: a stalled body is dropped -------------------------------------------------------


async def stall(service: Service, path: str, headers: dict[str, str]) -> tuple[str, dict[str, Any], bytes]:
    """Send the headers and part of a body, then nothing; returns (status line, JSON answer, rest until EOF)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", service.server.port)
    partial = b'{"noticeId": "stalled", "eventType": 103, "payload": {"contents": ['
    head = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Content-Length: 100000",
    ]
    head += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + partial)
    await writer.drain()
    try:
        # A bounded wait for the test's own sake: the server must answer and close long before.
        raw = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    status_line = head_bytes.split(b"\r\n", 1)[0].decode()
    length = int(
        next(
            line.split(b":")[1]
            for line in head_bytes.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    return status_line, json.loads(body[:length]), body[length:]


@pytest.mark.slow  # waits out the body timeout twice
async def test_a_stalled_body_is_answered_408_and_the_connection_closed(start_service: Any) -> None:
    service = await start_service(body_timeout_s=0.5, llm_token=LLM_TOKEN)
    partial_signature = agora_headers(SECRET, b"{}")  # headers as NCS sends them; the body never completes
    cases = [
        ("/webhooks/agora", partial_signature),
        ("/v1/users/u-body/characters/luna/facts", {"Authorization": f"Bearer {TOKEN}"}),
        ("/v1/llm/chat/completions", {"Authorization": f"Bearer {LLM_TOKEN}"}),
    ]
    for path, headers in cases:
        status_line, answer, rest = await stall(service, path, headers)
        assert status_line.startswith("HTTP/1.1 408"), (path, status_line)
        message = assert_error(408, answer, 408, "request_timeout")
        assert "AGENT_MEMORY_BODY_TIMEOUT_S" in message
        assert rest == b""  # and then the server closed the connection (read() reached EOF)
    assert (await counts(service))["inbox"] == 0
