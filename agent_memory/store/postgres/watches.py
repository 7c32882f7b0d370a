"""Watches on PostgreSQL: running agents the service follows, split between instances by leases.

A followed agent is held by one instance (`lease_owner`) until `lease_until_ms`: first the
instance that started following it, then whichever polls it. Its holder polls it, and
each poll extends the lease past the next poll, so an agent stays with a live instance;
when that instance dies, the lease runs out a lease after the agent's next poll was due
and the next instance to claim it takes it over.
"""

from __future__ import annotations

from typing import Any

from agent_memory.core.domain import Watch, WatchOrigin, WatchResult
from agent_memory.store.postgres.common import Repository, dumps, now_ms

# In `Watch`'s order.
WATCH_COLUMNS = (
    "agent_id, origin, status, next_poll_ms, stop_reason, last_poll_ms, polls, failures, "
    "last_error, base_system_messages, persona, max_tokens, style, push_due_ms, last_push_ms, "
    "last_pushed, created_ms, updated_ms, max_history"
)
_QUALIFIED = ", ".join(f"w.{column}" for column in WATCH_COLUMNS.split(", "))
# Whether this instance (%(me)s) may take a followed agent at %(now)s.
MINE_TO_TAKE = "(lease_owner IS NULL OR lease_owner = %(me)s OR lease_until_ms < %(now)s)"


def watch_of(row: dict[str, Any]) -> Watch:
    """A `WATCH_COLUMNS` row as a watch."""
    return Watch(*row.values())


