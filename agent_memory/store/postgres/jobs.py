"""How PostgreSQL's instances claim jobs: with leases (the rule and the rest are store/shared/jobs.py).

Lease times are the instances' clocks, as every due time is, so the instances' clocks must
agree (NTP) to well within the lease.
"""

from __future__ import annotations

from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.store.postgres.common import PostgresSql
from agent_memory.store.shared.jobs import Jobs

# Whether a row may be claimed at ?: pending, or running under a lease that ran out.
CLAIMABLE = "(status = 'pending' OR (status = 'running' AND coalesce(lease_until_ms, 0) < ?))"


class PostgresJobs(Jobs):
    """The `jobs` table, shared by every instance."""

    __slots__ = ()
    sql: PostgresSql
    _free = ", lease_owner = NULL, lease_until_ms = NULL"
    _skip_claimed = " FOR UPDATE SKIP LOCKED"

    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        return CLAIMABLE, [now_ms]

    def _lease(self, stamp: int) -> dict[str, Any]:
        return {"lease_owner": self.sql.instance.name, "lease_until_ms": stamp + self.sql.instance.lease_ms}

    def renew(self, job_id: int) -> bool:
        """Extend this instance's lease on a running job; False if another holds it or it ended."""
        lease = self._lease(now_ms())
        return (
            self.sql.run(
                "UPDATE jobs SET lease_until_ms = ? WHERE id = ? AND status = 'running' AND lease_owner = ?",
                (lease["lease_until_ms"], job_id, lease["lease_owner"]),
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
