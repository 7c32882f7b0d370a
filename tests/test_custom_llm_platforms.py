"""Vapi's and ElevenLabs' custom LLMs over the shared per-turn memory: their published request
shapes (fixtures/vapi/custom_llm, fixtures/elevenlabs/custom_llm), whose memory, recall injected,
the platform's fields kept from the model, and the turns recorded under the call's session so the
end-of-call transcript of the same call merges into them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import test_elevenlabs as elevenlabs
import test_vapi as vapi
from conftest import Service, load_fixture, wait_for
from fakes.upstream_llm import FakeUpstreamLLM, Script
from test_retention import database_files

from agent_memory.core.events import IncomingMessage
from agent_memory.memory.service import Memory
from agent_memory.platforms.calls import CallTranscript, call_identity, store_transcript
from agent_memory.platforms.llm_endpoint import PARTS, Parts
from agent_memory.web.keys import MEMORY

pytestmark = pytest.mark.postgres

LLM_TOKEN = "platform-llm-key"
VAPI = "/v1/vapi/chat/completions"
ELEVENLABS = "/v1/elevenlabs/chat/completions"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


async def start(start_service: Any, upstream: FakeUpstreamLLM, **overrides: Any) -> Service:
    values: dict[str, Any] = {
        "llm_token": LLM_TOKEN,
        "upstream_base_url": upstream.base_url,
        "recall_timeout_ms": 5000,
        "llm_reply_settle_s": 0.05,
    }
    values.update(overrides)
    return await start_service(**values)


def fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(load_fixture(name))
    return body


async def post(
    service: Service, path: str, body: dict[str, Any], key: str = LLM_TOKEN
) -> tuple[int, str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with service.session.post(f"{service.url}{path}", json=body, headers=headers) as response:
        return response.status, (await response.read()).decode(), response.headers


async def remember(service: Service, user_id: str, character_id: str, text: str) -> None:
    path = f"/v1/users/{user_id}/characters/{character_id}/facts"
    status, _ = await service.api("POST", path, json={"text": text})
    assert status == 201


async def stored(service: Service, user_id: str, character_id: str, count: int) -> list[dict[str, Any]]:
    _, body = await service.api("GET", f"/v1/users/{user_id}/characters/{character_id}/messages")
    found: list[dict[str, Any]] = body.get("messages", [])
    return found if len(found) >= count else []


def said(messages: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(m["agent_id"], m["role"], m["content"]) for m in messages]


def memory_of(service: Service) -> Memory:
    memory: Memory = service.server.app[MEMORY]
    return memory


async def end_of_call(
    service: Service, platform: str, call_id: str, user: str, character: str, turns: list[tuple[str, str]]
) -> None:
    """The platform's end-of-call transcript of the same call, stored as its webhook stores it."""
    memory = memory_of(service)
    transcript = CallTranscript(
        platform=platform,
        call_id=call_id,
        event="end-of-call",
        identity=call_identity(service.settings, user_id=user, character_id=character),
        messages=[IncomingMessage(role=role, content=text) for role, text in turns],
    )
    await store_transcript(memory, service.settings, transcript, body="{}", received_ms=1_800_000_000_000)


# -- Vapi ----------------------------------------------------------------------------------------


async def test_vapi_recalls_for_the_pair_its_variable_values_name_and_keeps_its_fields_from_the_model(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    await remember(service, "u-alice", "luna", "Alice's dog is called Biscuit")
    upstream.script(Script(words=["It's", " Biscuit!"]))
    status, text, headers = await post(
        service, VAPI, fixture("vapi/custom_llm/variable_mode_ids_request.json")
    )
    assert status == 200, text
    assert "Biscuit!" in text and text.rstrip().endswith("data: [DONE]")
    assert headers["X-Agent-Memory-Memories"] == "1"
    sent = upstream.requests[0]
    for name in ("call", "metadata", "customer", "phoneNumber", "user_id"):
        assert name not in sent
    assert sent["model"] == "gpt-4o" and sent["max_tokens"] == 250 and sent["stream"] is True
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "system", "user"]
    assert "Biscuit" in sent["messages"][1]["content"]


