"""The PostgreSQL backend: one database shared by any number of service instances."""

from __future__ import annotations

from agent_memory.settings import Settings
from agent_memory.store.postgres.engine import PostgresStore, PostgresTransaction, PostgresView
from agent_memory.store.protocols import Store

__all__ = ["PostgresStore", "PostgresTransaction", "PostgresView", "create"]


def create(settings: Settings) -> Store:
    """The store at `settings.postgres_url` (not yet opened); typed `Store` so mypy checks it is one."""
    assert settings.postgres_url is not None
    return PostgresStore(settings.postgres_url, lease_s=settings.lease_s)
