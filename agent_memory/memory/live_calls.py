"""What the per-turn memory keeps of live calls between their requests: the replies held until
the platform's copy of them, the pairs recalled on the event loop, and the endpoints' counters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Protocol

from agent_memory.core.clock import now_ms
from agent_memory.core.events import HistoryWindow, KnownEnd, Outcome
from agent_memory.errors import StoreUnavailable
from agent_memory.memory.service import Memory
from agent_memory.store import Transaction

log = logging.getLogger("agent_memory.memory.per_turn")  # one logger for the per-turn memory

# A pair whose last recall read in less than AGENT_MEMORY_RECALL_BRIEF_MS is recalled on the
# event loop (the embedded store): handing the read to a reader thread and back cost about
# 0.5 ms of a 2 ms recall (bench/llm_proxy.py, side by side). One read slower (its index not
# held in memory yet, so searched in SQLite, which a reader thread does without the GIL) goes
# back to a reader thread, where the deadline can cut it short.
BRIEF_PAIRS_HELD = 10_000
# A live call's turns are recorded this long after its request is on its way, with the other
# calls' turns asked for meanwhile, in one transaction: at four calls at a time (bench/endpoint.py)
# about two a commit. Well within a call's next turn (seconds away; the model's first token alone
# is 20 ms or more), and nothing waits for it.
MERGE_GATHER_S = 0.02


@dataclass(slots=True)
class ProxyStats:
    """What the custom-LLM endpoints did since the service started."""

    requests: int = 0
    streamed: int = 0
    unauthorized: int = 0
    bad_requests: int = 0
    recalls: int = 0
    recall_misses: int = 0  # past the deadline
    first_turn_recalls: int = 0  # the first recall of a call at an endpoint (this instance)
    first_turn_misses: int = 0  # of those, past the deadline
    recalls_brief: int = 0  # of a pair whose last recall was brief (read on the event loop by SQLite)
    recalls_reused: int = 0  # answered with the call's last recall: its question again, nothing new to find
    recall_errors: int = 0
    memories_injected: int = 0
    upstream_errors: int = 0
    cancelled: int = 0  # the client went away mid-answer
    recorded: int = 0
    record_errors: int = 0
    unrecorded: int = 0  # no call (session) to record into
    unchanged_windows: int = 0  # requests that added nothing to their call's stored window
    messages_read: int = 0  # of requests, read to be recorded (those a call repeats are read once)
    store_unavailable: int = (
        0  # recalls and recordings skipped: the database was down (relayed without memory)
    )

    def report(self) -> dict[str, int]:
        return asdict(self)


class Watch(Protocol):
    """What a merge of a live call's window tells, in its transaction, before and after it."""

    def before(self, tx: Transaction) -> None: ...

    def after(self, tx: Transaction) -> None: ...


