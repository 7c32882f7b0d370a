"""PLACEHOLDER: llm_routes on PostgreSQL (being written; mirror store/sqlite/llm_routes.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresLlmRoutes(Repository):
    """TODO."""

    __slots__ = ()
