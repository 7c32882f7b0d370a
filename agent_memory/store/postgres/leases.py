"""Named leases on PostgreSQL: cluster-wide work (retention) runs on the one instance holding its lease."""

from __future__ import annotations

from agent_memory.core.clock import now_ms
from agent_memory.store.postgres.common import Repository


class PostgresLeases(Repository):
    """The `leases` table: a name, the instance holding it, and until when."""

    __slots__ = ()

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Take `name` for `ttl_ms` if it is free or ran out, or extend it if this instance holds it."""
        stamp = now_ms()
        # One statement: of instances acquiring at once, the row lock lets exactly one in.
        row = self.sql.one(
            "INSERT INTO leases AS l (name, owner, until_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms "
            "WHERE l.owner = excluded.owner OR l.until_ms < ? RETURNING owner",
            (name, self.instance.name, stamp + ttl_ms, stamp),
        )
        return row is not None
