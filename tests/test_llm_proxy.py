"""The custom-LLM endpoint: auth, who, recall per turn, forwarding as it streams, cancel, recording."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
from conftest import (
    Service,
    agent_event,
    agora_settings,
    deliver,
    inbox_of,
    load_fixture,
    poll,
    stored,
    wait_for,
)
from fakes.agora_server import FakeAgora
from fakes.upstream_llm import FakeUpstreamLLM, Script
from test_retention import database_files

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import LlmRoute
from agent_memory.core.events import IncomingMessage
from agent_memory.core.secrets import hash_key
from agent_memory.core.textcache import held_texts
from agent_memory.memory.ingest import merge as merging
from agent_memory.memory.ingest.arrivals import in_order
from agent_memory.memory.live_calls import BriefPairs
from agent_memory.memory.per_turn import SHORT_TURN_WORDS, normal, recall_query, text_of
from agent_memory.memory.reading import Reading, recall_in
from agent_memory.platforms.agora.custom_llm import to_openai_messages
from agent_memory.platforms.agora.keys import POLLER
from agent_memory.platforms.llm_endpoint import PARTS
from agent_memory.upstream import HttpUpstream, Target
from agent_memory.upstream.http import event_end
from agent_memory.upstream.sse import first_error

pytestmark = pytest.mark.postgres

LLM_TOKEN = "agora-llm-key"
PARAMS = {"user_id": "u-ana", "character_id": "luna"}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


async def start(start_service: Any, upstream: FakeUpstreamLLM, **overrides: Any) -> Service:
    values: dict[str, Any] = {
        "llm_token": LLM_TOKEN,
        "upstream_base_url": upstream.base_url,
        "upstream_api_key": "upstream-secret",
        "recall_timeout_ms": 5000,  # deadline tests set their own
        "llm_reply_settle_s": 0.05,
    }
    values.update(overrides)
    return await start_service(**values)


def client(service: Service, key: str = LLM_TOKEN, route: str = "") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{service.url}/v1/llm{route}", api_key=key, max_retries=0)


def agora_request() -> dict[str, Any]:
    """Agora's custom-LLM body: its system_messages first, then the short-term memory, extended fields."""
    body = copy.deepcopy(load_fixture("agora_llm/custom_llm_request.json"))
    body["messages"] = load_fixture("agora_llm/long_term_system_messages.json") + body["messages"]
    return body


async def post(service: Service, body: dict[str, Any], key: str = LLM_TOKEN) -> aiohttp.ClientResponse:
    return await service.session.post(
        f"{service.url}/v1/llm/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )


async def sse_events(response: aiohttp.ClientResponse) -> list[str]:
    text = (await response.read()).decode()
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


async def stats(service: Service) -> dict[str, int]:
    status, body = await service.api("GET", "/v1/llm/stats")
    assert status == 200
    return body["llm_proxy"]


async def test_streams_through_the_openai_sdk_with_agora_fields_rendered_and_stripped(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(words=["Once", " upon", " a time."], delay_s=0.01))
    body = agora_request()
    extra = {k: v for k, v in body.items() if k not in ("messages", "model")}
    stream = await client(service).chat.completions.create(
        model=body["model"], messages=body["messages"], stream=True, extra_body={**extra, **PARAMS}
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Once upon a time."
    sent = upstream.requests[0]
    assert upstream.headers[0]["Authorization"] == "Bearer upstream-secret"
    for name in ("turn_id", "timestamp", "interruptable", "user_id", "character_id"):
        assert name not in sent
    assert sent["stream"] is True and sent["model"] == "xxxx"
    assert all(set(m) <= {"role", "content", "name", "tool_calls", "tool_call_id"} for m in sent["messages"])
    # The interrupted reply is noted with what it meant to say; times go before the content.
    interrupted = next(m for m in sent["messages"] if "scarecrow" in (m["content"] or ""))
    assert "outstanding in his field" in interrupted["content"]
    assert sent["messages"][-2]["content"].startswith("[")


async def test_answers_without_streaming(start_service: Any, upstream: FakeUpstreamLLM) -> None:
    service = await start(start_service, upstream)
    answer = await client(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], extra_body=PARAMS
    )
    assert answer.choices[0].message.content == "Hello there."
    assert upstream.requests[0]["messages"] == [{"role": "user", "content": "hi"}]


async def test_a_wrong_or_missing_key_is_401_in_openais_shape(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    with pytest.raises(openai.AuthenticationError) as caught:
        await client(service, key="nope").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_body=PARAMS
        )
    assert caught.value.status_code == 401
    async with service.session.post(f"{service.url}/v1/llm/chat/completions", json={"messages": []}) as resp:
        assert resp.status == 401
        assert (await resp.json())["error"]["code"] == "invalid_api_key"
    # The service's API token is not the LLM key.
    response = await post(service, {"messages": [], **PARAMS}, key="test-api-token")
    assert response.status == 401
    assert upstream.requests == []


async def test_no_pair_is_a_400_that_names_llm_params(start_service: Any, upstream: FakeUpstreamLLM) -> None:
    service = await start(start_service, upstream)
    with pytest.raises(openai.BadRequestError) as caught:
        await client(service).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert "llm.params" in caught.value.message and "user_id" in caught.value.message
    assert upstream.requests == []


@pytest.mark.parametrize(("script", "status", "error"), [
    (Script(status=429, retry_after="7"), 429, openai.RateLimitError),
    (Script(status=500), 500, openai.InternalServerError),
    (Script(hang=True), 504, openai.APIStatusError),
])  # fmt: skip
async def test_upstream_errors_come_back_with_their_status(
    start_service: Any, upstream: FakeUpstreamLLM, script: Script, status: int, error: type[Exception]
) -> None:
    service = await start(start_service, upstream, upstream_first_byte_timeout_s=0.3)
    upstream.script(script)
    with pytest.raises(error) as caught:
        stream = await client(service).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, extra_body=PARAMS
        )
        async for _ in stream:
            pass
    assert isinstance(caught.value, openai.APIStatusError)
    assert caught.value.status_code == status
    assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
    if script.retry_after:
        assert caught.value.response.headers["Retry-After"] == "7"
    assert (await stats(service))["upstream_errors"] == 1


