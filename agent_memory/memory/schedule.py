"""APScheduler, set up the one way the service uses it: an async function on an interval; and
whose turn it is, among instances sharing a database, to do work that runs once cluster-wide."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.store import Store

log = logging.getLogger(__name__)

# A sweep that overran is not run twice to catch up, never runs beside itself, and
# may start up to 30 s late (a busy loop) rather than be skipped.
JOB_DEFAULTS = {"coalesce": True, "max_instances": 1, "misfire_grace_time": 30}


def start_interval(fn: Callable[[], Awaitable[Any]], seconds: float, job_id: str) -> AsyncIOScheduler:
    """Run `fn` now and then every `seconds` on the running event loop; returns the scheduler."""
    scheduler = AsyncIOScheduler(job_defaults=JOB_DEFAULTS)
    scheduler.add_job(
        stops_quietly(fn, job_id), "interval", seconds=seconds, id=job_id, next_run_time=datetime.now()
    )
    scheduler.start()
    return scheduler


def stops_quietly(fn: Callable[[], Awaitable[Any]], job_id: str) -> Callable[[], Awaitable[Any]]:
    """`fn` as a scheduled job whose run cut short by the service stopping is said as that.

    Stopping cancels every task still running, a sweep awaiting the database among them, and
    APScheduler reports any exception of a job, cancellation included, as a failure with its
    traceback: an ERROR on every ordinary SIGTERM that lands mid-sweep.
    """

    async def run() -> Any:
        try:
            return await fn()
        except asyncio.CancelledError:
            log.info("%s was cut short: the service is stopping", job_id)
            return None

    return run


async def my_turn(store: Store, name: str, every_s: float) -> bool:
    """Whether this instance does the cluster-wide work `name` now.

    Every instance schedules it every `every_s`; the one that takes the lease `name` holds it
    for that long and keeps it while it lives, so one instance runs it per period, and another
    takes over within two periods when that one dies. One process alone always runs it.
    """
    return await store.write(lambda tx: tx.leases.acquire(name, round(every_s * 1000)))
