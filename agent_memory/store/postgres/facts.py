"""PostgreSQL's facts and summaries (store/shared/facts.py), over a pooled connection."""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository
from agent_memory.store.shared.facts import (
    FACT_COLUMNS,
    SUMMARY_COLUMNS,
    Facts,
    Summaries,
    fact_of,
    summary_of,
)

__all__ = ["FACT_COLUMNS", "SUMMARY_COLUMNS", "PostgresFacts", "PostgresSummaries", "fact_of", "summary_of"]


class PostgresFacts(Repository, Facts):
    """The `facts` table and its history, shared by every instance."""

    __slots__ = ()


class PostgresSummaries(Repository, Summaries):
    """The `summaries` table."""

    __slots__ = ()
