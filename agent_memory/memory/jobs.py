"""Background work: condensing each (user, character) memory on a schedule.

The database is the queue. Ingest writes a debounced `condense` job row per pair;
APScheduler only decides when to look for due rows. A claimed job reads the messages
after the pair's watermark, makes one condenser call, and commits the new summary,
the fact changes and the advanced watermark in one transaction. Failures retry with
exponential backoff and jitter; after `job_max_attempts` a job is dead until retried.

Instances sharing a database share the queue: a sweep claims due jobs (none another
instance holds), and the claim is a lease renewed while the job runs (`lease_kept`), so a
job whose instance died is claimed again once its lease runs out.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.condense.base import CondenseInput, CondenseOutput, Condenser, CondenseResult, FactIn
from agent_memory.core.clock import Backoff, now_ms
from agent_memory.core.domain import CONDENSE, Fact, Job, Message, Summary
from agent_memory.core.recall import TermStats
from agent_memory.core.render import is_renderable
from agent_memory.core.terms import cached_terms
from agent_memory.errors import LLMError, LLMUnavailable
from agent_memory.logs import pair_ref
from agent_memory.memory.schedule import start_interval
from agent_memory.metrics import CondenseOutcome, Metrics
from agent_memory.settings import Settings
from agent_memory.store import ReadView, Store, Transaction

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 600.0
# Half jitter: retries spread out, yet each waits at least half its ceiling.
BACKOFF = Backoff(BACKOFF_BASE_S, BACKOFF_CAP_S, jitter=0.5)
# More messages than this since the watermark are condensed over several calls.
MAX_MESSAGES_PER_CALL = 400
# A running job's lease is renewed this many times per lease time, so a late renewal or two
# never lets it run out while its instance lives.
RENEWALS_PER_LEASE = 3
# The messages a running agent keeps in its own window when it was not told how many (Agora's
# default llm.max_history).
DEFAULT_AGENT_WINDOW = 32


def schedule_condense(
    tx: Transaction, settings: Settings, user_id: str, character_id: str, new: int, *, ended: bool = False
) -> None:
    """Debounce the pair's condense job for `new` messages (in the transaction that stored them);
    after a call ended the wait is `summary_after_call_s`: the next call may start any minute."""
    delay_s = (
        min(settings.summary_after_call_s, settings.summary_delay_s) if ended else settings.summary_delay_s
    )
    tx.jobs.schedule(
        CONDENSE,
        user_id,
        character_id,
        delay_ms=round(delay_s * 1000),
        max_wait_ms=round(settings.summary_max_wait_s * 1000),
        max_messages=settings.summary_max_messages,
        new_messages=new,
    )


class Forgotten(Exception):
    """The pair was forgotten while its job ran; the result is dropped."""


class Superseded(Exception):
    """The pair's summary changed (or was reset) while its job ran; the result is dropped, the
    job runs again."""


# Run inside every condense result's commit, with its pair (live refresh asks for its pushes):
# no transaction of its own per job.
InCommit = Callable[[Transaction, str, str], Any]


@asynccontextmanager
async def lease_kept(store: Store, job_id: int, lease_s: float) -> AsyncIterator[None]:
    """Renew this instance's claim of a running job while the block runs."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(lease_s / RENEWALS_PER_LEASE)
            try:
                held = await store.write(lambda tx: tx.jobs.renew(job_id))
            except Exception as exc:  # the next renewal may well get through
                log.warning("renewing the lease of job %d failed: %s", job_id, exc)
                continue
            if not held:
                # Its result is still checked against the pair's watermark before it is kept.
                log.warning("job %d ran longer than its lease and another instance may run it", job_id)
                return

    renewing = asyncio.get_running_loop().create_task(renew())
    try:
        yield
    finally:
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)


