"""`agent-memory serve`: check the address and the database first, then run the app."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import socket
import sys
import time

from agent_memory.cli.common import check_database, log, settings_from
from agent_memory.cli.workers import supervise, worker_number, worker_ready, workers_problem
from agent_memory.errors import (
    NotConfigured,
)
from agent_memory.logs import configure_logging

# How long a thread holding the GIL keeps it from one that waits (`tune_interpreter`).
SWITCH_INTERVAL_S = 0.001


def check_listen(host: str, port: int, *, reuse_port: bool = False) -> None:
    """Raise the OSError that listening on host:port would meet, before the database opens."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
            if reuse_port:  # a worker, beside the others on the port
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)


def listen_problem(exc: OSError, host: str, port: int) -> str:
    """What to tell an operator when `serve` cannot listen on host:port."""
    if isinstance(exc, socket.gaierror):
        return (
            f"cannot listen on {host!r}: no such host or address (--host, AGENT_MEMORY_HOST); "
            "give an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for all of them"
        )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use: stop what listens there or choose another "
            "--port (AGENT_MEMORY_PORT)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine (--host, AGENT_MEMORY_HOST): give one of "
            "its addresses, e.g. 127.0.0.1, or 0.0.0.0 for all of them"
        )
    if exc.errno == errno.EACCES:
        return (
            f"no permission to listen on port {port} of {host}: ports below 1024 need privileges; "
            "choose another --port (AGENT_MEMORY_PORT)"
        )
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def tune_interpreter() -> None:
    """Fewer and shorter pauses for the event loop: collect young objects less often, and take
    the GIL back from a busy thread sooner.

    Each callback allocates thousands of short-lived objects (32 messages, their models and
    rows); with the default threshold of 700 the collector runs several times per callback,
    and its full collections stall every request in flight. Measured with bench/ingest.py:
    p99 61 ms -> 28 ms at 16 concurrent callbacks. Objects alive at start are frozen so that
    full collections do not walk them again and again.

    The loop serves every stream, and shares the GIL with the writer thread (merging and
    indexing what live calls say) and the reader threads: each SQLite statement it runs hands
    the GIL over, and getting it back waits up to the switch interval (5 ms by default).
    At 1 ms, with every turn recorded, side by side (`python bench/compare.py --ref c7340d4~1
    --rounds 2 llm_proxy.py --record --rounds 3`): added time to first token p99 4.97 -> 4.37 ms,
    p50 3.40 -> 3.57 ms; without recording, no difference either way.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def serving_loop(wanted: str) -> tuple[asyncio.AbstractEventLoop, str]:
    """The event loop `serve` runs on, and its name: uvloop unless declined or not installed.

    Every request's time on the loop (parsing, middlewares, relaying a model's chunks) is about
    a tenth cheaper on uvloop; measured with bench/llm_proxy.py, side by side: service CPU per
    call 13.7 -> 12.4 ms, added time to first token p50 6.6 -> 6.1 ms.
    """
    if wanted == "uvloop":
        try:
            import uvloop
        except ImportError:  # Windows, or a build without it
            pass
        else:
            return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from agent_memory.web.app import create_app
    from agent_memory.web.auth import open_api_warning

    settings = settings_from(args)
    configure_logging(settings.log_level, settings.log_format)
    problem = workers_problem(settings)
    if problem:
        log.error("%s", problem)
        return 2
    worker = worker_number()
    try:
        # Said before the database opens and jobs start, not as a traceback once they have.
        check_listen(settings.host, settings.port, reuse_port=worker is not None)
    except OSError as exc:
        log.error("%s", listen_problem(exc, settings.host, settings.port))
        return 2
    try:
        warning = open_api_warning(settings)
    except NotConfigured as exc:
        log.error("%s", exc.message)
        return 2
    if warning and worker is None:
        log.warning("%s", warning)
    if settings.workers > 1 and worker is None:
        return supervise(settings)
    note = check_database(settings)
    if note:
        log.info("%s", note)
    tune_interpreter()
    loop, loop_name = serving_loop(settings.event_loop)
    log.info(
        "agent-memory%s on http://%s:%d, database %s, condensing with %s, event loop %s",
        f" worker {worker} of {settings.workers}" if worker is not None else "",
        settings.host,
        settings.port,
        settings.database,
        settings.llm_model if settings.llm_configured else "the offline condenser",
        loop_name,
    )
    app = create_app(settings)
    if worker is not None:

        async def ready(_: web.Application) -> None:
            worker_ready()  # after every startup step above it: the store is open, jobs run

        app.on_startup.append(ready)
    started = time.monotonic()

    async def stopping(_: web.Application) -> None:
        log.info("agent-memory on port %d is shutting down: finishing what is in flight", settings.port)

    app.on_shutdown.append(stopping)
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        print=None,
        access_log=None,
        loop=loop,
        reuse_port=worker is not None,
    )
    log.info("agent-memory stopped after %.0f s", time.monotonic() - started)
    return 0
