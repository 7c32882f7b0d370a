"""Storage, the only package that runs SQL: `make_store` / `open_store` build the `Store` the
settings name; only this package knows which backend that is (see `agent_memory.store.protocols`)."""

from agent_memory.store.factory import make_store, open_store
from agent_memory.store.protocols import NotBrief, ReadsHere, ReadView, Store, Transaction

__all__ = ["NotBrief", "ReadView", "ReadsHere", "Store", "Transaction", "make_store", "open_store"]
