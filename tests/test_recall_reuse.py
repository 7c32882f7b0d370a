"""A live call's kept recalls: a forget racing a recall in flight leaves none of it reachable; a
recall read while the pair's other turns wait for the index is answered again only while they do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Service, agent_event, deliver, wait_for
from conftest import stored as messages_of
from fakes.upstream_llm import FakeUpstreamLLM, Script
from test_llm_proxy import LLM_TOKEN, said, start

from agent_memory.core.recall import Recall
from agent_memory.memory.live_calls import ProxyStats
from agent_memory.memory.per_turn import memory_message, normal, recall_query, text_of
from agent_memory.memory.reading import recall_in
from agent_memory.memory.recall_reuse import RecallReuse
from agent_memory.platforms.llm_endpoint import PARTS
from agent_memory.settings import Settings
from agent_memory.store import ReadView, open_store
from agent_memory.store.postgres import engine as pg_engine
from agent_memory.store.sqlite import engine as sqlite_engine

pytestmark = pytest.mark.postgres


def test_a_forget_while_a_recall_is_read_keeps_nothing_of_that_recall(tmp_path: Path) -> None:
    store = open_store(Settings(db_path=tmp_path / "m.db"))
    reuse = RecallReuse(ProxyStats())
    answer = object()

    def fresh(_: ReadView) -> Recall:
        reuse.forget("u1", None)  # the user's forget lands while this recall reads
        return answer  # type: ignore[return-value]

    try:
        read = reuse.read("agora:run-1", "u1", "luna", "where did I go?", 500, fresh)
        assert store.read_now(read) is answer
    finally:
        store.close()
    assert reuse.watch("agora:run-1") is None  # nothing kept of the call
    assert not reuse._calls


# -- a call's recalls while the pair's other turns wait for the index ------------------------

PARAMS = {"user_id": "u-ana", "character_id": "luna"}
ASKED = "what is my locker code again?"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


@pytest.fixture
def index_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """No background indexing on either backend (a busy writer's): the recall index takes in
    what is stored only when a recall over HTTP catches it up."""
    monkeypatch.setattr(sqlite_engine, "IDLE_AFTER_S", 3600.0)
    monkeypatch.setattr(pg_engine, "INDEX_EVERY_S", 3600.0)


async def ask(service: Service, upstream: FakeUpstreamLLM, lines: list[str], *, stored: bool = True) -> str:
    """One request of call A-NOW carrying `lines`; the memory the model was given, checked
    against a recall read afresh (no reuse) right after it, as the endpoint renders it; then
    (`stored`) waits for its turns to be recorded."""
    window = [{"role": "system", "content": "You are Luna."}] + [
        said(i, line) for i, line in enumerate(lines)
    ]
    upstream.script(Script(words=["Sure."]))
    body = {"messages": window, "stream": True, "model": "m", "agent_id": "A-NOW", **PARAMS}
    response = await service.session.post(
        f"{service.url}/v1/llm/chat/completions", json=body, headers={"Authorization": f"Bearer {LLM_TOKEN}"}
    )
    assert response.status == 200 and (await response.read()).endswith(b"data: [DONE]\n\n")
    sent = upstream.requests[-1]["messages"]
    memory = sent[1]["content"] if sent[1]["role"] == "system" else ""
    fresh = await service.store.read(
        lambda view: recall_in(
            view,
            "u-ana",
            "luna",
            recall_query(window),
            service.settings.recall_max_tokens,
            exclude_session="A-NOW",
        )
    )
    already = " ".join(part for m in window if (part := normal(text_of(m.get("content")))))
    assert memory == memory_message(fresh.memories, already)[0]
    if stored:
        await wait_for(lambda: stored_count(service, len(lines)))
    return memory


async def stored_count(service: Service, count: int) -> bool:
    return len(await messages_of(service, "A-NOW")) >= count


async def reused(service: Service) -> int:
    status, body = await service.api("GET", "/v1/llm/stats")
    assert status == 200
    return int(body["llm_proxy"]["recalls_reused"])


async def test_a_recall_read_while_other_turns_wait_for_the_index_is_reused_until_one_is_indexed(
    start_service: Any, upstream: FakeUpstreamLLM, index_held: None
) -> None:
    # The call before this one is stored, not yet indexed: a question asked again is answered
    # its recall again (the same answer as a recall read afresh) while that stands, and anew
    # once the index took that call in (then it finds it).
    service = await start(start_service, upstream, llm_reply_settle_s=3600)
    past = [said(0, "my locker code is Qzvxwjkq4471"), said(1, "Noted: Qzvxwjkq4471.")]
    await deliver(service, agent_event(103, "A-PAST", labels=dict(PARAMS), contents=past))
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and body["memories"] and body["index_lag"] == 0, body  # indexed
    other = [said(0, "I changed my locker code to Bxxpqr5521"), said(1, "Got it.")]
    await deliver(service, agent_event(103, "A-OTHER", labels=dict(PARAMS), contents=other))

    lines = [
        ASKED,
        "It is Qzvxwjkq4471.",
        "and where did I park the car last night?",
        "I do not know.",
        ASKED,
    ]
    first = await ask(service, upstream, lines[:1])
    await ask(service, upstream, lines[:3])
    again = await ask(service, upstream, lines[:5])
    assert "Qzvxwjkq4471" in first and "Bxxpqr5521" not in first  # A-OTHER is not indexed yet
    assert again == first and await reused(service) == 1

    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and "Bxxpqr5521" in json.dumps(body)  # the index took A-OTHER in
    last = await ask(service, upstream, [*lines, "Sure.", ASKED])
    assert "Bxxpqr5521" in last and await reused(service) == 1

    # A forget of the user drops every recall the call kept, those read behind the index too.
    lines = [*lines, "Sure.", ASKED, "Sure."]
    status, _ = await service.api("DELETE", "/v1/users/u-ana")
    assert status == 200
    recalls = service.server.app[PARTS].turns.recalls
    assert "Qzvxwjkq4471" not in repr(recalls._calls) and "Bxxpqr5521" not in repr(recalls._calls)
    status, body = await service.api("GET", "/v1/users/u-ana/characters/luna/recall?q=locker%20code")
    assert status == 200 and not body["memories"], body
    # (its window's turns are older than the forget: left out, not stored again)
    assert await ask(service, upstream, [*lines, ASKED], stored=False) == ""
    assert await reused(service) == 1
