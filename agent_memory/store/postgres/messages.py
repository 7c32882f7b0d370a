"""PLACEHOLDER: messages on PostgreSQL (being written; mirror store/sqlite/messages.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresMessages(Repository):
    """TODO."""

    __slots__ = ()
