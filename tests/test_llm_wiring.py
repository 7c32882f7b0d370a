"""Memory in every turn, wired: `POST /v1/agents` with `memory_llm` and `agent-memory llm-block`.

The service starts agents through the fake Agora server; what Agora receives, what the service
stores for the custom-LLM endpoint and what it answers are read back over HTTP and the store.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import (
    agent_event,
    assert_error,
    conversation,
    live,
    load_fixture,
    said,
    stored,
    wait_for,
)
from fakes.upstream_llm import FakeUpstreamLLM

from agent_memory.cli import main
from agent_memory.core.domain import LlmRoute
from agent_memory.core.secrets import hash_key

pytestmark = pytest.mark.postgres

PUBLIC = "https://memory.example.com"
ENDPOINT = f"{PUBLIC}/v1/llm/chat/completions"
OWN = [{"role": "system", "content": "Answer in two sentences."}]


def join_body(name: str, **llm: Any) -> dict[str, Any]:
    """A join body whose LLM is the caller's own OpenAI-compatible one."""
    return {
        "name": name,
        "properties": {
            "channel": f"room-{name}",
            "token": "rtc-token",
            "agent_rtc_uid": "0",
            "remote_rtc_uids": ["*"],
            "llm": {
                "url": "https://llm.example/v1/chat/completions",
                "api_key": "sk-caller",
                "max_history": 8,
                "greeting_message": "Hi!",
                "system_messages": OWN,
                "params": {"model": "gpt-4o-mini", "temperature": 0.3},
                **llm,
            },
        },
    }


async def start(service: Any, join: dict[str, Any], user: str = "u-w", **extra: Any) -> tuple[int, dict]:
    request = {"user_id": user, "character_id": "luna", "memory_llm": True, "join": join, **extra}
    return await service.api("POST", "/v1/agents", json=request)


async def routes_held(service: Any) -> list[LlmRoute]:
    """Every route stored, whatever agent it is tied to."""

    def read(view: Any) -> list[LlmRoute]:
        # Rows by name on both backends (sqlite3.Row and psycopg's dict rows).
        hashes = [dict(row)["key_hash"] for row in view.conn.execute("SELECT key_hash FROM llm_routes")]
        return [view.llm_routes.by_key_hash(key_hash) for key_hash in hashes]

    return await service.store.read(read)


async def remember(service: Any, user: str) -> None:
    """An earlier call of the pair, for the start memory."""
    labels = {"user_id": user, "character_id": "luna"}
    status, _ = await service.callback(
        {"noticeId": f"old-{user}", "productId": 17, "eventType": 103, "notifyMs": 1_763_700_000_000,
         "payload": {"agent_id": f"OLD-{user}", "channel": "old", "start_ts": 1_763_690_000,
                     "labels": labels, "contents": conversation(4, tag="earlier")}}
    )  # fmt: skip
    assert status == 200


