"""What PostgreSQL does its own way (the rest of each repository is store/shared/).

Instances split the work by leases: a job or a followed agent is claimed `FOR UPDATE SKIP LOCKED`
and held for the lease time unless renewed, so what a dead instance held is taken over once its
lease runs out; a named lease picks the one instance doing cluster-wide work (retention). Lease
times are the instances' clocks, which must agree (NTP) to well within the lease.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Watch
from agent_memory.core.stats import PERCENTILES
from agent_memory.store.postgres.common import PostgresSql
from agent_memory.store.shared.analytics import Analytics
from agent_memory.store.shared.jobs import Jobs
from agent_memory.store.shared.sessions import MOVED_COLUMNS, Sessions
from agent_memory.store.shared.sql import Repository
from agent_memory.store.shared.vectors import Vectors
from agent_memory.store.shared.watches import WATCH_COLUMNS, Watches

# Whether a job may be claimed at ?: pending, or running under a lease that ran out.
CLAIMABLE = "(status = 'pending' OR (status = 'running' AND coalesce(lease_until_ms, 0) < ?))"
# Whether this instance (the first ?) may take a followed agent at the second.
MINE_TO_TAKE = "(lease_owner IS NULL OR lease_owner = ? OR lease_until_ms < ?)"
# A move in one statement: the originals are deleted (their recall rows and vectors go with
# them) and inserted again under the new pair, with new ids above every other, in order.
_MOVE = (
    f"WITH gone AS (DELETE FROM messages WHERE agent_id = ? RETURNING id, {MOVED_COLUMNS}) "
    f"INSERT INTO messages (user_id, character_id, {MOVED_COLUMNS}) "
    f"SELECT ?, ?, {MOVED_COLUMNS} FROM gone ORDER BY id"
)


def lease(sql: PostgresSql, until_ms: int) -> dict[str, Any]:
    """This instance's claim, from `until_ms` on for the lease time."""
    return {"lease_owner": sql.instance.name, "lease_until_ms": until_ms + sql.instance.lease_ms}


class PostgresJobs(Jobs):
    """The `jobs` table, shared by every instance."""

    sql: PostgresSql
    _free = ", lease_owner = NULL, lease_until_ms = NULL"
    _skip_claimed = " FOR UPDATE SKIP LOCKED"

    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        return CLAIMABLE, [now_ms]

    def _lease(self, stamp: int) -> dict[str, Any]:
        return lease(self.sql, stamp)

    def renew(self, job_id: int) -> bool:
        """Extend this instance's lease on a running job; False if another holds it or it ended."""
        claim = lease(self.sql, now_ms())
        sql = "UPDATE jobs SET lease_until_ms = ? WHERE id = ? AND status = 'running' AND lease_owner = ?"
        return self.sql.run(sql, (claim["lease_until_ms"], job_id, claim["lease_owner"])) == 1

    def release_running(self) -> int:
        """Make pending again the jobs whose holder's lease ran out (a dead instance's); live ones' stand."""
        return self.sql.run(
            f"UPDATE jobs SET status = 'pending'{self._free} "
            "WHERE status = 'running' AND coalesce(lease_until_ms, 0) < ?",
            (now_ms(),),
        )


class PostgresWatches(Watches):
    """The `watched_agents` table, shared by every instance: each poll extends its poller's lease."""

    sql: PostgresSql

    def _mine(self, now_ms: int) -> tuple[str, list[Any]]:
        return f" AND {MINE_TO_TAKE}", [self.sql.instance.name, now_ms]

    def _lease(self, until_ms: int) -> dict[str, Any]:
        return lease(self.sql, until_ms)

    def _claim(self, column: str, now_ms: int, limit: int) -> list[Watch]:
        # A lease this instance already holds past the claim's is kept.
        me = self.sql.instance.name
        claimed = self.sql.records(
            Watch,
            "UPDATE watched_agents SET lease_owner = ?, lease_until_ms = greatest(?, "
            "CASE WHEN lease_owner = ? THEN lease_until_ms END) WHERE agent_id IN ("
            f"SELECT agent_id FROM watched_agents WHERE status = 'watching' AND {column} <= ? "
            f"AND {MINE_TO_TAKE} ORDER BY {column}, agent_id LIMIT ? FOR UPDATE SKIP LOCKED) "
            f"RETURNING {WATCH_COLUMNS}",
            (me, now_ms + self.sql.instance.lease_ms, me, now_ms, me, now_ms, limit),
        )
        return sorted(claimed, key=lambda watch: (getattr(watch, column) or 0, watch.agent_id))

    def claim_polls(self, now_ms: int, limit: int) -> list[Watch]:
        return self._claim("next_poll_ms", now_ms, limit)

    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        return self._claim("push_due_ms", now_ms, limit)

    def release_held(self) -> int:
        """Give up this instance's agents (it is stopping): anyone may take them at once."""
        return self.sql.run(
            "UPDATE watched_agents SET lease_owner = NULL, lease_until_ms = NULL WHERE lease_owner = ?",
            (self.sql.instance.name,),
        )


class PostgresLeases(Repository):
    """The `leases` table: a name, the instance holding it, and until when."""

    sql: PostgresSql

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Take `name` for `ttl_ms` if it is free or ran out, or extend it if this instance holds it."""
        stamp = now_ms()
        # One statement: of instances acquiring at once, the row lock lets exactly one in.
        row = self.sql.one(
            "INSERT INTO leases AS l (name, owner, until_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms "
            "WHERE l.owner = excluded.owner OR l.until_ms < ? RETURNING owner",
            (name, self.sql.instance.name, stamp + ttl_ms, stamp),
        )
        return row is not None


class PostgresAnalytics(Analytics):
    """Statistics, a metric's percentiles all in its one query: nearest rank, which is what
    `percentile_disc` computes (the value at rank ceil(p * n))."""

    ranks_column = ", percentile_disc(?::float8[]) WITHIN GROUP (ORDER BY a.value_ms) AS ranks"
    ranks_params = ([fraction for _, fraction in PERCENTILES],)

    def _ranks(self, row: Mapping[str, Any], source: str, where: str, params: list[Any]) -> dict[str, Any]:
        return dict(zip((label for label, _ in PERCENTILES), row["ranks"], strict=True))


class PostgresSessions(Sessions):
    """The `sessions` table."""

    def _move_messages(self, agent_id: str, user_id: str, character_id: str) -> int:
        return self.sql.run(_MOVE, (agent_id, user_id, character_id))


class PostgresVectors(Vectors):
    """The `message_vectors` table (rows leave with their messages: foreign key and trigger, m004)."""

    def _store(self, model: str, dims: int, vectors: Sequence[tuple[int, bytes]]) -> int:
        # The last vector given for a message is the one kept (one statement cannot touch a row twice).
        latest = dict(vectors)
        return self.sql.run(
            "INSERT INTO message_vectors (message_id, user_id, character_id, model, dims, vector) "
            "SELECT m.id, m.user_id, m.character_id, ?, ?, v.vector "
            "FROM unnest(?::bigint[], ?::bytea[]) AS v(message_id, vector) JOIN messages m ON m.id = v.message_id "
            "ORDER BY m.id ON CONFLICT (message_id) DO UPDATE SET id = DEFAULT, user_id = excluded.user_id, "
            "character_id = excluded.character_id, model = excluded.model, dims = excluded.dims, vector = excluded.vector",
            (model, dims, list(latest), list(latest.values())),
        )
