"""PLACEHOLDER: watches on PostgreSQL (being written; mirror store/sqlite/watches.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresWatches(Repository):
    """TODO."""

    __slots__ = ()
