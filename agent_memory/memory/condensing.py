"""Condense jobs: listed, retried, made due now; and a pair condensed now by the job runner."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_memory.core.domain import CONDENSE, Job, JobStatus, Summary
from agent_memory.errors import JobHeld, NotFound
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.store import Store, Transaction

JOB_STATUSES: tuple[JobStatus, ...] = ("pending", "running", "dead")
# How often `condense` looks again at a job another process holds.
HELD_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class Condensed:
    """A pair's summary and condense job after condensing it now."""

    summary: Summary | None
    job: Job | None


class JobQueue:
    """The condense jobs as the API and the CLI see them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def list_jobs(self, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Condense jobs, optionally of one status."""
        return await self.store.read(lambda view: view.jobs.by_status(status, limit))

    async def retry_job(self, job_id: int) -> Job:
        """Make a dead job pending now, or NotFound."""
        if not await self.store.write(lambda tx: tx.jobs.revive(job_id)):
            raise NotFound(f"no dead job with id {job_id}")
        job = await self.store.read(lambda view: view.jobs.by_id(job_id))
        if job is None:
            raise NotFound(f"job {job_id} was deleted meanwhile")
        return job

    async def condense_now(self, user_id: str, character_id: str) -> Job | None:
        """Make the pair's condense job due now (creating it); returns the job."""

        def due(tx: Transaction) -> Job | None:
            tx.jobs.make_due(CONDENSE, user_id, character_id)
            return tx.jobs.get(CONDENSE, user_id, character_id)

        return await self.store.write(due)


class Condensing:
    """A pair condensed now, here, by a job runner of this process (the CLI's `condense`)."""

    def __init__(self, store: Store, jobs: CondenseJobs) -> None:
        self.store = store
        self.jobs = jobs
        self.queue = JobQueue(store)

    async def condense(
        self,
        user_id: str,
        character_id: str,
        *,
        wait_s: float = 0.0,
        waiting: Callable[[Job, float], None] | None = None,
    ) -> Condensed:
        """Condense the pair now with this process's job runner, and wait for it.

        A job another process holds (the running service condensing the pair) is waited for
        up to `wait_s` (`waiting` is told how long so far), then condensed here too: JobHeld
        when it is still held by then."""
        started = time.monotonic()
        while (job := await self.queue.condense_now(user_id, character_id)) is not None:
            if await self.jobs.run(job.id):
                break
            waited = time.monotonic() - started
            if waited >= wait_s:
                raise JobHeld(
                    f"{user_id}/{character_id} is being condensed by the running service (job {job.id} "
                    f"is {job.status}); waited {waited:.0f}s for it",
                    job_id=job.id,
                )
            if waiting is not None:
                waiting(job, waited)
            await asyncio.sleep(min(HELD_POLL_S, max(0.0, wait_s - waited)))
        return Condensed(
            *await self.store.read(
                lambda view: (
                    view.summaries.get(user_id, character_id),
                    view.jobs.get(CONDENSE, user_id, character_id),
                )
            )
        )
