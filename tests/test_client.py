"""agent_memory.client against the real server on a real port, and the CLI's --url.

The client's answers are compared with the API's own JSON (nothing lost on the way); retries
are checked against a tiny loopback server that answers 429 or 503 first.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from conftest import TOKEN, condense, load_conversations, said, seed
from pydantic import BaseModel

from agent_memory.cli import main
from agent_memory.client import ApiError, AsyncMemoryClient, MemoryClient
from agent_memory.core.clock import Backoff

ALICE = "/v1/users/u-alice/characters/luna"
NO_WAIT = Backoff(base_s=0.0, cap_s=0.0)  # our own delay 0: a wait is the server's Retry-After alone


def wire(answer: BaseModel) -> Any:
    """An answer as JSON again, to compare with what the API sent."""
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


async def api_json(service: Any, path: str, **params: Any) -> Any:
    status, body = await service.api("GET", path, params=params)
    assert status == 200, body
    return body


# the client against the real server


async def test_async_client_reads_every_answer_whole(service):
    await load_conversations(service, "en_luna_companion")
    async with AsyncMemoryClient(service.url, TOKEN) as memory:
        health = await memory.health()
        assert health.status == "ok" and health.migrations
        added = await memory.add_fact("u-alice", "luna", "prefers to be called Ally")
        assert added.created and added.fact.pinned and added.fact.origin == "manual"
        context = await memory.system_messages("u-alice", "luna", max_tokens=400, query="Miso")
        recalled = await memory.recall("u-alice", "luna", "What is my cat called?")
        found = await memory.search("u-alice", "Miso", kinds=["message"], limit=5)
        answers = [
            (await memory.facts("u-alice", "luna"), f"{ALICE}/facts", {}),
            (context, f"{ALICE}/system-messages", {"max_tokens": 400, "query": "Miso"}),
            (recalled, f"{ALICE}/recall", {"q": "What is my cat called?"}),
            (await memory.messages("u-alice", "luna", limit=5), f"{ALICE}/messages", {"limit": 5}),
            (found, "/v1/users/u-alice/search", {"q": "Miso", "kinds": "message", "limit": 5}),
            (await memory.mentions("Miso"), "/v1/search/mentions", {"q": "Miso"}),
            (await memory.user_stats("u-alice"), "/v1/users/u-alice/stats", {}),
            (await memory.character_stats("luna"), "/v1/characters/luna/stats", {}),
            (await memory.stats(), "/v1/stats", {}),
        ]
        for answer, path, params in answers:
            assert wire(answer) == await api_json(service, path, **params), path
        assert "prefers to be called Ally" in context.system_messages[0]["content"]
        assert context.tokens <= 400
        assert any("Miso" in m.text for m in recalled.memories) and "Miso" in recalled.system_message.content
        assert found.results and all(hit.kind == "message" for hit in found.results)
        assert [user.user_id for user in (await memory.mentions("Miso")).users] == ["u-alice"]

        exported = await memory.export("u-alice")
        expected = await api_json(service, "/v1/users/u-alice/export")
        assert {**wire(exported), "exported_ms": 0} == {**expected, "exported_ms": 0}
        assert exported.counts["facts"] == 1

        # Condense now, then read the summary it made and the job that made it.
        job = (await memory.condense("u-alice", "luna")).job
        assert job is not None and job.status == "pending"
        await condense(service)
        summary = await memory.summary("u-alice", "luna")
        assert summary.summary is not None and summary.summary.messages_covered > 0
        assert wire(summary) == await api_json(service, f"{ALICE}/summary")
        assert wire(await memory.jobs()) == await api_json(service, "/v1/jobs")

        agent_id = (await memory.messages("u-alice", "luna")).messages[0].agent_id
        bound = await memory.bind(agent_id, "u-alice", "luna")
        assert bound.session.agent_id == agent_id and bound.session.user_id == "u-alice"
        assert (await memory.session(agent_id)).session == bound.session
        assert (await memory.bind_channel("room-7", "u-alice", "luna")).binding.user_id == "u-alice"
        assert (await memory.channel_binding("room-7")).binding.character_id == "luna"
        assert (await memory.unbind_channel("room-7")).deleted.channel == "room-7"

        assert (await memory.delete_fact(added.fact.id)).deleted == added.fact.id
        assert "prefers to be called Ally" not in [
            f.text for f in (await memory.facts("u-alice", "luna")).facts
        ]
        receipt = await memory.forget("u-alice")
        assert receipt.character_id is None and receipt.deleted["messages"] > 0
        with pytest.raises(ApiError) as gone:
            await memory.export("u-alice")
        assert (gone.value.status, gone.value.code) == (404, "not_found")
        assert gone.value.request_id  # the service's X-Request-Id, to find its log line


async def test_ids_with_slashes_and_unicode_reach_the_right_pair(service):
    user, character = "u/ä ?#1", "c%2F"
    async with AsyncMemoryClient(service.url, TOKEN) as memory:
        await memory.add_fact(user, character, "likes green tea", scope="user")
        facts = await memory.facts(user, character)
    assert (facts.user_id, facts.character_id) == (user, character)
    assert [(f.text, f.scope) for f in facts.facts] == [("likes green tea", "user")]


async def test_sync_client_answers_and_raises_like_the_async_one(service):
    await load_conversations(service, "zh_xiaoyu_tutor")

    def use() -> None:
        with MemoryClient(service.url, TOKEN) as memory:
            assert memory.add_fact("u-wang", "xiaoyu", "考试在六月").created
            assert "考试在六月" in [f.text for f in memory.facts("u-wang", "xiaoyu").facts]
            assert memory.messages("u-wang", "xiaoyu", limit=3).messages[-1].content
            with pytest.raises(ApiError) as refused:
                memory.system_messages("u-wang", "xiaoyu", max_tokens=10)
            assert (refused.value.status, refused.value.code) == (422, "invalid_field")
            assert "max_tokens must be between 50 and 200000" in refused.value.message
        with pytest.raises(RuntimeError, match="closed"):
            memory.facts("u-wang", "xiaoyu")
        with MemoryClient(service.url, "not-the-token") as stranger, pytest.raises(ApiError) as denied:
            stranger.facts("u-wang", "xiaoyu")
        assert (denied.value.status, denied.value.code) == (401, "unauthorized")

    # In a thread: the server answers on this test's event loop, which must stay free meanwhile.
    await asyncio.to_thread(use)


# retries, against a server that is busy first


class Busy:
    """A loopback server answering each request with the next of `answers`; then 200 with `final`."""

    def __init__(self, *answers: tuple[int, dict[str, str], dict[str, Any]], final: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.final = final
        self.arrivals: list[float] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.answer)
        self.server = TestServer(app, host="127.0.0.1")

    async def answer(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.monotonic())
        if not self.answers:
            return web.json_response(self.final)
        status, headers, body = self.answers.pop(0)
        return web.json_response(body, status=status, headers={"X-Request-Id": "busy-1", **headers})

    async def __aenter__(self) -> str:
        await self.server.start_server()
        return str(self.server.make_url("")).rstrip("/")

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()


FACTS = {"user_id": "u", "character_id": "c", "facts": []}


def error(code: str, message: str = "try later") -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


async def test_a_429_is_retried_no_sooner_than_its_retry_after():
    busy = Busy((429, {"Retry-After": "1"}, error("rate_limited")), final=FACTS)
    async with busy as url, AsyncMemoryClient(url, backoff=NO_WAIT) as memory:
        facts = await memory.facts("u", "c")
    assert facts.facts == [] and len(busy.arrivals) == 2
    assert busy.arrivals[1] - busy.arrivals[0] >= 1.0  # asked for 1 s: never sooner


async def test_503_is_retried_until_the_retries_run_out():
    unavailable = (503, {}, error("store_unavailable"))
    busy = Busy(*[unavailable] * 3, final=FACTS)
    async with busy as url, AsyncMemoryClient(url, retries=3, backoff=NO_WAIT) as memory:
        assert (await memory.facts("u", "c")).user_id == "u"
    assert len(busy.arrivals) == 4

    busy = Busy(*[unavailable] * 3, final=FACTS)
    async with busy as url, AsyncMemoryClient(url, retries=2, backoff=NO_WAIT) as memory:
        with pytest.raises(ApiError) as failed:
            await memory.facts("u", "c")
    assert (failed.value.status, failed.value.code, failed.value.request_id) == (
        503,
        "store_unavailable",
        "busy-1",
    )
    assert len(busy.arrivals) == 3


@pytest.mark.parametrize(
    ("status", "headers", "code", "retry_after"),
    [
        (503, {}, "not_configured", None),  # a missing setting stays missing
        (429, {"Retry-After": "3600"}, "rate_limited", 3600.0),  # too long to wait here: the caller's call
        (422, {}, "invalid_field", None),
    ],
)
async def test_answers_not_worth_a_retry_raise_at_once(status, headers, code, retry_after):
    busy = Busy((status, headers, error(code)), final=FACTS)
    async with busy as url, AsyncMemoryClient(url, backoff=NO_WAIT) as memory:
        with pytest.raises(ApiError) as raised:
            await memory.facts("u", "c")
    assert (raised.value.status, raised.value.code, raised.value.retry_after) == (status, code, retry_after)
    assert len(busy.arrivals) == 1


async def test_an_answer_of_another_shape_is_an_api_error_not_a_validation_error():
    busy = Busy(final={"user_id": "u", "facts": "none"})
    async with busy as url, AsyncMemoryClient(url) as memory:
        with pytest.raises(ApiError) as raised:
            await memory.facts("u", "c")
    assert (raised.value.status, raised.value.code) == (502, "bad_answer")
    assert "FactsAnswer" in raised.value.message


async def test_no_server_is_an_api_error_that_names_the_address():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens there now.
    async with AsyncMemoryClient(f"http://127.0.0.1:{port}") as memory:
        with pytest.raises(ApiError) as raised:
            await memory.health()
    assert (raised.value.status, raised.value.code) == (503, "unreachable")
    assert f"127.0.0.1:{port}" in raised.value.message


# the CLI, on the database here and against the running service


async def cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """Run `agent-memory argv` in a thread (the service answers on this loop meanwhile)."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


