"""How one SQLite process holds followed agents: all of them, no lease (the rest is store/shared/watches.py)."""

from __future__ import annotations

from agent_memory.core.domain import Watch
from agent_memory.store.shared.watches import Watches


class SQLiteWatches(Watches):
    """The `watched_agents` table."""

    __slots__ = ()

    def claim_polls(self, now_ms: int, limit: int) -> list[Watch]:
        """The due polls: one process polls every followed agent, nobody else to keep out."""
        return self.due_polls(now_ms, limit)

    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        """The due refreshes (one process sends them all)."""
        return self.due_pushes(now_ms, limit)

    def release_held(self) -> int:
        """Nothing is held: the next process to open the file polls every followed agent."""
        return 0
