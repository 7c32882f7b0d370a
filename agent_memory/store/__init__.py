"""Storage: the only package that runs SQL."""

from .base import Store
from .sqlite import SQLiteStore, SQLiteTransaction, SQLiteView, dumps, now_ms

__all__ = ["SQLiteStore", "SQLiteTransaction", "SQLiteView", "Store", "dumps", "now_ms"]
