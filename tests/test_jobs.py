"""Scheduled condensing through the real server, the real openai SDK and a fake LLM on loopback."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from conftest import agent_event, condense, deliver, load_fixture, turns, wait_for
from fakes.openai_server import FakeOpenAI, Reply

from agent_memory.condense.base import CondenseInput, CondenseOutput, CondenseResult
from agent_memory.core.domain import CONDENSE, Job, Summary
from agent_memory.memory.jobs import CondenseJobs

pytestmark = pytest.mark.postgres

ALICE = "/v1/users/u-alice/characters/luna"
NO_SWEEP = {"job_sweep_s": 3600}  # tests drive the jobs themselves unless they test the scheduler


async def job_of(service, user: str = "u-alice", character: str = "luna") -> Job | None:
    return await service.store.read(lambda view: view.jobs.get(CONDENSE, user, character))


def llm_settings(fake: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "openai_base_url": fake.base_url, "openai_api_key": "test", "llm_max_retries": 0,
        "llm_timeout_s": 5, "llm_model": "fake-model", "summary_delay_s": 0, **NO_SWEEP, **extra,
    }  # fmt: skip


UPDATE = {
    "summary": "Alice, an ICU night-shift nurse, talks with Luna about her cat Miso and her exam.",
    "add_facts": [
        {"text": "Alice has an orange tabby cat named Miso", "scope": "user"},
        {"text": "Luna promised to quiz Alice on cardiac rhythms", "scope": "character"},
    ],
    "update_facts": [],
    "remove_facts": [],
}


async def test_offline_condenser_without_llm_gives_summary_and_remembered_facts(start_service):
    service = await start_service(summary_delay_s=0, **NO_SWEEP)
    await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
    await condense(service)
    _, body = await service.api("GET", ALICE + "/summary")
    assert body["summary"]["method"] == "offline"
    assert body["messages_not_yet_covered"] == 0
    _, facts = await service.api("GET", ALICE + "/facts")
    assert any("december 14" in fact["text"].lower() for fact in facts["facts"])
    _, context = await service.api("GET", ALICE + "/system-messages")
    contents = [m["content"] for m in context["system_messages"]]
    assert contents[0].startswith("What you remember") and "December 14" in contents[0]
    assert "made without a language model" in contents[1]
    assert await job_of(service) is None


async def test_chinese_remember_request_becomes_a_fact_offline(start_service):
    service = await start_service(summary_delay_s=0, **NO_SWEEP)
    await deliver(service, *load_fixture("conversations/zh_xiaoyu_tutor.json"))
    await condense(service)
    _, facts = await service.api("GET", "/v1/users/u-wang/characters/xiaoyu/facts")
    assert any("22号有考试" in fact["text"] for fact in facts["facts"])
    _, summary = await service.api("GET", "/v1/users/u-wang/characters/xiaoyu/summary")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in summary["summary"]["text"])


async def test_llm_condenses_only_new_messages_each_time(start_service):
    async with FakeOpenAI() as fake:
        service = await start_service(**llm_settings(fake))
        fake.script(UPDATE)
        first = load_fixture("conversations/en_luna_companion.json")
        runs = list(dict.fromkeys(e["payload"]["agent_id"] for e in first))  # in delivery order
        for envelope in first:
            if envelope["payload"]["agent_id"] != runs[2]:
                await service.callback(envelope)
        await condense(service)
        assert fake.calls == 1
        request = fake.requests[0]
        assert request["response_format"]["type"] == "json_schema"
        assert request["response_format"]["json_schema"]["strict"] is True
        assert "Miso" in fake.sent_text(0)
        assert "the unheard rest" in fake.sent_text(0) or "was going to say" in fake.sent_text(0)

        _, context = await service.api("GET", ALICE + "/system-messages")
        text = "\n".join(m["content"] for m in context["system_messages"])
        assert "orange tabby cat named Miso" in text and "ICU night-shift nurse" in text

        for envelope in first:
            if envelope["payload"]["agent_id"] == runs[2]:
                await service.callback(envelope)
        await condense(service)
        assert fake.calls == 2
        second = fake.sent_text(1)
        assert UPDATE["summary"] in second  # the previous summary goes in
        assert "Cardiac rhythms are my weak spot" not in second  # old messages do not
        assert "sage green" in second
        _, summary = await service.api("GET", ALICE + "/summary")
        assert summary["messages_not_yet_covered"] == 0 and summary["summary"]["method"] == "llm"


async def test_llm_failure_keeps_memory_and_retries_then_recovers(start_service):
    async with FakeOpenAI() as fake:
        service = await start_service(**llm_settings(fake))
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script(500)
        await condense(service)
        job = await job_of(service)
        assert job.status == "pending" and job.attempts == 1
        assert "LLMUnavailable" in job.last_error
        assert job.due_ms > time.time() * 1000  # backed off, not hammering
        _, summary = await service.api("GET", ALICE + "/summary")
        assert summary["summary"] is None and summary["messages_not_yet_covered"] > 0
        _, context = await service.api("GET", ALICE + "/system-messages")
        assert "Miso" in context["system_messages"][-1]["content"]  # raw turns still serve

        status, _ = await service.api("POST", ALICE + "/condense")
        assert status == 202
        fake.script(UPDATE)
        await condense(service)
        assert await job_of(service) is None
        _, summary = await service.api("GET", ALICE + "/summary")
        assert summary["summary"]["text"] == UPDATE["summary"]


async def test_rate_limit_honours_retry_after(start_service):
    async with FakeOpenAI(retry_after=120) as fake:
        service = await start_service(**llm_settings(fake))
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script(429)
        before = time.time() * 1000
        await condense(service)
        job = await job_of(service)
        assert job.due_ms >= before + 120_000


async def test_timeout_is_a_retryable_failure(start_service):
    async with FakeOpenAI(hang_s=5) as fake:
        service = await start_service(**llm_settings(fake, llm_timeout_s=0.3))
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script("hang")
        await condense(service)
        job = await job_of(service)
        assert job.attempts == 1 and "LLMUnavailable" in job.last_error


async def test_malformed_output_is_never_half_applied_and_job_dies_then_is_retried(start_service):
    async with FakeOpenAI() as fake:
        service = await start_service(**llm_settings(fake, job_max_attempts=2))
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script("malformed", "malformed", "malformed", Reply(content='{"summary": 5}'))
        await condense(service)
        await service.api("POST", ALICE + "/condense")
        await condense(service)
        assert fake.calls == 4
        _, dead = await service.api("GET", "/v1/jobs?status=dead")
        assert [job["user_id"] for job in dead["jobs"]] == ["u-alice"]
        assert "LLMBadOutput" in dead["jobs"][0]["last_error"]
        _, facts = await service.api("GET", ALICE + "/facts")
        _, summary = await service.api("GET", ALICE + "/summary")
        assert facts["facts"] == [] and summary["summary"] is None

        job_id = dead["jobs"][0]["id"]
        status, body = await service.api("POST", f"/v1/jobs/{job_id}/retry")
        assert status == 200 and body["job"]["status"] == "pending"
        fake.script(UPDATE)
        await condense(service)
        _, summary = await service.api("GET", ALICE + "/summary")
        assert summary["summary"]["text"] == UPDATE["summary"]
        status, _ = await service.api("POST", f"/v1/jobs/{job_id}/retry")
        assert status == 404


async def test_pinned_facts_survive_the_model(start_service):
    async with FakeOpenAI() as fake:
        service = await start_service(**llm_settings(fake))
        _status, body = await service.api(
            "POST", ALICE + "/facts", json={"text": "Alice is allergic to peanuts", "scope": "user"}
        )
        pinned_id = body["fact"]["id"]
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script(
            {**UPDATE, "remove_facts": [pinned_id], "update_facts": [{"id": pinned_id, "text": "gone"}]}
        )
        await condense(service)
        _, facts = await service.api("GET", ALICE + "/facts")
        texts = {fact["text"] for fact in facts["facts"]}
        assert "Alice is allergic to peanuts" in texts and "gone" not in texts


async def test_many_sessions_of_one_pair_arriving_together_make_one_job_and_one_call(start_service):
    async with FakeOpenAI() as fake:
        service = await start_service(**llm_settings(fake))
        labels = {"user_id": "u-many", "character_id": "luna"}
        await asyncio.gather(*(
            service.callback(agent_event(103, f"MANY{i}", labels=labels, contents=turns(6, prefix=f"s{i} ")))
            for i in range(12)
        ))  # fmt: skip
        jobs = await service.store.read(lambda view: view.jobs.by_status())
        assert len(jobs) == 1 and jobs[0].pending_messages == 72
        await asyncio.gather(condense(service), condense(service), condense(service))
        assert fake.calls == 1  # two jobs for one pair never run at once, and this is one job
        assert all(f"s{i} user line 0" in fake.sent_text(0) for i in range(12))


async def test_a_backlog_longer_than_one_call_is_condensed_whole_when_ids_and_times_disagree(start_service):
    # An older call's turns delivered after a newer call's: later ids, earlier times. The
    # backlog (600 turns) takes two condense calls of at most MAX_MESSAGES_PER_CALL.
    service = await start_service(summary_delay_s=0, **NO_SWEEP)
    labels = {"user_id": "u-late", "character_id": "c"}
    await service.callback(agent_event(103, "NEWER", labels=labels, contents=turns(300, prefix="newer ")))
    older = turns(300, start_ms=1_763_000_000_000, prefix="older ")
    await service.callback(agent_event(103, "OLDER", labels=labels, contents=older))
    for _ in range(4):
        await condense(service)
        if await job_of(service, "u-late", "c") is None:
            break
    summary = await service.store.read(lambda view: view.summaries.get("u-late", "c"))
    uncovered = await service.store.read(lambda view: view.messages.count_after("u-late", "c", 0))
    assert summary is not None and summary.message_count == uncovered == 600
    assert await job_of(service, "u-late", "c") is None


async def test_debounce_pushes_the_job_back_and_max_messages_makes_it_due(start_service):
    service = await start_service(
        summary_delay_s=60, summary_after_call_s=60, summary_max_messages=20, **NO_SWEEP
    )
    labels = {"user_id": "u-d", "character_id": "c"}
    await service.callback(agent_event(103, "D1", labels=labels, contents=turns(4)))
    first = await job_of(service, "u-d", "c")
    assert first.due_ms > time.time() * 1000 + 50_000
    await service.callback(agent_event(103, "D2", labels=labels, contents=turns(30, prefix="x")))
    second = await job_of(service, "u-d", "c")
    assert second.due_ms <= time.time() * 1000 and second.pending_messages == 34


async def test_a_call_that_ended_is_condensed_within_seconds_not_after_the_debounce(start_service):
    service = await start_service(summary_delay_s=60, summary_after_call_s=5, **NO_SWEEP)
    before = time.time() * 1000
    await service.callback(
        agent_event(103, "E1", labels={"user_id": "u-e", "character_id": "c"}, contents=turns(4))
    )
    job = await job_of(service, "u-e", "c")
    assert before + 4_000 <= job.due_ms <= time.time() * 1000 + 5_000


async def test_restart_finds_pending_and_interrupted_jobs_again(start_service, make_settings):
    # A shared database frees the dead process's claim once its lease (here 1 s) runs out.
    first = await start_service(summary_delay_s=0, lease_s=1, **NO_SWEEP)
    await deliver(first, *load_fixture("conversations/en_luna_companion.json"))
    await deliver(first, *load_fixture("conversations/zh_xiaoyu_tutor.json"))
    # One job is claimed and then the process "dies" before finishing it.
    job = await job_of(first, "u-wang", "xiaoyu")
    claimed = await first.store.write(lambda tx: tx.jobs.claim(job.id))
    assert claimed.status == "running"
    await first.server.close()

    second = await start_service(summary_delay_s=0, job_sweep_s=0.05, lease_s=1)

    async def both_condensed():
        alice = await second.store.read(lambda v: v.summaries.get("u-alice", "luna"))
        wang = await second.store.read(lambda v: v.summaries.get("u-wang", "xiaoyu"))
        return alice and wang

    await wait_for(both_condensed)
    assert await second.store.read(lambda view: view.jobs.by_status()) == []


class CondensedMeanwhile:
    """A condenser during whose first call another writer condenses the pair's older half."""

    reads_history = False

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls = 0

    async def condense(self, job: CondenseInput) -> CondenseResult:
        self.calls += 1
        if self.calls == 1:
            halfway = job.messages[len(job.messages) // 2]
            summary = Summary(
                job.user_id, job.character_id, "condensed elsewhere", halfway.id, halfway.at_ms,
                len(job.messages) // 2, "offline", None, 1, 1,
            )  # fmt: skip
            await self.store.write(lambda tx: tx.summaries.put(summary))
        return CondenseResult(
            output=CondenseOutput(summary=f"call {self.calls}"), method="offline", model="stub"
        )

    async def close(self) -> None:
        """Nothing to release."""


async def test_a_job_superseded_while_it_ran_runs_again_without_counting_an_attempt(start_service):
    service = await start_service(summary_delay_s=0, **NO_SWEEP)
    await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
    condenser = CondensedMeanwhile(service.store)
    jobs = CondenseJobs(service.settings, service.store, condenser)

    await jobs.run_due_now()
    # The summary changed under the job: its result is dropped, and nobody failed.
    job = await job_of(service)
    assert job is not None and job.status == "pending"
    assert job.attempts == 0 and job.last_error is None
    summary = await service.store.read(lambda view: view.summaries.get("u-alice", "luna"))
    assert summary.text == "condensed elsewhere"

    await jobs.run_due_now()
    # Run again from the new watermark: the rest is condensed and the job is done.
    assert condenser.calls == 2 and await job_of(service) is None
    summary = await service.store.read(lambda view: view.summaries.get("u-alice", "luna"))
    assert summary.text == "call 2"


def counted_writes(store: Any) -> list[str]:
    """The names of the write functions `store` runs from now on, in order (the writes still run)."""
    writes: list[str] = []
    write = store.write

    async def counted(fn: Any) -> Any:
        writes.append(fn.__qualname__)
        return await write(fn)

    store.write = counted
    return writes


async def test_a_backlog_is_claimed_job_by_job_in_the_commits_of_the_jobs_before(start_service):
    # One slot, three pairs due: each finishing job claims the next due one in its own commit,
    # not in a sweep's read and claim after it (a transaction and an fsync more per job).
    service = await start_service(
        summary_delay_s=0, summary_after_call_s=0, condense_concurrency=1, **NO_SWEEP
    )
    for user in ("u-b1", "u-b2", "u-b3"):
        labels = {"user_id": user, "character_id": "luna"}
        await service.callback(agent_event(103, f"BL-{user}", labels=labels, contents=turns(4)))
    store = service.store
    writes = counted_writes(store)
    from agent_memory.web.keys import JOBS

    jobs = service.server.app[JOBS]
    assert await jobs.sweep() == 1
    await wait_for(
        lambda: store.read(lambda view: not view.jobs.by_status()), failure="the backlog was not condensed"
    )
    await jobs.drained()
    for user in ("u-b1", "u-b2", "u-b3"):
        assert (await store.read(lambda view, user=user: view.summaries.get(user, "luna"))) is not None
    assert sum("sweep" in name for name in writes) == 1, writes


async def test_a_condensed_result_asks_for_its_pushes_in_its_own_commit(start_service):
    # Live refresh learns of a pair's new memory in the transaction that writes it, not in a
    # transaction of its own after it (test_live holds that the pushes still go out).
    service = await start_service(summary_delay_s=0, summary_after_call_s=0, **NO_SWEEP)
    labels = {"user_id": "u-push", "character_id": "luna"}
    await service.callback(agent_event(103, "PUSH1", labels=labels, contents=turns(4)))
    store = service.store
    writes = counted_writes(store)
    await condense(service)
    assert await store.read(lambda view: view.summaries.get("u-push", "luna")) is not None
    assert [name for name in writes if "sweep" not in name] == ["CondenseJobs._commit.<locals>.commit"], (
        writes
    )
