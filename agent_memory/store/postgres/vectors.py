"""PLACEHOLDER: vectors on PostgreSQL (being written; mirror store/sqlite/vectors.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresVectors(Repository):
    """TODO."""

    __slots__ = ()
