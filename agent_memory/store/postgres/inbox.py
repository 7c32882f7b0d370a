"""PLACEHOLDER: inbox on PostgreSQL (being written; mirror store/sqlite/inbox.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresInbox(Repository):
    """TODO."""

    __slots__ = ()
