"""PLACEHOLDER: bindings on PostgreSQL (being written; mirror store/sqlite/bindings.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresBindings(Repository):
    """TODO."""

    __slots__ = ()
