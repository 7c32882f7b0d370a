"""Jobs: the database is the queue, at most one job per (kind, user, character); a claimed job is `running`.

How a job is claimed is the backend's: one SQLite process claims alone, PostgreSQL's instances
with leases (a job its holder dies with is claimable again once its lease runs out)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Job, JobKind, JobStatus
from agent_memory.store.shared.sql import Repository

JOB_COLUMNS = (
    "id, kind, user_id, character_id, status, due_ms, first_due_ms, pending_messages, attempts, "
    "last_error, created_ms, updated_ms"
)
_INSERT = (
    "INSERT INTO jobs AS j (kind, user_id, character_id, status, due_ms, first_due_ms, pending_messages, "
    "attempts, created_ms, updated_ms) VALUES (?, ?, ?, 'pending', ?, ?, ?, 0, ?, ?) "
    "ON CONFLICT (kind, user_id, character_id) DO UPDATE SET "
)


class Jobs(Repository):
    """The `jobs` table; claims are the backend's."""

    # What a job no longer running gives up besides its status (a backend's lease).
    _free = ""
    # What keeps a claim off the rows another instance is claiming at the same moment.
    _skip_claimed = ""

    def get(self, kind: JobKind, user_id: str, character_id: str) -> Job | None:
        return self.sql.record(
            Job,
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = ? AND user_id = ? AND character_id = ?",
            (kind, user_id, character_id),
        )

    def by_id(self, job_id: int) -> Job | None:
        return self.sql.record(Job, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))

    def by_status(self, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Jobs (of one status), soonest due first."""
        where, params = ("", ()) if status is None else ("WHERE status = ? ", (status,))
        return self.sql.records(
            Job, f"SELECT {JOB_COLUMNS} FROM jobs {where}ORDER BY due_ms, id LIMIT ?", (*params, limit)
        )

    def counts(self) -> dict[tuple[JobKind, JobStatus], int]:
        """How many jobs there are of each kind and status (absent: none)."""
        rows = self.sql.all("SELECT kind, status, count(*) AS n FROM jobs GROUP BY kind, status")
        return {(row["kind"], row["status"]): row["n"] for row in rows}

    def due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Jobs that may be claimed at `now_ms` (pending and due, or their lease ran out), soonest first."""
        claimable, params = self._claimable(now_ms)
        return self.sql.records(
            Job,
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = ? AND due_ms <= ? AND {claimable} ORDER BY due_ms, id LIMIT ?",
            (kind, now_ms, *params, limit),
        )

    @abstractmethod
    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        """Whether a row may be claimed at `now_ms`: the condition and its parameters."""

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
        """Debounce: due `delay_ms` from now, never later than `max_wait_ms` after it was first
        scheduled, at once when `max_messages` wait; one statement, so instances add up."""
        # Running: finish sees the count change and runs it again. Dead: waits for a human.
        # Retrying (attempts > 0): keeps its backoff. In each case only the count grows.
        now = now_ms()
        due = now if new_messages >= max_messages else now + delay_ms
        least, greatest = self.sql.least, self.sql.greatest
        inserted = (kind, user_id, character_id, due, now, new_messages, now, now)
        self.sql.send(
            _INSERT + "pending_messages = j.pending_messages + excluded.pending_messages, "
            "updated_ms = excluded.updated_ms, due_ms = CASE WHEN j.status <> 'pending' OR j.attempts > 0 THEN j.due_ms "
            "WHEN j.pending_messages + excluded.pending_messages >= ? THEN ? "
            f"ELSE {least}(? + ?, {greatest}(coalesce(j.first_due_ms, ?) + ?, ?)) END",
            (*inserted, max_messages, now, now, delay_ms, now, max_wait_ms, now),
        )

    def make_due(self, kind: JobKind, user_id: str, character_id: str) -> None:
        """Due now, created or revived; a running job is left alone."""
        stamp = now_ms()
        self.sql.run(
            _INSERT + "due_ms = excluded.due_ms, "
            "status = CASE j.status WHEN 'running' THEN 'running' ELSE 'pending' END, "
            "attempts = CASE j.status WHEN 'dead' THEN 0 ELSE j.attempts END, updated_ms = excluded.updated_ms",
            (kind, user_id, character_id, stamp, stamp, 0, stamp, stamp),
        )

    def finish(self, claimed: Job, *, again_at_ms: int) -> bool:
        """Delete a finished job (True), or pending at `again_at_ms` if messages came while it ran."""
        # Locked, so a schedule adding to the count waits and is not overwritten.
        row = self.sql.one(
            f"SELECT pending_messages FROM jobs WHERE id = ?{self.sql.for_update}", (claimed.id,)
        )
        if row is None:
            return True
        arrived = row["pending_messages"] - claimed.pending_messages
        if arrived > 0:
            stamp = now_ms()
            self.sql.run(
                "UPDATE jobs SET status = 'pending', attempts = 0, last_error = NULL, due_ms = ?, "
                f"first_due_ms = ?, pending_messages = ?, updated_ms = ?{self._free} WHERE id = ?",
                (again_at_ms, stamp, arrived, stamp, claimed.id),
            )
            return False
        self.sql.run("DELETE FROM jobs WHERE id = ?", (claimed.id,))
        return True

    def fail(self, job_id: int, error: str, *, retry_at_ms: int | None) -> None:
        """Count a failed attempt: pending again at `retry_at_ms`, or dead when that is None."""
        self.sql.run(
            "UPDATE jobs SET status = ?, attempts = attempts + 1, last_error = ?, due_ms = coalesce(?, due_ms), "
            f"updated_ms = ?{self._free} WHERE id = ?",
            ("dead" if retry_at_ms is None else "pending", error, retry_at_ms, now_ms(), job_id),
        )

    def postpone(self, job_id: int, due_ms: int) -> None:
        """Pending again at `due_ms` without counting an attempt (its run was superseded)."""
        self.sql.run(
            f"UPDATE jobs SET status = 'pending', due_ms = ?, updated_ms = ?{self._free} "
            "WHERE id = ? AND status = 'running'",
            (due_ms, now_ms(), job_id),
        )

    def revive(self, job_id: int) -> bool:
        """Make a dead job pending now, its attempts reset."""
        stamp = now_ms()
        revived = self.sql.run(
            "UPDATE jobs SET status = 'pending', attempts = 0, due_ms = ?, updated_ms = ? "
            "WHERE id = ? AND status = 'dead'",
            (stamp, stamp, job_id),
        )
        return revived == 1

    def _lease(self, stamp: int) -> dict[str, Any]:
        """The columns that make a claim made at `stamp` this instance's (one process: none)."""
        return {}

    def claim(self, job_id: int) -> Job | None:
        """Mark a claimable job running (under this instance's lease); None if it is not claimable."""
        claimed = self._claim("id = ?", [job_id], now_ms())
        return claimed[0] if claimed else None

    def claim_due(self, kind: JobKind, now_ms: int, limit: int) -> list[Job]:
        """Claim up to `limit` of the jobs `due` lists, soonest first (none another is claiming)."""
        claimable, params = self._claimable(now_ms)
        due = (
            f"id IN (SELECT id FROM jobs WHERE kind = ? AND due_ms <= ? AND {claimable} "
            f"ORDER BY due_ms, id LIMIT ?{self._skip_claimed})"
        )
        claimed = self._claim(due, [kind, now_ms, *params, limit], now_ms)
        return sorted(claimed, key=lambda job: (job.due_ms, job.id))

    def _claim(self, which: str, params: list[Any], stamp: int) -> list[Job]:
        """Mark running (leased) the claimable jobs `which` names."""
        claimable, more = self._claimable(stamp)
        lease = self._lease(stamp)
        sets = "".join(f"{column} = ?, " for column in lease)
        return self.sql.records(
            Job,
            f"UPDATE jobs SET status = 'running', {sets}updated_ms = ? WHERE {which} AND {claimable} "
            f"RETURNING {JOB_COLUMNS}",
            (*lease.values(), stamp, *params, *more),
        )

    @abstractmethod
    def renew(self, job_id: int) -> bool:
        """Extend this instance's claim of a running job; False if it no longer holds it."""

    @abstractmethod
    def release_running(self) -> int:
        """Make jobs left running by a process that is gone pending again."""
