"""The migration that gives followed agents their window (`max_history`) upgrades a populated database."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from sqlite_utils import Database

from agent_memory.settings import Settings
from agent_memory.store.factory import open_store
from agent_memory.store.postgres import migrations as pg_migrations
from agent_memory.store.sqlite.migrations import migrations as sqlite_migrations

WATCH = (
    "INSERT INTO watched_agents (agent_id, origin, status, next_poll_ms, base_system_messages, "
    "created_ms, updated_ms) VALUES ('OLD-AGENT', 'join', 'watching', 1, '[]', 1, 1)"
)


async def check(db: Any) -> None:
    """The old watch reads back with no window (the platform's default), and a new one keeps its own."""
    store = open_store(Settings(db_path=db))
    try:
        old = store.read_now(lambda view: view.watches.get("OLD-AGENT"))
        assert old is not None and old.max_history is None and old.base_system_messages == []
        await store.write(
            lambda tx: tx.watches.follow(
                "NEW-AGENT", "join", first_poll_ms=1, base_system_messages=[], max_history=6
            )
        )
        new = store.read_now(lambda view: view.watches.get("NEW-AGENT"))
        assert new is not None and new.max_history == 6
    finally:
        store.close()


async def test_sqlite_upgrade_keeps_the_followed_agents(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    sqlite_migrations.apply(Database(conn), stop_before="m019_watch_max_history")
    conn.execute(WATCH)
    conn.commit()
    conn.close()
    await check(path)


async def test_postgres_upgrade_keeps_the_followed_agents(pg_cluster: Any, monkeypatch: Any) -> None:
    url = pg_cluster.create("watch_max_history_upgrade")
    names = [name for name, _ in pg_migrations.MIGRATIONS]
    at = names.index("m009_watch_max_history")
    monkeypatch.setattr(pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[:at])
    with psycopg.connect(url) as conn:
        pg_migrations.apply(conn)
        conn.execute(WATCH)
    monkeypatch.undo()
    await check(url)
