"""Choosing and building the store a deployment's settings name."""

from __future__ import annotations

import importlib
from typing import Protocol, cast

from agent_memory.settings import Settings
from agent_memory.store.protocols import Store

# Each backend package exposes `create(settings) -> Store`. They are imported by name when
# chosen, so a backend's driver (sqlite3 here, psycopg for PostgreSQL) loads only when used
# and nothing above the store depends on a backend's modules (import-linter checks that).
BACKENDS = {"sqlite": "agent_memory.store.sqlite", "postgres": "agent_memory.store.postgres"}


class _Backend(Protocol):
    def create(self, settings: Settings) -> Store: ...


def make_store(settings: Settings) -> Store:
    """The store the settings name, not yet opened (a web app opens it at startup)."""
    module = cast(_Backend, importlib.import_module(BACKENDS[settings.backend]))
    return module.create(settings)


def open_store(settings: Settings) -> Store:
    """The store the settings name, created or migrated and ready (CLI commands, benchmarks)."""
    store = make_store(settings)
    store.open()
    return store