async def test_memory_llm_points_the_agent_at_the_endpoint_and_keeps_the_callers_llm(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC + "/")
    await remember(service, "u-w")
    join = join_body("luna-w1")
    status, answer = await start(service, join)
    assert status == 201, answer
    agent_id = answer["agent_id"]
    llm = fake.joins[0]["properties"]["llm"]

    # Agora calls the endpoint with a key of its own, and the pair at the top level of each request.
    assert llm["vendor"] == "custom" and llm["url"] == ENDPOINT
    key = llm["api_key"]
    assert key != "sk-caller" and len(key) >= 32
    assert llm["params"] == {
        "model": "gpt-4o-mini",
        "temperature": 0.3,
        "user_id": "u-w",
        "character_id": "luna",
    }
    # Everything else of the caller's block is kept, and the start memory still comes after its prompt.
    assert llm["max_history"] == 8 and llm["greeting_message"] == "Hi!"
    assert llm["system_messages"][: len(OWN)] == OWN
    assert "earlier user message 2" in json.dumps(llm["system_messages"][len(OWN) :])
    assert fake.joins[0]["properties"]["labels"] == {"user_id": "u-w", "character_id": "luna"}

    # The endpoint finds the agent's route by the key's hash and forwards to the caller's LLM.
    route = await service.store.read(lambda view: view.llm_routes.by_key_hash(hash_key(key)))
    assert route is not None
    assert (route.agent_id, route.user_id, route.character_id) == (agent_id, "u-w", "luna")
    assert route.upstream_base_url == "https://llm.example/v1"
    assert route.upstream_api_key == "sk-caller" and route.upstream_model == "gpt-4o-mini"
    assert route.upstream_params == {"model": "gpt-4o-mini", "temperature": 0.3}
    assert await service.store.read(lambda view: view.llm_routes.of_agent(agent_id)) == [route]

    # The answer says where the agent's LLM now is, never the key or the caller's.
    assert answer["memory"]["llm"] == {"url": ENDPOINT, "custom": True}
    assert answer["memory"]["injected"] is True
    assert key not in json.dumps(answer) and "sk-caller" not in json.dumps(answer)
    assert "hash" not in json.dumps(answer["memory"])


async def test_each_agent_gets_its_own_key(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC)
    for name in ("luna-k1", "luna-k2"):
        status, answer = await start(service, join_body(name))
        assert status == 201, answer
    keys = [join["properties"]["llm"]["api_key"] for join in fake.joins]
    assert keys[0] != keys[1]
    routes = await routes_held(service)
    assert sorted(r.key_hash for r in routes) == sorted(hash_key(k) for k in keys)
    assert {r.agent_id for r in routes} == set(fake.agents)


async def test_without_memory_llm_the_join_and_the_answer_are_as_before(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC)
    join = join_body("luna-plain")
    status, answer = await service.api(
        "POST", "/v1/agents", json={"user_id": "u-p", "character_id": "luna", "join": join}
    )
    assert status == 201, answer
    llm = fake.joins[0]["properties"]["llm"]
    assert {k: v for k, v in llm.items() if k != "system_messages"} == {
        k: v for k, v in join["properties"]["llm"].items() if k != "system_messages"
    }
    assert "llm" not in answer["memory"]
    assert await routes_held(service) == []


async def test_memory_llm_without_a_public_url_is_refused_before_agora(start_service, fake):
    service = await live(start_service, fake)
    status, answer = await start(service, join_body("luna-nourl"))
    message = assert_error(status, answer, 422, "invalid_field")
    assert "AGENT_MEMORY_PUBLIC_URL" in message
    assert fake.joins == [] and await routes_held(service) == []


async def test_a_join_without_its_own_llm_url_forwards_to_the_servers_upstream(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC)
    join = join_body("luna-default")
    del join["properties"]["llm"]["url"], join["properties"]["llm"]["api_key"]
    del join["properties"]["llm"]["params"]
    status, answer = await start(service, join)
    assert status == 201, answer
    llm = fake.joins[0]["properties"]["llm"]
    assert llm["url"] == ENDPOINT and llm["params"] == {"user_id": "u-w", "character_id": "luna"}
    [route] = await routes_held(service)
    assert (route.upstream_base_url, route.upstream_api_key, route.upstream_model) == (None, None, None)
    assert route.upstream_params == {} and route.agent_id == answer["agent_id"]


@pytest.mark.parametrize(
    ("llm", "words"),
    [
        ({"style": "gemini"}, ["style", "gemini"]),
        ({"url": f"{PUBLIC}/v1/llm/chat/completions"}, ["already points at this service"]),
        ({"url": f"{PUBLIC}/v1/llm/u-w/chat/completions"}, ["already points at this service"]),
        ({"params": ["not", "an", "object"]}, ["llm.params"]),
        ({"params": {"model": 4}}, ["params.model"]),
        ({"url": 42}, ["llm.url"]),
    ],
    ids=[
        "gemini-style",
        "own-endpoint",
        "own-endpoint-routed",
        "params-not-object",
        "model-not-text",
        "url-not-text",
    ],
)
async def test_memory_llm_refuses_an_llm_block_it_cannot_forward_to(start_service, fake, llm, words):
    service = await live(start_service, fake, public_url=PUBLIC)
    status, answer = await start(service, join_body("luna-bad", **llm))
    message = assert_error(status, answer, 422, "invalid_field")
    assert all(word in message for word in words), message
    assert fake.joins == [] and await routes_held(service) == []


