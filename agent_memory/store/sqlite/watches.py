"""Watches: running agents the service follows (polling their transcript, refreshing memory)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import Watch, WatchOrigin, WatchResult
from agent_memory.store.sqlite.common import Repository, dumps, now_ms

# In `Watch`'s order.
WATCH_COLUMNS = (
    "agent_id, origin, status, next_poll_ms, stop_reason, last_poll_ms, polls, failures, "
    "last_error, base_system_messages, persona, max_tokens, style, push_due_ms, last_push_ms, "
    "last_pushed, created_ms, updated_ms, max_history"
)
_QUALIFIED = ", ".join(f"w.{column}" for column in WATCH_COLUMNS.split(", "))


def watch_of(row: Sequence[Any]) -> Watch:
    """A `WATCH_COLUMNS` row as a watch."""
    return Watch(*row)


class SQLiteWatches(Repository):
    """The `watched_agents` table."""

    __slots__ = ()

    def _watches(self, sql: str, params: Sequence[Any]) -> list[Watch]:
        return [watch_of(row) for row in self.conn.execute(sql, params)]

    def get(self, agent_id: str) -> Watch | None:
        row = self.conn.execute(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        return watch_of(row) if row is not None else None

    def due_polls(self, now_ms: int, limit: int) -> list[Watch]:
        return self._watches(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE status = 'watching' "
            "AND next_poll_ms <= ? ORDER BY next_poll_ms LIMIT ?",
            (now_ms, limit),
        )

    def due_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        return self._watches(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE status = 'watching' "
            "AND push_due_ms <= ? ORDER BY push_due_ms LIMIT ?",
            (now_ms, limit),
        )

    def claim_polls(self, now_ms: int, limit: int) -> list[Watch]:
        """The due polls: one process polls every followed agent, nobody else to keep out."""
        return self.due_polls(now_ms, limit)

    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """The due refreshes (one process sends them all)."""
        return self.due_pushes(now_ms, limit)

    def release_held(self) -> int:
        """Nothing is held: the next process to open the file polls every followed agent."""
        return 0

    def running_for(self, user_id: str, character_id: str) -> list[Watch]:
        """Followed agents still running for a pair."""
        return self._watches(
            f"SELECT {_QUALIFIED} FROM watched_agents w JOIN sessions s ON s.agent_id = w.agent_id "
            "WHERE w.status = 'watching' AND s.user_id = ? AND s.character_id = ?",
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
        """Follow a running agent; an explicit request (not a platform event) also updates or
        resumes an existing watch. `style` is the agent's LLM message style (None: default)."""
        status = self.conn.execute("SELECT status FROM sessions WHERE agent_id = ?", (agent_id,)).fetchone()
        if status is not None and status[0] != "running":
            return "stopped"
        stamp = now_ms()
        base = dumps(base_system_messages) if base_system_messages is not None else None
        existing = self.get(agent_id)
        if existing is None:
            self.conn.execute(
                "INSERT INTO watched_agents (agent_id, origin, status, next_poll_ms, "
                "base_system_messages, persona, max_tokens, style, created_ms, updated_ms, max_history) "
                "VALUES (?, ?, 'watching', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    agent_id,
                    origin,
                    first_poll_ms,
                    base,
                    persona,
                    max_tokens,
                    style,
                    stamp,
                    stamp,
                    max_history,
                ),
            )
            return "created"
        if origin == "callback":
            return "unchanged"
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
            changes.update(status="watching", stop_reason=None, next_poll_ms=first_poll_ms, failures=0)
        if not changes:
            return "unchanged"
        changes.update(origin=origin, updated_ms=stamp)
        self._set("watched_agents", "agent_id", agent_id, changes)
        return "updated"

    def unfollow(self, agent_id: str, reason: str) -> bool:
        cursor = self.conn.execute(
            "UPDATE watched_agents SET status = 'stopped', stop_reason = ?, push_due_ms = NULL, "
            "updated_ms = ? WHERE agent_id = ? AND status = 'watching'",
            (reason, now_ms(), agent_id),
        )
        return cursor.rowcount == 1

    def polled(self, agent_id: str, *, next_poll_ms: int, error: str | None) -> None:
        """Record a poll: failures count up until one succeeds."""
        stamp = now_ms()
        if error is None:
            self.conn.execute(
                "UPDATE watched_agents SET next_poll_ms = ?, last_poll_ms = ?, polls = polls + 1, "
                "failures = 0, last_error = NULL, updated_ms = ? WHERE agent_id = ?",
                (next_poll_ms, stamp, stamp, agent_id),
            )
        else:
            self.conn.execute(
                "UPDATE watched_agents SET next_poll_ms = ?, failures = failures + 1, "
                "last_error = ?, updated_ms = ? WHERE agent_id = ?",
                (next_poll_ms, error, stamp, agent_id),
            )

    def request_push(self, agent_id: str, due_ms: int) -> None:
        """Ask for a refresh push no earlier than `due_ms` (an earlier request stands)."""
        self.conn.execute(
            "UPDATE watched_agents SET push_due_ms = min(coalesce(push_due_ms, ?), ?) "
            "WHERE agent_id = ? AND status = 'watching' AND base_system_messages IS NOT NULL",
            (due_ms, due_ms, agent_id),
        )

    def pushed(self, agent_id: str, system_messages: list[dict[str, Any]] | None) -> None:
        """A refresh was sent (None: it was skipped, only the request is cleared)."""
        if system_messages is None:
            self.conn.execute("UPDATE watched_agents SET push_due_ms = NULL WHERE agent_id = ?", (agent_id,))
            return
        stamp = now_ms()
        self.conn.execute(
            "UPDATE watched_agents SET push_due_ms = NULL, last_push_ms = ?, last_pushed = ?, "
            "updated_ms = ? WHERE agent_id = ?",
            (stamp, dumps(system_messages), stamp, agent_id),
        )
