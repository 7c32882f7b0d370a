"""PLACEHOLDER: versions on PostgreSQL (being written; mirror store/sqlite/versions.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresVersions(Repository):
    """TODO."""

    __slots__ = ()
