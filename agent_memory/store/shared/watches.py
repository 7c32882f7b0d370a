"""Watches: running agents the service follows (polling their transcript, refreshing memory).

Who polls a followed agent is the backend's: one SQLite process polls them all, PostgreSQL's
instances split them by leases (each poll extends its lease; a lapsed one is taken over)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Watch, WatchOrigin, WatchResult
from agent_memory.core.jsonutil import dumps
from agent_memory.store.shared.sql import Repository

# In `Watch`'s order.
WATCH_COLUMNS = (
    "agent_id, origin, status, next_poll_ms, stop_reason, last_poll_ms, polls, failures, "
    "last_error, base_system_messages, persona, max_tokens, style, push_due_ms, last_push_ms, "
    "last_pushed, created_ms, updated_ms, max_history"
)
QUALIFIED = ", ".join(f"w.{column}" for column in WATCH_COLUMNS.split(", "))


class Watches(Repository):
    """The `watched_agents` table; who polls a followed agent is the backend's."""

    def get(self, agent_id: str) -> Watch | None:
        return self.sql.record(
            Watch, f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = ?", (agent_id,)
        )

    def due_polls(self, now_ms: int, limit: int) -> list[Watch]:
        """Followed agents whose poll is due, of those this instance may take, soonest first."""
        return self._due("next_poll_ms", now_ms, limit)

    def due_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """Followed agents whose refresh is due, of those this instance may take."""
        return self._due("push_due_ms", now_ms, limit)

    def _due(self, column: str, now_ms: int, limit: int) -> list[Watch]:
        mine, params = self._mine(now_ms)
        return self.sql.records(
            Watch,
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE status = 'watching' AND {column} <= ?{mine} "
            f"ORDER BY {column}, agent_id{self.sql.binary} LIMIT ?",
            (now_ms, *params, limit),
        )

    def running_for(self, user_id: str, character_id: str) -> list[Watch]:
        """Followed agents still running for a pair."""
        return self.sql.records(
            Watch,
            f"SELECT {QUALIFIED} FROM watched_agents w JOIN sessions s ON s.agent_id = w.agent_id "
            f"WHERE w.status = 'watching' AND s.user_id = ? AND s.character_id = ? ORDER BY w.agent_id{self.sql.binary}",
            (user_id, character_id),
        )

    def _mine(self, now_ms: int) -> tuple[str, list[Any]]:
        """` AND` which agents this instance may take at `now_ms` (one process: all), and its parameters."""
        return "", []

    def _lease(self, until_ms: int) -> dict[str, Any]:
        """The columns that make this instance hold an agent until `until_ms` (one process: none)."""
        return {}

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
        """Follow a running agent (held by this instance); a request (not a platform event) also
        updates or resumes an existing watch."""
        session = self.sql.one("SELECT status FROM sessions WHERE agent_id = ?", (agent_id,))
        if session is not None and session["status"] != "running":
            return "stopped"
        stamp = now_ms()
        base = dumps(base_system_messages) if base_system_messages is not None else None
        lease = self._lease(first_poll_ms)
        settings = {"persona": persona, "max_tokens": max_tokens, "style": style, "max_history": max_history}
        values = {"agent_id": agent_id, "origin": origin, "status": "watching", "next_poll_ms": first_poll_ms}
        values |= {"base_system_messages": base, **settings, "created_ms": stamp, "updated_ms": stamp}
        # Two instances told of one agent at once: one inserts, the other finds its row.
        if self.sql.insert_new("watched_agents", "agent_id", values | lease):
            return "created"
        if origin == "callback":
            return "unchanged"
        existing = self.sql.record(
            Watch,
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = ?{self.sql.for_update}",
            (agent_id,),
        )
        if existing is None:  # deleted since (a forget): nothing to update
            return "unchanged"
        changes: dict[str, Any] = {}
        held = {name: getattr(existing, name) for name in settings}
        if base is not None and (base, settings) != (existing.base_system_messages_json, held):
            changes.update(base_system_messages=base, **settings)
        if existing.status != "watching":
            changes.update(
                status="watching", stop_reason=None, next_poll_ms=first_poll_ms, failures=0, **lease
            )
        if not changes:
            return "unchanged"
        changes.update(origin=origin, updated_ms=stamp)
        self.sql.set("watched_agents", "agent_id", agent_id, changes)
        return "updated"

    def unfollow(self, agent_id: str, reason: str) -> Watch | None:
        """Stop following an agent, in one statement: the watch, stopped (None: it was not followed)."""
        return self.sql.record(
            Watch,
            "UPDATE watched_agents SET status = 'stopped', stop_reason = ?, push_due_ms = NULL, "
            f"updated_ms = ? WHERE agent_id = ? AND status = 'watching' RETURNING {WATCH_COLUMNS}",
            (reason, now_ms(), agent_id),
        )

    def polled(self, agent_id: str, *, next_poll_ms: int, error: str | None) -> None:
        """Record a poll: failures count up until one succeeds; the poller holds the agent on."""
        stamp = now_ms()
        changes = {"next_poll_ms": next_poll_ms, "updated_ms": stamp, **self._lease(next_poll_ms)}
        last: int | str
        if error is None:
            counts, last = "last_poll_ms = ?, polls = polls + 1, failures = 0, last_error = NULL", stamp
        else:
            counts, last = "failures = failures + 1, last_error = ?", error
        assignments = "".join(f"{column} = ?, " for column in changes)
        self.sql.run(
            f"UPDATE watched_agents SET {assignments}{counts} WHERE agent_id = ?",
            (*changes.values(), last, agent_id),
        )

    def request_push(self, agent_id: str, due_ms: int) -> None:
        """Ask for a refresh no earlier than `due_ms` (an earlier request stands)."""
        self.sql.run(
            f"UPDATE watched_agents SET push_due_ms = {self.sql.least}(coalesce(push_due_ms, ?), ?) "
            "WHERE agent_id = ? AND status = 'watching' AND base_system_messages IS NOT NULL",
            (due_ms, due_ms, agent_id),
        )

    def pushed(self, agent_id: str, system_messages: list[dict[str, Any]] | None) -> None:
        """A refresh was sent (None: it was skipped, only the request is cleared)."""
        if system_messages is None:
            self.sql.run("UPDATE watched_agents SET push_due_ms = NULL WHERE agent_id = ?", (agent_id,))
            return
        stamp = now_ms()
        self.sql.run(
            "UPDATE watched_agents SET push_due_ms = NULL, last_push_ms = ?, last_pushed = ?, updated_ms = ? "
            "WHERE agent_id = ?",
            (stamp, dumps(system_messages), stamp, agent_id),
        )

    @abstractmethod
    def claim_polls(self, now_ms: int, limit: int) -> list[Watch]:
        """Take the `due_polls` for this instance: no other instance polls them meanwhile."""

    @abstractmethod
    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """Take the `due_pushes` for this instance."""

    @abstractmethod
    def release_held(self) -> int:
        """Give up the agents this instance holds (it is stopping) for another to take; how many."""
