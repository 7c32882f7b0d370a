"""Agora's own payloads through the custom-LLM renderer, the LLM styles, live refresh and leave.

Fixtures are Agora's documented examples (fixtures/README.md names each source). The real
service runs on a loopback port against the fake Agora REST server, on real SQLite files.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest
from conftest import (
    agent_event,
    conversation,
    live,
    load_fixture,
    poll,
    pushed_list,
    stored,
    watch_of,
)

from agent_memory.core.styles import shape_system_messages, style_from_query
from agent_memory.errors import AgoraError, BadRequest, InvalidField
from agent_memory.memory.reading import ContextRequest, build_in
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.platforms.agora.custom_llm import RenderOptions, to_openai_messages
from agent_memory.platforms.agora.routes import style_of_llm
from agent_memory.settings import Settings

SCARECROW = "Why did the scarecrow win an award? Because he was outstanding in his field!"
EXTENDED = {"turn_id", "timestamp", "metadata", "speech_start_ms", "speech_end_ms",
            "speech_algorithmic_delay"}  # fmt: skip


def custom_llm_messages() -> list[dict[str, Any]]:
    """What the engine sends a custom LLM: the agent's system_messages first, then its memory."""
    request = load_fixture("agora_llm/custom_llm_request.json")
    return load_fixture("agora_llm/long_term_system_messages.json") + request["messages"]


def llm_block(name: str) -> dict[str, Any]:
    return load_fixture(f"agora_llm/{name}.json")["llm"]


