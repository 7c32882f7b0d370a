"""Retention: the scheduled purge that keeps the store bounded, and the search-index scrub.

Every `retention_sweep_s` (first run shortly after start) the purge removes, in short write
transactions of at most `batch_rows` rows so the writer is never held for long:
- messages beyond the latest `retention_max_messages` of their (user, character) and messages
  older than `retention_max_age_days` (either setting 0 = off), but only messages a committed
  summary covers (id <= the pair's watermark); the search index follows by trigger;
- per-turn metrics older than `retention_max_age_days`;
- processed raw callbacks (any status but `received`/`failed`) older than `raw_retention_days`;
then it merges the search index when enough of it is dead, gives free pages back to the file
system (incremental vacuum) and checkpoints the WAL.

Instances sharing a database each schedule both, and each time one of them runs them
(`schedule.my_turn`); a purge asked for by hand runs where it was asked.

A forget on a large database leaves its deleted index entries in old index segments (small
indexes are optimized by the forget itself); a scrub check every `SCRUB_CHECK_S` merges the
index into one segment in short steps, after which none of that text is left in the file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.core.clock import now_ms
from agent_memory.core.search import SEARCH_KINDS, SearchKind
from agent_memory.memory.schedule import JOB_DEFAULTS, my_turn, stops_quietly
from agent_memory.settings import Settings
from agent_memory.store import Store, Transaction
from agent_memory.store.types import PurgeStep

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
BATCH_ROWS = 2000  # rows per write: ~70 ms at ~28k rows/s, so other writers wait little
MERGE_PAGES = 250  # pages merged per write (tens of ms)
VACUUM_PAGES = 1000  # pages handed back per write (~50 ms)
FIRST_RUN_AFTER_S = 60.0
SCRUB_CHECK_S = 30.0
# The named leases of the scheduled work, one instance holding each.
PURGE_LEASE = "retention-purge"
SCRUB_LEASE = "search-scrub"
# Dead entries (from retention) above this share of the stored messages trigger a full merge.
DEAD_SHARE_FOR_MERGE = 0.10

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PurgeLimits:
    """The retention settings a purge ran with (0: that limit is off)."""

    retention_max_messages: int
    retention_max_age_days: float
    raw_retention_days: float


@dataclass(frozen=True, slots=True)
class ScrubReport:
    """Whether the search index was merged, in how many steps, and what had made it due."""

    merged: bool
    merge_steps: int
    owed_forgets: int
    dead_rows: int


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """Free pages given back to the file system, and how the WAL checkpoint after it went."""

    pages_freed: int
    checkpoint_busy: int
    wal_pages: int
    wal_pages_checkpointed: int


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What one purge removed and gave back, and how long each phase took."""

    settings: PurgeLimits
    messages: int
    metrics: int
    raw_callbacks: int
    write_batches: int
    phase_seconds: dict[str, float]
    search_index: ScrubReport
    reclaimed: Reclaimed
    bytes_before: int
    bytes_after: int
    seconds: float
    # What would make the database give freed space back, when it keeps it to itself.
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as the CLI and `POST /v1/admin/purge` print it (`warning` only when there is one)."""
        document = dataclasses.asdict(self)
        if self.warning is None:
            del document["warning"]
        return document


class Retention:
    """Runs the purge on a schedule, or once on demand (`purge_once`)."""

    def __init__(self, settings: Settings, store: Store, *, batch_rows: int = BATCH_ROWS) -> None:
        self.settings = settings
        self.store = store
        self.batch_rows = batch_rows
        self.scheduler: AsyncIOScheduler | None = None
        self.last_report: PurgeReport | None = None
        # The scheduled purge and an admin's request never run at the same time.
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Purge every `retention_sweep_s` and check for an owed index scrub every `SCRUB_CHECK_S`."""
        sweep_s = self.settings.retention_sweep_s
        # Not schedule.start_interval: the first purge waits a little after start (not at once),
        # so a restart does not purge while clients are still reconnecting.
        self.scheduler = AsyncIOScheduler(job_defaults=JOB_DEFAULTS)
        self.scheduler.add_job(
            stops_quietly(self._scheduled_purge, "retention-purge"),
            "interval",
            seconds=sweep_s,
            id="retention-purge",
            next_run_time=datetime.now() + timedelta(seconds=min(sweep_s, FIRST_RUN_AFTER_S)),
        )
        self.scheduler.add_job(
            stops_quietly(self._scheduled_scrub, "search-scrub"),
            "interval",
            seconds=self._scrub_every_s,
            id="search-scrub",
        )
        self.scheduler.start()

    @property
    def _scrub_every_s(self) -> float:
        return min(self.settings.retention_sweep_s, SCRUB_CHECK_S)

    async def stop(self) -> None:
        """Stop scheduling; a purge in progress finishes its current write."""
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None

    async def _scheduled_purge(self) -> None:
        """The scheduled purge (on one instance): failures are logged, and it runs again next time."""
        try:
            if await my_turn(self.store, PURGE_LEASE, self.settings.retention_sweep_s):
                await self.purge_once()
        except Exception:
            log.exception("retention purge failed; it runs again in %ss", self.settings.retention_sweep_s)

    async def _scheduled_scrub(self) -> None:
        """The scheduled scrub check (on one instance): failures are logged, and it is tried again."""
        try:
            if await my_turn(self.store, SCRUB_LEASE, self._scrub_every_s):
                await self.scrub_if_owed()
        except Exception:
            log.exception("search index scrub failed; it is tried again")

    # the purge

    async def purge_once(self, progress: Progress | None = None) -> PurgeReport:
        """One full purge; returns (and logs) what it removed and what it gave back."""
        async with self._lock:
            return await self._purge(progress)

    async def _purge(self, progress: Progress | None) -> PurgeReport:
        """The purge itself, run under the lock."""
        say = progress or (lambda _: None)
        settings = self.settings
        started = time.monotonic()
        now = now_ms()
        before = await self.store.read(lambda view: view.maintenance.storage_stats())
        messages = metrics = raw_callbacks = write_batches = 0
        phases: dict[str, float] = {}
        mark = time.monotonic()

        def lap(phase: str) -> None:
            nonlocal mark
            phases[phase] = round(time.monotonic() - mark, 3)
            mark = time.monotonic()

        max_age_ms = round(settings.retention_max_age_days * DAY_MS)
        if settings.retention_max_messages or max_age_ms:
            after: tuple[str, str] | None = None

            def purge_step(tx: Transaction) -> PurgeStep:
                return tx.maintenance.purge_messages(
                    after=after,
                    now_ms=now,
                    keep_latest=settings.retention_max_messages,
                    max_age_ms=max_age_ms,
                    budget=self.batch_rows,
                )

            while True:
                step = await self.store.write(purge_step)
                messages += step.deleted
                write_batches += 1
                if step.deleted:
                    say(f"messages: {messages} removed")
                if step.done:
                    break
                after = step.resume_after
        lap("messages")
        if max_age_ms:
            metrics, batches = await self._drain(
                lambda tx: tx.maintenance.purge_metrics(
                    older_than_ms=now - max_age_ms, budget=self.batch_rows
                ),
                "metrics",
                say,
            )
            write_batches += batches
        lap("metrics")
        if settings.raw_retention_days:
            raw_cutoff = now - round(settings.raw_retention_days * DAY_MS)
            raw_callbacks, batches = await self._drain(
                lambda tx: tx.maintenance.purge_raw_events(older_than_ms=raw_cutoff, budget=self.batch_rows),
                "raw callbacks",
                say,
            )
            write_batches += batches
        lap("raw_callbacks")
        search_index = await self._scrub(say, dead_rows_too=True)
        lap("search_index")
        reclaimed = await self.reclaim(say)
        lap("reclaim")
        after_stats = await self.store.read(lambda view: view.maintenance.storage_stats())
        report = PurgeReport(
            settings=PurgeLimits(
                retention_max_messages=settings.retention_max_messages,
                retention_max_age_days=settings.retention_max_age_days,
                raw_retention_days=settings.raw_retention_days,
            ),
            messages=messages,
            metrics=metrics,
            raw_callbacks=raw_callbacks,
            write_batches=write_batches,
            phase_seconds=phases,
            search_index=search_index,
            reclaimed=reclaimed,
            bytes_before=before["bytes"],
            bytes_after=after_stats["bytes"],
            seconds=round(time.monotonic() - started, 3),
            # The database keeps freed space to itself; the store says what would fix it.
            warning=after_stats["advice"] or None,
        )
        if report.warning:
            log.warning("retention: %s", report.warning)
        log.info(
            "retention: removed %d messages, %d metrics, %d raw callbacks in %.2fs; %d -> %d bytes",
            report.messages,
            report.metrics,
            report.raw_callbacks,
            report.seconds,
            report.bytes_before,
            report.bytes_after,
        )
        self.last_report = report
        return report

    async def _drain(self, fn: Callable[[Transaction], int], what: str, say: Progress) -> tuple[int, int]:
        """Run a bounded delete until it deletes less than a batch; returns (rows deleted, writes)."""
        total = batches = 0
        while True:
            deleted = await self.store.write(fn)
            batches += 1
            total += deleted
            if deleted:
                say(f"{what}: {total} removed")
            if deleted < self.batch_rows:
                return total, batches

    # the search index

    async def scrub_if_owed(self, progress: Progress | None = None) -> ScrubReport:
        """Merge the search index into one segment if a forget left deleted entries in it."""
        async with self._lock:
            return await self._scrub(progress, dead_rows_too=False)

    async def _scrub(self, progress: Progress | None, *, dead_rows_too: bool) -> ScrubReport:
        """The scrub; with `dead_rows_too` also when retention left more than
        `DEAD_SHARE_FOR_MERGE` of the index dead."""
        state = await self.store.read(lambda view: view.maintenance.search_state())
        owed, dead = state["scrub_owed"], state["dead_rows"]
        due = owed > 0
        if not due and dead_rows_too and dead:
            messages = await self.store.read(lambda view: view.maintenance.counts()["messages"])
            due = dead > DEAD_SHARE_FOR_MERGE * max(messages, 1)
        if not due:
            return ScrubReport(merged=False, merge_steps=0, owed_forgets=owed, dead_rows=dead)
        steps = await self.merge_index(progress)
        await self.store.write(lambda tx: tx.maintenance.search_scrubbed(owed, dead))
        # The WAL may still hold copies of pages from before the merge.
        await self.store.checkpoint()
        log.info(
            "search index merged in %d steps (%d forgets owed a scrub, %d dead rows)",
            steps,
            owed,
            dead,
        )
        return ScrubReport(merged=True, merge_steps=steps, owed_forgets=owed, dead_rows=dead)

    async def merge_index(self, progress: Progress | None = None) -> int:
        """Merge each search index into a single segment, `MERGE_PAGES` pages per write."""
        steps = 0
        for kind in SEARCH_KINDS:
            while await self.store.write(partial(_merge_step, kind=kind)):
                steps += 1
                if progress and steps % 10 == 0:
                    progress(f"search index: {steps} merge steps")
        return steps

    # space

    async def reclaim(self, progress: Progress | None = None) -> Reclaimed:
        """Hand free pages back to the file system, then checkpoint the WAL into the file."""
        freed = 0
        shrinks = (await self.store.read(lambda view: view.maintenance.storage_stats()))["advice"] is None
        while shrinks:
            step = await self.store.write(lambda tx: tx.maintenance.reclaim_space(VACUUM_PAGES))
            freed += step
            if step and progress:
                progress(f"space: {freed} pages given back")
            if step < VACUUM_PAGES:
                break
        busy, wal_pages, checkpointed = await self.store.checkpoint()
        return Reclaimed(
            pages_freed=freed, checkpoint_busy=busy, wal_pages=wal_pages, wal_pages_checkpointed=checkpointed
        )


def _merge_step(tx: Transaction, *, kind: SearchKind) -> bool:
    """One merge step of one index (a module function so the write is typed)."""
    return tx.maintenance.merge_search_index(kind, MERGE_PAGES)
