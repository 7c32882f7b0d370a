"""PLACEHOLDER: export on PostgreSQL (being written; mirror store/sqlite/export.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresExport(Repository):
    """TODO."""

    __slots__ = ()
