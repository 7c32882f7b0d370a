"""How one SQLite process claims jobs: alone, so a claim needs no lease (the rest is store/shared/jobs.py)."""

from __future__ import annotations

from typing import Any

from agent_memory.store.shared.jobs import Jobs


class SQLiteJobs(Jobs):
    """The `jobs` table. One process claims: a job left running was its own (see release_running)."""

    __slots__ = ()

    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        return "status = 'pending'", []

    def renew(self, job_id: int) -> bool:
        """One process holds every claim for as long as it lives: True while the job runs."""
        row = self.sql.one("SELECT status FROM jobs WHERE id = ?", (job_id,))
        return row is not None and row["status"] == "running"

    def release_running(self) -> int:
        """At start nothing runs: a job left 'running' by a crash is pending again."""
        return self.sql.run("UPDATE jobs SET status = 'pending' WHERE status = 'running'")
