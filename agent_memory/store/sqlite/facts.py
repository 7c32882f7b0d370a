"""SQLite's facts and summaries: a new fact's id (the rest is store/shared/facts.py)."""

from __future__ import annotations

from agent_memory.store.shared.facts import (
    FACT_COLUMNS,
    SUMMARY_COLUMNS,
    Facts,
    Summaries,
    fact_of,
    summary_of,
)
from agent_memory.store.sqlite.common import Repository

__all__ = ["FACT_COLUMNS", "SUMMARY_COLUMNS", "SQLiteFacts", "SQLiteSummaries", "fact_of", "summary_of"]


class SQLiteFacts(Repository, Facts):
    """The `facts` table and its history, over a SQLite connection."""

    __slots__ = ()
    # An id no fact had before: an ended fact's history keeps its id (SQLite would hand the
    # newest one out again).
    new_id = "1 + max(coalesce((SELECT max(id) FROM facts), 0), coalesce((SELECT max(fact_id) FROM fact_history), 0))"


class SQLiteSummaries(Repository, Summaries):
    """The `summaries` table (its search index follows by trigger)."""

    __slots__ = ()