class HeldReplies:
    """Replies waiting for the next request of their call (or the settle time) to be recorded."""

    def __init__(
        self,
        memory: Memory,
        stats: ProxyStats,
        settle_s: float,
        settled: Callable[[str], None] | None = None,
        gather_s: float = MERGE_GATHER_S,
    ) -> None:
        self.memory = memory
        self.stats = stats
        self.settle_s = settle_s
        # Told when a call's reply settled (the call went quiet).
        self.settled = settled or (lambda session: None)
        self.gather_s = gather_s
        self._held: dict[str, tuple[HistoryWindow, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Merges asked for within `gather_s` of the first of them, written together when it ends.
        self._gathered: list[_Merge] = []
        self._gathering: asyncio.TimerHandle | None = None

    def drop(self, session: str) -> None:
        """The call's next request came: it carries the reply as the platform heard it."""
        held = self._held.pop(session, None)
        if held is not None:
            held[1].cancel()

    def hold(self, session: str, window: HistoryWindow) -> None:
        self.drop(session)
        loop = asyncio.get_running_loop()
        handle = loop.call_later(self.settle_s, self._settle, session)
        self._held[session] = (window, handle)

    def forget(self, labels: Mapping[str, str]) -> None:
        """A forget: drop the held replies of the pair (or user) whose `labels` it names, and its
        windows still gathered (the forget's cut-off would leave them out all the same)."""
        for session, (window, _) in list(self._held.items()):
            if _names(window, labels):
                self.drop(session)
        self._gathered = [merge for merge in self._gathered if not _names(merge.window, labels)]

    def _settle(self, session: str) -> None:
        held = self._held.pop(session, None)
        if held is not None:
            self.merge(held[0])
        self.settled(session)

    def merge(
        self,
        window: HistoryWindow,
        done: Callable[[Outcome], None] | None = None,
        known: KnownEnd | None = None,
        watch: Watch | None = None,
    ) -> None:
        """Merge a window in the background (then `done(outcome)`), only what follows `known`
        where that holds, `watch` told in its transaction; never fails the answer, errors are logged.

        Written with the other windows asked for within `gather_s` (live calls' turns come a few
        at a time from many calls): one transaction and one commit for all of them."""
        self._gathered.append(_Merge(window, done, known, watch))
        if self._gathering is None:
            self._gathering = asyncio.get_running_loop().call_later(self.gather_s, self._write)

    def _write(self) -> None:
        """Write the gathered windows, in the order they were asked for."""
        self._gathering = None
        merges, self._gathered = self._gathered, []
        if merges:
            task = asyncio.get_running_loop().create_task(self._merge(merges))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _merge(self, merges: list[_Merge]) -> None:
        try:
            outcomes: list[Outcome | Exception] = await self.memory.merge_windows(
                [
                    (
                        m.window,
                        m.known,
                        m.watch.before if m.watch else None,
                        m.watch.after if m.watch else None,
                    )
                    for m in merges
                ],
                now_ms(),
            )
        except Exception as exc:  # the transaction failed: none of them was stored
            outcomes = [exc] * len(merges)
        for merge, outcome in zip(merges, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self._failed(merge.window, outcome)
                continue
            self.stats.recorded += outcome.new_messages
            if merge.done is not None:
                try:
                    merge.done(outcome)
                except Exception:
                    log.exception("custom LLM: after recording agent %s", merge.window.agent_id)

    def _failed(self, window: HistoryWindow, exc: Exception) -> None:
        """A window not stored: counted and logged (the call's next request, or its transcript,
        carries its turns again)."""
        self.stats.record_errors += 1
        if isinstance(exc, StoreUnavailable):
            self.stats.store_unavailable += 1
            log.warning("custom LLM: recording agent %s failed: %s", window.agent_id, exc.message)
        else:
            log.error("custom LLM: recording agent %s failed", window.agent_id, exc_info=exc)

    async def close(self) -> None:
        """Record what is still held or gathered, and wait for the merges under way."""
        for session in list(self._held):
            self._settle(session)
        if self._gathering is not None:
            self._gathering.cancel()
        self._write()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)


def _names(window: HistoryWindow, labels: Mapping[str, str]) -> bool:
    """Whether a window is of the pair (or user) whose `labels` a forget names."""
    return all(window.labels.get(key) == value for key, value in labels.items())


@dataclass(slots=True)
class _Merge:
    """A window to merge (`HeldReplies.merge`)."""

    window: HistoryWindow
    done: Callable[[Outcome], None] | None
    known: KnownEnd | None
    watch: Watch | None


class BriefPairs:
    """The pairs whose last recall read in under `brief_ms`: recalled on the event loop."""

    def __init__(self, brief_ms: float, held: int = BRIEF_PAIRS_HELD) -> None:
        self.brief_ms = brief_ms
        self.held = held
        self._pairs: set[tuple[str, str]] = set()

    def __contains__(self, pair: tuple[str, str]) -> bool:
        return pair in self._pairs

    def took(self, pair: tuple[str, str], ms: float | None) -> None:
        """How long the pair's recall read took (None: it did not finish)."""
        if ms is None or ms >= self.brief_ms:
            self._pairs.discard(pair)
            return
        if len(self._pairs) >= self.held:
            self._pairs.clear()  # the pairs still in a call are brief again after one recall
        self._pairs.add(pair)
