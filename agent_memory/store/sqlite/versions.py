"""Change counters of pairs' memory (migration m013).

Facts and summaries bump their pair's counter by trigger (they change rarely). Messages are
written in batches of hundreds a second, and a trigger per row cost a third of ingest's CPU,
so the message writes bump once per pair and statement instead (`bump`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from agent_memory.store.shared.facts import USER_WIDE
from agent_memory.store.sqlite.common import Repository


class SQLiteVersions(Repository):
    """When a pair's memory last changed, as a number that only grows."""

    __slots__ = ()

    def of_pair(self, user_id: str, character_id: str) -> tuple[int, int]:
        """The pair's version and the user's user-wide facts' version (0: never changed)."""
        rows = dict(
            self.conn.execute(
                "SELECT character_id, version FROM memory_versions WHERE user_id = ? AND character_id IN (?, ?)",
                (user_id, character_id, USER_WIDE),
            ).fetchall()
        )
        return rows.get(character_id, 0), rows.get(USER_WIDE, 0)


def bump(conn: sqlite3.Connection, pairs: Iterable[tuple[str, str]]) -> None:
    """Count a change of each (user, character) pair's messages."""
    for user_id, character_id in set(pairs):
        # One clock for all, so a pair forgotten and said again never repeats a version.
        conn.execute("UPDATE memory_clock SET tick = tick + 1")
        conn.execute(
            "INSERT INTO memory_versions (user_id, character_id, version) "
            "VALUES (?, ?, (SELECT tick FROM memory_clock)) "
            "ON CONFLICT (user_id, character_id) DO UPDATE SET version = excluded.version",
            (user_id, character_id),
        )
