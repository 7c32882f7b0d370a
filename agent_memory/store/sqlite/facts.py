"""SQLite's facts: a new fact's id (the rest is store/shared/facts.py)."""

from __future__ import annotations

from agent_memory.store.shared.facts import Facts


class SQLiteFacts(Facts):
    """The `facts` table and its history, over a SQLite connection."""

    __slots__ = ()
    # An id no fact had before: an ended fact's history keeps its id (SQLite would hand the
    # newest one out again).
    new_id = "1 + max(coalesce((SELECT max(id) FROM facts), 0), coalesce((SELECT max(fact_id) FROM fact_history), 0))"
