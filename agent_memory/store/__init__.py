"""Storage: the only package that runs SQL."""

from agent_memory.store.protocols import Store
from agent_memory.store.sqlite.engine import SQLiteStore, SQLiteTransaction, SQLiteView, dumps, now_ms

__all__ = ["SQLiteStore", "SQLiteTransaction", "SQLiteView", "Store", "dumps", "now_ms"]
