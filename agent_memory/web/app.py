"""The application factory: settings in, a wired aiohttp application out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web

from agent_memory.condense import make_condenser
from agent_memory.embed import make_embedder
from agent_memory.errors import DatabaseDown
from agent_memory.logs import (
    REQUEST_ID_HEADER,
    current_request_id,
    install_request_ids,
    log_access,
    request_id_for,
)
from agent_memory.memory.embedding import EmbeddingJobs
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.memory.retention import Retention
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.agora.install import install
from agent_memory.platforms.api.install import install as install_messages
from agent_memory.platforms.elevenlabs.install import install as install_elevenlabs
from agent_memory.platforms.retell.install import install as install_retell
from agent_memory.platforms.vapi.install import install as install_vapi
from agent_memory.settings import Settings
from agent_memory.store import make_store
from agent_memory.web import console, docs
from agent_memory.web.auth import auth_middleware, install_gate
from agent_memory.web.declare import add_routes
from agent_memory.web.http import BODY_TIMEOUT_S, Handler, errors_middleware, nul_middleware
from agent_memory.web.keys import EMBEDDINGS, JOBS, MEMORY, METRICS, RETENTION, SETTINGS, STORE
from agent_memory.web.metrics import add_metrics_route
from agent_memory.web.routes import insights
from agent_memory.web.routes import keys as api_keys
from agent_memory.web.routes import memory as api

log = logging.getLogger(__name__)

REQUEST_ID = web.RequestKey("request_id", str)
# Starting while the database server does not answer: try again this often, say so this often.
DB_WAIT_RETRY_S = 1.0
DB_WAIT_LOG_EVERY_S = 30.0


@web.middleware
async def request_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give each request an id (answered as X-Request-Id) and log one access line when it ends."""
    request_id = request[REQUEST_ID] = request_id_for(request.headers.get(REQUEST_ID_HEADER))
    # Every line logged for the request (on store threads too) carries its id.
    token = current_request_id.set(request_id)
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:  # what errors_middleware lets through: redirects
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client went away before the answer (nginx's convention)
        raise
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource else None
        log_access(request_id, request.method, route, status, started)
        current_request_id.reset(token)
        metrics = request.app.get(METRICS)
        if metrics is not None:
            metrics.request(request.method, route, status, time.perf_counter() - started)


async def send_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """Put the request's id on its response as the headers go out, streamed responses too."""
    request_id = request.get(REQUEST_ID)
    if request_id is not None:
        response.headers[REQUEST_ID_HEADER] = request_id


async def store_context(app: web.Application) -> AsyncIterator[None]:
    """Open the database (migrating it) for the app's lifetime; while its server does not
    answer, wait for it (a deployment may start the service before the database)."""
    store = app[STORE]
    waiting_since = logged_at = None
    while True:
        try:
            await asyncio.get_running_loop().run_in_executor(None, store.open)
            break
        except DatabaseDown as exc:
            now = time.monotonic()
            waiting_since = waiting_since or now
            if logged_at is None or now - logged_at >= DB_WAIT_LOG_EVERY_S:
                log.warning(
                    "%s; waiting for it (trying every %g s, %.0f s so far)",
                    exc.message,
                    DB_WAIT_RETRY_S,
                    now - waiting_since,
                )
                logged_at = now
            await asyncio.sleep(DB_WAIT_RETRY_S)
    if waiting_since is not None:
        log.warning("the database answers after %.0f s: starting", time.monotonic() - waiting_since)
    # Another instance's forget (or the CLI's) empties this process's copies too.
    app[MEMORY].admin.watch_forgets()
    yield
    app[MEMORY].admin.stop_watching()
    await app[MEMORY].reading.close()  # no warming read left for a closed store
    await asyncio.get_running_loop().run_in_executor(None, store.close)


async def jobs_context(app: web.Application) -> AsyncIterator[None]:
    """Condense memories in the background while the app runs."""
    jobs = app[JOBS]
    await jobs.start()
    yield
    await jobs.stop()


async def retention_context(app: web.Application) -> AsyncIterator[None]:
    """Purge what retention allows, and scrub the search index after forgets, while the app runs."""
    retention = app[RETENTION]
    await retention.start()
    yield
    await retention.stop()


async def embeddings_context(app: web.Application) -> AsyncIterator[None]:
    """Embed new turns in the background while the app runs (only with an embeddings model)."""
    embeddings = app[EMBEDDINGS]
    await embeddings.start()
    yield
    await embeddings.stop()


def create_app(settings: Settings) -> web.Application:
    """Build the service: webhook receiver, HTTP API, and its background work."""
    install_request_ids()
    app = web.Application(
        middlewares=[
            request_log_middleware,
            errors_middleware,
            auth_middleware,
            nul_middleware,
        ],
        client_max_size=settings.max_body_bytes,
        handler_args={
            # A persona travels in the query string; let one of MAX_PERSONA_CHARS through.
            "max_line_size": 256 * 1024,
            # After answering a body it did not read (408, 413), aiohttp reads on for this long
            # before closing: a stalled sender is held no longer than the body timeout again.
            "lingering_time": min(10.0, settings.body_timeout_s),
        },
    )
    store = make_store(settings)
    metrics = Metrics() if settings.metrics else None
    # Built here, started by their cleanup contexts; the routes and platforms that need them
    # find them under their app keys (web/keys.py).
    jobs = CondenseJobs(
        settings, store, make_condenser(settings), sweep_s=settings.job_sweep_s, metrics=metrics
    )
    retention = Retention(settings, store)
    embedder = make_embedder(settings)  # None: recall by keywords alone
    memory = Memory(settings, store, embedder=embedder, metrics=metrics)
    app.on_response_prepare.append(send_request_id)
    app[SETTINGS] = settings
    app[BODY_TIMEOUT_S] = settings.body_timeout_s
    app[STORE] = store
    app[MEMORY] = memory
    app[JOBS] = jobs
    app[RETENTION] = retention
    if metrics is not None:
        app[METRICS] = metrics  # before the platforms' install(): they count into it
    install_gate(app, settings)
    add_routes(app, api.routes)
    add_routes(app, insights.routes)
    docs.add_docs(app)  # /openapi.json and /docs
    add_routes(app, api_keys.routes)
    # The generic write API: an app's own sessions (platforms/api).
    install_messages(app, memory)
    console.install(app)  # /console: the operator's pages, signed in with an API key
    if metrics is not None:
        add_metrics_route(app, settings, metrics, store)
    app.cleanup_ctx.append(store_context)
    app.cleanup_ctx.append(jobs_context)
    if embedder is not None:
        # After jobs_context: its start frees the jobs of every kind a crash left running.
        app[EMBEDDINGS] = EmbeddingJobs(settings, store, embedder, sweep_s=settings.job_sweep_s)
        app.cleanup_ctx.append(embeddings_context)
    # The voice platform: its webhook, routes, REST client and poller (after store and jobs).
    install(app, memory)
    install_retell(app, memory)
    install_elevenlabs(app, memory)
    install_vapi(app, memory)
    app.cleanup_ctx.append(retention_context)
    return app
