"""PLACEHOLDER: jobs on PostgreSQL (being written; mirror store/sqlite/jobs.py)."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository


class PostgresJobs(Repository):
    """TODO."""

    __slots__ = ()