class PostgresWatches(Repository):
    """The `watched_agents` table, shared by every instance."""

    __slots__ = ()

    def _watches(self, sql: str, params: Any) -> list[Watch]:
        return [watch_of(row) for row in self.conn.execute(sql.encode(), params)]

    def get(self, agent_id: str) -> Watch | None:
        row = self._one(f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = %s", (agent_id,))
        return watch_of(row) if row is not None else None

    def _due(self, column: str, now_ms: int, limit: int) -> list[Watch]:
        return self._watches(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE status = 'watching' "
            f"AND {column} <= %(now)s AND {MINE_TO_TAKE} ORDER BY {column}, agent_id LIMIT %(limit)s",
            {"me": self.instance.name, "now": now_ms, "limit": limit},
        )

    def due_polls(self, now_ms: int, limit: int) -> list[Watch]:
        """Agents due a poll that this instance holds, or that nobody live holds."""
        return self._due("next_poll_ms", now_ms, limit)

    def due_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """Agents due a refresh that this instance holds, or that nobody live holds."""
        return self._due("push_due_ms", now_ms, limit)

    def _claim(self, column: str, now_ms: int, limit: int) -> list[Watch]:
        # A lease this instance already holds past the claim's is kept.
        claimed = self._watches(
            "UPDATE watched_agents SET lease_owner = %(me)s, lease_until_ms = greatest(%(until)s, "
            "CASE WHEN lease_owner = %(me)s THEN lease_until_ms END) WHERE agent_id IN ("
            f"SELECT agent_id FROM watched_agents WHERE status = 'watching' AND {column} <= %(now)s "
            f"AND {MINE_TO_TAKE} ORDER BY {column}, agent_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
            f"RETURNING {WATCH_COLUMNS}",
            {
                "me": self.instance.name,
                "now": now_ms,
                "until": now_ms + self.instance.lease_ms,
                "limit": limit,
            },
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
        cursor = self._execute(
            b"UPDATE watched_agents SET lease_owner = NULL, lease_until_ms = NULL WHERE lease_owner = %s",
            (self.instance.name,),
        )
        return cursor.rowcount

    def running_for(self, user_id: str, character_id: str) -> list[Watch]:
        """Followed agents still running for a pair."""
        return self._watches(
            f"SELECT {_QUALIFIED} FROM watched_agents w JOIN sessions s ON s.agent_id = w.agent_id "
            "WHERE w.status = 'watching' AND s.user_id = %s AND s.character_id = %s ORDER BY w.agent_id",
            (user_id, character_id),
        )

    def follow(
        self,
        agent_id: str,
        origin: WatchOrigin,
        *,
        first_poll_ms: int,
        base_system_messages: list[dict[str, Any]] | None = None,
        persona: str | None = None,
        max_tokens: int | None = None,
        style: str | None = None,
        max_history: int | None = None,
    ) -> WatchResult:
        """Follow a running agent (held by this instance); an explicit request (not a platform
        event) also updates or resumes an existing watch."""
        session = self._one("SELECT status FROM sessions WHERE agent_id = %s", (agent_id,))
        if session is not None and session["status"] != "running":
            return "stopped"
        stamp = now_ms()
        base = dumps(base_system_messages) if base_system_messages is not None else None
        lease_until = first_poll_ms + self.instance.lease_ms
        # Two instances told of one agent at once: one inserts, the other finds its row.
        created = self._one(
            "INSERT INTO watched_agents (agent_id, origin, status, next_poll_ms, base_system_messages, "
            "persona, max_tokens, style, created_ms, updated_ms, lease_owner, lease_until_ms, max_history) "
            "VALUES (%s, %s, 'watching', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (agent_id) DO NOTHING RETURNING agent_id",
            (agent_id, origin, first_poll_ms, base, persona, max_tokens, style, stamp, stamp,
             self.instance.name, lease_until, max_history),
        )  # fmt: skip
        if created is not None:
            return "created"
        if origin == "callback":
            return "unchanged"
        row = self._one(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = %s FOR UPDATE", (agent_id,)
        )
        if row is None:  # deleted since (a forget): nothing to update
            return "unchanged"
        existing = watch_of(row)
        changes: dict[str, Any] = {}
        if base is not None and (base, persona, max_tokens, style, max_history) != (
            existing.base_system_messages_json, existing.persona, existing.max_tokens,
            existing.style, existing.max_history,
        ):  # fmt: skip
            changes.update(
                base_system_messages=base,
                persona=persona,
                max_tokens=max_tokens,
                style=style,
                max_history=max_history,
            )
        if existing.status != "watching":
            changes.update(
                status="watching", stop_reason=None, next_poll_ms=first_poll_ms, failures=0,
                lease_owner=self.instance.name, lease_until_ms=lease_until,
            )  # fmt: skip
        if not changes:
            return "unchanged"
        changes.update(origin=origin, updated_ms=stamp)
        self._set("watched_agents", "agent_id", agent_id, changes)
        return "updated"

    def unfollow(self, agent_id: str, reason: str) -> bool:
        cursor = self._execute(
            b"UPDATE watched_agents SET status = 'stopped', stop_reason = %s, push_due_ms = NULL, "
            b"updated_ms = %s WHERE agent_id = %s AND status = 'watching'",
            (reason, now_ms(), agent_id),
        )
        return cursor.rowcount == 1

    def polled(self, agent_id: str, *, next_poll_ms: int, error: str | None) -> None:
        """Record a poll (failures count up until one succeeds); the poller holds the agent
        until a lease after its next poll."""
        stamp = now_ms()
        lease = (self.instance.name, next_poll_ms + self.instance.lease_ms)
        if error is None:
            self._execute(
                b"UPDATE watched_agents SET next_poll_ms = %s, last_poll_ms = %s, polls = polls + 1, "
                b"failures = 0, last_error = NULL, updated_ms = %s, lease_owner = %s, lease_until_ms = %s "
                b"WHERE agent_id = %s",
                (next_poll_ms, stamp, stamp, *lease, agent_id),
            )
        else:
            self._execute(
                b"UPDATE watched_agents SET next_poll_ms = %s, failures = failures + 1, last_error = %s, "
                b"updated_ms = %s, lease_owner = %s, lease_until_ms = %s WHERE agent_id = %s",
                (next_poll_ms, error, stamp, *lease, agent_id),
            )

    def request_push(self, agent_id: str, due_ms: int) -> None:
        """Ask for a refresh push no earlier than `due_ms` (an earlier request stands)."""
        self._execute(
            b"UPDATE watched_agents SET push_due_ms = least(coalesce(push_due_ms, %s), %s) "
            b"WHERE agent_id = %s AND status = 'watching' AND base_system_messages IS NOT NULL",
            (due_ms, due_ms, agent_id),
        )

    def pushed(self, agent_id: str, system_messages: list[dict[str, Any]] | None) -> None:
        """A refresh was sent (None: it was skipped, only the request is cleared)."""
        if system_messages is None:
            self._execute(b"UPDATE watched_agents SET push_due_ms = NULL WHERE agent_id = %s", (agent_id,))
            return
        stamp = now_ms()
        self._execute(
            b"UPDATE watched_agents SET push_due_ms = NULL, last_push_ms = %s, last_pushed = %s, "
            b"updated_ms = %s WHERE agent_id = %s",
            (stamp, dumps(system_messages), stamp, agent_id),
        )
