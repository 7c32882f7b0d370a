"""Storage, the only package that runs SQL: typed repository protocols and their backends.

`make_store(settings)` / `open_store(settings)` build the store the settings name; callers
hold it as a `Store` and reach the repositories through a `ReadView` or a `Transaction`
(see `agent_memory.store.protocols`). Only this package knows which backend that is.
"""

from agent_memory.store.factory import make_store, open_store
from agent_memory.store.protocols import NotBrief, ReadsHere, ReadView, Store, Transaction

__all__ = ["NotBrief", "ReadView", "ReadsHere", "Store", "Transaction", "make_store", "open_store"]
