"""PLACEHOLDER: recall on PostgreSQL (being written; mirror store/sqlite/recall.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresRecall(Repository):
    """TODO."""

    __slots__ = ()
