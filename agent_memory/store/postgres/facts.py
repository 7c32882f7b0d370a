"""PLACEHOLDER: facts on PostgreSQL (being written; mirror store/sqlite/facts.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresFacts(Repository):
    """TODO."""

    __slots__ = ()


class PostgresSummaries(Repository):
    """TODO."""

    __slots__ = ()
