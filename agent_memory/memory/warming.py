"""Warming a pair's recall index when its call starts, so that the call's first question is not cold.

A pair whose index is not held in memory is searched in the database on its first recall,
which under load can miss the custom-LLM endpoint's deadline: the call's first "do you
remember…" would go out without memory. A call's start (Agora's 101, `POST /v1/agents`, the
first request of a run at the endpoint) reads the pair's index into memory in the background,
on a reader thread. What is held is this process's: another instance warms what it sees.
"""

from __future__ import annotations

import asyncio
import logging

from agent_memory.store.protocols import Store

log = logging.getLogger(__name__)


class Warming:
    """Pairs read into memory as their calls start, one read per pair at a time."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._warming: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.pairs_warmed = 0  # read into memory (not counted: already held, or nothing to hold)
        self.warm_errors = 0

    def warm(self, user_id: str, character_id: str) -> None:
        """Start reading the pair's index into memory, unless it is being read already; never waits."""
        pair = (user_id, character_id)
        if pair in self._warming:
            return
        task = asyncio.get_running_loop().create_task(self._warm(pair))
        self._warming[pair] = task
        task.add_done_callback(lambda _: self._warming.pop(pair, None))

    async def _warm(self, pair: tuple[str, str]) -> None:
        try:
            if await self.store.read(lambda view: view.recall.warm(*pair)):
                self.pairs_warmed += 1
        except Exception as exc:  # the first recall reads it then, as it would have unwarmed
            self.warm_errors += 1
            log.warning("warming the recall index of a pair failed: %s", exc)

    async def settled(self) -> None:
        """Wait for the warming under way (tests and benchmarks)."""
        while self._warming:
            await asyncio.gather(*self._warming.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the warming under way (the service is stopping)."""
        for task in list(self._warming.values()):
            task.cancel()
        await asyncio.gather(*self._warming.values(), return_exceptions=True)

    def report(self) -> dict[str, int]:
        return {"pairs_warmed": self.pairs_warmed, "warm_errors": self.warm_errors}
