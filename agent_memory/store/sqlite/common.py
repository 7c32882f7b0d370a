"""What every SQLite repository shares: its connection and row helpers."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, TypeVar

from agent_memory.store.shared.sql import Repository as SharedRepository
from agent_memory.store.shared.sql import Row, Sql

R = TypeVar("R")


def fts_phrase(term: str) -> str:
    """A term as an FTS5 string: matched as a substring by the trigram tokenizer, whole by recall's."""
    return '"' + term.replace('"', '""') + '"'


def ensure_pairs(conn: sqlite3.Connection, after_id: int, upto_id: int) -> None:
    """Give each pair of the messages with ids in (after_id, upto_id] an index id (search's and recall's)."""
    conn.execute(
        "INSERT INTO search_pairs (user_id, character_id) "
        "SELECT DISTINCT user_id, character_id FROM messages m WHERE id > ? AND id <= ? "
        "AND NOT EXISTS (SELECT 1 FROM search_pairs p WHERE p.user_id = m.user_id "
        "AND p.character_id = m.character_id)",
        (after_id, upto_id),
    )


def marks(count: int) -> str:
    """`?, ?, ...` for `count` parameters."""
    return ", ".join("?" * count)


# The most rows one INSERT of `SQLiteSql.insert_rows` writes, and the most variables a statement
# may bind in any SQLite build (999 before 3.32).
_MAX_ROWS = 32
_MAX_VARIABLES = 999


@functools.lru_cache(maxsize=64)
def _multi_insert(table: str, columns: tuple[str, ...], rows: int) -> str:
    """`INSERT INTO table (columns) VALUES (?, ...), ...` of `rows` rows."""
    row = f"({marks(len(columns))})"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * rows)}"


class Repository(SharedRepository):
    """One aggregate's SQL over a connection (a reader's, or the writer's inside its transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(SQLiteSql(conn))
        self.conn = conn


class SQLiteSql(Sql):
    """Statements written once, run on a SQLite connection (`?` is its own placeholder)."""

    list_max = 500  # below the variable limit of any SQLite build
    least, greatest = "min", "max"
    no_limit = "LIMIT -1"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self.conn.execute(sql, params).fetchone()
        return row

    def records(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        return [make(*row) for row in self.conn.execute(sql, params)]

    def build(self, make: Callable[..., R], row: Row) -> R:
        return make(*row)  # a sqlite3.Row iterates its values

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self.conn.execute(sql, params).fetchone()[0])

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        # Multi-row statements, not one statement per row: SQLite then steps one statement,
        # and updates an AUTOINCREMENT table's sequence once, per chunk (a 32-message callback
        # 0.43 -> 0.34 ms). Chunks of powers of two keep the statements few (for its cache)
        # and each within the variable limit of any SQLite build, whatever the table's width.
        most = max(1, min(_MAX_ROWS, _MAX_VARIABLES // len(columns)))
        start, left = 0, len(rows)
        while left:
            size = 1 << (min(left, most).bit_length() - 1)
            chunk = rows[start : start + size]
            self.conn.execute(_multi_insert(table, tuple(columns), size), list(chain.from_iterable(chunk)))
            start, left = start + size, left - size

    def bump(self, pairs: Iterable[tuple[str, str]]) -> None:
        # Once per pair and statement, where a trigger per row cost a third of ingest's CPU
        # (facts and summaries bump by trigger).
        for user_id, character_id in set(pairs):
            # One clock for all, so a pair forgotten and said again never repeats a version.
            self.conn.execute("UPDATE memory_clock SET tick = tick + 1")
            self.conn.execute(
                "INSERT INTO memory_versions (user_id, character_id, version) "
                "VALUES (?, ?, (SELECT tick FROM memory_clock)) "
                "ON CONFLICT (user_id, character_id) DO UPDATE SET version = excluded.version",
                (user_id, character_id),
            )

    def database(self) -> str:
        for row in self.conn.execute("PRAGMA database_list"):
            if row[1] == "main":
                return str(row[2])
        return ""

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        # One read transaction (unless the caller's is open): every table seen at the same commit.
        began = not self.conn.in_transaction
        if began:
            self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if began:
                self.conn.execute("COMMIT")

    def unindexed(self, column: str) -> str:
        return f"+{column}"  # a unary plus hides the column from SQLite's index choice

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} IN ({marks(len(values))})", list(values)