COMMANDS = [
    ["system-messages", "u-alice", "luna", "--max-tokens", "400"],
    ["system-messages", "u-alice", "luna", "--text", "--query", "Miso"],
    ["recall", "u-alice", "luna", "What is my cat called?"],
    ["recall", "u-alice", "luna", "Miso", "--json", "--scope", "user"],
    ["search", "u-alice", "Miso"],
    ["search", "u-alice", "Miso", "--json", "--limit", "3"],
    ["facts", "u-alice", "luna"],
    ["facts", "u-alice", "luna", "--json"],
    ["stats"],
    ["stats", "--user", "u-alice"],
    ["stats", "--character", "luna", "--json"],
    ["stats", "--user", "nobody"],
    ["jobs"],
    ["export", "u-alice"],
]


async def test_cli_url_prints_what_the_local_database_prints(service, capsys):
    await load_conversations(service, "en_luna_companion")
    status, _ = await service.api("POST", f"{ALICE}/facts", json={"text": "works night shifts"})
    assert status == 201
    db = str(service.settings.db_path)
    for command in COMMANDS:
        here = await cli(capsys, *command, "--db", db)
        there = await cli(capsys, *command, "--url", service.url, "--api-key", TOKEN)
        assert here[1] or here[2], command  # something was said
        if command[0] == "export":  # stamped with the time it was made
            here, there = (
                (code, json.loads(out) | {"exported_ms": 0}, err) for code, out, err in (here, there)
            )
        assert here == there, command
    assert "works night shifts" in (await cli(capsys, "facts", "u-alice", "luna", "--url", service.url,
                                               "--api-key", TOKEN))[1]  # fmt: skip