def apply_result(
    tx: Transaction,
    job: Job,
    messages: list[Message],
    result: CondenseResult,
    previous: Summary | None,
    read_ms: int | None = None,
) -> dict[str, int]:
    """Commit a condensed result: summary, fact changes and watermark together; `read_ms`: when
    its messages were read (a forget since then drops it)."""
    _check_still_wanted(tx, job, previous, read_ms)
    tx.summaries.put(_next_summary(job, messages, result, previous))
    return _apply_facts(tx, job.user_id, job.character_id, result)


def _check_still_wanted(tx: Transaction, job: Job, previous: Summary | None, read_ms: int | None) -> None:
    """Raise Forgotten or Superseded when the result must not be committed."""
    user_id, character_id = job.user_id, job.character_id
    # Read first: a forget takes the reset mark's lock before the user's, and so does this.
    reset = tx.maintenance.reset_at(user_id, character_id)
    cutoff = tx.maintenance.forget_cutoff(user_id, character_id)
    # Forgetting the pair deletes its job (whose id SQLite may give to the next one) and leaves
    # its cut-off: what we condensed must not come back.
    if tx.jobs.by_id(job.id) is None or (
        cutoff is not None and read_ms is not None and cutoff.at_ms >= read_ms
    ):
        raise Forgotten(f"{user_id}/{character_id} was forgotten while it was being condensed")
    if reset is not None and read_ms is not None and reset >= read_ms:
        # Words it read left the pair (a forgotten guest's, a moved session's), whether or not
        # a summary held them yet: the watermark alone cannot tell.
        raise Superseded(f"the memory of {user_id}/{character_id} was reset while its job ran")
    current = tx.summaries.get(user_id, character_id)
    if (current and current.watermark_id) != (previous and previous.watermark_id):
        # Someone condensed these messages meanwhile (a forget, or a manual retry): drop ours.
        raise Superseded(f"the summary of {user_id}/{character_id} changed while its job ran")


def _next_summary(
    job: Job, messages: list[Message], result: CondenseResult, previous: Summary | None
) -> Summary:
    """The pair's summary once `messages` are condensed into it."""
    stamp = now_ms()
    covered_until = max(message.at_ms for message in messages)
    return Summary(
        user_id=job.user_id,
        character_id=job.character_id,
        text=result.summary,
        watermark_id=max(message.id for message in messages),
        covered_until_ms=max(covered_until, (previous and previous.covered_until_ms) or 0),
        message_count=(previous.message_count if previous else 0) + len(messages),
        method=result.method,
        model=result.model,
        created_ms=previous.created_ms if previous else stamp,
        updated_ms=stamp,
        meta={"tokens_sent": result.tokens_sent, "fallback_reason": result.fallback_reason},
    )


def _apply_facts(tx: Transaction, user_id: str, character_id: str, result: CondenseResult) -> dict[str, int]:
    """Add, update and end the result's facts (pinned ones are the user's: left alone); counted."""
    changes = {"added": 0, "updated": 0, "removed": 0}
    pinned = {fact.id for fact in tx.facts.of_pair(user_id, character_id) if fact.pinned}
    for fact in result.add_facts:
        _, created = tx.facts.add(
            user_id, character_id, fact.text, scope=fact.scope, pinned=False, origin=result.method
        )
        changes["added"] += int(created)
    changeable = {fact.id for fact in tx.facts.of_pair(user_id, character_id)} - pinned
    for update in result.update_facts:
        if update.id in changeable:
            changes["updated"] += int(tx.facts.update(update.id, update.text))
    for fact_id in result.remove_facts:
        if fact_id in changeable:
            # No longer true: kept as the fact's history (valid_to set), gone from memory.
            changes["removed"] += int(tx.facts.end(fact_id))
    return changes


