"""PLACEHOLDER: maintenance on PostgreSQL (being written; mirror store/sqlite/maintenance.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Connection, Repository


class PostgresMaintenance(Repository):
    """TODO."""

    __slots__ = ()

    @staticmethod
    def scrub(conn: Connection) -> tuple[int, int, int]:
        """TODO: vacuum what forget touched."""
        return (0, 0, 0)
