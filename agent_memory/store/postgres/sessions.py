"""PLACEHOLDER: sessions on PostgreSQL (being written; mirror store/sqlite/sessions.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresSessions(Repository):
    """TODO."""

    __slots__ = ()
