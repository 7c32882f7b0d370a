"""Named leases on SQLite: one process serves a database file, so it holds every lease."""

from __future__ import annotations

from agent_memory.store.sqlite.common import Repository


class SQLiteLeases(Repository):
    """Cluster-wide work needs no arbiter when the cluster is one process."""

    __slots__ = ()

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Always held: no other instance shares the file."""
        return True
