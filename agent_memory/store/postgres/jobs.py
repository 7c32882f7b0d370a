"""How PostgreSQL's instances claim jobs: with leases (the rest is store/shared/jobs.py).

A claim writes the claiming instance and how long its claim holds (`lease_owner`,
`lease_until_ms`); the holder renews it while the job runs. A job left `running` under a
lease that ran out (its instance died) is claimable again by any instance. Times are the
instances' clocks, as every due time is, so the instances' clocks must agree (NTP) to
well within the lease.
"""

from __future__ import annotations

from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Job, JobKind
from agent_memory.store.postgres.common import PostgresSql
from agent_memory.store.shared.jobs import JOB_COLUMNS, Jobs

# Whether a row may be claimed at ?: pending, or running under a lease that ran out.
CLAIMABLE = "(status = 'pending' OR (status = 'running' AND coalesce(lease_until_ms, 0) < ?))"
_CLAIM = "UPDATE jobs SET status = 'running', lease_owner = ?, lease_until_ms = ?, updated_ms = ? WHERE "


class PostgresJobs(Jobs):
    """The `jobs` table, shared by every instance."""

    __slots__ = ()
    sql: PostgresSql
    _free = ", lease_owner = NULL, lease_until_ms = NULL"

    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        return CLAIMABLE, [now_ms]

    def _lease(self, stamp: int) -> tuple[str, int, int]:
        """(owner, until, now) of a claim made at `stamp`."""
        return self.sql.instance.name, stamp + self.sql.instance.lease_ms, stamp

    def claim(self, job_id: int) -> Job | None:
        """Mark a claimable job running under this instance's lease; None if it is not claimable."""
        stamp = now_ms()
        return self.sql.record(
            Job,
            f"{_CLAIM}id = ? AND {CLAIMABLE} RETURNING {JOB_COLUMNS}",
            (*self._lease(stamp), job_id, stamp),
        )

    def claim_due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Claim up to `limit` due jobs, soonest first; rows another instance is claiming are skipped."""
        claimed = self.sql.records(
            Job,
            f"{_CLAIM}id IN (SELECT id FROM jobs WHERE kind = ? AND due_ms <= ? AND {CLAIMABLE} "
            f"ORDER BY due_ms, id LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING {JOB_COLUMNS}",
            (*self._lease(now_ms), kind, now_ms, now_ms, limit),
        )
        return sorted(claimed, key=lambda job: (job.due_ms, job.id))

    def renew(self, job_id: int) -> bool:
        """Extend this instance's lease on a running job; False if another holds it or it ended."""
        owner, until, _ = self._lease(now_ms())
        return (
            self.sql.run(
                "UPDATE jobs SET lease_until_ms = ? WHERE id = ? AND status = 'running' AND lease_owner = ?",
                (until, job_id, owner),
            )
            == 1
        )

    def release_running(self) -> int:
        """Make pending again the jobs whose holder let its lease run out (an instance that died);
        the claims of live instances stand."""
        return self.sql.run(
            "UPDATE jobs SET status = 'pending', lease_owner = NULL, lease_until_ms = NULL "
            "WHERE status = 'running' AND coalesce(lease_until_ms, 0) < ?",
            (now_ms(),),
        )
