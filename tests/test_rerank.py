"""The optional LLM rerank of recalled memories (AGENT_MEMORY_RECALL_RERANK): the model's order
is used when it answers in time; past the deadline, on an error or a useless answer, recall's
own order stands, and each outcome is counted. Against a fake OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import said, seed
from fakes.openai_server import HANG, FakeOpenAI
from test_metrics import scrape

from agent_memory.errors import InvalidField
from agent_memory.settings import Settings
from agent_memory.web.keys import MEMORY

PAIR = "/v1/users/u-tea/characters/luna"
LINES = (
    "I drink green tea every morning.",
    "My sister and I had tea in Kyoto.",
    "I bought a new tea pot last spring.",
    "Tea makes me calm before exams.",
)


async def tea_service(start_service: Any, fake: FakeOpenAI, **extra: Any) -> Any:
    """A service reranking through `fake`, with a pair that has four turns about tea."""
    settings = {
        "openai_base_url": fake.base_url, "openai_api_key": "test", "recall_rerank": True,
        "recall_rerank_timeout_ms": 2000, "summary_delay_s": 3600, "job_sweep_s": 3600, **extra,
    }  # fmt: skip
    service = await start_service(**settings)
    lines: list[str] = []
    for line in LINES:
        lines += [line, "Lovely."]
    await seed(service, "u-tea", "luna", "AGENT-TEA", said(*lines))
    return service


async def recall(service: Any) -> dict[str, Any]:
    status, body = await service.api("GET", PAIR + "/recall", params={"q": "tea", "max_tokens": 2000})
    assert status == 200, body
    return body


def user_turns(body: dict[str, Any]) -> list[str]:
    return [m["text"] for m in body["memories"] if m["kind"] == "turn"]


async def reranked(service: Any) -> dict[str, float]:
    after = await scrape(service)
    return {
        outcome: after.value(f"agent_memory_recall_rerank_{outcome}_total")
        for outcome in ("reordered", "unchanged", "timeouts", "errors", "bad_answers", "no_time")
    }


async def test_the_models_order_is_used_and_rendered(start_service) -> None:
    async with FakeOpenAI() as fake:
        service = await tea_service(start_service, fake)
        fake.script({"order": [0, 1, 2, 3]})
        first = await recall(service)
        given = user_turns(first)
        assert len(given) == 4 and set(given) == set(LINES)
        asked = fake.requests[0]["messages"][1]["content"]
        assert "The user said: tea" in asked and all(f"[{n}]" in asked for n in range(4))
        assert fake.requests[0]["response_format"]["json_schema"]["name"] == "memory_order"

        # The last first; a number it leaves out keeps recall's order after those it ranked.
        fake.script({"order": [3, 99, 1, 3, "x"]})
        body = await recall(service)
        texts = [m["text"] for m in first["memories"]]
        assert [m["text"] for m in body["memories"]][:4] == [texts[3], texts[1], texts[0], texts[2]]
        content = body["system_message"]["content"]
        assert content.index(texts[3].split(" (")[0]) < content.index(texts[0].split(" (")[0])
        counts = await reranked(service)
        assert counts["reordered"] == 1 and counts["unchanged"] == 1


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (HANG, "timeouts"),
        (500, "errors"),
        ("not an order", "bad_answers"),
        ({"order": "first"}, "bad_answers"),
    ],
    ids=["slow-server", "server-error", "not-json", "no-list"],
)
async def test_recalls_own_order_stands_when_the_model_fails(
    start_service, answer: Any, outcome: str
) -> None:
    async with FakeOpenAI(hang_s=30) as fake:
        service = await tea_service(start_service, fake, recall_rerank_timeout_ms=200)
        fake.script({"order": [0, 1, 2, 3]})
        expected = await recall(service)
        fake.script(answer)
        body = await recall(service)  # a slow model is not waited for past the rerank's deadline
        assert body["memories"] == expected["memories"]
        assert body["system_message"] == expected["system_message"]
        counts = await reranked(service)
        assert counts[outcome] == 1 and counts["reordered"] == 0


async def test_a_live_calls_recall_leaves_the_model_no_time_past_its_deadline(start_service) -> None:
    async with FakeOpenAI() as fake:
        # A deadline shorter than the one millisecond kept for the answer: never time to ask.
        service = await tea_service(start_service, fake, recall_timeout_ms=0.5)
        memory = service.server.app[MEMORY]
        await service.store.catch_up_search()  # a live call's recall reads what is indexed
        found = await memory.reading.recall("u-tea", "luna", "tea", max_tokens=2000, indexed_only=True)
        assert len(found.memories) >= 2 and fake.calls == 0
        assert (await reranked(service))["no_time"] == 1


def test_rerank_is_off_by_default_and_needs_an_llm() -> None:
    assert Settings().recall_rerank is False
    with pytest.raises(InvalidField, match="AGENT_MEMORY_RECALL_RERANK needs an LLM"):
        Settings.from_env({"AGENT_MEMORY_RECALL_RERANK": "true"})
    assert Settings.from_env(
        {"AGENT_MEMORY_RECALL_RERANK": "1", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    ).recall_rerank
