"""GET /metrics: scraped from the real server after real callbacks, jobs, polls, pushes and recalls.

Every exposition is parsed with prometheus_client's own parser; each test reads the counters
before and after what it does and checks they moved by exactly what was done.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

import pytest
from conftest import (
    TOKEN,
    Service,
    agent_event,
    condense,
    conversation,
    deliver,
    live,
    load_fixture,
    poll,
    turns,
)
from fakes.agora_server import FakeAgora
from fakes.openai_server import FakeOpenAI
from fakes.upstream_llm import FakeUpstreamLLM
from prometheus_client.parser import text_string_to_metric_families

from agent_memory import __version__
from agent_memory.core.domain import CONDENSE
from agent_memory.platforms.agora.keys import POLLER

LABELS = {"user_id": "u-metrics", "character_id": "luna"}
ALICE = "/v1/users/u-alice/characters/luna"
FACTS_ROUTE = "/v1/users/{user_id}/characters/{character_id}/facts"


class Scrape:
    """One parsed exposition: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; a series never touched counts as 0."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


async def scrape(service: Service, token: str | None = TOKEN) -> Scrape:
    """GET /metrics as Prometheus would (with the API token as its bearer)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with service.session.get(f"{service.url}/metrics", headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "text/plain"
        return Scrape(await resp.text())


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


# callbacks and requests


@pytest.mark.postgres
async def test_callbacks_are_counted_by_event_type_and_outcome(service: Service) -> None:
    before = await scrape(service)
    history = agent_event(103, "METRICS-A", labels=LABELS, contents=turns(4))
    await deliver(service, history, expect="done")
    status, answer = await service.callback(history)
    assert (status, answer["status"]) == (200, "duplicate")
    status, answer = await service.callback(agent_event(777, "METRICS-A", labels=LABELS))
    assert (status, answer["status"]) == (200, "ignored")
    status, _ = await service.callback(agent_event(101, "METRICS-B", labels=LABELS), secret="not-the-secret")
    assert status == 401
    status, _ = await service.callback(b"not json at all")
    assert status == 400
    after = await scrape(service)

    callbacks = "agent_memory_callbacks_total"
    assert moved(before, after, callbacks, event_type="103", outcome="done") == 1
    assert moved(before, after, callbacks, event_type="103", outcome="duplicate") == 1
    # An event type the service does not know is counted, but not under its own number.
    assert moved(before, after, callbacks, event_type="other", outcome="ignored") == 1
    assert 'event_type="777"' not in after.text
    assert moved(before, after, callbacks, event_type="unknown", outcome="rejected_signature") == 1
    assert moved(before, after, callbacks, event_type="unknown", outcome="rejected_body") == 1

    route = {"method": "POST", "route": "/webhooks/agora"}
    responses = "agent_memory_http_responses_total"
    assert moved(before, after, responses, **route, status="200") == 3
    assert moved(before, after, responses, **route, status="401") == 1
    assert moved(before, after, responses, **route, status="400") == 1
    assert moved(before, after, "agent_memory_http_request_duration_seconds_count", **route) == 5
    assert moved(before, after, "agent_memory_http_request_duration_seconds_sum", **route) > 0


async def test_requests_are_timed_per_route_template_never_per_path(service: Service) -> None:
    before = await scrape(service)
    for user in ("u-one", "u-two", "u-three"):
        status, _ = await service.api("GET", f"/v1/users/{user}/characters/luna/facts")
        assert status == 200
    status, _ = await service.api("GET", "/v1/users/u-one/characters/luna/facts", token="wrong")
    assert status == 401
    status, _ = await service.api("GET", "/no/such/route/u-one")
    assert status == 404
    async with service.session.request("PROPFIND", f"{service.url}/healthz") as resp:
        assert resp.status == 405
    after = await scrape(service)

    facts = {"method": "GET", "route": FACTS_ROUTE}
    assert moved(before, after, "agent_memory_http_request_duration_seconds_count", **facts) == 4
    assert moved(before, after, "agent_memory_http_responses_total", **facts, status="200") == 3
    assert moved(before, after, "agent_memory_http_responses_total", **facts, status="401") == 1
    # Each observation fell in some bucket: +Inf holds them all.
    assert moved(before, after, "agent_memory_http_request_duration_seconds_bucket", **facts, le="+Inf") == 4
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert moved(before, after, "agent_memory_http_responses_total", **unmatched) == 1
    made_up = {"method": "OTHER", "route": "unmatched", "status": "405"}
    assert moved(before, after, "agent_memory_http_responses_total", **made_up) == 1
    # No user id, path or invented method becomes a label.
    assert "u-one" not in after.text and "/no/such" not in after.text and "PROPFIND" not in after.text
    # The previous scrape is counted too, under its own route.
    assert after.value("agent_memory_http_responses_total", method="GET", route="/metrics", status="200") >= 1


# condensing and jobs


@pytest.mark.postgres
async def test_dead_jobs_and_the_condensing_llm_calls_are_counted(start_service: Any) -> None:
    async with FakeOpenAI() as fake:
        service = await start_service(
            openai_base_url=fake.base_url, openai_api_key="test", llm_max_retries=0, llm_timeout_s=5,
            llm_model="fake-model", summary_delay_s=0, job_sweep_s=3600, job_max_attempts=1,
        )  # fmt: skip
        await deliver(service, *load_fixture("conversations/en_luna_companion.json"))
        fake.script("malformed", "malformed")  # the condenser asks twice before it gives up
        await condense(service)
        # The first scrape of a new service: the database's figures are read now (then cached a few seconds).
        dead = await scrape(service)
        assert dead.value("agent_memory_jobs", kind="condense", status="dead") == 1
        assert dead.value("agent_memory_jobs", kind="condense", status="pending") == 0
        assert dead.value("agent_memory_jobs", kind="embed", status="running") == 0
        assert fake.calls == 2
        assert dead.value("agent_memory_condense_runs_total", outcome="dead") == 1
        assert dead.value("agent_memory_condense_runs_total", outcome="done") == 0
        # The call that answered garbage counts as a failed run, not as an answered call.
        assert dead.value("agent_memory_condense_llm_duration_seconds_count", method="llm") == 0

        job = await service.store.read(lambda view: view.jobs.get(CONDENSE, "u-alice", "luna"))
        assert job is not None
        status, _ = await service.api("POST", f"/v1/jobs/{job.id}/retry")
        assert status == 200
        fake.script(
            {"summary": "Alice talks with Luna.", "add_facts": [], "update_facts": [], "remove_facts": []}
        )
        await condense(service)
        done = await scrape(service)
        summary = await service.store.read(lambda view: view.summaries.get("u-alice", "luna"))
        assert summary is not None and summary.method == "llm"
        assert moved(dead, done, "agent_memory_condense_runs_total", outcome="done") == 1
        assert moved(dead, done, "agent_memory_condense_llm_duration_seconds_count", method="llm") == 1
        assert moved(dead, done, "agent_memory_condense_llm_duration_seconds_sum", method="llm") > 0
        assert (
            moved(dead, done, "agent_memory_condense_llm_tokens_sent_total")
            == summary.meta["tokens_sent"]
            > 0
        )
        assert moved(dead, done, "agent_memory_condense_messages_total") == summary.message_count > 0


async def test_database_size_and_job_gauges_cover_every_kind_and_status(service: Service) -> None:
    scraped = await scrape(service)
    for kind in ("condense", "embed"):
        for status in ("pending", "running", "dead"):
            assert (("agent_memory_jobs", frozenset({("kind", kind), ("status", status)}))) in scraped.samples
    size = await service.store.read(lambda view: view.maintenance.storage_stats())
    assert scraped.value("agent_memory_database_bytes", backend="sqlite") == size["bytes"] > 0
    assert scraped.value("agent_memory_database_up") == 1


# recall and the custom-LLM endpoint


async def test_recalls_are_timed_and_empty_ones_counted(service: Service) -> None:
    status, _ = await service.api("POST", ALICE + "/facts", json={"text": "Alice's cat is called Miso"})
    assert status == 201
    before = await scrape(service)
    status, found = await service.api("GET", ALICE + "/recall?q=what is my cat called")
    assert status == 200 and found["memories"]
    status, nothing = await service.api("GET", ALICE + "/recall?q=zeppelin xylophone")
    assert status == 200 and nothing["memories"] == []
    status, _ = await service.api("GET", ALICE + "/recall?q=cat&scope=user")
    assert status == 200
    after = await scrape(service)
    assert moved(before, after, "agent_memory_recall_duration_seconds_count", scope="pair") == 2
    assert moved(before, after, "agent_memory_recall_duration_seconds_count", scope="user") == 1
    assert moved(before, after, "agent_memory_recall_empty_total", scope="pair") == 1
    assert moved(before, after, "agent_memory_recall_empty_total", scope="user") == 0


async def test_the_custom_llm_endpoints_counters_and_recall_misses_are_exposed(start_service: Any) -> None:
    async with FakeUpstreamLLM() as upstream:
        service = await start_service(
            llm_token="agora-llm-key", upstream_base_url=upstream.base_url, upstream_api_key="k",
            recall_timeout_ms=0.001, llm_reply_settle_s=0.05,
        )  # fmt: skip
        status, _ = await service.api("POST", ALICE + "/facts", json={"text": "Alice's cat is called Miso"})
        assert status == 201
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "what is my cat called?"}],
            "user_id": "u-alice",
            "character_id": "luna",
        }
        url = f"{service.url}/v1/llm/chat/completions"
        async with service.session.post(url, json=body, headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401
        async with service.session.post(
            url, json=body, headers={"Authorization": "Bearer agora-llm-key"}
        ) as resp:
            assert resp.status == 200
            await resp.read()
        status, stats = await service.api("GET", "/v1/llm/stats")
        assert status == 200
        scraped = await scrape(service)
    report: Mapping[str, int] = stats["llm_proxy"]
    assert report["unauthorized"] == 1 and report["recall_misses"] == 1
    for key, count in report.items():
        assert scraped.value(f"agent_memory_llm_proxy_{key}_total") == count, key


# following running agents


async def test_polled_windows_their_lag_and_live_pushes(start_service: Any, fake: FakeAgora) -> None:
    service = await live(start_service, fake)
    agent = "METRICSLIVE00000000000001"
    fake.add_agent(agent, max_history=8)
    status, _ = await service.api(
        "POST", f"/v1/sessions/{agent}/watch",
        json={**LABELS, "system_messages": [{"role": "system", "content": "You are Luna."}]},
    )  # fmt: skip
    assert status == 201
    before = await scrape(service)
    fake.say(agent, conversation(5, tag="metrics"))
    await poll(service)
    fake.fail_next("/history", 503)
    await poll(service)
    status, _ = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status == 200
    fake.fail_next("/update", 500)
    status, _ = await service.api("POST", f"/v1/agents/{agent}/refresh")
    assert status >= 500
    fake.stop(agent)
    await poll(service)
    after = await scrape(service)

    assert moved(before, after, "agent_memory_poll_windows_total", outcome="merged") == 1
    assert moved(before, after, "agent_memory_poll_windows_total", outcome="failed") == 1
    assert moved(before, after, "agent_memory_poll_windows_total", outcome="gone") == 1
    assert moved(before, after, "agent_memory_poll_new_messages_total") == 5
    # Every poll observed how late it started (each was made due at time 0: very late).
    assert moved(before, after, "agent_memory_poll_lag_seconds_count") == 3
    assert moved(before, after, "agent_memory_poll_lag_seconds_bucket", le="300.0") == 0
    assert moved(before, after, "agent_memory_live_pushes_total", outcome="sent") == 1
    assert moved(before, after, "agent_memory_live_pushes_total", outcome="failed") == 1
    assert len(fake.updates) == 1
    assert service.server.app[POLLER].windows_merged == 1


# who may scrape, and turning metrics off


async def test_with_an_api_token_metrics_need_an_admin_key_unless_made_public(start_service: Any) -> None:
    guarded = await start_service()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        async with guarded.session.get(f"{guarded.url}/metrics", headers=headers) as resp:
            assert (resp.status, resp.content_type) == (401, "text/plain")  # what a scraper can read
            answer = await resp.text()
        assert answer.startswith("unauthorized: ") and "AGENT_MEMORY_METRICS_PUBLIC" in answer
    keys = {}
    for scope in ("read", "admin"):
        status, made = await guarded.api(
            "POST", "/v1/keys", json={"scope": scope, "name": f"scraper-{scope}"}
        )
        assert status == 201, made
        keys[scope] = made["key"]
    async with guarded.session.get(
        f"{guarded.url}/metrics", headers={"Authorization": f"Bearer {keys['read']}"}
    ) as resp:
        assert resp.status == 403
    scraped = await scrape(guarded, token=keys["admin"])
    # The refusals above are counted by reason (the no-scheme one as missing).
    assert scraped.value("agent_memory_auth_refused_total", reason="missing") == 2
    assert scraped.value("agent_memory_auth_refused_total", reason="wrong") == 1
    assert scraped.value("agent_memory_auth_refused_total", reason="scope") == 1
    assert "agent_memory_jobs" in (await scrape(guarded)).names()
    public = await start_service(metrics_public=True)
    assert "agent_memory_jobs" in (await scrape(public, token=None)).names()
    loopback = await start_service(api_token=None)
    assert "agent_memory_database_bytes" in (await scrape(loopback, token=None)).names()


async def test_metrics_off_serves_no_endpoint_and_the_service_still_works(start_service: Any) -> None:
    service = await start_service(metrics=False)
    async with service.session.get(
        f"{service.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as resp:
        assert resp.status == 404
    await deliver(service, agent_event(103, "METRICS-OFF", labels=LABELS, contents=turns(3)), expect="done")
    status, body = await service.api("GET", f"/v1/users/{LABELS['user_id']}/characters/luna/messages")
    assert status == 200 and len(body["messages"]) == 3


def test_each_app_has_its_own_registry() -> None:
    from agent_memory.metrics import Metrics

    first, second = Metrics(), Metrics()
    first.callback("103", "done")
    assert b'agent_memory_callbacks_total{event_type="103",outcome="done"} 1.0' in first.exposition()
    assert b"agent_memory_callbacks_total{" not in second.exposition()


# The process's own series and which build (and backend) the others came from.
@pytest.mark.postgres
async def test_metrics_show_the_process_and_the_build(service: Service) -> None:
    scraped = await scrape(service)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert name in scraped.names(), name
    build = {
        "version": __version__, "python": platform.python_version(), "backend": service.settings.backend,
    }  # fmt: skip
    assert scraped.value("agent_memory_build_info", **build) == 1
