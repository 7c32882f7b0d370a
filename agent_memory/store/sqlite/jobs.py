"""Jobs: the database is the queue, one job per (kind, user, character)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import Job, JobKind, JobStatus
from agent_memory.store.sqlite.common import Repository, now_ms

JOB_COLUMNS = (
    "id, kind, user_id, character_id, status, due_ms, first_due_ms, pending_messages, attempts, "
    "last_error, created_ms, updated_ms"
)


def job_of(row: Sequence[Any]) -> Job:
    """A `JOB_COLUMNS` row as a job."""
    return Job(*row)


class SQLiteJobs(Repository):
    """The `jobs` table. One process claims: a job left running was its own (see release_running)."""

    __slots__ = ()

    def _jobs(self, sql: str, params: Sequence[Any]) -> list[Job]:
        return [job_of(row) for row in self.conn.execute(sql, params)]

    def get(self, kind: JobKind, user_id: str, character_id: str) -> Job | None:
        row = self.conn.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = ? AND user_id = ? AND character_id = ?",
            (kind, user_id, character_id),
        ).fetchone()
        return job_of(row) if row is not None else None

    def by_id(self, job_id: int) -> Job | None:
        row = self.conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return job_of(row) if row is not None else None

    def by_status(self, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Jobs (of one status), soonest due first."""
        if status is None:
            return self._jobs(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY due_ms LIMIT ?", (limit,))
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = ? ORDER BY due_ms LIMIT ?", (status, limit)
        )

    def counts(self) -> dict[tuple[JobKind, JobStatus], int]:
        rows = self.conn.execute("SELECT kind, status, count(*) FROM jobs GROUP BY kind, status")
        return {(kind, status): count for kind, status, count in rows}

    def due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = 'pending' AND kind = ? AND due_ms <= ? "
            "ORDER BY due_ms LIMIT ?",
            (kind, now_ms, limit),
        )

    def schedule(
        self,
        kind: JobKind,
        user_id: str,
        character_id: str,
        *,
        delay_ms: int,
        max_wait_ms: int,
        max_messages: int,
        new_messages: int,
    ) -> None:
        """Debounce a job: due `delay_ms` from now, but never later than `max_wait_ms` after
        it was first scheduled, and due at once once `max_messages` new messages are waiting."""
        stamp = now_ms()
        job = self.get(kind, user_id, character_id)
        if job is None:
            due = stamp if new_messages >= max_messages else stamp + delay_ms
            self.conn.execute(
                "INSERT INTO jobs (kind, user_id, character_id, status, due_ms, first_due_ms, "
                "pending_messages, attempts, created_ms, updated_ms) "
                "VALUES (?, ?, ?, 'pending', ?, ?, ?, 0, ?, ?)",
                (kind, user_id, character_id, due, stamp, new_messages, stamp, stamp),
            )
            return
        pending = job.pending_messages + new_messages
        if job.status != "pending" or job.attempts:
            # Running: finish sees the count change and runs it again. Dead: waits for a
            # human. Retrying: keeps its backoff. In each case only the count grows.
            self.conn.execute(
                "UPDATE jobs SET pending_messages = ?, updated_ms = ? WHERE id = ?",
                (pending, stamp, job.id),
            )
            return
        deadline = (job.first_due_ms or stamp) + max_wait_ms
        due = stamp if pending >= max_messages else min(stamp + delay_ms, max(deadline, stamp))
        self.conn.execute(
            "UPDATE jobs SET due_ms = ?, pending_messages = ?, updated_ms = ? WHERE id = ?",
            (due, pending, stamp, job.id),
        )

    def make_due(self, kind: JobKind, user_id: str, character_id: str) -> None:
        """Make the pair's job due now, creating or reviving it; a running one is left alone."""
        stamp = now_ms()
        self.conn.execute(
            "INSERT INTO jobs (kind, user_id, character_id, status, due_ms, first_due_ms, "
            "pending_messages, attempts, created_ms, updated_ms) "
            "VALUES (?, ?, ?, 'pending', ?, ?, 0, 0, ?, ?) "
            "ON CONFLICT (kind, user_id, character_id) DO UPDATE SET due_ms = excluded.due_ms, "
            "status = CASE status WHEN 'running' THEN 'running' ELSE 'pending' END, "
            "attempts = CASE status WHEN 'dead' THEN 0 ELSE attempts END, "
            "updated_ms = excluded.updated_ms",
            (kind, user_id, character_id, stamp, stamp, stamp, stamp),
        )

    def claim(self, job_id: int) -> Job | None:
        """Mark a pending job running; None if it is not pending any more."""
        cursor = self.conn.execute(
            "UPDATE jobs SET status = 'running', updated_ms = ? WHERE id = ? AND status = 'pending'",
            (now_ms(), job_id),
        )
        return self.by_id(job_id) if cursor.rowcount == 1 else None

    def claim_due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Claim up to `limit` due jobs, soonest first (one process: nobody claims beside it)."""
        return [
            claimed for job in self.due(kind, now_ms, limit) if (claimed := self.claim(job.id)) is not None
        ]

    def renew(self, job_id: int) -> bool:
        """One process holds every claim for as long as it lives: True while the job runs."""
        row = self.conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return row is not None and row[0] == "running"

    def finish(self, claimed: Job, *, again_at_ms: int) -> bool:
        """Delete a finished job, or make it pending at `again_at_ms` if messages came
        while it ran; returns True when it was deleted."""
        job = self.by_id(claimed.id)
        if job is None:
            return True
        arrived = job.pending_messages - claimed.pending_messages
        if arrived > 0:
            stamp = now_ms()
            self.conn.execute(
                "UPDATE jobs SET status = 'pending', attempts = 0, last_error = NULL, due_ms = ?, "
                "first_due_ms = ?, pending_messages = ?, updated_ms = ? WHERE id = ?",
                (again_at_ms, stamp, arrived, stamp, job.id),
            )
            return False
        self.conn.execute("DELETE FROM jobs WHERE id = ?", (job.id,))
        return True

    def fail(self, job_id: int, error: str, *, retry_at_ms: int | None) -> None:
        """Record a failure: pending again at `retry_at_ms`, or dead when that is None."""
        if retry_at_ms is None:
            self.conn.execute(
                "UPDATE jobs SET status = 'dead', attempts = attempts + 1, last_error = ?, "
                "updated_ms = ? WHERE id = ?",
                (error, now_ms(), job_id),
            )
        else:
            self.conn.execute(
                "UPDATE jobs SET status = 'pending', attempts = attempts + 1, last_error = ?, "
                "due_ms = ?, updated_ms = ? WHERE id = ?",
                (error, retry_at_ms, now_ms(), job_id),
            )

    def postpone(self, job_id: int, due_ms: int) -> None:
        """Pending again at `due_ms`, without counting an attempt (its run was superseded)."""
        self.conn.execute(
            "UPDATE jobs SET status = 'pending', due_ms = ?, updated_ms = ? "
            "WHERE id = ? AND status = 'running'",
            (due_ms, now_ms(), job_id),
        )

    def revive(self, job_id: int) -> bool:
        """Make a dead job pending now."""
        stamp = now_ms()
        cursor = self.conn.execute(
            "UPDATE jobs SET status = 'pending', attempts = 0, due_ms = ?, updated_ms = ? "
            "WHERE id = ? AND status = 'dead'",
            (stamp, stamp, job_id),
        )
        return cursor.rowcount == 1

    def release_running(self) -> int:
        """At start nothing runs: a job left 'running' by a crash is pending again."""
        return self.conn.execute("UPDATE jobs SET status = 'pending' WHERE status = 'running'").rowcount
