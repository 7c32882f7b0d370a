"""Following running agents: read their history while they run, and start due refreshes.

Which agents are followed lives in the `watched_agents` table, so a restart picks up
where it stopped. A sweep reads the history of every agent whose poll is due, with
bounded concurrency and jittered intervals, and merges each window exactly as the
103 callback would be merged. Following ends on a 404 from Agora, a 102 or a 103.
The same sweep starts the live refreshes that are due (`memory/refresh.py` decides what
they send; Agora's update endpoint takes it).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.core.clock import Backoff, now_ms
from agent_memory.core.domain import Watch
from agent_memory.errors import AgentMemoryError, AgoraNotFound
from agent_memory.memory.follow_recall import FollowRecall
from agent_memory.memory.refresh import Refresher
from agent_memory.memory.schedule import start_interval
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.platforms.agora.events import history_window
from agent_memory.settings import Settings

log = logging.getLogger(__name__)

# Backing off longer risks losing turns: a brisk call moves 32 messages through the
# window in well under a minute.
MAX_BACKOFF_S = 30.0
# The jittered share of a failure backoff (its ceiling is never exceeded); the schedule
# between successful polls has its own ±20%.
BACKOFF_JITTER = 0.2


class Poller:
    """Polls followed agents and starts the refreshes that are due."""

    def __init__(
        self,
        settings: Settings,
        memory: Memory,
        client: AgoraClient,
        refresher: Refresher,
        *,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        sweep_s: float = 0.5,
        follow: FollowRecall | None = None,
    ) -> None:
        """Follow agents for `memory`; `refresher` sends due refreshes; `follow` is told of new
        turns and pushes the memories recalled for them; `metrics` counts polls."""
        self.settings = settings
        self.memory = memory
        self.metrics = metrics
        self.client = client
        self.refresher = refresher
        self.rng = rng or random.Random()
        self.sweep_s = sweep_s
        self.follow = follow
        self.scheduler: AsyncIOScheduler | None = None
        self._slots = asyncio.Semaphore(settings.poll_concurrency)
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self.windows_merged = 0

    async def start(self) -> None:
        self.scheduler = start_interval(self.sweep, self.sweep_s, "poll-sweep")

    async def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        if self._in_flight:
            await asyncio.wait(list(self._in_flight.values()), timeout=5)
        try:
            await self.memory.follows.release_follows()
        except AgentMemoryError as exc:  # unreleased, they move when their leases run out
            log.warning("could not hand the followed agents over at stop: %s", exc.message)

    def next_poll_ms(self, failures: int = 0) -> int:
        """Now plus the interval ±20%; after failures, the interval doubled per failure (capped)."""
        interval = self.settings.poll_interval_s
        if failures:
            # The cap never shortens a configured interval longer than it.
            backoff = Backoff(2 * interval, max(MAX_BACKOFF_S, interval), jitter=BACKOFF_JITTER)
            delay = backoff.delay_s(failures, self.rng)
        else:
            delay = interval * self.rng.uniform(0.8, 1.2)
        return now_ms() + round(delay * 1000)

    async def sweep(self) -> int:
        """Start polls and pushes that are due; returns how many polls started."""
        stamp = now_ms()
        # Started polls queue on the semaphore; a sweep must be able to start a whole
        # interval's worth, or many agents would be polled less often than configured.
        room = max(self.settings.poll_concurrency * 4, 4096)
        due, pushes = await self.memory.follows.due_follows(stamp, room)
        started = 0
        for watch in due:
            if watch.agent_id not in self._in_flight:
                self._track(watch.agent_id, self.poll(watch))
                started += 1
        for watch in pushes:
            key = f"push:{watch.agent_id}"
            if key not in self._in_flight:
                self._track(key, self.refresher.push_quietly(watch.agent_id))
        if self.follow is not None:
            for agent_id in self.follow.due():
                if f"follow:{agent_id}" not in self._in_flight:
                    self._track(f"follow:{agent_id}", self.follow.push_due(agent_id))
        return started

    async def run_due_now(self) -> None:
        """Sweep and wait for what it started (tests and benchmarks)."""
        await self.sweep()
        while self._in_flight:
            await asyncio.gather(*self._in_flight.values())

    def _track(self, key: str, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._in_flight[key] = task
        task.add_done_callback(lambda _: self._in_flight.pop(key, None))

    async def poll(self, watch: Watch) -> None:
        """Read one agent's history and merge it; failures back off, a 404 ends following."""
        agent_id = watch.agent_id
        metrics = self.metrics
        async with self._slots:
            # How late the poll starts: sweeps falling behind, or too few slots for the agents.
            lag_s = (now_ms() - watch.next_poll_ms) / 1000
            try:
                answer = await self.client.history(agent_id)
            except AgoraNotFound:
                await self.memory.follows.agent_gone(
                    agent_id, "agent not found on Agora (404)", "not found on Agora while polling"
                )
                log.info("agent %s is gone (404): no longer followed", agent_id)
                if self.follow is not None:
                    self.follow.ended(agent_id)
                if metrics is not None:
                    metrics.polled("gone", lag_s=lag_s)
                return
            except AgentMemoryError as exc:
                failures, error = watch.failures + 1, exc.message
                log.warning("history of %s failed (%d in a row): %s", agent_id, failures, error)
                await self.memory.follows.poll_failed(
                    agent_id, next_poll_ms=self.next_poll_ms(failures), error=error
                )
                if metrics is not None:
                    metrics.polled("failed", lag_s=lag_s)
                return
            window = history_window(agent_id, answer)
            outcome = await self.memory.merge_window(
                window,
                now_ms(),
                then=lambda tx: tx.watches.polled(agent_id, next_poll_ms=self.next_poll_ms(), error=None),
            )
            self.windows_merged += 1
            if self.follow is not None:
                self.follow.seen(watch, window, outcome)
            if metrics is not None:
                metrics.polled("merged", lag_s=lag_s, new_messages=outcome.new_messages)
            if outcome.new_messages:
                log.info(
                    "agent %s: +%d messages from history%s",
                    agent_id,
                    outcome.new_messages,
                    " (gap recorded)" if outcome.gap else "",
                )