def held_from(view: ReadView, user_id: str, character_id: str) -> int | None:
    """The lowest id of what the pair's running agents that are refreshed still hold themselves
    (the last `max_history` messages of each), None when they hold nothing.

    A summary must not cover those: a live refresh would push them back into the call that
    holds them. They are condensed once they leave its window, or when the call ends.
    """
    held = [
        row.id
        for watch in view.watches.running_for(user_id, character_id)
        if watch.refreshes
        for row in view.messages.tail(watch.agent_id, watch.max_history or DEFAULT_AGENT_WINDOW)
    ]
    return min(held, default=None)


def _claim_next(tx: Transaction) -> list[Job] | None:
    """The next due condense job, claimed; None when the claim failed (its own savepoint: the
    result it commits with is kept, and a sweep claims instead)."""
    try:
        with tx.savepoint():
            return tx.jobs.claim_due(CONDENSE, now_ms(), 1)
    except Exception as exc:
        log.warning("claiming the next condense job failed: %s", exc)
        return None


def _run_in_commit(tx: Transaction, hook: InCommit, user_id: str, character_id: str) -> None:
    """`hook` in its own savepoint: one that fails is logged and undone, the result it commits with kept."""
    try:
        with tx.savepoint():
            hook(tx, user_id, character_id)
    except Exception:
        log.exception("a hook of condensed memory failed")


