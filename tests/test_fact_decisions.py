"""With an LLM configured, the model decides per candidate fact (ADD, UPDATE, DELETE, NONE)
against the facts already held, applied through the facts' history; whatever it answers
that cannot be used is ignored and counted. Against a fake OpenAI-compatible server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import condense, said, seed
from fakes.openai_server import FakeOpenAI
from test_condense import FACTS, job, settings_for
from test_metrics import scrape

from agent_memory.condense.base import FactAdd, FactUpdate
from agent_memory.condense.openai_compatible import LLMCondenser

pytestmark = pytest.mark.postgres

PAIR = "/v1/users/u-bo/characters/luna"


def decision(event: str, id_: int | None = None, text: str | None = None, scope: str | None = None) -> Any:
    return {"event": event, "id": id_, "text": text, "scope": scope}


async def test_decisions_become_changes_and_the_unusable_are_counted() -> None:
    async with FakeOpenAI() as fake:
        condenser = LLMCondenser(settings_for(fake))
        fake.script(
            {
                "summary": "Alice moved to day shifts; her exam is on the 22nd.",
                "facts": [
                    decision("ADD", text="The user's exam is on the 22nd.", scope="user"),
                    decision("UPDATE", 2, "The user works day shifts."),
                    decision("DELETE", 3),
                    decision("NONE", 1),
                    decision("UPDATE", 99, "An unknown fact."),  # unknown id
                    decision("DELETE", 1),  # pinned
                    decision("UPDATE", None, "No id to update."),  # malformed
                    {"event": "MERGE", "id": 2},  # no such event
                    "not a decision",
                    {"event": "delete", "id": 3},  # said twice (in lower case)
                ],
            }
        )
        result = await condenser.condense(job())
        await condenser.close()
    assert fake.calls == 1  # a bad decision is not worth asking again
    assert result.add_facts == [FactAdd(text="The user's exam is on the 22nd.", scope="user")]
    assert result.update_facts == [FactUpdate(id=2, text="The user works day shifts.")]
    assert result.remove_facts == [3]
    assert result.fact_decisions == {"add": 1, "update": 1, "delete": 1, "none": 1, "ignored": 6}


@pytest.mark.parametrize(
    "answer",
    [
        '{"summary": "s", "facts": [{"event": "ADD", "text": "cut off',  # truncated JSON
        '{"summary": "s", "facts": "ADD everything"}',  # facts not a list
        '{"facts": []}',  # no summary
    ],
    ids=["truncated", "facts-not-a-list", "no-summary"],
)
async def test_an_unreadable_answer_is_asked_again_never_a_crash(answer: str) -> None:
    async with FakeOpenAI() as fake:
        condenser = LLMCondenser(settings_for(fake))
        fake.script(answer, {"summary": "fine", "facts": [decision("NONE", 1)]})
        result = await condenser.condense(job())
        await condenser.close()
    assert fake.calls == 2 and result.summary == "fine" and result.fact_decisions["none"] == 1


async def test_the_prompt_lists_the_held_facts_with_their_ids() -> None:
    async with FakeOpenAI() as fake:
        condenser = LLMCondenser(settings_for(fake))
        await condenser.condense(job())
        await condenser.close()
    system, user = fake.requests[0]["messages"]
    assert all(word in system["content"] for word in ("ADD", "UPDATE", "DELETE", "NONE"))
    for fact in FACTS:
        assert f"[{fact.id}]" in user["content"] and fact.text in user["content"]


async def test_the_service_applies_decisions_through_the_facts_history(start_service) -> None:
    async with FakeOpenAI() as fake:
        service = await start_service(
            openai_base_url=fake.base_url, openai_api_key="test", llm_max_retries=0, llm_timeout_s=5,
            summary_delay_s=0, job_sweep_s=3600,
        )  # fmt: skip
        await seed(service, "u-bo", "luna", "AGENT-BO-1", said("I work night shifts. We got a dog, Rex."))
        fake.script(
            {
                "summary": "Bo works nights and has a dog named Rex.",
                "facts": [
                    decision("ADD", text="The user works night shifts", scope="user"),
                    decision("ADD", text="The user has a dog named Rex", scope="user"),
                ],
            }
        )
        await condense(service)
        _, body = await service.api("GET", PAIR + "/facts")
        ids = {fact["text"]: fact["id"] for fact in body["facts"]}
        shifts, dog = ids["The user works night shifts"], ids["The user has a dog named Rex"]
        before = await scrape(service)

        await seed(
            service, "u-bo", "luna", "AGENT-BO-2",
            said("I switched to day shifts. Rex went to live with my parents.", start_ms=1_763_790_000_000),
        )  # fmt: skip
        fake.script(
            {
                "summary": "Bo now works days; Rex lives with Bo's parents.",
                "facts": [
                    decision("UPDATE", shifts, "The user works day shifts"),
                    decision("DELETE", dog),
                    decision("DELETE", 987654),  # an id the pair does not have
                    decision("UPDATE", shifts),  # no text
                ],
            }
        )
        await condense(service)
        assert f"[{shifts}]" in fake.sent_text(1) and f"[{dog}]" in fake.sent_text(1)

        _, body = await service.api("GET", PAIR + "/facts")
        assert [fact["text"] for fact in body["facts"]] == ["The user works day shifts"]
        _, history = await service.api("GET", f"/v1/facts/{shifts}/history")
        assert [(v["text"], v["change"]) for v in history["versions"]] == [
            ("The user works night shifts", "updated"), ("The user works day shifts", None),
        ]  # fmt: skip
        # Deleted by the model: no longer remembered, but kept, marked, with when it ended.
        _, history = await service.api("GET", f"/v1/facts/{dog}/history")
        assert history["current"] is False
        ((ended),) = history["versions"]
        assert ended["text"] == "The user has a dog named Rex" and ended["change"] == "ended"
        assert ended["valid_to"] is not None
        _, context = await service.api("GET", PAIR + "/system-messages")
        assert "Rex" not in "\n".join(
            m["content"] for m in context["system_messages"] if "remember" in m["content"].lower()
        )
        after = await scrape(service)
        name = "agent_memory_condense_fact_decisions_total"
        assert after.value(name, decision="update") - before.value(name, decision="update") == 1
        assert after.value(name, decision="delete") - before.value(name, decision="delete") == 1
        assert after.value(name, decision="ignored") - before.value(name, decision="ignored") == 2
