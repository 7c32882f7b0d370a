"""Scheduled sweeps: a run cut short by the service stopping is no failure in the log."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent_memory.memory.schedule import start_interval


async def test_a_sweep_cancelled_when_the_service_stops_is_logged_as_cut_short_not_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = asyncio.Event()

    async def sweep() -> None:
        started.set()
        await asyncio.Event().wait()  # a sweep awaiting the database when the service stops

    caplog.set_level(logging.INFO)
    scheduler = start_interval(sweep, 60, "test-sweep")
    await asyncio.wait_for(started.wait(), 10)
    scheduler.shutdown(wait=False)
    # What aiohttp's run_app does at the end: cancel every task still running.
    running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    await asyncio.sleep(0)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert "test-sweep was cut short: the service is stopping" in caplog.text
