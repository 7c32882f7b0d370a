"""How PostgreSQL's instances split followed agents: by leases (`lease_owner`, `lease_until_ms`;
the rule and the rest are store/shared/watches.py)."""

from __future__ import annotations

from typing import Any

from agent_memory.core.domain import Watch
from agent_memory.store.postgres.common import PostgresSql
from agent_memory.store.shared.watches import WATCH_COLUMNS, Watches

# Whether this instance (the first ?) may take a followed agent at the second.
MINE_TO_TAKE = "(lease_owner IS NULL OR lease_owner = ? OR lease_until_ms < ?)"


class PostgresWatches(Watches):
    """The `watched_agents` table, shared by every instance."""

    __slots__ = ()
    sql: PostgresSql

    def _mine(self, now_ms: int) -> tuple[str, list[Any]]:
        return f" AND {MINE_TO_TAKE}", [self.sql.instance.name, now_ms]

    def _lease(self, until_ms: int) -> dict[str, Any]:
        return {
            "lease_owner": self.sql.instance.name,
            "lease_until_ms": until_ms + self.sql.instance.lease_ms,
        }

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
        """Take the agents due a poll for this instance; others skip them while it polls."""
        return self._claim("next_poll_ms", now_ms, limit)

    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """Take the agents due a refresh for this instance."""
        return self._claim("push_due_ms", now_ms, limit)

    def release_held(self) -> int:
        """Give up this instance's agents (it is stopping): anyone may take them at once."""
        return self.sql.run(
            "UPDATE watched_agents SET lease_owner = NULL, lease_until_ms = NULL WHERE lease_owner = ?",
            (self.sql.instance.name,),
        )
