"""Jobs on PostgreSQL: the shared queue, one job per (kind, user, character), claimed with leases.

A claim writes the claiming instance and how long its claim holds (`lease_owner`,
`lease_until_ms`); the holder renews it while the job runs. A job left `running` under a
lease that ran out (its instance died) is claimable again by any instance. Times are the
instances' clocks, as every due time is, so the instances' clocks must agree (NTP) to
well within the lease.
"""

from __future__ import annotations

from typing import Any

from agent_memory.core.domain import Job, JobKind, JobStatus
from agent_memory.store.postgres.common import Repository, now_ms

JOB_COLUMNS = (
    "id, kind, user_id, character_id, status, due_ms, first_due_ms, pending_messages, attempts, "
    "last_error, created_ms, updated_ms"
)
# Whether a row may be claimed at %(now)s: pending, or running under a lease that ran out.
CLAIMABLE = "(status = 'pending' OR (status = 'running' AND coalesce(lease_until_ms, 0) < %(now)s))"


def job_of(row: dict[str, Any]) -> Job:
    """A `JOB_COLUMNS` row as a job."""
    return Job(**row)


class PostgresJobs(Repository):
    """The `jobs` table, shared by every instance."""

    __slots__ = ()

    def _jobs(self, sql: str, params: Any) -> list[Job]:
        return [job_of(row) for row in self.conn.execute(sql.encode(), params)]

    def get(self, kind: JobKind, user_id: str, character_id: str) -> Job | None:
        row = self._one(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = %s AND user_id = %s AND character_id = %s",
            (kind, user_id, character_id),
        )
        return job_of(row) if row is not None else None

    def by_id(self, job_id: int) -> Job | None:
        row = self._one(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = %s", (job_id,))
        return job_of(row) if row is not None else None

    def by_status(self, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Jobs (of one status), soonest due first."""
        if status is None:
            return self._jobs(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY due_ms, id LIMIT %s", (limit,))
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = %s ORDER BY due_ms, id LIMIT %s", (status, limit)
        )

    def counts(self) -> dict[tuple[JobKind, JobStatus], int]:
        rows = self.conn.execute(b"SELECT kind, status, count(*) AS n FROM jobs GROUP BY kind, status")
        return {(row["kind"], row["status"]): row["n"] for row in rows}

    def due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Claimable jobs due by `now_ms`: pending, or running under a lease that ran out."""
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = %(kind)s AND due_ms <= %(now)s AND {CLAIMABLE} "
            "ORDER BY due_ms, id LIMIT %(limit)s",
            {"kind": kind, "now": now_ms, "limit": limit},
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
        """Debounce a job (see the protocol), in one statement: instances scheduling the same
        pair at once each add their messages to the one row."""
        # Running: finish sees the count change and runs it again. Dead: waits for a human.
        # Retrying (attempts > 0): keeps its backoff. In each case only the count grows.
        self._execute(
            b"INSERT INTO jobs AS j (kind, user_id, character_id, status, due_ms, first_due_ms, "
            b"pending_messages, attempts, created_ms, updated_ms) "
            b"VALUES (%(kind)s, %(user)s, %(character)s, 'pending', "
            b"CASE WHEN %(new)s >= %(max)s THEN %(now)s ELSE %(now)s + %(delay)s END, "
            b"%(now)s, %(new)s, 0, %(now)s, %(now)s) "
            b"ON CONFLICT (kind, user_id, character_id) DO UPDATE SET "
            b"pending_messages = j.pending_messages + excluded.pending_messages, "
            b"updated_ms = excluded.updated_ms, "
            b"due_ms = CASE WHEN j.status <> 'pending' OR j.attempts > 0 THEN j.due_ms "
            b"WHEN j.pending_messages + excluded.pending_messages >= %(max)s THEN %(now)s "
            b"ELSE least(%(now)s + %(delay)s, greatest(coalesce(j.first_due_ms, %(now)s) + %(wait)s, %(now)s)) "
            b"END",
            {
                "kind": kind, "user": user_id, "character": character_id, "new": new_messages,
                "max": max_messages, "now": now_ms(), "delay": delay_ms, "wait": max_wait_ms,
            },
        )  # fmt: skip

    def make_due(self, kind: JobKind, user_id: str, character_id: str) -> None:
        """Make the pair's job due now, creating or reviving it; a running one is left alone."""
        stamp = now_ms()
        self._execute(
            b"INSERT INTO jobs AS j (kind, user_id, character_id, status, due_ms, first_due_ms, "
            b"pending_messages, attempts, created_ms, updated_ms) "
            b"VALUES (%s, %s, %s, 'pending', %s, %s, 0, 0, %s, %s) "
            b"ON CONFLICT (kind, user_id, character_id) DO UPDATE SET due_ms = excluded.due_ms, "
            b"status = CASE j.status WHEN 'running' THEN 'running' ELSE 'pending' END, "
            b"attempts = CASE j.status WHEN 'dead' THEN 0 ELSE j.attempts END, "
            b"updated_ms = excluded.updated_ms",
            (kind, user_id, character_id, stamp, stamp, stamp, stamp),
        )

    def _lease(self, stamp: int) -> dict[str, Any]:
        return {"owner": self.instance.name, "until": stamp + self.instance.lease_ms, "now": stamp}

    def claim(self, job_id: int) -> Job | None:
        """Mark a claimable job running under this instance's lease; None if it is not claimable."""
        claimed = self._jobs(
            "UPDATE jobs SET status = 'running', lease_owner = %(owner)s, lease_until_ms = %(until)s, "
            f"updated_ms = %(now)s WHERE id = %(id)s AND {CLAIMABLE} RETURNING {JOB_COLUMNS}",
            {**self._lease(now_ms()), "id": job_id},
        )
        return claimed[0] if claimed else None

    def claim_due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Claim up to `limit` due jobs, soonest first; rows another instance is claiming are skipped."""
        claimed = self._jobs(
            "UPDATE jobs SET status = 'running', lease_owner = %(owner)s, lease_until_ms = %(until)s, "
            "updated_ms = %(now)s WHERE id IN ("
            f"SELECT id FROM jobs WHERE kind = %(kind)s AND due_ms <= %(due)s AND {CLAIMABLE} "
            "ORDER BY due_ms, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
            f"RETURNING {JOB_COLUMNS}",
            {**self._lease(now_ms), "kind": kind, "due": now_ms, "limit": limit},
        )
        return sorted(claimed, key=lambda job: (job.due_ms, job.id))

    def renew(self, job_id: int) -> bool:
        """Extend this instance's lease on a running job; False if another holds it or it ended."""
        lease = self._lease(now_ms())
        cursor = self._execute(
            b"UPDATE jobs SET lease_until_ms = %(until)s "
            b"WHERE id = %(id)s AND status = 'running' AND lease_owner = %(owner)s",
            {**lease, "id": job_id},
        )
        return cursor.rowcount == 1

    def finish(self, claimed: Job, *, again_at_ms: int) -> bool:
        """Delete a finished job, or make it pending at `again_at_ms` if messages came
        while it ran; returns True when it was deleted."""
        # Locked, so a schedule adding to the count waits and is not overwritten.
        row = self._one("SELECT pending_messages FROM jobs WHERE id = %s FOR UPDATE", (claimed.id,))
        if row is None:
            return True
        arrived = row["pending_messages"] - claimed.pending_messages
        if arrived > 0:
            stamp = now_ms()
            self._execute(
                b"UPDATE jobs SET status = 'pending', attempts = 0, last_error = NULL, due_ms = %s, "
                b"first_due_ms = %s, pending_messages = %s, updated_ms = %s, lease_owner = NULL, "
                b"lease_until_ms = NULL WHERE id = %s",
                (again_at_ms, stamp, arrived, stamp, claimed.id),
            )
            return False
        self._execute(b"DELETE FROM jobs WHERE id = %s", (claimed.id,))
        return True

    def fail(self, job_id: int, error: str, *, retry_at_ms: int | None) -> None:
        """Record a failure: pending again at `retry_at_ms`, or dead when that is None."""
        if retry_at_ms is None:
            self._execute(
                b"UPDATE jobs SET status = 'dead', attempts = attempts + 1, last_error = %s, "
                b"updated_ms = %s, lease_owner = NULL, lease_until_ms = NULL WHERE id = %s",
                (error, now_ms(), job_id),
            )
        else:
            self._execute(
                b"UPDATE jobs SET status = 'pending', attempts = attempts + 1, last_error = %s, "
                b"due_ms = %s, updated_ms = %s, lease_owner = NULL, lease_until_ms = NULL WHERE id = %s",
                (error, retry_at_ms, now_ms(), job_id),
            )

    def postpone(self, job_id: int, due_ms: int) -> None:
        """Pending again at `due_ms`, without counting an attempt (its run was superseded)."""
        self._execute(
            b"UPDATE jobs SET status = 'pending', due_ms = %s, updated_ms = %s, lease_owner = NULL, "
            b"lease_until_ms = NULL WHERE id = %s AND status = 'running'",
            (due_ms, now_ms(), job_id),
        )

    def revive(self, job_id: int) -> bool:
        """Make a dead job pending now."""
        stamp = now_ms()
        cursor = self._execute(
            b"UPDATE jobs SET status = 'pending', attempts = 0, due_ms = %s, updated_ms = %s "
            b"WHERE id = %s AND status = 'dead'",
            (stamp, stamp, job_id),
        )
        return cursor.rowcount == 1

    def release_running(self) -> int:
        """Make pending again the jobs whose holder let its lease run out (an instance that died);
        the claims of live instances stand."""
        cursor = self._execute(
            b"UPDATE jobs SET status = 'pending', lease_owner = NULL, lease_until_ms = NULL "
            b"WHERE status = 'running' AND coalesce(lease_until_ms, 0) < %s",
            (now_ms(),),
        )
        return cursor.rowcount