def join_with(llm: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """A join body around one of Agora's documented llm blocks."""
    properties: dict[str, Any] = {
        "channel": f"room-{name}", "token": "rtc-token", "agent_rtc_uid": "0",
        "remote_rtc_uids": ["*"],
    }  # fmt: skip
    if llm is not None:
        properties["llm"] = copy.deepcopy(llm)
    return {"name": name, "properties": properties}


async def earlier_call(
    service: Any, user: str, tag: str = "earlier", count: int = 6, base_ms: int = 1_795_000_000_000
) -> None:
    labels = {"user_id": user, "character_id": "luna"}
    contents = conversation(count, tag=tag, base_ms=base_ms)
    status, _ = await service.callback(
        agent_event(103, f"OLD-{user}-{tag}", labels=labels, contents=contents)
    )
    assert status == 200


async def start(service: Any, user: str, join: dict[str, Any], **extra: Any) -> tuple[int, dict]:
    return await service.api(
        "POST", "/v1/agents",
        json={"user_id": user, "character_id": "luna", "join": join, **extra},
    )  # fmt: skip


# -- the custom-LLM renderer ------------------------------------------------------------------


def test_a_real_custom_llm_request_keeps_its_system_messages_first_and_as_system():
    messages = custom_llm_messages()
    rendered = to_openai_messages(messages)
    system = load_fixture("agora_llm/long_term_system_messages.json")
    assert rendered[:2] == system  # untouched, first, still `system`
    assert [m["role"] for m in rendered[2:]] == [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "assistant",
    ]
    assert rendered[3] == {"role": "user", "content": "[2023-03-15 17:27 UTC] Can you tell me a joke?"}
    assert rendered[4]["content"] == (
        "[2023-03-15 17:27 UTC] Why did the scarecrow… [interrupted by the user; the unheard rest: "
        "win an award? Because he was outstanding in his field!]"
    )
    assert all(not EXTENDED & set(m) for m in rendered)
    # One speaker: no names; the request's messages themselves are not modified.
    assert not any("user123" in m["content"] for m in rendered)
    assert messages == custom_llm_messages()


def tool_turn() -> list[dict[str, Any]]:
    """An assistant tool call and its result, in the message shapes of Agora's custom-LLM page
    (AssistantMessage: content null + tool_calls; ToolMessage: content + tool_call_id), with
    OpenAI's tool_calls item shape, which that page types only as a list of objects."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}  # fmt: skip
    return [
        {"role": "user", "content": "What's the weather in Paris?", "turn_id": 5,
         "timestamp": 1678905300, "metadata": {"source": "asr", "user": "user123"}},
        {"role": "assistant", "content": None, "tool_calls": [call], "turn_id": 5,
         "timestamp": 1678905301, "metadata": {"source": "llm"}},
        {"role": "tool", "content": "{\"temp_c\": 21}", "tool_call_id": "call_1", "turn_id": 5,
         "timestamp": 1678905302},
        {"role": "assistant", "content": "It is 21 degrees in Paris.", "turn_id": 5,
         "timestamp": 1678905303, "metadata": {"source": "llm"}},
    ]  # fmt: skip


def test_tool_calls_and_tool_results_keep_their_openai_shapes():
    messages = load_fixture("agora_llm/long_term_system_messages.json") + tool_turn()
    rendered = to_openai_messages(messages)
    assert [m["role"] for m in rendered] == ["system", "system", "user", "assistant", "tool", "assistant"]
    assert rendered[3] == {"role": "assistant", "content": None, "tool_calls": tool_turn()[1]["tool_calls"]}
    assert rendered[4] == {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"}
    assert rendered[5]["content"] == "[2023-03-15 18:35 UTC] It is 21 degrees in Paris."
    # With empties kept or dropped, a tool call is never an empty turn.
    assert to_openai_messages(messages, RenderOptions(drop_empty=False))[3] == rendered[3]


def test_image_parts_keep_their_urls_and_the_time_goes_into_the_text():
    openai_image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
    # Agora's custom-LLM page types an image part as {"type": "image", "image_url": <url>}.
    agora_image = {"type": "image", "image_url": "https://example.com/dog.png"}
    messages = [
        {"role": "user", "timestamp": 1678905300, "metadata": {"source": "message"},
         "content": [{"type": "text", "text": "What is in this picture?"}, openai_image]},
        {"role": "user", "timestamp": 1678905310, "content": [agora_image]},
    ]  # fmt: skip
    rendered = to_openai_messages(messages)
    assert rendered[0] == {"role": "user", "content": [
        {"type": "text", "text": "[2023-03-15 18:35 UTC] What is in this picture?"}, openai_image,
    ]}  # fmt: skip
    assert rendered[1] == {"role": "user", "content": [
        {"type": "text", "text": "[2023-03-15 18:35 UTC]"}, agora_image,
    ]}  # fmt: skip
    assert to_openai_messages(messages, RenderOptions(time="none"))[1] == {
        "role": "user",
        "content": [agora_image],
    }
    assert messages[0]["content"][0]["text"] == "What is in this picture?"  # input untouched


def test_roles_the_renderer_does_not_know_are_passed_on_not_made_user_turns():
    messages = [{"role": "developer", "content": "Be brief.", "turn_id": 0},
                {"role": "user", "content": "hi", "timestamp": 1678905300}]  # fmt: skip
    assert to_openai_messages(messages, RenderOptions(time="none")) == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"role": "tool", "content": "21"}, "tool_call_id"),
        ({"role": "user", "content": 42}, "content"),
        ({"role": "user", "content": ["just text"]}, "parts"),
        ({"role": "", "content": "who?"}, "role"),
    ],
)
def test_bad_messages_are_named_in_a_422(message, says):
    with pytest.raises(InvalidField) as raised:
        to_openai_messages([{"role": "system", "content": "ok"}, message])
    assert "messages[1]" in raised.value.message and says in raised.value.message


async def test_render_endpoint_keeps_system_tool_and_image_messages(service):
    messages = custom_llm_messages() + tool_turn()
    status, body = await service.api("POST", "/v1/render/openai-messages", json={"messages": messages})
    assert status == 200, body
    assert body["messages"] == to_openai_messages(messages)
    assert body["messages"][:2] == load_fixture("agora_llm/long_term_system_messages.json")
    assert {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"} in body["messages"]

    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": [{"role": "tool", "content": "21", "turn_id": 1}]},
    )  # fmt: skip
    assert status == 422 and "tool_call_id" in body["error"]["message"]


# -- styles ---------------------------------------------------------------------------------


def test_each_style_has_the_shape_of_agoras_model_pages():
    gemini_own = llm_block("join_llm_gemini")["system_messages"]
    assert shape_system_messages(["You are a helpful chatbot"], "gemini") == gemini_own
    claude_own = llm_block("join_llm_anthropic_user_role")["system_messages"]
    text = claude_own[0]["content"]
    assert shape_system_messages([text], "anthropic") == claude_own
    custom_own = llm_block("join_llm_custom")["system_messages"]
    assert shape_system_messages(["You are a helpful assistant."], "openai") == custom_own
    assert shape_system_messages(["a", "b"]) == [{"role": "system", "content": "a"},
                                                 {"role": "system", "content": "b"}]  # fmt: skip


def test_styles_are_read_from_llm_style_only():
    assert style_of_llm(llm_block("join_llm_gemini")) == "gemini"
    assert style_of_llm(llm_block("join_llm_anthropic_system_role")) == "anthropic"
    assert style_of_llm(llm_block("join_llm_custom")) == "openai"  # no style: Agora's default
    assert style_of_llm({"style": "Gemini"}) == "gemini"
    with pytest.raises(InvalidField, match="dify"):
        style_of_llm({"style": "dify"})
    assert style_from_query(None) == "openai" and style_from_query("anthropic") == "anthropic"
    with pytest.raises(BadRequest, match="openai, gemini, anthropic"):
        style_from_query("claude")


async def test_system_messages_endpoint_answers_in_each_style(service):
    await earlier_call(service, "u-style")
    await service.api("POST", "/v1/users/u-style/characters/luna/facts", json={"text": "Has a cat, Miso"})
    path = "/v1/users/u-style/characters/luna/system-messages"
    persona = "You are Luna."
    answers = {}
    for style in ("openai", "gemini", "anthropic"):
        status, body = await service.api("GET", path, params={"persona": persona, "style": style})
        assert status == 200, body
        assert body["style"] == style
        answers[style] = body
    texts = [m["content"] for m in answers["openai"]["system_messages"]]
    assert texts[0] == persona and "Miso" in texts[1] and "earlier user message 4" in texts[-1]
    assert answers["gemini"]["system_messages"] == [
        {"role": "user", "parts": [{"text": text}]} for text in texts
    ]
    assert answers["anthropic"]["system_messages"] == [{"role": "user", "content": t} for t in texts]
    assert all(m["role"] == "system" for m in answers["openai"]["system_messages"])
    assert len({a["tokens"] for a in answers.values()}) == 1
    status, default = await service.api("GET", path, params={"persona": persona})
    assert default["system_messages"] == answers["openai"]["system_messages"]

    for bad in ("dify", "claude", "OPENAI-ish"):
        status, body = await service.api("GET", path, params={"style": bad})
        assert status == 400, body
        assert body["error"]["code"] == "bad_request"
        assert "openai, gemini, anthropic" in body["error"]["message"] and bad in body["error"]["message"]


@pytest.mark.parametrize(
    ("fixture", "memory_role"),
    [("join_llm_gemini", None), ("join_llm_anthropic_user_role", "user"),
     ("join_llm_anthropic_system_role", "user"), ("join_llm_custom", "system")],
)  # fmt: skip
async def test_start_and_refresh_send_memory_in_the_agents_style(start_service, fake, fixture, memory_role):
    service = await live(start_service, fake, summary_delay_s=3600)
    user = f"u-{fixture}"
    await earlier_call(service, user)
    llm = llm_block(fixture)
    style = style_of_llm(llm)
    status, answer = await start(service, user, join_with(llm, fixture.replace("_", "-")))
    assert status == 201, answer
    assert answer["memory"] == {"injected": True, "style": style, "reason": None}
    sent = fake.joins[0]["properties"]["llm"]
    own = llm["system_messages"]
    assert sent["system_messages"][: len(own)] == own  # the caller's own, verbatim
    memory = sent["system_messages"][len(own) :]
    assert memory and "earlier user message 4" in json.dumps(memory)
    if style == "gemini":
        assert all(set(m) == {"role", "parts"} and m["role"] == "user" for m in memory)
    else:
        assert all(set(m) == {"role", "content"} and m["role"] == memory_role for m in memory)
    assert {k: v for k, v in sent.items() if k != "system_messages"} == {
        k: v for k, v in llm.items() if k != "system_messages"
    }
    agent_id = answer["agent_id"]
    assert (await watch_of(service, agent_id)).style == style

    status, refreshed = await service.api("POST", f"/v1/agents/{agent_id}/refresh")
    assert status == 200, refreshed
    pushed = pushed_list(fake.updates[-1])
    assert pushed == refreshed["system_messages"] and pushed[: len(own)] == own
    assert [(sorted(m), m["role"]) for m in pushed[len(own) :]] == [(sorted(m), m["role"]) for m in memory]


async def test_a_join_with_a_style_memory_cannot_take_is_refused_before_agora(start_service, fake):
    service = await live(start_service, fake, summary_delay_s=3600)
    status, answer = await start(service, "u-dify", join_with({"url": "https://x", "style": "dify"}, "d"))
    assert status == 422 and "dify" in answer["error"]["message"]
    assert fake.joins == []


async def test_manual_watch_takes_the_style_for_refreshes(start_service, fake):
    service = await live(start_service, fake, summary_delay_s=3600)
    agent = "STYLEWATCH00000000000001"
    fake.add_agent(agent, max_history=8)
    await earlier_call(service, "u-w")
    own = llm_block("join_llm_gemini")["system_messages"]
    body = {"user_id": "u-w", "character_id": "luna", "system_messages": own, "style": "gemini"}
    status, answer = await service.api("POST", f"/v1/sessions/{agent}/watch", json=body)
    assert status == 201 and answer["refresh_enabled"] is True
    fake.say(agent, conversation(2, tag="watched"))
    await poll(service)
    status, refreshed = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 200, refreshed
    assert refreshed["system_messages"][0] == own[0]
    assert (await watch_of(service, agent)).style == "gemini"
    assert all("parts" in m for m in refreshed["system_messages"][1:])
    status, bad = await service.api("POST", "/v1/sessions/STYLEWATCH2/watch", json={**body, "style": "dify"})
    assert status == 422 and "style" in bad["error"]["message"]


# -- refresh without the running call's own turns ---------------------------------------------


async def test_refresh_sends_memory_without_the_running_calls_own_turns(start_service, fake):
    service = await live(start_service, fake, context_recent_messages=4, summary_delay_s=3600)
    await earlier_call(service, "u-own", tag="earlier", count=6)
    status, answer = await start(service, "u-own", join_with(llm_block("join_llm_custom"), "own-1"))
    assert status == 201
    mine = answer["agent_id"]
    status, other = await start(service, "u-own", join_with(llm_block("join_llm_custom"), "own-2"))
    assert status == 201
    fake.say(mine, conversation(10, tag="mine", base_ms=1_795_000_100_000))
    fake.say(other["agent_id"], conversation(2, tag="other", base_ms=1_795_000_050_000))
    await poll(service)
    assert len(await stored(service, mine)) == 10

    status, refreshed = await service.api("POST", f"/v1/agents/{mine}/refresh")
    assert status == 200
    pushed = json.dumps(pushed_list(fake.updates[-1]))
    assert "mine " not in pushed  # none of the call's own turns
    # The window is still the 4 newest turns of the pair: the other call's, then the earlier call's.
    assert "other user message 0" in pushed and "other assistant message 1" in pushed
    assert "earlier user message 4" in pushed and "earlier assistant message 5" in pushed
    assert "earlier assistant message 3" not in pushed

    # The same list the endpoint gives with exclude_agent_id; without it the call's turns are there.
    path = "/v1/users/u-own/characters/luna/system-messages"
    status, excluded = await service.api("GET", path, params={"exclude_agent_id": mine})
    assert status == 200 and excluded["included"]["excluded_agent_id"] == mine
    own = llm_block("join_llm_custom")["system_messages"]
    assert refreshed["system_messages"] == own + excluded["system_messages"]
    status, everything = await service.api("GET", path)
    assert "mine assistant message 9" in json.dumps(everything["system_messages"])


async def test_exclusion_reads_further_back_when_the_runs_count_lags(service):
    """The recent window stays full even when a run's message count understates its rows."""
    await earlier_call(service, "u-lag", tag="old", count=6)
    await earlier_call(service, "u-lag", tag="new", count=6, base_ms=1_795_000_600_000)
    new_agent = "OLD-u-lag-new"

    def lag(tx: Any) -> None:
        tx.conn.execute("UPDATE sessions SET message_count = 0 WHERE agent_id = ?", (new_agent,))

    await service.store.write(lag)
    request = ContextRequest(
        user_id="u-lag", character_id="luna", max_tokens=2000, recent_messages=3, exclude_agent_id=new_agent
    )
    context = await service.store.read(lambda view: build_in(view, request))
    text = context.system_messages[-1]["content"]
    assert context.included["messages"] == 3
    assert "new " not in text and "old user message 4" in text and "old assistant message 3" in text


# -- pipeline joins ----------------------------------------------------------------------------


async def test_a_pipeline_join_gets_no_llm_block_and_says_why(start_service, fake):
    service = await live(start_service, fake, summary_delay_s=3600)
    await earlier_call(service, "u-pipe")
    join = load_fixture("agora_llm/join_pipeline.json")
    status, answer = await start(service, "u-pipe", join)
    assert status == 201, answer
    sent = fake.joins[0]
    assert sent["pipeline_id"] == "studio-pipeline-id"
    assert "llm" not in sent["properties"]
    assert {k: v for k, v in sent["properties"].items() if k != "labels"} == join["properties"]
    assert sent["properties"]["labels"] == {"user_id": "u-pipe", "character_id": "luna"}
    assert answer["memory"]["injected"] is False and "pipeline_id" in answer["memory"]["reason"]
    assert answer["system_messages"] is None and answer["memory_tokens"] == 0
    agent_id = answer["agent_id"]
    watch = await watch_of(service, agent_id)
    assert watch is not None and watch.status == "watching" and watch.base_system_messages is None

    # Followed (its turns are kept), but never refreshed: the pipeline's prompt is unknown.
    fake.say(agent_id, conversation(2, tag="pipe"))
    await poll(service)
    assert len(await stored(service, agent_id)) == 2
    status, refused = await service.api("POST", f"/v1/agents/{agent_id}/refresh")
    message = refused["error"]["message"]
    assert status == 409 and "started without giving them" in message and "system_messages" in message
    assert fake.updates == []


async def test_a_pipeline_join_that_overrides_the_prompt_gets_memory_after_it(start_service, fake):
    service = await live(start_service, fake, summary_delay_s=3600)
    await earlier_call(service, "u-pipe2")
    join = load_fixture("agora_llm/join_pipeline.json")
    own = [{"role": "system", "content": "You are the support agent."}]
    join["properties"]["llm"] = {"system_messages": own}
    status, answer = await start(service, "u-pipe2", join)
    assert status == 201 and answer["memory"]["injected"] is True
    llm = fake.joins[0]["properties"]["llm"]
    assert set(llm) == {"system_messages"} and llm["system_messages"][0] == own[0]
    assert "earlier user message 4" in json.dumps(llm["system_messages"][1:])


# -- leave -------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["", '""', "null"], ids=["empty", "empty-json-string", "null"])
async def test_leave_answered_with_an_empty_body_is_a_success(start_service, fake, body):
    service = await live(start_service, fake, summary_delay_s=3600)
    fake.leave_body = body
    status, answer = await start(service, "u-leave", join_with(llm_block("join_llm_custom"), "leave"))
    assert status == 201
    agent_id = answer["agent_id"]
    status, left = await service.api("POST", f"/v1/agents/{agent_id}/leave")
    assert status == 200, left
    assert left == {"agent_id": agent_id, "agora": {}}
    assert fake.agents[agent_id].status == "STOPPED"
    status, again = await service.api("POST", f"/v1/agents/{agent_id}/leave")
    assert status == 404 and again["error"]["code"] == "agent_not_found"


async def test_only_leave_takes_a_body_that_is_not_an_object(fake):
    settings = Settings(agora_app_id="app", agora_customer_id="cid", agora_customer_secret="csec",
                        agora_api_base=fake.base_url, agora_max_retries=0)  # fmt: skip
    fake.add_agent("LEAVEBODY1")
    fake.add_agent("LEAVEBODY2")
    async with aiohttp.ClientSession() as session:
        client = AgoraClient(settings, session)
        fake.leave_body = '""'
        assert await client.leave("LEAVEBODY1") == {}
        fake.leave_body = "OK"
        assert await client.leave("LEAVEBODY2") == {}
        fake.join_answer = '""'
        with pytest.raises(AgoraError, match="not a JSON object"):
            await client.join(join_with(None, "j"))


async def test_a_join_answered_without_an_agent_id_is_a_clear_502(start_service, fake):
    service = await live(start_service, fake, summary_delay_s=3600)
    fake.join_answer = "{}"
    status, answer = await start(service, "u-noid", join_with(llm_block("join_llm_custom"), "noid"))
    assert status == 502, answer
    assert answer["error"]["code"] == "agora_error" and "agent_id" in answer["error"]["message"]
    counts = await service.store.read(
        lambda view: [view.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                      for table in ("watched_agents", "sessions")]
    )  # fmt: skip
    assert counts == [0, 0]


def test_stored_tool_rows_render_as_the_tool_messages_they_were():
    """Rows as GET …/messages gives them: a tool call or result (`kind`) carries its tool data."""
    call = tool_turn()[1]["tool_calls"]
    rows = [
        {"role": "user", "kind": "turn", "content": "Weather in Paris?", "ts_ms": 1_678_905_300_000},
        {"role": "assistant", "kind": "tool_call", "content": None, "ts_ms": 1_678_905_301_000,
         "tool": {"tool_calls": call}},
        {"role": "tool", "kind": "tool_result", "content": "{\"temp_c\": 21}",
         "ts_ms": 1_678_905_302_000, "tool": {"tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}},
        {"role": "assistant", "kind": "tool_call", "content": "checking", "ts_ms": 1_678_905_303_000},
    ]  # fmt: skip
    rendered = to_openai_messages(rows, RenderOptions(time="none"))
    assert rendered == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_1"},
        {"role": "assistant", "content": "checking"},  # a tool call is never re-dated as a turn
    ]


async def test_a_103_with_tool_calls_renders_from_storage_with_its_tool_messages(service):
    envelope = load_fixture("agora/103_tool_calls.json")
    status, _ = await service.callback(envelope)
    assert status == 200
    status, stored_rows = await service.api("GET", "/v1/users/u-tools/characters/luna/messages")
    assert status == 200
    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": stored_rows["messages"], "options": {"time": "none"}},
    )  # fmt: skip
    assert status == 200, body
    contents = envelope["payload"]["contents"]
    assert body["messages"] == to_openai_messages(contents, RenderOptions(time="none"))
    assert body["messages"][1] == {"role": "assistant", "content": None,
                                   "tool_calls": contents[1]["tool_calls"]}  # fmt: skip
    assert body["messages"][2] == {"role": "tool", "content": contents[2]["content"],
                                   "tool_call_id": "call_abc123"}  # fmt: skip
