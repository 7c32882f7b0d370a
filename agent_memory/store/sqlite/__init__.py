"""The embedded SQLite backend, the default store: one file, one writer thread, pooled readers."""

from __future__ import annotations

from agent_memory.settings import Settings
from agent_memory.store.protocols import Store
from agent_memory.store.sqlite.engine import SQLiteStore, SQLiteTransaction, SQLiteView

__all__ = ["SQLiteStore", "SQLiteTransaction", "SQLiteView", "create"]


def create(settings: Settings) -> Store:
    """The store at `settings.db_path` (not yet opened); typed `Store` so mypy checks it is one."""
    return SQLiteStore(settings.db_path, group_commit_max=settings.group_commit_max)
