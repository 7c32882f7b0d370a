"""The Agora platform's one entry point into the web app: webhook, routes, client, poller."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web

from agent_memory.memory.follow_recall import FollowRecall
from agent_memory.memory.refresh import AgentControl, Refresher
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.platforms.agora.custom_llm import ChatCompletionRequest
from agent_memory.platforms.agora.keys import AGORA, FOLLOW, LLM_PROXY, POLLER, REFRESHER
from agent_memory.platforms.agora.llm_proxy import LlmProxy
from agent_memory.platforms.agora.poller import Poller
from agent_memory.platforms.agora.routes import AgentRoutes
from agent_memory.platforms.agora.webhook import AgoraReceiver
from agent_memory.platforms.llm_endpoint import shared_parts
from agent_memory.web import answers as a
from agent_memory.web.declare import OWN_BEARER, UPSTREAM_ERRORS, Route, add_routes
from agent_memory.web.keys import JOBS, METRICS, SETTINGS, STORE

log = logging.getLogger(__name__)


class CountedPushes:
    """An agent's update endpoint with each push of memory counted, sent or failed."""

    def __init__(self, control: AgentControl, metrics: Metrics) -> None:
        self.control = control
        self.metrics = metrics

    async def update_system_messages(self, agent_id: str, system_messages: list[dict[str, Any]]) -> Any:
        """Replace the running agent's whole system messages list, and count it."""
        try:
            answer = await self.control.update_system_messages(agent_id, system_messages)
        except Exception:
            self.metrics.pushed("failed")
            raise
        self.metrics.pushed("sent")
        return answer


def proxy_routes(proxy: LlmProxy) -> list[Route]:
    """The custom-LLM endpoint's routes, declared (web/declare.py)."""
    completion = Route(
        "POST",
        "/v1/llm/chat/completions",
        "Agora's custom LLM: recall for the turn, forward upstream, record",
        "custom LLM",
        a.ChatCompletion,
        scope=OWN_BEARER,
        operation_id="chat_completions",
        body=ChatCompletionRequest,
        errors=(400, 401, 413, *UPSTREAM_ERRORS),
        auth="llm",
        streams=True,
        handler=proxy.complete,
    )
    routed = replace(
        completion,
        path="/v1/llm/{route:.*}/chat/completions",
        summary="The custom LLM, with routing text in its URL",
        operation_id="chat_completions_routed",
    )
    stats = Route(
        "GET",
        "/v1/llm/stats",
        "The custom-LLM endpoint's counters",
        "custom LLM",
        a.LlmStats,
        scope="admin",
        handler=proxy.report,
        operation_id="llm_stats",
    )
    return [completion, routed, stats]


def install(app: web.Application, memory: Memory) -> None:
    """Add `POST /webhooks/agora`, the agent and render routes, and the client and poller.

    Call it after the app's store and job runner contexts are added: following agents
    needs the database open, and refreshes listen to the job runner.
    """
    settings = app[SETTINGS]
    metrics = app.get(METRICS)
    receiver = AgoraReceiver(settings, memory.accept_event, metrics)
    add_routes(app, AgentRoutes(memory, settings).table())
    proxy = app[LLM_PROXY] = LlmProxy(memory, shared_parts(app, memory))
    add_routes(app, proxy_routes(proxy))
    add_routes(app, [receiver.route()])

    async def agora_context(app: web.Application) -> AsyncIterator[None]:
        """One HTTP session for Agora's REST API; follow running agents when Agora is configured."""
        async with aiohttp.ClientSession() as session:
            client = AgoraClient(settings, session)
            control = client if metrics is None else CountedPushes(client, metrics)
            refresher = Refresher(settings, app[STORE], memory.reading, control)
            follow = FollowRecall(settings, app[STORE], memory, refresher)
            poller = Poller(settings, memory, client, refresher, metrics=metrics, follow=follow)
            app[AGORA] = client
            app[FOLLOW] = follow
            app[REFRESHER] = refresher
            app[POLLER] = poller
            app[JOBS].in_commit.append(refresher.on_condensed)
            if metrics is not None:
                metrics.add_reported(
                    "follow_recall",
                    "Memories recalled for a running call's new turns and pushed into it",
                    follow.stats.report,
                )
            if settings.agora_configured:
                await poller.start()
            else:
                log.info("Agora REST credentials not set: running agents are not followed")
            yield
            await poller.stop()

    app.cleanup_ctx.append(agora_context)
    if settings.webhook_secret:
        return
    if settings.insecure_webhooks:
        log.warning(
            "webhook signatures are NOT checked (--insecure-dev-webhooks): anyone who can "
            "reach this port can write memory; never run like this in production"
        )
    else:
        log.warning("AGORA_WEBHOOK_SECRET is not set: Agora callbacks will be refused until it is")