async def test_a_mid_stream_error_is_relayed_as_the_last_event(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(words=["a", "b", "c"], error_after=2))
    stream = await client(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, extra_body=PARAMS
    )
    got: list[str] = []
    with pytest.raises(openai.APIError, match="fake upstream broke"):
        async for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "ab"
    # A stream that stalls after its first chunk ends with an error event, not a hang.
    service2 = await start(start_service, upstream, upstream_first_byte_timeout_s=0.3)
    upstream.script(Script(words=["a", "b"], hang_after_first=True))
    response = await post(
        service2, {"messages": [{"role": "user", "content": "hi"}], "stream": True, **PARAMS}
    )
    events = await sse_events(response)
    assert json.loads(events[-1])["error"]["code"] == "upstream_unavailable"


async def test_tool_calls_custom_metadata_and_usage_pass_through(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(tool_calls=True, custom_metadata=True, usage=True))
    response = await post(
        service, {"messages": [{"role": "user", "content": "weather?"}], "stream": True, **PARAMS}
    )
    assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    events = await sse_events(response)
    assert json.loads(events[0])["object"] == "chat.completion.custom_metadata"
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[1:-1]]
    calls = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert calls[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chunks[-1]["usage"]["total_tokens"] == 8


async def test_a_client_that_goes_away_cancels_the_upstream_at_once(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(words=["one"] + [" more"] * 50, delay_s=0.2))
    body = {
        "messages": [{"role": "user", "content": "talk"}],
        "stream": True,
        "agent_id": "AGENT-CUT",
        **PARAMS,
    }
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{service.url}/v1/llm/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {LLM_TOKEN}"},
        )
        await response.content.readuntil(b'"one"')
        response.close()
        left = time.perf_counter()
    await wait_for(lambda: upstream.disconnects, 5, failure="the upstream never saw the disconnect")
    assert upstream.disconnects[0].at - left < 0.1
    assert upstream.disconnects[0].chunks_sent < 5
    await wait_for(lambda: _stats_cancelled(service))
    # The part streamed before the cut is recorded, marked interrupted.
    messages = await wait_for(lambda: _messages(service, assistant=True))
    assert messages[-1]["content"].startswith("one") and messages[-1]["interrupted"] is True


async def _stats_cancelled(service: Service) -> bool:
    return (await stats(service))["cancelled"] == 1


async def _messages(service: Service, *, assistant: bool = False, count: int = 0) -> list[dict[str, Any]]:
    _, body = await service.api("GET", "/v1/users/u-ana/characters/luna/messages")
    found: list[dict[str, Any]] = body["messages"]
    if assistant and not any(m["role"] == "assistant" for m in found):
        return []
    return found if len(found) >= count else []


async def remember(service: Service) -> None:
    status, _ = await service.api(
        "POST", "/v1/users/u-ana/characters/luna/facts", json={"text": "Ana's sister's dog is called Biscuit"}
    )
    assert status == 201


async def test_recalled_memory_is_one_system_message_before_the_conversation(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    await remember(service)
    messages = [
        {"role": "system", "content": "You are Luna."},
        {"role": "assistant", "content": "Hi Ana!"},
        {"role": "user", "content": "do you remember what my sister's dog is called?"},
    ]
    await client(service).chat.completions.create(model="m", messages=messages, extra_body=PARAMS)
    sent = upstream.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "system", "assistant", "user"]
    assert "Biscuit" in sent[1]["content"]
    assert (await stats(service))["memories_injected"] >= 1
    # Already in the system messages (the start memory): not repeated.
    messages[0] = {"role": "system", "content": "You are Luna.\n- Fact: Ana's sister's dog is called Biscuit"}
    await client(service).chat.completions.create(model="m", messages=messages, extra_body=PARAMS)
    again = upstream.requests[1]["messages"]
    assert sum("Biscuit" in (m["content"] or "") for m in again) == 1


async def test_the_calls_own_turns_are_not_recalled_into_it_and_leave_the_budget_to_the_past(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, recall_max_tokens=120)
    labels = {"user_id": "u-ana", "character_id": "luna"}
    past = [
        {
            "role": "user",
            "content": "My sister's dog is called Biscuit.",
            "turn_id": 1,
            "timestamp": 1_700_000_000_000,
        }
    ]
    await deliver(service, agent_event(103, "a-past", labels=labels, contents=past), expect="done")
    # This call said more about the dog than fits in the budget, and ranks above the past call.
    live = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"My sister's dog is called Rex {i}.",
         "turn_id": i // 2 + 1, "timestamp": 1_800_000_000_000 + i * 1000}
        for i in range(12)
    ]  # fmt: skip
    await deliver(service, agent_event(103, "a-live", labels=labels, contents=live), expect="done")
    while await service.store.catch_up_search():  # the endpoint recalls from what is indexed
        pass
    messages = [*live, {"role": "user", "content": "What is my sister's dog called?"}]
    body = {"model": "m", "messages": messages, "stream": False, **labels, "agent_id": "a-live"}
    response = await post(service, body)
    assert response.status == 200, await response.text()
    sent = upstream.requests[-1]["messages"]
    memory = [m["content"] for m in sent if m["role"] == "system"]
    assert len(memory) == 1 and "Biscuit" in memory[0]
    assert "Rex" not in memory[0]


async def test_a_recall_past_its_deadline_forwards_without_memory(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, recall_timeout_ms=0.001)
    await remember(service)
    answer = await client(service).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "what is my sister's dog called?"}],
        extra_body=PARAMS,
    )
    assert answer.choices[0].message.content == "Hello there."
    assert [m["role"] for m in upstream.requests[0]["messages"]] == ["user"]
    counted = await stats(service)
    assert counted["recall_misses"] == 1 and counted["memories_injected"] == 0