async def test_a_pipeline_join_with_memory_llm_must_name_its_llm(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC)
    join = load_fixture("agora_llm/join_pipeline.json")
    status, answer = await start(service, join)
    message = assert_error(status, answer, 422, "invalid_field")
    assert "pipeline_id" in message and "llm.url" in message
    assert fake.joins == [] and await routes_held(service) == []

    # Naming its LLM overrides the pipeline's: the endpoint forwards there. The pipeline's own
    # prompt is still unknown, so no start memory goes in; recall comes with every turn instead.
    join["properties"]["llm"] = {"url": "https://llm.example/v1", "params": {"model": "m"}}
    status, answer = await start(service, join)
    assert status == 201, answer
    llm = fake.joins[0]["properties"]["llm"]
    assert llm["vendor"] == "custom" and llm["url"] == ENDPOINT and "system_messages" not in llm
    assert answer["memory"]["injected"] is False and "pipeline_id" in answer["memory"]["reason"]
    assert answer["memory"]["llm"] == {"url": ENDPOINT, "custom": True}
    [route] = await routes_held(service)
    assert route.upstream_base_url == "https://llm.example/v1" and route.upstream_model == "m"
    assert route.agent_id == answer["agent_id"]


async def test_agora_refusing_the_join_leaves_no_route(start_service, fake):
    service = await live(start_service, fake, public_url=PUBLIC)
    fake.fail_next("/join", 400)
    status, answer = await start(service, join_body("luna-refused"))
    assert status == 502, answer
    assert await routes_held(service) == []


# -- the wired agent, as Agora then calls it ---------------------------------------------------


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