async def test_cli_forget_through_the_service_answers_the_same_receipt(service, capsys):
    for user, agent in (("u-1", "A1"), ("u-2", "A2")):
        await seed(service, user, "luna", agent, said("My cat is called Miso.", "Hello Miso!"))
    code, there, _ = await cli(capsys, "forget", "u-1", "--url", service.url, "--api-key", TOKEN)
    assert code == 0
    code, here, _ = await cli(capsys, "forget", "u-2", "--db", str(service.settings.db_path))
    assert code == 0
    assert json.loads(there)["deleted"]["messages"] == 2
    assert there.replace("u-1", "u-2") == here
    status, _ = await service.api("GET", "/v1/users/u-1/export")
    assert status == 404  # gone from the service's database


async def test_cli_edits_a_fact_and_shows_its_history_here_and_through_the_service(service, capsys):
    status, added = await service.api("POST", f"{ALICE}/facts", json={"text": "lives in Paris"})
    assert status == 201
    fact_id = str(added["fact"]["id"])
    db = str(service.settings.db_path)
    code, out, _ = await cli(capsys, "fact-edit", fact_id, "--text", "moved to Lyon", "--db", db)
    assert code == 0 and "pinned" in out and "moved to Lyon" in out
    code, out, _ = await cli(
        capsys, "fact-edit", fact_id, "--unpin", "--url", service.url, "--api-key", TOKEN
    )
    assert code == 0 and "pinned" not in out
    here = await cli(capsys, "fact-history", fact_id, "--db", db)
    there = await cli(capsys, "fact-history", fact_id, "--url", service.url, "--api-key", TOKEN)
    assert here == there
    lines = here[1].splitlines()
    assert lines[0].endswith("(edited): lives in Paris") and lines[-1].endswith("now: moved to Lyon")
    code, _, err = await cli(capsys, "fact-history", "999999", "--db", db)
    assert code != 0 and "no fact with id 999999" in err


async def test_cli_url_says_what_is_wrong(service, capsys, monkeypatch):
    monkeypatch.delenv("AGENT_MEMORY_API_TOKEN", raising=False)
    code, _, err = await cli(capsys, "facts", "u-alice", "luna", "--url", service.url)
    assert code == 2 and "give --api-key, or set AGENT_MEMORY_API_TOKEN" in err
    monkeypatch.setenv("AGENT_MEMORY_API_TOKEN", TOKEN)
    code, out, _ = await cli(capsys, "facts", "u-alice", "luna", "--url", service.url)
    assert code == 0 and "no facts remembered for u-alice/luna" in out
    code, _, err = await cli(capsys, "facts", "u-alice", "luna", "--url", service.url, "--db", "x.db")
    assert code == 2 and "not both" in err
    with pytest.raises(SystemExit):
        main(["facts", "u-alice", "luna", "--url", "localhost:8080"])
    assert "e.g. http://127.0.0.1:8080" in capsys.readouterr().err
