"""The application factory: settings in, a wired aiohttp application out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from agent_memory.platforms.agora.webhook import AgoraReceiver

from agent_memory.web.routes import agents, insights
from agent_memory.web.routes import memory as api
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.web.http import bearer_auth_middleware, errors_middleware
from agent_memory.condense.openai_compatible import make_condenser
from agent_memory.memory.ingest import Ingestor, Outcome
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.platforms.agora.poller import Poller
from agent_memory.memory.retention import Retention
from agent_memory.platforms.agora.payloads import Envelope
from agent_memory.settings import Settings
from agent_memory.web.keys import AGORA, INGESTOR, JOBS, POLLER, RETENTION, SETTINGS, STORE
from agent_memory.store import SQLiteStore

log = logging.getLogger(__name__)


async def store_context(app: web.Application) -> AsyncIterator[None]:
    """Open the database (migrating it) for the app's lifetime."""
    store = app[STORE]
    await asyncio.get_running_loop().run_in_executor(None, store.open)
    yield
    await asyncio.get_running_loop().run_in_executor(None, store.close)


async def jobs_context(app: web.Application) -> AsyncIterator[None]:
    """Condense memories in the background while the app runs."""
    settings = app[SETTINGS]
    jobs = CondenseJobs(
        settings, app[STORE], make_condenser(settings), sweep_s=settings.job_sweep_s
    )
    app[JOBS] = jobs
    await jobs.start()
    yield
    await jobs.stop()


async def agora_context(app: web.Application) -> AsyncIterator[None]:
    """One HTTP session for Agora's REST API; follow running agents when Agora is configured."""
    settings = app[SETTINGS]
    async with aiohttp.ClientSession() as session:
        client = AgoraClient(settings, session)
        poller = Poller(settings, app[STORE], app[INGESTOR], client)
        app[AGORA] = client
        app[POLLER] = poller
        app[JOBS].listeners.append(poller.on_condensed)
        if settings.agora_configured:
            await poller.start()
        else:
            log.info("Agora REST credentials not set: running agents are not followed")
        yield
        await poller.stop()


async def retention_context(app: web.Application) -> AsyncIterator[None]:
    """Purge what retention allows, and scrub the search index after forgets, while the app runs."""
    retention = Retention(app[SETTINGS], app[STORE])
    app[RETENTION] = retention
    await retention.start()
    yield
    await retention.stop()


def create_app(settings: Settings) -> web.Application:
    """Build the service: webhook receiver, HTTP API, and its background work."""
    app = web.Application(
        middlewares=[errors_middleware, bearer_auth_middleware(settings.api_token)],
        client_max_size=settings.max_body_bytes,
        # A persona travels in the query string; let one of MAX_PERSONA_CHARS through.
        handler_args={"max_line_size": 256 * 1024},
    )
    store = SQLiteStore(settings.db_path, group_commit_max=settings.group_commit_max)
    ingestor = Ingestor(settings)
    app[SETTINGS] = settings
    app[STORE] = store
    app[INGESTOR] = ingestor

    async def accept(envelope: Envelope, body: str, received_ms: int) -> Outcome:
        # Validating the payload here keeps that work off the single writer thread.
        parsed = ingestor.classify(envelope)
        return await store.write(
            lambda tx: ingestor.accept_callback(tx, envelope, body, received_ms, parsed)
        )

    receiver = AgoraReceiver(settings, accept)
    app.router.add_post("/webhooks/agora", receiver.handle)
    app.router.add_routes(api.routes)
    app.router.add_routes(agents.routes)
    app.router.add_routes(insights.routes)
    app.cleanup_ctx.append(store_context)
    app.cleanup_ctx.append(jobs_context)
    app.cleanup_ctx.append(agora_context)
    app.cleanup_ctx.append(retention_context)
    if not settings.webhook_secret:
        if settings.insecure_webhooks:
            log.warning(
                "webhook signatures are NOT checked (--insecure-dev-webhooks): anyone who can "
                "reach this port can write memory; never run like this in production"
            )
        else:
            log.warning(
                "AGORA_WEBHOOK_SECRET is not set: Agora callbacks will be refused until it is"
            )
    return app
