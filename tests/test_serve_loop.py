"""The real `agent-memory serve` runs on uvloop (unless declined), and the custom-LLM endpoint
recalls, streams and cancels on it as it does on asyncio's own loop; the interpreter is tuned
for short pauses of that loop."""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import TOKEN, wait_for
from fakes.upstream_llm import FakeUpstreamLLM, Script
from served import Server, servers

from agent_memory import cli

LLM_TOKEN = "agora-llm-key"
PAIR = "/v1/users/u-ana/characters/luna"
PARAMS = {"user_id": "u-ana", "character_id": "luna", "agent_id": "AGENT-LOOP"}


def serve(tmp_path: Path, upstream: FakeUpstreamLLM, **more: str) -> Server:
    settings = {
        "AGENT_MEMORY_LOG_LEVEL": "INFO",
        "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN,
        "AGENT_MEMORY_UPSTREAM_BASE_URL": upstream.base_url,
        "AGENT_MEMORY_LLM_REPLY_SETTLE_S": "0.05",
        "AGENT_MEMORY_RECALL_TIMEOUT_MS": "5000",
    }
    return Server(tmp_path / "memory.db", tmp_path / "serve.log", {**settings, **more})


async def api(session: aiohttp.ClientSession, server: Server, method: str, path: str, **kw: Any) -> Any:
    async with session.request(
        method, f"{server.url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}, **kw
    ) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "stream": True, **PARAMS}


@pytest.mark.slow
async def test_serve_runs_on_uvloop_and_the_endpoint_recalls_streams_and_cancels_on_it(
    tmp_path: Path,
) -> None:
    async with FakeUpstreamLLM() as upstream:
        with servers() as started:
            started.append(server := serve(tmp_path, upstream))
            async with aiohttp.ClientSession() as session:
                await server.wait_healthy(session)
                assert "event loop uvloop" in (tmp_path / "serve.log").read_text()
                await api(
                    session, server, "POST", f"{PAIR}/facts", json={"text": "Ana's dog is called Biscuit"}
                )
                headers = {"Authorization": f"Bearer {LLM_TOKEN}"}

                # A whole answer: the recalled fact reaches the model, every chunk reaches the caller.
                upstream.script(Script(words=["It", " is", " Biscuit", "."]))
                async with session.post(
                    f"{server.url}/v1/llm/chat/completions",
                    json=ask("What is my dog called?"),
                    headers=headers,
                ) as resp:
                    assert resp.status == 200 and resp.headers["X-Agent-Memory-Memories"] == "1"
                    events = [
                        line[6:] for line in (await resp.text()).split("\n") if line.startswith("data: ")
                    ]
                assert events[-1] == "[DONE]"
                said = "".join(
                    choice["delta"].get("content") or ""
                    for event in events[:-1]
                    for choice in json.loads(event)["choices"]
                )
                assert said == "It is Biscuit."
                assert any(
                    "Biscuit" in m["content"]
                    for m in upstream.requests[0]["messages"]
                    if m["role"] == "system"
                )

                # The caller goes away mid-answer: the upstream is closed at once, the part said is kept.
                upstream.script(Script(words=["one"] + [" more"] * 50, delay_s=0.2))
                response = await session.post(
                    f"{server.url}/v1/llm/chat/completions", json=ask("Tell me a long story"), headers=headers
                )
                await response.content.readuntil(b'"one"')
                response.close()
                left = time.perf_counter()
                await wait_for(
                    lambda: upstream.disconnects, 5, failure="the upstream never saw the disconnect"
                )
                assert upstream.disconnects[0].at - left < 0.1

                async def cut_reply() -> list[dict[str, Any]]:
                    found = (await api(session, server, "GET", f"{PAIR}/messages"))["messages"]
                    return [m for m in found if m["role"] == "assistant" and m["interrupted"]]

                kept = await wait_for(cut_reply, 5, failure="the interrupted reply was not recorded")
                assert kept[0]["content"].startswith("one")


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["asyncio", "uvloop"])
async def test_the_event_loop_is_said_at_start_and_asyncio_can_be_chosen(
    tmp_path: Path, setting: str
) -> None:
    async with FakeUpstreamLLM() as upstream:
        with servers() as started:
            started.append(server := serve(tmp_path, upstream, AGENT_MEMORY_EVENT_LOOP=setting))
            async with aiohttp.ClientSession() as session:
                await server.wait_healthy(session)
    assert f"event loop {setting}" in (tmp_path / "serve.log").read_text()


def test_serve_takes_the_gil_back_within_a_millisecond_and_collects_young_objects_rarely() -> None:
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    try:
        cli.tune_interpreter()
        # A thread busy merging or indexing keeps the loop (every stream) waiting at most this.
        assert sys.getswitchinterval() <= 0.001
        assert gc.get_threshold()[0] >= 50_000 and gc.get_freeze_count() > 0
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