async def test_a_per_agent_key_names_the_pair_the_upstream_and_the_session(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, upstream_base_url="http://127.0.0.1:9/v1")
    route = LlmRoute(
        key_hash=hash_key("agent-key-1"), agent_id=None, user_id="u-ana", character_id="luna",
        upstream_base_url=upstream.base_url, upstream_api_key="callers-key", upstream_model="callers-model",
        upstream_params={"temperature": 0.3, "user_id": "u-ana"}, created_ms=now_ms(),
    )  # fmt: skip
    await service.store.write(lambda tx: tx.llm_routes.add(route))
    assert await service.store.write(lambda tx: tx.llm_routes.set_agent(route.key_hash, "AGENT-KEYED"))
    assert [r.key_hash for r in await service.store.read(lambda v: v.llm_routes.of_agent("AGENT-KEYED"))] == [
        route.key_hash
    ]
    answer = await client(service, key="agent-key-1", route="/anything/here").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello luna"}]
    )
    assert answer.choices[0].message.content == "Hello there."
    sent = upstream.requests[0]
    assert sent["model"] == "callers-model" and sent["temperature"] == 0.3 and "user_id" not in sent
    assert upstream.headers[0]["Authorization"] == "Bearer callers-key"
    found = await wait_for(lambda: _messages(service, count=2))
    assert [(m["role"], m["content"]) for m in found] == [
        ("user", "hello luna"),
        ("assistant", "Hello there."),
    ]
    # Forgetting the user deletes the route: its key stops working.
    status, receipt = await service.api("DELETE", "/v1/users/u-ana")
    assert status == 200 and receipt["deleted"]["llm_routes"] == 1
    with pytest.raises(openai.AuthenticationError):
        await client(service, key="agent-key-1").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )


def call_turns() -> list[dict[str, Any]]:
    """Agora's short-term memory of one call (extended fields), turn by turn."""
    base = 1_795_000_000_000
    lines = [
        ("user", "hi Luna, it's Ana"), ("assistant", "Hi Ana! How was the night shift?"),
        ("user", "long, but my sister's dog Biscuit cheered me up"), ("assistant", "Biscuit sounds lovely."),
        ("user", "she is a corgi"), ("assistant", "Corgis are the best."),
    ]  # fmt: skip
    return [
        {"role": role, "content": text, "turn_id": i // 2 + 1, "timestamp": base + i * 1000,
         "metadata": {"source": "asr", "user": "1001"} if role == "user" else {"source": "llm"}}
        for i, (role, text) in enumerate(lines)
    ]  # fmt: skip


async def drive_call(service: Service, upstream: FakeUpstreamLLM, agent_id: str) -> None:
    """The call as Agora drives a custom LLM: one streamed request per user turn; the model says the replies."""
    memory = call_turns()
    for index in range(0, len(memory), 2):
        upstream.script(Script(words=[memory[index + 1]["content"]]))
        body = {
            "messages": [{"role": "system", "content": "You are Luna."}, *memory[: index + 1]],
            "stream": True, "model": "m", "turn_id": index // 2 + 1, "timestamp": 1_795_000_000,
            "interruptable": True, "agent_id": agent_id, **PARAMS,
        }  # fmt: skip
        response = await post(service, body)
        assert (await sse_events(response))[-1] == "[DONE]"


def history_of(agent_id: str) -> dict[str, Any]:
    return agent_event(103, agent_id, labels=dict(PARAMS), contents=call_turns())