async def test_agora_calling_with_the_minted_key_reaches_the_callers_llm_with_memory(
    start_service, fake, upstream
):
    service = await live(
        start_service, fake, public_url=PUBLIC, recall_timeout_ms=5000, llm_reply_settle_s=0.05
    )
    join = join_body("luna-e2e", url=f"{upstream.base_url}/chat/completions", api_key="sk-caller",
                     params={"model": "caller-model", "temperature": 0.3})  # fmt: skip
    status, answer = await start(service, join, user="u-e2e")
    assert status == 201, answer
    agent_id = answer["agent_id"]
    llm = fake.joins[0]["properties"]["llm"]
    # Remembered after the start memory was built: only recall can bring it into the call.
    earlier = said("My sister's dog is called Pepper.", "Pepper is a lovely name for a dog!")
    status, _ = await service.callback(
        agent_event(103, "OLD-e2e", labels={"user_id": "u-e2e", "character_id": "luna"}, contents=earlier)
    )
    assert status == 200
    assert "Pepper" not in json.dumps(llm["system_messages"])
    # The endpoint recalls from what is indexed, without waiting; a call comes seconds after
    # the last one ended, by when the idle writer has indexed it. Here: at once.
    await service.store.catch_up_search()

    # What Agora sends: the system messages, the turns with extended fields, llm.params on top.
    turns = said(
        "Hi Luna!", "Hi! Good to hear you.", "What is my sister's dog called?", start_ms=1_795_000_000_000
    )
    body = {"model": llm["params"]["model"], "stream": True, "messages": llm["system_messages"] + turns,
            "turn_id": 2, "timestamp": 1_795_000_003_000, "interruptable": True, **llm["params"]}  # fmt: skip
    headers = {"Authorization": f"Bearer {llm['api_key']}"}
    async with service.session.post(
        llm["url"].replace(PUBLIC, service.url), json=body, headers=headers
    ) as resp:
        assert resp.status == 200, await resp.text()
        streamed = (await resp.read()).decode()
    assert '"Hello"' in streamed and streamed.rstrip().endswith("data: [DONE]")

    # Forwarded to the caller's own LLM, with its key, model and params, and the recalled memory.
    assert upstream.headers[0]["Authorization"] == "Bearer sk-caller"
    sent = upstream.requests[0]
    assert sent["model"] == "caller-model" and sent["temperature"] == 0.3
    assert "user_id" not in sent and "turn_id" not in sent
    assert "Pepper" in json.dumps(sent["messages"][len(llm["system_messages"]) :])
    # Recorded into the agent's own session.
    await wait_for(lambda: stored(service, agent_id), failure="the endpoint recorded nothing")
    recorded = [m.content for m in await stored(service, agent_id)]
    assert "What is my sister's dog called?" in recorded

    # A key is not a key after it is made up; the caller's upstream key is none either.
    for key in ("made-up", "sk-caller"):
        async with service.session.post(
            f"{service.url}/v1/llm/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as refused:
            assert refused.status == 401
    assert len(upstream.requests) == 1


# -- agent-memory llm-block ----------------------------------------------------------------------


def llm_block(capsys: Any, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["llm-block", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


def test_llm_block_prints_the_block_for_a_pair(capsys, monkeypatch):
    monkeypatch.delenv("AGENT_MEMORY_LLM_TOKEN", raising=False)
    monkeypatch.setenv("AGENT_MEMORY_PUBLIC_URL", PUBLIC + "/")
    code, printed, err = llm_block(capsys, "u-1", "luna", "--upstream-model", "gpt-4o")
    assert code == 0, err
    assert printed == {"llm": {"vendor": "custom", "url": ENDPOINT, "api_key": "<AGENT_MEMORY_LLM_TOKEN>",
                               "params": {"model": "gpt-4o", "user_id": "u-1", "character_id": "luna"}}}  # fmt: skip
    assert "AGENT_MEMORY_LLM_TOKEN is not set" in err

    # --url wins over the setting; a full endpoint URL is kept as it is.
    code, printed, _ = llm_block(capsys, "u-1", "luna", "--url", "http://10.0.0.5:8080")
    assert printed is not None and printed["llm"]["url"] == "http://10.0.0.5:8080/v1/llm/chat/completions"
    assert printed["llm"]["params"] == {"user_id": "u-1", "character_id": "luna"}
    code, printed, _ = llm_block(
        capsys, "u-1", "luna", "--url", "https://m.example/v1/llm/x/chat/completions"
    )
    assert printed is not None and printed["llm"]["url"] == "https://m.example/v1/llm/x/chat/completions"


def test_llm_block_never_prints_the_token_unasked(capsys, monkeypatch):
    monkeypatch.setenv("AGENT_MEMORY_LLM_TOKEN", "s3cret-llm-token")
    code, printed, err = llm_block(capsys, "u-1", "luna", "--url", PUBLIC)
    assert code == 0 and printed is not None
    assert printed["llm"]["api_key"] == "<AGENT_MEMORY_LLM_TOKEN>"
    assert "s3cret-llm-token" not in json.dumps(printed) + err and "--show-token" in err
    code, printed, err = llm_block(capsys, "u-1", "luna", "--url", PUBLIC, "--show-token")
    assert code == 0 and printed is not None and printed["llm"]["api_key"] == "s3cret-llm-token"


def test_llm_block_without_a_url_says_what_to_set(capsys, monkeypatch):
    monkeypatch.delenv("AGENT_MEMORY_PUBLIC_URL", raising=False)
    code, printed, err = llm_block(capsys, "u-1", "luna")
    assert code == 2 and printed is None
    assert "--url" in err and "AGENT_MEMORY_PUBLIC_URL" in err
