"""Following running agents: read their history while they run, and refresh their memory.

Which agents are followed lives in the `watched_agents` table, so a restart picks up
where it stopped. A sweep reads the history of every agent whose poll is due, with
bounded concurrency and jittered intervals, and merges each window exactly as the
103 callback would be merged. Following ends on a 404 from Agora, a 102 or a 103.

Refreshes: when a pair's summary or facts change while one of its agents runs, the
whole system_messages list (the caller's own, then fresh memory) is pushed through
Agora's update endpoint, at most once per `refresh_interval_s` per agent. The memory is
shaped for the `llm.style` the agent was started with, and its recent transcript leaves
out the agent's own turns: they are in its short-term memory already.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.condense.openai_compatible import CondenseResult
from agent_memory.core.context import load_context
from agent_memory.errors import AgentMemoryError, AgoraNotFound, Conflict, NotFound
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.schedule import start_interval
from agent_memory.settings import Settings
from agent_memory.store import SQLiteStore, now_ms
from agent_memory.core.styles import DEFAULT_STYLE

log = logging.getLogger(__name__)

# Backing off longer risks losing turns: a brisk call moves 32 messages through the
# window in well under a minute.
MAX_BACKOFF_S = 30.0


class Poller:
    """Polls followed agents and pushes refreshed memory into them."""

    def __init__(
        self,
        settings: Settings,
        store: SQLiteStore,
        ingestor: Ingestor,
        client: AgoraClient,
        *,
        rng: random.Random | None = None,
        sweep_s: float = 0.5,
    ) -> None:
        self.settings = settings
        self.store = store
        self.ingestor = ingestor
        self.client = client
        self.rng = rng or random.Random()
        self.sweep_s = sweep_s
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

    def next_poll_ms(self, failures: int = 0) -> int:
        """Now plus the interval with ±20% jitter, doubled per consecutive failure."""
        interval = self.settings.poll_interval_s * (2 ** min(failures, 6))
        interval = min(interval, max(MAX_BACKOFF_S, self.settings.poll_interval_s))
        return now_ms() + round(interval * self.rng.uniform(0.8, 1.2) * 1000)

    async def sweep(self) -> int:
        """Start polls and pushes that are due; returns how many polls started."""
        stamp = now_ms()
        # Started polls queue on the semaphore; a sweep must be able to start a whole
        # interval's worth, or many agents would be polled less often than configured.
        room = max(self.settings.poll_concurrency * 4, 4096)
        due, pushes = await self.store.read(
            lambda view: (view.due_watches(stamp, room), view.due_pushes(stamp, room))
        )
        started = 0
        for watch in due:
            agent_id = watch["agent_id"]
            if agent_id not in self._in_flight:
                self._track(agent_id, self.poll(watch))
                started += 1
        for watch in pushes:
            key = f"push:{watch['agent_id']}"
            if key not in self._in_flight:
                self._track(key, self._push_quietly(watch["agent_id"]))
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

    async def poll(self, watch: dict[str, Any]) -> None:
        """Read one agent's history and merge it; failures back off, a 404 ends following."""
        agent_id = watch["agent_id"]
        async with self._slots:
            try:
                window = await self.client.history(agent_id)
            except AgoraNotFound:
                await self.store.write(lambda tx: self._stopped(tx, agent_id))
                log.info("agent %s is gone (404): no longer followed", agent_id)
                return
            except AgentMemoryError as exc:
                failures, error = watch["failures"] + 1, exc.message
                log.warning("history of %s failed (%d in a row): %s", agent_id, failures, error)
                await self.store.write(
                    lambda tx: tx.polled(
                        agent_id, next_poll_ms=self.next_poll_ms(failures), error=error
                    )
                )
                return
            stamp = now_ms()

            def merge(tx: Any) -> Any:
                outcome = self.ingestor.apply_window(tx, agent_id, window, stamp)
                tx.polled(agent_id, next_poll_ms=self.next_poll_ms(), error=None)
                return outcome

            outcome = await self.store.write(merge)
            self.windows_merged += 1
            if outcome.new_messages:
                log.info(
                    "agent %s: +%d messages from history%s", agent_id, outcome.new_messages,
                    " (gap recorded)" if outcome.gap else "",
                )  # fmt: skip

    @staticmethod
    def _stopped(tx: Any, agent_id: str) -> None:
        tx.unwatch(agent_id, "agent not found on Agora (404)")
        session = tx.get_session(agent_id)
        if session is not None and session["status"] == "running":
            tx.update_session(
                agent_id, {"status": "stopped", "stop_reason": "not found on Agora while polling"}
            )

    # live refresh

    async def on_condensed(self, user_id: str, character_id: str, result: CondenseResult) -> None:
        """A pair's memory changed: ask for a push into each of its running agents."""
        interval_ms = round(self.settings.refresh_interval_s * 1000)

        def request(tx: Any) -> int:
            agents = tx.running_agents_of(user_id, character_id)
            for agent in agents:
                earliest = (agent["last_push_ms"] or 0) + interval_ms
                tx.request_push(agent["agent_id"], max(now_ms(), earliest))
            return len(agents)

        await self.store.write(request)

    async def _push_quietly(self, agent_id: str) -> None:
        try:
            await self.push(agent_id)
        except AgentMemoryError as exc:
            log.warning("refresh of %s failed: %s", agent_id, exc.message)
            retry_at = now_ms() + round(max(self.settings.refresh_interval_s, 5) * 1000)
            await self.store.write(lambda tx: tx.request_push(agent_id, retry_at))

    async def push(self, agent_id: str, *, force: bool = False) -> list[dict[str, Any]]:
        """Send the full system_messages list to a running agent; returns what was sent."""
        watch = await self.store.read(lambda view: view.get_watch(agent_id))
        if watch is None:
            raise NotFound(f"agent {agent_id} is not followed by this service")
        if watch["base_system_messages"] is None:
            raise Conflict(
                f"agent {agent_id} was not started through this service with its system "
                "messages (or it was started from a Studio pipeline without them), so they are "
                "unknown and an update would erase them; start it with POST /v1/agents or "
                "register it with POST /v1/sessions/{agent_id}/watch giving its system_messages"
            )
        if watch["status"] != "watching":
            raise Conflict(f"agent {agent_id} is not running ({watch['stop_reason']})")
        session = await self.store.read(lambda view: view.get_session(agent_id))
        if session is None:
            raise NotFound(f"no session for agent {agent_id} yet")
        context = await load_context(
            self.store,
            user_id=session["user_id"],
            character_id=session["character_id"],
            max_tokens=watch["max_tokens"] or self.settings.context_max_tokens,
            recent_messages=self.settings.context_recent_messages,
            persona=watch["persona"],
            style=watch["style"] or DEFAULT_STYLE,
            exclude_agent_id=agent_id,
        )
        messages = json.loads(watch["base_system_messages"]) + context.system_messages
        if not force and watch["last_pushed"] and json.loads(watch["last_pushed"]) == messages:
            await self.store.write(lambda tx: tx.pushed(agent_id, None))
            return messages
        await self.client.update_system_messages(agent_id, messages)
        await self.store.write(lambda tx: tx.pushed(agent_id, messages))
        log.info("pushed %d system messages (%d tokens) into agent %s",
                 len(messages), context.tokens, agent_id)  # fmt: skip
        return messages