class CondenseJobs:
    """Finds due condense jobs and runs them, at most one per pair at a time."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        condenser: Condenser,
        *,
        rng: random.Random | None = None,
        sweep_s: float = 1.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.condenser = condenser
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.sweep_s = sweep_s
        self.in_commit: list[InCommit] = []
        self.scheduler: AsyncIOScheduler | None = None
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._sweeps: set[asyncio.Task[int]] = set()
        self._backlog = False
        # Sweeps claim what they start: one at a time, so claims never exceed the free slots.
        self._sweeping = asyncio.Lock()
        self.concurrency = settings.condense_concurrency

    async def start(self) -> None:
        """Free what a dead instance left running, then look for due jobs every `sweep_s`."""
        released = await self.store.write(lambda tx: tx.jobs.release_running())
        if released:
            log.info("%d jobs left running by an instance that is gone are pending again", released)
        self.scheduler = start_interval(self.sweep, self.sweep_s, "condense-sweep")

    async def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        if self._running:
            # A job cut short stays 'running': found again at the next start, or (a shared
            # database) by any instance once its lease runs out.
            await asyncio.wait(list(self._running.values()), timeout=5)
        await self.condenser.close()

    async def sweep(self) -> int:
        """Claim and start due jobs, as many as there are free slots; returns how many started."""
        async with self._sweeping:
            free = self.concurrency - len(self._running)
            if free <= 0:
                return 0
            stamp = now_ms()
            # An idle sweep (the usual one) only reads.
            if not await self.store.read(lambda view: view.jobs.due(CONDENSE, stamp, 1)):
                return 0
            claimed = await self.store.write(lambda tx: tx.jobs.claim_due(CONDENSE, stamp, free))
            # All slots filled: each finishing job claims the next in its commit instead of
            # waiting for the timer.
            self._backlog = len(claimed) == free
            return await self._start(claimed)

    async def _start(self, claimed: list[Job], *, running: bool = True) -> int:
        """Run the jobs this instance claimed; one whose pair still runs here goes back, and so do
        all when the runner is no longer `running` (stopped meanwhile). How many started."""
        busy = [job.id for job in claimed if not running or (job.user_id, job.character_id) in self._running]
        for job in claimed:
            if job.id not in busy:
                key = (job.user_id, job.character_id)
                task = asyncio.get_running_loop().create_task(self._run_claimed(job, refill=True))
                self._running[key] = task
                task.add_done_callback(functools.partial(self._job_done, key))
        if busy:
            # Still running here after their lease ran out (or stopped): the new claims go back.
            def give_back(tx: Transaction) -> None:
                for job_id in busy:
                    tx.jobs.postpone(job_id, now_ms())

            await self.store.write(give_back)
        return len(claimed) - len(busy)

    def _job_done(self, key: tuple[str, str], _: asyncio.Task[None]) -> None:
        self._running.pop(key, None)
        # A job that claimed its successor in its commit left no slot free.
        if self._backlog and self.scheduler is not None and len(self._running) < self.concurrency:
            self._backlog = False
            self._sweeps.add(task := asyncio.get_running_loop().create_task(self.sweep()))
            task.add_done_callback(self._sweeps.discard)

    async def run_due_now(self) -> None:
        """Sweep, and wait for what it started (tests and the CLI)."""
        await self.sweep()
        await self.drained()

    async def drained(self) -> None:
        """Wait until no job is running (jobs started meanwhile are waited for too)."""
        while self._running:
            await asyncio.gather(*self._running.values())

    async def run(self, job_id: int) -> bool:
        """Claim one job, condense, commit; failures are recorded on the job. False when the
        job could not be claimed: another process (the running service) holds it."""
        job = await self.store.write(lambda tx: tx.jobs.claim(job_id))
        if job is None:
            return False
        await self._run_claimed(job)
        return True

    async def _run_claimed(self, job: Job, *, refill: bool = False) -> None:
        """Condense and commit a job this instance claimed, holding its lease meanwhile; `refill`:
        it holds one of the sweeps' slots, which its commit may hand to the next due job."""
        outcome: CondenseOutcome = "done"
        async with lease_kept(self.store, job.id, self.settings.lease_s):
            try:
                await self._condense(job, refill=refill)
            except Forgotten as exc:
                outcome = "forgotten"
                log.info("%s; result dropped", exc)
            except Superseded as exc:
                # Nobody failed: run again from the new watermark, with no attempt counted.
                outcome = "superseded"
                log.info("%s; result dropped, condensing again", exc)
                await self.store.write(lambda tx: tx.jobs.postpone(job.id, now_ms()))
            except Exception as exc:
                outcome = await self._failed(job, exc)
        if self.metrics is not None:
            self.metrics.condense_run(outcome)

    async def _condense(self, job: Job, *, refill: bool = False) -> None:
        user_id, character_id = job.user_id, job.character_id

        reads_history = self.condenser.reads_history

        def read(view: ReadView) -> tuple[Summary | None, list[Fact], list[Message], TermStats | None]:
            summary = view.summaries.get(user_id, character_id)
            watermark = summary.watermark_id if summary else 0
            after = view.messages.after(user_id, character_id, watermark, MAX_MESSAGES_PER_CALL + 1)
            held = held_from(view, user_id, character_id)
            if held is not None:
                after = [message for message in after if message.id < held]
            facts = view.facts.of_pair(user_id, character_id)
            if not reads_history:
                return summary, facts, after, None
            # How common each word of the new turns (and of the summary they join) is in the
            # pair's history: the offline condenser quotes what is seldom said (condense.gist).
            said = [message.content for message in after]
            asked = sorted(
                {term for text in (*said, summary.text if summary else "") for term in cached_terms(text)}
            )
            history = view.recall.term_stats(
                user_id, character_id, [(term, 1.0) for term in asked], idfs=False
            )
            return summary, facts, after, history

        read_ms = now_ms()
        previous, facts, messages, history = await self.store.read(read)
        more = len(messages) > MAX_MESSAGES_PER_CALL
        if more:
            # The one read past the limit is the highest id, wherever it falls in time: every
            # id up to the new watermark stays in this call.
            last = max(messages, key=lambda message: message.id)
            messages = [message for message in messages if message is not last]
        again_at = now_ms() + round(self.settings.summary_delay_s * 1000)
        if not messages:
            await self.store.write(lambda tx: tx.jobs.finish(job, again_at_ms=again_at))
            return
        if not any(is_renderable(message) for message in messages) and previous is not None:
            # Only empty turns: nothing to tell a model, but they are covered all the same.
            result = CondenseResult(
                output=CondenseOutput(summary=previous.text),
                method=previous.method,
                model=previous.model or "",
                fallback_reason="only empty messages",
            )
            await self.store.write(
                lambda tx: (
                    apply_result(tx, job, messages, result, previous, read_ms),
                    tx.jobs.finish(job, again_at_ms=again_at),
                )
            )
            return
        started = time.monotonic()
        result = await self.condenser.condense(
            CondenseInput(
                user_id=user_id,
                character_id=character_id,
                previous_summary=previous.text if previous else None,
                facts=[
                    FactIn(id=fact.id, text=fact.text, scope=fact.scope, pinned=fact.pinned) for fact in facts
                ],
                messages=messages,
                term_turns={term: turns for term, turns in history.frequencies.items() if turns}
                if history
                else {},
                indexed_turns=history.documents if history else 0,
            )
        )
        took = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.condensed(
                result.method, took, tokens_sent=result.tokens_sent, messages=len(messages)
            )
            self.metrics.fact_decisions(result.fact_decisions)

        changes = await self._commit(
            job, messages, result, previous, read_ms, again_at_ms=again_at, more=more, refill=refill
        )
        log.info(
            "condensed %s: %d messages with %s in %.2fs, %d tokens sent; facts %s",
            pair_ref(user_id, character_id),
            len(messages),
            result.model,
            took,
            result.tokens_sent,
            changes,
        )

    async def _commit(
        self,
        job: Job,
        messages: list[Message],
        result: CondenseResult,
        previous: Summary | None,
        read_ms: int,
        *,
        again_at_ms: int,
        more: bool,
        refill: bool,
    ) -> dict[str, int]:
        """Commit a job's result with its hooks (`in_commit`) and finish the job (due again at
        `again_at_ms`, or now when `more` messages are left); under a backlog, claim and start
        the next due job in the same commit. Returns the fact changes."""
        # Not in a sweep's read and claim after it: a transaction and an fsync less per job.
        claim_next = refill and self._backlog and self.scheduler is not None
        user_id, character_id = job.user_id, job.character_id

        def commit(tx: Transaction) -> tuple[dict[str, int], list[Job] | None]:
            changes = apply_result(tx, job, messages, result, previous, read_ms)
            finished = tx.jobs.finish(job, again_at_ms=now_ms() if more else again_at_ms)
            if finished and more:
                tx.jobs.make_due(CONDENSE, user_id, character_id)
            for hook in self.in_commit:
                _run_in_commit(tx, hook, user_id, character_id)
            return changes, _claim_next(tx) if claim_next else None

        changes, claimed = await self.store.write(commit)
        if claimed is not None:
            self._backlog = len(claimed) == 1
            await self._start(claimed, running=self.scheduler is not None)
        return changes

    async def _failed(self, job: Job, exc: Exception) -> CondenseOutcome:
        """Record the failure on the job: retried later with backoff, or dead."""
        attempt = job.attempts + 1
        reason = f"{type(exc).__name__}: {exc}"
        if attempt >= self.settings.job_max_attempts:
            retry_at = None
            log.error(
                "condense %s is dead after %d attempts: %s",
                pair_ref(job.user_id, job.character_id),
                attempt,
                reason,
            )
        else:
            retry_after = exc.retry_after if isinstance(exc, LLMUnavailable) else None
            delay = BACKOFF.delay_s(attempt, self.rng, retry_after)
            retry_at = now_ms() + round(delay * 1000)
            level = logging.WARNING if isinstance(exc, LLMError) else logging.ERROR
            log.log(
                level,
                "condense %s failed (attempt %d), retry in %.1fs: %s",
                pair_ref(job.user_id, job.character_id),
                attempt,
                delay,
                reason,
                exc_info=not isinstance(exc, LLMError),
            )
        await self.store.write(lambda tx: tx.jobs.fail(job.id, reason, retry_at_ms=retry_at))
        return "failed" if retry_at is not None else "dead"