def transcript(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


async def test_the_transcript_from_the_endpoint_equals_the_callbacks_and_nothing_doubles(
    start_service: Any, upstream: FakeUpstreamLLM, tmp_path: Any
) -> None:
    expected = [(m["role"], m["content"]) for m in call_turns()]
    by_callbacks = await start(start_service, upstream, db_path=tmp_path / "callbacks.db")
    await deliver(by_callbacks, history_of("AGENT-CB"))
    assert transcript(await _messages(by_callbacks)) == expected

    by_endpoint = await start(start_service, upstream, db_path=tmp_path / "endpoint.db")
    await drive_call(by_endpoint, upstream, "AGENT-EP")
    found = await wait_for(lambda: _messages(by_endpoint, count=len(expected)))
    assert transcript(found) == expected

    both = await start(start_service, upstream, db_path=tmp_path / "both.db")
    await deliver(both, agent_event(101, "AGENT-BOTH", labels=dict(PARAMS)))
    await drive_call(both, upstream, "AGENT-BOTH")
    await wait_for(lambda: _messages(both, count=len(expected)))
    await deliver(both, history_of("AGENT-BOTH"))
    await asyncio.sleep(0.2)  # past the settle time: a held reply would land now
    assert transcript(await _messages(both)) == expected
    assert (await stats(both))["record_errors"] == 0


async def test_a_recorded_reply_follows_the_question_it_answers(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    # Agora dates each turn as it happens, so the run's session starts among them.
    turns = [{"role": "user", "content": "what's the weather like?", "turn_id": 1, "timestamp": now_ms()}]
    for turn_id, said in ((1, "Sunny all day."), (2, "Rain, sadly.")):
        if turn_id == 2:
            await asyncio.sleep(0.05)
            turns += [
                {"role": "assistant", "content": "Sunny all day.", "turn_id": 1, "timestamp": now_ms() - 40},
                {"role": "user", "content": "and tomorrow?", "turn_id": 2, "timestamp": now_ms()},
            ]
        upstream.script(Script(words=[said]))
        body = {
            "messages": turns,
            "stream": True,
            "model": "m",
            "turn_id": turn_id,
            "agent_id": "A-ORDER",
            **PARAMS,
        }
        assert (await sse_events(await post(service, body)))[-1] == "[DONE]"
    # The last reply has no next request to carry it: it is recorded after the settle time.
    found = await wait_for(lambda: _messages(service, count=4))
    assert transcript(found) == [
        ("user", "what's the weather like?"), ("assistant", "Sunny all day."),
        ("user", "and tomorrow?"), ("assistant", "Rain, sadly."),
    ]  # fmt: skip


def test_a_reply_seen_before_its_run_was_first_stored_still_follows_its_question() -> None:
    # An undated question is dated by the session's start, which the first merge sets: the reply
    # may have reached the caller a moment before that.
    said = [
        IncomingMessage(role="user", content="hello"),
        IncomingMessage(role="assistant", content="hi", seen_ms=900),
    ]
    assert [item.at_ms for item in in_order(said, 1000)] == [1000, 1000]


def delta(text: str) -> bytes:
    """A streamed chunk's JSON saying `text`."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}  # fmt: skip
    return json.dumps(chunk).encode()


# Events as a network may cut them: mid-JSON, between the two newlines, several in one read, CRLF.
CUT = [
    b"data: " + delta("Hel")[:20],
    delta("Hel")[20:] + b"\n",
    b"\ndata: " + delta("lo") + b"\r\n\r\ndata: " + delta(" you") + b"\n\n",
    b"data: [DONE]\n\n",
]


async def test_events_cut_anywhere_by_the_network_reach_the_caller_whole(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    upstream.script(Script(raw=CUT, delay_s=0.02))
    seam = HttpUpstream(connect_timeout_s=1, first_byte_timeout_s=1)
    answer = await seam.open(Target(upstream.base_url), b'{"stream": true, "messages": []}')
    blocks = [block async for block in answer.events()]
    answer.close()
    await seam.close()
    assert b"".join(blocks) == b"".join(CUT)
    assert all(event_end(block) == len(block) for block in blocks)  # never part of an event
    # Through the endpoint, recording: the reply is read from the relayed blocks once, at the end.
    service = await start(start_service, upstream)
    upstream.script(Script(raw=CUT, delay_s=0.02))
    stream = await client(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_body={**PARAMS, "agent_id": "AGENT-CUT-EVENTS"},
    )  # fmt: skip
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "Hello you"
    found = await wait_for(lambda: _messages(service, assistant=True))
    assert transcript(found) == [("user", "hi"), ("assistant", "Hello you")]


async def test_an_error_inside_a_block_is_the_last_event_relayed(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    error = b'data: {"error": {"message": "fake upstream broke", "type": "server_error"}}\n\n'
    block = b"data: " + delta("a") + b"\n\n" + error + b"data: " + delta("after") + b"\n\n"
    found = first_error(block)
    assert found is not None and block[found[0] : found[1]] == error
    assert first_error(b"data: " + delta('the "error" word') + b"\n\n") is None
    service = await start(start_service, upstream)
    upstream.script(Script(raw=[block]))
    response = await post(
        service, {"messages": [{"role": "user", "content": "hi"}], "stream": True, **PARAMS}
    )
    events = await sse_events(response)
    assert json.loads(events[-1])["error"]["message"] == "fake upstream broke"
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "a"
    assert not any("after" in event for event in events)
    # An error before anything else is the answer's status.
    upstream.script(Script(raw=[error]))
    response = await post(
        service, {"messages": [{"role": "user", "content": "hi"}], "stream": True, **PARAMS}
    )
    assert response.status == 502
    assert (await response.json())["error"]["message"] == "fake upstream broke"
    assert (await stats(service))["upstream_errors"] == 2


async def test_the_turns_are_recorded_when_the_upstream_fails(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(status=500))
    body = {
        "messages": [{"role": "user", "content": "are you there?"}],
        "stream": True,
        "agent_id": "AGENT-DOWN",
    }
    response = await post(service, {**body, **PARAMS})
    assert response.status == 500
    found = await wait_for(lambda: _messages(service, count=1))
    assert transcript(found) == [("user", "are you there?")]


async def test_recall_misses_are_all_counted_and_logged_once_in_a_while(
    start_service: Any, upstream: FakeUpstreamLLM, caplog: pytest.LogCaptureFixture
) -> None:
    service = await start(start_service, upstream, recall_timeout_ms=0.001)
    await remember(service)
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.per_turn")
    for _ in range(3):
        await client(service).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "what is my sister's dog called?"}],
            extra_body=PARAMS,
        )
    assert (await stats(service))["recall_misses"] == 3
    assert sum("missed its" in record.getMessage() for record in caplog.records) == 1


def test_a_pair_is_brief_after_a_quick_recall_and_not_after_a_slow_or_unfinished_one() -> None:
    pairs = BriefPairs(4.0, held=2)
    assert ("u", "c") not in pairs
    pairs.took(("u", "c"), 1.5)
    assert ("u", "c") in pairs
    pairs.took(("u", "c"), 9.0)
    assert ("u", "c") not in pairs
    pairs.took(("u", "c"), 1.0)
    pairs.took(("u", "c"), None)
    assert ("u", "c") not in pairs
    for user in ("a", "b", "d"):
        pairs.took((user, "c"), 1.0)
    # Held at most two: the third starts the set again (a pair still in a call rejoins at once).
    assert ("d", "c") in pairs and ("a", "c") not in pairs


async def memory_sent(service: Service, upstream: FakeUpstreamLLM) -> list[str]:
    """Ask about the dog; the system messages the model was sent."""
    await client(service).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "what is my sister's dog called?"}],
        extra_body=PARAMS,
    )
    return [m["content"] for m in upstream.requests[-1]["messages"] if m["role"] == "system"]


async def test_a_briefly_recalled_pair_is_read_as_brief_and_still_held_to_its_deadline(
    start_service: Any, upstream: FakeUpstreamLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a loaded test machine a tiny pair's recall still counts as brief.
    service = await start(start_service, upstream, recall_timeout_ms=200, recall_brief_ms=150)
    await remember(service)
    recall_here = Reading.recall_here
    brief_reads: list[float] = []

    def watched(reading: Reading, *args: Any, **kwargs: Any) -> Any:
        brief_reads.append(time.perf_counter())
        return recall_here(reading, *args, **kwargs)

    async def ask() -> list[str]:
        return await memory_sent(service, upstream)

    monkeypatch.setattr(Reading, "recall_here", watched)
    first, second = await ask(), await ask()
    assert "Biscuit" in first[0] and second == first
    assert len(brief_reads) == 1 and (await stats(service))["recalls_brief"] == 1

    def slow_recall(*args: Any, **kwargs: Any) -> Any:
        # Read on the loop (SQLite) this blocks it, as a slow read there would: it cannot be
        # cut short. PostgreSQL declines to read there, and its reader thread is.
        time.sleep(0.3)
        return recall_in(*args, **kwargs)

    monkeypatch.setattr("agent_memory.memory.reading.recall_in", slow_recall)
    assert await ask() == []  # past its deadline: forwarded without memory
    counted = await stats(service)
    assert counted["recall_misses"] == 1 and counted["recalls_brief"] == 2
    monkeypatch.setattr("agent_memory.memory.reading.recall_in", recall_in)
    # The pair goes back to a reader thread (recall_here is not asked again) and is answered again.
    assert "Biscuit" in (await ask())[0]
    assert (await stats(service))["recalls_brief"] == 2


async def test_a_pair_whose_read_was_slow_goes_back_to_a_reader_thread(
    start_service: Any, upstream: FakeUpstreamLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = await start(start_service, upstream, recall_brief_ms=150)
    await remember(service)

    def slow_recall(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return recall_in(*args, **kwargs)

    assert "Biscuit" in (await memory_sent(service, upstream))[0]
    monkeypatch.setattr("agent_memory.memory.reading.recall_in", slow_recall)
    # Within its deadline the slow read still answers; the pair's next recall is not brief.
    assert "Biscuit" in (await memory_sent(service, upstream))[0]
    assert "Biscuit" in (await memory_sent(service, upstream))[0]
    counted = await stats(service)
    assert counted["recalls_brief"] == 1 and counted["recall_misses"] == 0


async def test_a_brief_time_of_zero_keeps_every_recall_on_a_reader_thread(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, recall_brief_ms=0)
    await remember(service)
    for _ in range(3):
        assert "Biscuit" in (await memory_sent(service, upstream))[0]
    assert (await stats(service))["recalls_brief"] == 0


# Forget in the middle of a live call: final, whatever the call, the poller or Agora send after.

SAID_BEFORE = (
    "my locker code is Qzvxwjkq4471",
    "Noted, Qzvxwjkq4471.",
    "the cat is Wfxbnrtz",
    "Wfxbnrtz, lovely.",
)
SAID_AFTER = ("new start, call me Plovrenki", "Hello again, Plovrenki.")


def turn(role: str, text: str, turn_id: int, at_ms: int) -> dict[str, Any]:
    meta = {"source": "asr", "user": "1001"} if role == "user" else {"source": "llm"}
    return {"role": role, "content": text, "turn_id": turn_id, "timestamp": at_ms, "metadata": meta}


async def ask(service: Service, upstream: FakeUpstreamLLM, agent_id: str, memory: list[dict[str, Any]],
              reply: str) -> None:  # fmt: skip
    """One request of the call as Agora sends it, the model saying `reply`."""
    upstream.script(Script(words=[reply]))
    body = {
        "messages": [{"role": "system", "content": "You are Luna."}, *memory], "stream": True, "model": "m",
        "turn_id": memory[-1]["turn_id"], "agent_id": agent_id, **PARAMS,
    }  # fmt: skip
    assert (await sse_events(await post(service, body)))[-1] == "[DONE]"


async def test_a_forget_in_the_middle_of_a_live_call_is_final(
    start_service: Any, upstream: FakeUpstreamLLM, fake: FakeAgora, db_path: Any
) -> None:
    service = await start(start_service, upstream, **agora_settings(fake), llm_reply_settle_s=0.5)
    poller = service.server.app[POLLER]
    assert poller.scheduler is not None
    poller.scheduler.pause()
    agent = "AGENT-FORGET-LIVE"
    fake.add_agent(agent)
    await deliver(service, agent_event(101, agent, labels=dict(PARAMS)), expect="done")  # followed
    start_ms = now_ms() - 60_000
    before = [turn("user" if i % 2 == 0 else "assistant", text, i // 2 + 1, start_ms + i * 1000)
              for i, text in enumerate(SAID_BEFORE)]  # fmt: skip
    await ask(service, upstream, agent, before[:1], SAID_BEFORE[1])
    await ask(service, upstream, agent, before[:3], SAID_BEFORE[3])  # its reply is held now
    await wait_for(lambda: _messages(service, count=3))

    # A poll under way reads the history before the forget and merges it after.
    fake.say(agent, before)
    fake.latency_s = 0.5
    polling = asyncio.ensure_future(poll(service))
    await wait_for(lambda: fake.count("/history") == 1)
    status, body = await service.api("DELETE", "/v1/users/u-ana")
    assert status == 200 and body["deleted"]["messages"] == 3, body
    await polling
    fake.latency_s = 0

    # The call goes on: its next request carries what was said before, and something new.
    after = turn("user", SAID_AFTER[0], 3, now_ms())
    await ask(service, upstream, agent, [*before, after], SAID_AFTER[1])
    await wait_for(lambda: _messages(service, count=2, assistant=True))
    # Agora's 103 of the whole call, after it ended.
    late = agent_event(103, agent, labels=dict(PARAMS), notice_id=f"{agent}:103",
                       contents=[*before, after, turn("assistant", SAID_AFTER[1], 3, now_ms())])  # fmt: skip
    answer = await deliver(service, late, expect="done")
    assert answer["new_messages"] == 0
    await asyncio.sleep(0.6)  # past the settle time: a reply still held would be recorded now

    assert transcript(await _messages(service)) == [("user", SAID_AFTER[0]), ("assistant", SAID_AFTER[1])]
    entry = await inbox_of(service, f"{agent}:103")
    assert entry is not None and entry.status == "forgotten" and entry.body == ""
    assert (await stats(service))["record_errors"] == 0
    await service.store.checkpoint()
    data = database_files(db_path)
    assert SAID_AFTER[0].encode() in data  # the scan sees what is held
    for text in ("Qzvxwjkq4471", "Wfxbnrtz"):
        assert text.encode() not in data, text


# interrupted or heard: the caller leaving, and Agora's own copy of the reply

ASKED = {"role": "user", "content": "tell me about Biscuit", "turn_id": 1, "timestamp": 1_795_000_000_000,
         "metadata": {"source": "asr", "user": "1001"}}  # fmt: skip
FULL = "Biscuit is a corgi."


def asking(agent_id: str, *history: dict[str, Any]) -> dict[str, Any]:
    """Agora's request for the reply to the latest user turn."""
    return {
        "messages": [{"role": "system", "content": "You are Luna."}, ASKED, *history],
        "stream": True, "model": "m", "turn_id": 1, "agent_id": agent_id, **PARAMS,
    }  # fmt: skip


async def leave_after(service: Service, body: dict[str, Any], marker: bytes) -> None:
    """A caller that reads the stream up to `marker` and closes the connection at once."""
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{service.url}/v1/llm/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {LLM_TOKEN}"},
        )
        await response.content.readuntil(marker)
        response.close()


async def replies(service: Service, agent_id: str, *, interrupted: bool | None = None) -> list[Any]:
    """The run's stored replies (once there are any, and the last one is `interrupted` when given)."""
    found = [m for m in await stored(service, agent_id) if m.role == "assistant"]
    if not found or (interrupted is not None and found[-1].interrupted != interrupted):
        return []
    return found


@pytest.mark.parametrize("leaves_after", ["[DONE]", "the finish chunk"])
async def test_a_reply_relayed_to_its_end_is_not_interrupted_when_the_caller_then_leaves(
    start_service: Any, upstream: FakeUpstreamLLM, leaves_after: str
) -> None:
    # Agora's engine closes right after [DONE]; the upstream is still open (slow to close, or
    # slow to send [DONE]), so the caller is seen leaving while the answer is still relayed.
    service = await start(start_service, upstream)
    words = ["Biscuit", " is", " a", " corgi."]
    if leaves_after == "[DONE]":
        upstream.script(Script(words=words, pause_after_done_s=60))
        marker = b"[DONE]"
    else:
        upstream.script(Script(words=words, pause_before_done_s=60))
        marker = b'"finish_reason": "stop"'
    await leave_after(service, asking("A-HEARD"), marker)
    await wait_for(lambda: upstream.disconnects, 5, failure="the endpoint never saw the caller leave")
    said = await wait_for(lambda: replies(service, "A-HEARD"))
    assert [(m.content, m.interrupted) for m in said] == [(FULL, False)]
    assert (await stats(service))["cancelled"] == 0


async def test_a_reply_cut_mid_stream_is_stored_interrupted(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    upstream.script(Script(words=["Biscuit is", " a corgi."], hang_after_first=True))
    await leave_after(service, asking("A-CUT"), b'"Biscuit is"')
    said = await wait_for(lambda: replies(service, "A-CUT"))
    assert [(m.content, m.interrupted) for m in said] == [("Biscuit is", True)]
    assert (await stats(service))["cancelled"] == 1


def agoras_copy(heard: str) -> dict[str, Any]:
    """Agora's copy of the reply: what the user heard, interrupted when that is not all of it."""
    meta: dict[str, Any] = {"source": "llm"}
    if heard != FULL:
        meta.update(interrupted=True, interrupt_timestamp=1_795_000_003_000, original=FULL)
    return {
        "role": "assistant",
        "content": heard,
        "turn_id": 1,
        "timestamp": 1_795_000_001_000,
        "metadata": meta,
    }


async def _agoras(service: Service, agent_id: str) -> list[Any]:
    said = await replies(service, agent_id)
    return said if said and said[0].source == "llm" else []


@pytest.mark.parametrize("heard", [FULL, "Biscuit"])
@pytest.mark.parametrize("carrier", ["next request", "103"])
async def test_agoras_copy_of_a_reply_corrects_the_one_recorded_before_it(
    start_service: Any, upstream: FakeUpstreamLLM, heard: str, carrier: str
) -> None:
    service = await start(start_service, upstream)
    # The whole text went out, but not the upstream's finish: the endpoint cannot know it was
    # heard and records it interrupted; Agora knows.
    upstream.script(Script(words=[FULL], hang_after_first=True), Script(words=["Good night."]))
    await leave_after(service, asking("A-FIX"), FULL.encode())
    await wait_for(lambda: replies(service, "A-FIX", interrupted=True))
    copy_ = agoras_copy(heard)
    if carrier == "next request":
        asked_again = {"role": "user", "content": "good night", "turn_id": 2, "timestamp": 1_795_000_005_000,
                       "metadata": {"source": "asr", "user": "1001"}}  # fmt: skip
        assert (await sse_events(await post(service, asking("A-FIX", copy_, asked_again))))[-1] == "[DONE]"
    else:
        await deliver(service, agent_event(103, "A-FIX", labels=dict(PARAMS), contents=[ASKED, copy_]))
    said = await wait_for(lambda: _agoras(service, "A-FIX"), failure="Agora's copy never replaced ours")
    first = said[0]
    assert (first.content, first.interrupted, first.source) == (heard, heard != FULL, "llm")
    assert first.original == (None if heard == FULL else FULL)
    assert [m.content for m in await stored(service, "A-FIX")][:2] == ["tell me about Biscuit", heard]
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/messages")
    assert status == 200 and [m["content"] for m in body["messages"]].count(heard) == 1, body


@pytest.mark.parametrize("heard", [FULL, "Biscuit"])
async def test_agoras_copy_of_a_reply_wins_over_the_one_recorded_after_it(
    start_service: Any, upstream: FakeUpstreamLLM, store: Any, heard: str
) -> None:
    # The 103 comes while the relayed reply is still held; the held one is merged last (here
    # when the service stops) and must change nothing.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    upstream.script(Script(words=[FULL], hang_after_first=True))
    await leave_after(service, asking("A-LATE"), FULL.encode())
    await wait_for(lambda: _stats_cancelled(service))
    await deliver(
        service, agent_event(103, "A-LATE", labels=dict(PARAMS), contents=[ASKED, agoras_copy(heard)])
    )
    await service.server.close()  # the held reply is merged on the way out
    rows = await store.read(lambda view: view.messages.of_session("A-LATE"))
    assert [(m.role, m.content, m.interrupted, m.source) for m in rows] == [
        ("user", "tell me about Biscuit", False, "asr"), ("assistant", heard, heard != FULL, "llm"),
    ]  # fmt: skip


def said(index: int, text: str) -> dict[str, Any]:
    """Message `index` of a call as Agora keeps it: a user turn, then the reply, and so on."""
    user = index % 2 == 0
    return {
        "role": "user" if user else "assistant", "content": text, "turn_id": index // 2 + 1,
        "timestamp": 1_795_100_000_000 + index * 3000,
        "metadata": {"source": "asr", "user": "1001"} if user else {"source": "llm"},
    }  # fmt: skip


async def test_a_sliding_window_is_read_once_per_message_and_rendered_and_stored_as_if_read_anew(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    # Once Agora's short-term memory is full the window slides: each message sits two places
    # earlier in the next request. Each is still read once, and what the model gets and what is
    # stored are what reading every request whole gives. "yes" is said twice, at two times.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    lines = ["my dog is Biscuit", "A lovely name.", "yes", "Noted.", "she is a corgi", "Sweet!",
             "yes", "Right.", "she likes the beach", "Fun!", "what is her name?"]  # fmt: skip
    conversation = [said(index, text) for index, text in enumerate(lines)]
    system = {"role": "system", "content": "You are Luna."}
    sent: list[list[dict[str, Any]]] = []
    for end in range(1, len(conversation) + 1, 2):
        window = [system, *conversation[max(0, end - 5) : end]]
        sent.append(window)
        body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-SLIDE", **PARAMS}
        upstream.script(Script(words=[lines[end] if end < len(lines) else "Biscuit."]))
        assert (await sse_events(await post(service, copy.deepcopy(body))))[-1] == "[DONE]"
    expected = [to_openai_messages(window) for window in sent]
    assert [request["messages"] for request in upstream.requests] == expected
    counters = await stats(service)
    assert counters["messages_read"] == 1 + len(conversation)  # the system message, then each once

    async def all_stored() -> list[str] | None:
        contents = [m.content for m in await stored(service, "A-SLIDE")]
        return contents if len(contents) >= len(lines) else None

    assert await wait_for(all_stored) == lines


def aligning(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each window the merges place by aligning it (`place_window`), as they go."""
    windows: list[int] = []
    real = merging.place_window

    def spy(stored: Any, incoming: Any, *args: Any) -> Any:
        windows.append(len(incoming))
        return real(stored, incoming, *args)

    monkeypatch.setattr(merging, "place_window", spy)
    return windows


async def slide(
    service: Service, upstream: FakeUpstreamLLM, agent_id: str, lines: list[str], end: int
) -> None:
    """The call's request that ends with line `end - 1` (the last 5 lines: Agora's full window),
    once the window before it is stored (its reply held)."""
    window = [
        {"role": "system", "content": "You are Luna."},
        *[said(i, lines[i]) for i in range(max(0, end - 5), end)],
    ]
    body = {"messages": window, "stream": True, "model": "m", "agent_id": agent_id, **PARAMS}
    upstream.script(Script(words=[lines[end] if end < len(lines) else "Biscuit."]))
    assert (await sse_events(await post(service, body)))[-1] == "[DONE]"

    async def merged() -> bool:
        return len(await stored(service, agent_id)) >= end

    await wait_for(merged)


async def test_a_window_that_adds_to_its_call_merges_only_what_it_adds(
    start_service: Any, upstream: FakeUpstreamLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each request repeats the call's window but for what it adds at its end (the reply as heard
    # and the new question): only those two are merged, after the session's newest message, with
    # no window aligned again; a request that adds nothing is not merged at all.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    aligned = aligning(monkeypatch)
    lines = ["my dog is Biscuit", "A lovely name.", "yes", "Noted.", "she is a corgi", "Sweet!",
             "yes", "Right.", "she likes the beach", "Fun!", "what is her name?"]  # fmt: skip
    for end in range(1, len(lines) + 1, 2):
        await slide(service, upstream, "A-END", lines, end)
    assert aligned == [1]  # the call's first window, into an empty session
    assert [m.content for m in await stored(service, "A-END")] == lines
    # The platform's window shrinks to its last three messages: nothing new.
    window = [said(i, lines[i]) for i in range(len(lines) - 3, len(lines))]
    unchanged = (await stats(service))["unchanged_windows"]
    upstream.script(Script(words=["Biscuit."]))
    body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-END", **PARAMS}
    assert (await sse_events(await post(service, body)))[-1] == "[DONE]"
    assert (await stats(service))["unchanged_windows"] == unchanged + 1
    assert aligned == [1]
    assert [m.content for m in await stored(service, "A-END")] == lines


async def test_a_window_after_a_webhook_merged_its_call_is_merged_whole_and_stored_once(
    start_service: Any, upstream: FakeUpstreamLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Agora's 103 (or a poll) merges the call between two requests, the reply the next request
    # carries included: the session is no longer as the endpoint left it, so that request's
    # window is aligned whole, and nothing is stored twice.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    aligned = aligning(monkeypatch)
    lines = ["my dog is Biscuit", "A lovely name.", "she is a corgi", "Sweet!", "she likes the beach",
             "Fun!", "what is her name?"]  # fmt: skip
    for end in (1, 3):
        await slide(service, upstream, "A-HOOK", lines, end)
    contents = [said(i, lines[i]) for i in range(4)]
    await deliver(service, agent_event(103, "A-HOOK", labels=dict(PARAMS), contents=contents))
    for end in (5, 7):
        await slide(service, upstream, "A-HOOK", lines, end)
    assert aligned == [1, 4, 5]  # the first window, the 103, then the window after it, whole
    assert [m.content for m in await stored(service, "A-HOOK")] == lines


def test_the_question_and_what_a_request_holds_read_as_from_its_whole_window() -> None:
    # Only the last user turns are read for the question, and each content is folded on its own
    # (cached): both as reading the whole window at once.
    def question(messages: list[Any]) -> str:
        said = [
            text_of(m.get("content")).strip()
            for m in messages
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        said = [text for text in said if text]
        if len(said) > 1 and len(said[-1].split()) < SHORT_TURN_WORDS:
            return f"{said[-2]}\n{said[-1]}"
        return said[-1] if said else ""

    def held(messages: list[Any]) -> str:
        return normal.__wrapped__(" ".join(text_of(m.get("content")) for m in messages))

    user, bot = "user", "assistant"
    windows: list[list[Any]] = [
        [],
        [{"role": "system", "content": "You are Luna."}],
        [{"role": user, "content": "  Where is the STRASSE?  "}],
        [{"role": user, "content": "my dog is called Biscuit"}, {"role": bot, "content": "Nice!"},
         {"role": user, "content": "yes"}],
        [{"role": user, "content": "tell me about the trip"}, {"role": user, "content": "   "},
         {"role": bot, "content": ""}, {"role": user, "content": "ok\u2003then"}],
        [{"role": user, "content": [{"type": "text", "text": "Straße\tand"}, {"type": "text", "text": "İstanbul"}]},
         "not a message", {"role": bot, "content": None}, {"role": user, "content": "why so?"}],
        [{"role": user, "content": "a b c d e"}, {"role": user, "content": "f g h i j"}],
    ]  # fmt: skip
    for window in windows:
        assert recall_query(window) == question(window), window
        already = " ".join(
            part for m in window if isinstance(m, dict) if (part := normal(text_of(m.get("content"))))
        )
        assert already == held([m for m in window if isinstance(m, dict)]), window


async def test_a_forget_empties_what_the_endpoint_folded_of_a_calls_words(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    # What a request holds is folded once per text and kept for the call's next requests: a
    # forget leaves none of it in the process.
    service = await start(start_service, upstream)
    past = [said(0, "my locker code is Qzvxwjkq4471"), said(1, "Noted: Qzvxwjkq4471.")]
    await deliver(service, agent_event(103, "A-PAST", labels=dict(PARAMS), contents=past))
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and body["memories"], body
    window = [{"role": "system", "content": "You are Luna."}, said(2, "what is my locker code again?")]
    upstream.script(Script(words=["It is Qzvxwjkq4471."]))
    response = await post(
        service, {"messages": window, "stream": True, "model": "m", "agent_id": "A-NOW", **PARAMS}
    )
    assert response.headers["X-Agent-Memory-Memories"] != "0"
    assert (await sse_events(response))[-1] == "[DONE]"
    assert normal.cache_info().currsize > 0
    status, _ = await service.api("DELETE", "/v1/users/u-ana")
    assert status == 200
    assert held_texts() == 0


async def test_a_forget_drops_what_the_endpoint_kept_of_a_live_calls_messages(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    # What a call's requests were read and rendered as is kept for its next request: a forget
    # of the user drops it, and the call's next request is read anew.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    parts = service.server.app[PARTS]
    window = [{"role": "system", "content": "You are Luna."}, said(0, "my locker code is Qzvxwjkq4471")]
    body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-KEPT", **PARAMS}
    upstream.script(Script(words=["Noted."]))
    assert (await sse_events(await post(service, copy.deepcopy(body))))[-1] == "[DONE]"
    await wait_for(lambda: stored(service, "A-KEPT"))
    assert "Qzvxwjkq4471" in repr(parts.turns.windows._last)
    assert "Qzvxwjkq4471" in repr(parts.turns.recalls._calls)  # the question, kept with its recall
    status, _ = await service.api("DELETE", "/v1/users/u-ana")
    assert status == 200
    assert "Qzvxwjkq4471" not in repr(parts.turns.windows._last)
    assert "Qzvxwjkq4471" not in repr(parts.turns.recalls._calls)
    read_before = (await stats(service))["messages_read"]
    upstream.script(Script(words=["Noted."]))
    assert (await sse_events(await post(service, copy.deepcopy(body))))[-1] == "[DONE]"
    assert (await stats(service))["messages_read"] == read_before + len(window)
    assert upstream.requests[1]["messages"] == to_openai_messages(window)


async def test_a_call_asking_again_is_answered_its_recall_again_until_the_pair_remembers_more(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    # A call's own turns never change what its recall finds (they are left out), so a question
    # it asks again is answered with the recall it got, however many of its turns were stored
    # meanwhile; another session's turn of the pair makes it recall anew.
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    past = [said(0, "my locker code is Qzvxwjkq4471"), said(1, "Noted: Qzvxwjkq4471.")]
    await deliver(service, agent_event(103, "A-PAST", labels=dict(PARAMS), contents=past))
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and body["memories"], body  # indexed
    asked = "what is my locker code again?"
    lines = [
        asked,
        "It is Qzvxwjkq4471.",
        "and where did I park the car last night?",
        "I do not know.",
        asked,
    ]
    memories: list[str] = []
    for turn in range(3):
        window = [{"role": "system", "content": "You are Luna."}] + [
            said(index, line) for index, line in enumerate(lines[: 2 * turn + 1])
        ]
        upstream.script(Script(words=["Sure."]))
        body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-NOW", **PARAMS}
        assert (await sse_events(await post(service, body)))[-1] == "[DONE]"
        memories.append(upstream.requests[-1]["messages"][1]["content"])
        await wait_for(lambda n=2 * turn + 1: len_stored(service, "A-NOW", n))
    assert (await stats(service))["recalls_reused"] == 1  # the third turn asks the first's question
    assert "Qzvxwjkq4471" in memories[0] and memories[2] == memories[0]

    other = [said(0, "I changed my locker code to Bxxpqr5521"), said(1, "Got it.")]
    await deliver(service, agent_event(103, "A-OTHER", labels=dict(PARAMS), contents=other))
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and "Bxxpqr5521" in json.dumps(body)
    window = [{"role": "system", "content": "You are Luna."}] + [
        said(index, line) for index, line in enumerate([*lines, "Sure.", asked])
    ]
    upstream.script(Script(words=["Sure."]))
    body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-NOW", **PARAMS}
    assert (await sse_events(await post(service, body)))[-1] == "[DONE]"
    assert "Bxxpqr5521" in upstream.requests[-1]["messages"][1]["content"]
    assert (await stats(service))["recalls_reused"] == 1


async def len_stored(service: Service, agent_id: str, count: int) -> bool:
    return len(await stored(service, agent_id)) >= count
