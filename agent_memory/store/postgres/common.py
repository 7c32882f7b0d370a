"""What every PostgreSQL repository shares: its connection, the instance's identity and row helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import DictRow

from agent_memory.core.clock import now_ms
from agent_memory.core.jsonutil import dumps, loads_object

# Storage time and JSON are core's; re-exported for the repositories.
__all__ = ["Connection", "Instance", "Repository", "dumps", "loads_object", "now_ms"]

Connection = psycopg.Connection[DictRow]


@dataclass(frozen=True, slots=True)
class Instance:
    """This process among those sharing the database: its name, and how long its claims last."""

    name: str
    lease_ms: int


class Repository:
    """One aggregate's SQL over a pooled connection, inside the caller's transaction."""

    __slots__ = ("conn", "instance")

    def __init__(self, conn: Connection, instance: Instance) -> None:
        self.conn = conn
        self.instance = instance

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return list(self.conn.execute(sql.encode(), params).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        return self.conn.execute(sql.encode(), params).fetchone()

    def _count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """The single integer a `count(*)` query answers."""
        row = self.conn.execute(sql.encode(), params).fetchone()
        return int(next(iter(row.values()))) if row else 0

    def _set(self, table: str, key: str, value: Any, changes: dict[str, Any]) -> None:
        """`UPDATE table SET changes WHERE key = value` (column names are ours, never input)."""
        if not changes:
            return
        assignments = ", ".join(f"{column} = %s" for column in changes)
        self.conn.execute(
            f"UPDATE {table} SET {assignments} WHERE {key} = %s".encode(), (*changes.values(), value)
        )
