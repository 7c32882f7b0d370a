"""PLACEHOLDER: analytics on PostgreSQL (being written; mirror store/sqlite/analytics.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresAnalytics(Repository):
    """TODO."""

    __slots__ = ()
