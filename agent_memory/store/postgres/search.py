"""PLACEHOLDER: search on PostgreSQL (being written; mirror store/sqlite/search.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresSearch(Repository):
    """TODO."""

    __slots__ = ()