async def test_vapi_turns_are_recorded_under_the_call_and_its_end_of_call_report_merges(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    body = fixture("vapi/custom_llm/variable_mode_ids_request.json")
    call_id = body["call"]["id"]
    upstream.script(Script(words=["Biscuit, of course."]))
    status, text, _ = await post(service, VAPI, body)
    assert status == 200, text
    question = body["messages"][-1]["content"]
    expected = [
        (f"vapi:{call_id}", "user", question),
        (f"vapi:{call_id}", "assistant", "Biscuit, of course."),
    ]
    assert said(await wait_for(lambda: stored(service, "u-alice", "luna", 2))) == expected
    # The end-of-call report of the same call (its webhook) carries the same turns and one more.
    turns = [("user", question), ("assistant", "Biscuit, of course."), ("user", "Bye!")]
    await end_of_call(service, "vapi", call_id, "u-alice", "luna", turns)
    found = await wait_for(lambda: stored(service, "u-alice", "luna", 3))
    assert said(found) == [*expected, (f"vapi:{call_id}", "user", "Bye!")]


async def test_vapi_phone_identity_only_when_the_setting_is_on(
    start_service: Any, upstream: FakeUpstreamLLM, tmp_path: Path
) -> None:
    body = fixture("vapi/custom_llm/variable_mode_phone_request.json")
    off = await start(start_service, upstream, db_path=tmp_path / "off.db")
    await remember(off, "tel:+14155550123", "default", "The caller's dog is called Biscuit")
    status, text, headers = await post(off, VAPI, body)
    assert status == 200, text
    assert headers["X-Agent-Memory-Memories"] == "0"
    assert [m["role"] for m in upstream.requests[-1]["messages"]] == ["system", "assistant", "user"]

    on = await start(start_service, upstream, phone_identity=True, db_path=tmp_path / "on.db")
    await remember(on, "tel:+14155550123", "default", "The caller's dog is called Biscuit")
    status, text, headers = await post(on, VAPI, body)
    assert status == 200, text
    assert headers["X-Agent-Memory-Memories"] == "1"
    assert "Biscuit" in upstream.requests[-1]["messages"][1]["content"]
    found = await wait_for(lambda: stored(on, "tel:+14155550123", "default", 2))
    assert {m["agent_id"] for m in found} == {"vapi:3f1b2c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}


async def test_vapi_a_web_calls_number_names_no_one_as_in_its_webhook(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    # The webhook never takes a web call's customer number as the user (events.call_identity_of):
    # the per-turn route must not either, or the live turns and the report would part.
    body = fixture("vapi/custom_llm/variable_mode_phone_request.json")
    body["call"] = {**body["call"], "type": "webCall"}
    service = await start(start_service, upstream, phone_identity=True)
    await remember(service, "tel:+14155550123", "default", "The caller's dog is called Biscuit")
    status, text, headers = await post(service, VAPI, body)
    assert status == 200, text
    assert headers["X-Agent-Memory-Memories"] == "0"


async def test_vapi_captured_request_with_its_older_call_id_is_recorded_and_its_fields_kept_back(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    body = fixture("vapi/custom_llm/captured_webcall_request.json")
    status, text, headers = await post(service, VAPI, body)
    assert status == 200, text
    assert "X-Agent-Memory-Recorded" not in headers  # `call.callId` names the call
    sent = upstream.requests[0]
    assert "org" not in sent and "call" not in sent and sent["functions"] == body["functions"]
    _, counters = await service.api("GET", "/v1/llm/stats")
    assert counters["llm_proxy"]["unrecorded"] == 0


async def test_vapi_docs_request_without_a_call_is_answered_and_says_why_it_was_not_recorded(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    status, text, headers = await post(
        service, VAPI, fixture("vapi/custom_llm/docs_transfer_call_request.json")
    )
    assert status == 200, text
    assert "call.id" in headers["X-Agent-Memory-Recorded"]
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "transferCall"


async def test_vapi_a_wrong_key_is_401_and_a_bad_message_400(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    body = fixture("vapi/custom_llm/variable_mode_ids_request.json")
    status, text, _ = await post(service, VAPI, body, key="wrong")
    assert status == 401 and "custom-llm credential" in text
    body["messages"].append("hello")
    status, text, _ = await post(service, VAPI, body)
    assert status == 400 and "messages[2]" in text
    assert upstream.requests == []


# -- ElevenLabs ----------------------------------------------------------------------------------


async def test_elevenlabs_recalls_records_under_the_conversation_and_its_transcript_merges(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    await remember(service, "u-alice", "luna", "Alice's dog is called Biscuit")
    body = fixture("elevenlabs/custom_llm/docs_request.json")
    upstream.script(Script(words=["Biscuit!"]))
    status, text, headers = await post(service, ELEVENLABS, body)
    assert status == 200, text
    assert headers["X-Agent-Memory-Memories"] == "1"
    sent = upstream.requests[0]
    assert "elevenlabs_extra_body" not in sent and "user_id" not in sent
    assert "Biscuit" in sent["messages"][1]["content"]
    conversation = body["elevenlabs_extra_body"]["conversation_id"]
    session = f"elevenlabs:{conversation}"
    expected = [
        (session, "assistant", body["messages"][1]["content"]),
        (session, "user", body["messages"][2]["content"]),
        (session, "assistant", "Biscuit!"),
    ]
    assert said(await wait_for(lambda: stored(service, "u-alice", "luna", 3))) == expected
    turns = [(role, content) for _, role, content in expected]
    await end_of_call(service, "elevenlabs", conversation, "u-alice", "luna", turns)
    assert said(await stored(service, "u-alice", "luna", 3)) == expected


async def test_elevenlabs_dynamic_variables_name_the_caller_and_the_agent_when_phone_identity_is_on(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, phone_identity=True)
    agent = "agent_8401k8w2p6q7r8s9t0u1v2w3x4y5"
    await remember(service, "tel:+14155550123", agent, "The caller's dog is called Biscuit")
    status, text, headers = await post(
        service, ELEVENLABS, fixture("elevenlabs/custom_llm/dynamic_variables_phone_request.json")
    )
    assert status == 200, text
    assert headers["X-Agent-Memory-Memories"] == "1"
    found = await wait_for(lambda: stored(service, "tel:+14155550123", agent, 2))
    assert {m["agent_id"] for m in found} == {"elevenlabs:conv_0201k8w3a1b2c3d4e5f6g7h8j9k0"}


async def test_elevenlabs_without_a_conversation_id_is_answered_unrecorded(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream)
    body = fixture("elevenlabs/custom_llm/docs_request.json")
    del body["elevenlabs_extra_body"]["conversation_id"]
    status, text, headers = await post(service, ELEVENLABS, body)
    assert status == 200, text
    assert "conversation_id" in headers["X-Agent-Memory-Recorded"]
    _, counters = await service.api("GET", "/v1/llm/stats")
    assert counters["llm_proxy"]["unrecorded"] == 1


async def test_vapi_a_forget_while_a_reply_is_held_is_final(
    start_service: Any, upstream: FakeUpstreamLLM, db_path: Path
) -> None:
    service = await start(start_service, upstream, llm_reply_settle_s=0.5)
    body = fixture("vapi/custom_llm/variable_mode_ids_request.json")
    body["messages"][-1]["content"] = "My locker code is Qzvxwjkq4471."
    upstream.script(Script(words=["Noted: Wfxbnrtz."]))
    status, text, _ = await post(service, VAPI, body)
    assert status == 200, text
    await wait_for(lambda: stored(service, "u-alice", "luna", 1))  # the question; the reply is held
    status, _ = await service.api("DELETE", "/v1/users/u-alice")
    assert status == 200
    await asyncio.sleep(0.6)  # past the settle time: a reply still held would be recorded now
    assert await stored(service, "u-alice", "luna", 0) == []
    await service.store.checkpoint()
    data = database_files(db_path)
    for secret in ("Qzvxwjkq4471", "Wfxbnrtz"):
        assert secret.encode() not in data, secret


# On SQLite one writer merges in order: the call's window is stored before its reply, which the
# test waits for. PostgreSQL may merge them the other way round (what is stored is the same).
@pytest.mark.sqlite_only
async def test_a_calls_repeated_messages_are_read_once_and_a_repeated_request_is_not_merged_again(
    start_service: Any, upstream: FakeUpstreamLLM
) -> None:
    service = await start(start_service, upstream, llm_reply_settle_s=0)
    body = fixture("vapi/custom_llm/variable_mode_ids_request.json")  # a system prompt and a question
    upstream.script(Script(words=["Biscuit."]))
    assert (await post(service, VAPI, body))[0] == 200
    await wait_for(lambda: stored(service, "u-alice", "luna", 2))
    # The call's next turn carries the first two messages again, the reply as heard, a new question.
    body["messages"] += [
        {"role": "assistant", "content": "Biscuit."},
        {"role": "user", "content": "And the cat?"},
    ]
    upstream.script(Script(words=["Miso."]))
    assert (await post(service, VAPI, body))[0] == 200
    await wait_for(lambda: stored(service, "u-alice", "luna", 4))
    # Its merge's rows can be read before the merge's task has noted the window stored: wait
    # for the task, as a retry seconds later would find it (else it merges again, harmlessly).
    await settled(service)
    # The same request again (a retry): nothing new to read or store.
    upstream.script(Script(words=["Miso."]))
    assert (await post(service, VAPI, body))[0] == 200
    _, counters = await service.api("GET", "/v1/llm/stats")
    assert counters["llm_proxy"]["messages_read"] == 2 + 2
    assert counters["llm_proxy"]["unchanged_windows"] == 1
    assert [m["content"] for m in await stored(service, "u-alice", "luna", 4)] == [
        body["messages"][1]["content"],
        "Biscuit.",
        "And the cat?",
        "Miso.",
    ]


def settled(service: Service) -> Any:
    """The per-turn route's held replies recorded and its merges done (what a quiet call leaves)."""
    parts: Parts = service.server.app[PARTS]
    return parts.turns.close()


async def live_vapi_call(
    service: Service, upstream: FakeUpstreamLLM, tool_items: list[dict[str, Any]]
) -> None:
    """The report's call as Vapi drives its custom LLM: one request per user turn, the model
    says the replies; before its last reply it calls the report's tool, and Vapi asks again
    with the call and its result (OpenAI's messages: an assistant `tool_calls`, a `tool`)."""
    call = {"id": vapi.CALL_ID, "type": "inboundPhoneCall", "customer": {"number": vapi.CALLER}}
    said = [{"role": role, "content": text} for role, text in vapi.SPOKEN]
    called, result = tool_items
    tool_messages = [
        {"role": "assistant", "content": None, "tool_calls": called["toolCalls"]},
        {"role": "tool", "tool_call_id": result["toolCallId"], "content": result["result"]},
    ]
    requests = [
        (said[:2], Script(words=[said[2]["content"]])),
        (said[:4], Script(words=[], tool_calls=True)),
        ([*said[:4], *tool_messages], Script(words=[said[4]["content"]])),
    ]
    for conversation, answer in requests:
        upstream.script(answer)
        body = {"model": "gpt-4o", "stream": True, "call": call, "customer": call["customer"], "metadata": {}}
        body["messages"] = [{"role": "system", "content": "You are Luna."}, *conversation]
        status, text, _ = await post(service, VAPI, body)
        assert status == 200, text
    await settled(service)


def tools_of(messages: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """Each tool item: its role, kind and the tool call it is or answers."""
    return [
        (
            m["role"],
            m["kind"],
            m["tool"].get("tool_call_id") or m["tool"]["tool_calls"][0]["id"],
        )
        for m in messages
        if m["kind"] != "turn"
    ]


@pytest.mark.parametrize("live_first", [True, False])
async def test_a_live_vapi_call_and_its_signed_end_of_call_report_are_one_transcript(
    start_service: Any, upstream: FakeUpstreamLLM, live_first: bool
) -> None:
    # A call whose model calls a tool: its live turns (tool call and result among them) and its
    # report, in either order, are one transcript; the report's redelivery changes nothing.
    service = await start(start_service, upstream, phone_identity=True, vapi_secret=vapi.VAPI_SECRET)
    report = vapi.report()
    tool_items = [
        m
        for m in report["message"]["artifact"]["messages"]
        if m["role"] in ("tool_calls", "tool_call_result")
    ]
    if live_first:
        await live_vapi_call(service, upstream, tool_items)
        assert vapi.spoken(await stored(service, vapi.CALLER_USER, "default", 5)) == vapi.SPOKEN
    status, answer = await vapi.post(service, report)
    assert (status, answer["status"]) == (200, "done"), answer
    if not live_first:
        await live_vapi_call(service, upstream, tool_items)
    assert (await vapi.post(service, report))[1]["status"] == "duplicate"
    found = await stored(service, vapi.CALLER_USER, "default", 7)
    assert len(found) == 7
    assert vapi.spoken(found) == vapi.SPOKEN
    assert [m["kind"] for m in found] == ["turn"] * 4 + ["tool_call", "tool_result", "turn"]
    assert tools_of(found) == [
        ("assistant", "tool_call", "call_Kp3RwQ9"),
        ("tool", "tool_result", "call_Kp3RwQ9"),
    ]
    assert {m["agent_id"] for m in found} == {f"vapi:{vapi.CALL_ID}"}
    # The reply is the platform's copy (no longer the relayed one), and no turn is empty.
    assert found[-1]["source"] != "relayed" and all(m["content"] for m in found if m["kind"] == "turn")


@pytest.mark.parametrize("live_first", [True, False])
async def test_tool_items_the_live_requests_never_carried_go_between_the_turns_of_the_report(
    start_service: Any, upstream: FakeUpstreamLLM, live_first: bool
) -> None:
    # A tool the model never saw (run by the platform between two turns): the report has it, the
    # live requests do not. Room is made for it where it was called; nothing is doubled.
    service = await start(start_service, upstream, phone_identity=True, vapi_secret=vapi.VAPI_SECRET)
    report = vapi.report()
    call = {"id": vapi.CALL_ID, "type": "inboundPhoneCall", "customer": {"number": vapi.CALLER}}
    said = [{"role": role, "content": text} for role, text in vapi.SPOKEN]

    async def live() -> None:
        for asked in (2, 4):
            upstream.script(Script(words=[said[asked]["content"]]))
            body = {"model": "gpt-4o", "stream": True, "call": call, "customer": call["customer"]}
            body["messages"] = [{"role": "system", "content": "You are Luna."}, *said[:asked]]
            status, text, _ = await post(service, VAPI, body)
            assert status == 200, text
        await settled(service)

    if live_first:
        await live()
        assert vapi.spoken(await stored(service, vapi.CALLER_USER, "default", 5)) == vapi.SPOKEN
    assert (await vapi.post(service, report))[1]["status"] == "done"
    if not live_first:
        await live()
    assert (await vapi.post(service, report))[1]["status"] == "duplicate"
    found = await stored(service, vapi.CALLER_USER, "default", 7)
    assert len(found) == 7 and vapi.spoken(found) == vapi.SPOKEN
    assert [m["kind"] for m in found] == ["turn"] * 4 + ["tool_call", "tool_result", "turn"]
    assert not any(m["gap_before"] for m in found)


@pytest.mark.parametrize("live_first", [True, False])
async def test_a_live_elevenlabs_call_with_a_tool_call_and_its_signed_transcript_are_one_transcript(
    start_service: Any, upstream: FakeUpstreamLLM, live_first: bool
) -> None:
    service = await start(start_service, upstream, elevenlabs_secret=elevenlabs.SECRET)
    # The published transcription (conversation abc, user123, agent xyz), its agent calling the
    # published Conversation API example's tool (an entry of its own, no words) before it answers.
    payload = elevenlabs.published("post_call_transcription.json")
    example = elevenlabs.published("conversation_api_example.json")["transcript"][0]
    transcript = payload["data"]["transcript"]
    entry = {"role": "agent", "message": None, "time_in_call_secs": 5}
    entry.update(tool_calls=example["tool_calls"], tool_results=example["tool_results"])
    transcript.insert(2, entry)
    greeting, question, answer = (transcript[i]["message"] for i in (0, 1, 3))
    call, result = example["tool_calls"][0], example["tool_results"][0]

    async def live() -> None:
        # As ElevenLabs drives a custom LLM: the model calls the tool, then answers its result.
        said = [{"role": "assistant", "content": greeting}, {"role": "user", "content": question}]
        called = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["request_id"],
                    "type": "function",
                    "function": {"name": call["tool_name"], "arguments": call["params_as_json"]},
                }
            ],
        }
        answered = {"role": "tool", "tool_call_id": result["request_id"], "content": result["result_value"]}
        for conversation, script in (
            (said, Script(words=[], tool_calls=True)),
            ([*said, called, answered], Script(words=[answer])),
        ):
            upstream.script(script)
            body = {
                "model": "gpt-4o",
                "stream": True,
                "messages": [{"role": "system", "content": "You are Luna."}, *conversation],
                "user_id": "user123",
                "elevenlabs_extra_body": {"conversation_id": "abc", "agent_id": "xyz"},
            }
            status, text, _ = await post(service, ELEVENLABS, body)
            assert status == 200, text
        await settled(service)

    if live_first:
        await live()
    status, outcome = await elevenlabs.post(service, payload)
    assert (status, outcome["status"]) == (200, "done"), outcome
    if not live_first:
        await live()
    assert (await elevenlabs.post(service, payload))[1]["status"] == "duplicate"
    found = await stored(service, "user123", "xyz", 5)
    assert [(m["role"], m["kind"]) for m in found] == [
        ("assistant", "turn"),
        ("user", "turn"),
        ("assistant", "tool_call"),
        ("tool", "tool_result"),
        ("assistant", "turn"),
    ]
    assert [m["content"] for m in found if m["kind"] == "turn"] == [greeting, question, answer]
    assert {m["agent_id"] for m in found} == {"elevenlabs:abc"}
