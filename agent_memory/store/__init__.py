"""Storage, the only package that runs SQL: typed repository protocols and their backends.

`make_store(settings)` / `open_store(settings)` build the store the settings name; callers
hold it as a `Store` and reach the repositories through a `ReadView` or a `Transaction`
(see `agent_memory.store.protocols`).
"""

from agent_memory.store.factory import make_store, open_store
from agent_memory.store.protocols import ReadView, Store, Transaction

# Issue 9, phase 1 only: the names callers imported before the repositories existed.
from agent_memory.store.sqlite.engine import SQLiteStore, SQLiteTransaction, SQLiteView, dumps, now_ms

__all__ = [
    "ReadView",
    "SQLiteStore",
    "SQLiteTransaction",
    "SQLiteView",
    "Store",
    "Transaction",
    "dumps",
    "make_store",
    "now_ms",
    "open_store",
]
