"""What every PostgreSQL repository shares: its connection, the instance's identity and row helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from psycopg.rows import DictRow, dict_row

from agent_memory.core.clock import now_ms
from agent_memory.core.jsonutil import dumps, loads_object
from agent_memory.store.shared.sql import Repository as SharedRepository
from agent_memory.store.shared.sql import Row, Sql

# Storage time and JSON are core's; re-exported for the repositories.
__all__ = [
    "Connection",
    "Instance",
    "PostgresSql",
    "Repository",
    "dumps",
    "int_array",
    "loads_object",
    "now_ms",
    "text_array",
]

R = TypeVar("R")


class Connection(psycopg.Connection[DictRow]):
    """A pooled connection, keeping the cursors its statements reuse."""

    # Making a cursor (it copies the connection's adapters) costs about as much CPU as a small
    # statement's round trip: statements whose small result is read at once share one.
    _shared: psycopg.Cursor[DictRow] | None = None
    _shared_client: psycopg.ClientCursor[DictRow] | None = None

    def shared_cursor(self) -> psycopg.Cursor[DictRow]:
        """The reused cursor: each execute replaces its result, so read that first."""
        if self._shared is None:
            self._shared = self.cursor()
        return self._shared

    def shared_client_cursor(self) -> psycopg.ClientCursor[DictRow]:
        """The reused cursor that binds parameters itself (several statements in one query)."""
        if self._shared_client is None:
            self._shared_client = psycopg.ClientCursor(self, row_factory=dict_row)
        return self._shared_client


# A Python list is adapted to an array element by element in Python: long lists on hot paths
# go as array literals built in C (`%s::bigint[]`, `%s::text[]`).
_QUOTE = str.maketrans({"\\": "\\\\", '"': '\\"'})


def int_array(values: Iterable[int]) -> str:
    """Integers as an array literal, for a `%s::bigint[]` parameter."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Iterable[str]) -> str:
    """Strings as an array literal (each quoted), for a `%s::text[]` parameter or a COPY column."""
    quoted = [value.translate(_QUOTE) for value in values]
    return '{"' + '","'.join(quoted) + '"}' if quoted else "{}"


@dataclass(frozen=True, slots=True)
class Instance:
    """This process among those sharing the database: its name, and how long its claims last."""

    name: str
    lease_ms: int


class Repository(SharedRepository):
    """One aggregate's SQL over a pooled connection, inside the caller's transaction."""

    __slots__ = ("conn", "instance")

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(PostgresSql(conn, instance))
        self.conn = conn
        self.instance = instance


@lru_cache(maxsize=2048)
def dialect(sql: str) -> bytes:
    """A statement written once (`?` placeholders) in psycopg's form (`%s`, a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s").encode()


_BUMP = (
    b"INSERT INTO memory_versions (user_id, character_id, version) "
    b"SELECT u, c, nextval('memory_clock') FROM unnest(%s::text[], %s::text[]) AS p(u, c) "
    b"ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock')"
)
_BUMP_ONE = (
    b"INSERT INTO memory_versions (user_id, character_id, version) VALUES (%s, %s, nextval('memory_clock')) "
    b"ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock')"
)


class PostgresSql(Sql):
    """Statements written once, run on a pooled connection; knows this instance, for leases."""

    __slots__ = ("conn", "instance")
    binary = ' COLLATE "C"'
    for_update = " FOR UPDATE"

    def __init__(self, conn: Connection, instance: Instance) -> None:
        self.conn = conn
        self.instance = instance

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[DictRow]:
        # The reusable cursor: what a statement returns is read at once.
        return self.conn.shared_cursor().execute(dialect(sql), params)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        # A cursor of its own: a long result would otherwise stay in memory until the next statement.
        return list(self.conn.execute(dialect(sql), params).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return self._execute(sql, params).fetchone()

    def records(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        return [make(*row.values()) for row in self.conn.execute(dialect(sql), params)]

    def build(self, make: Callable[..., R], row: Row) -> R:
        return make(*row.values())

    def record(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> R | None:
        row = self._execute(sql, params).fetchone()  # one row: the reusable cursor will do
        return make(*row.values()) if row is not None else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._execute(sql, params).rowcount

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.shared_cursor().executemany(dialect(sql), rows)

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        row = self._execute(sql, params).fetchone()
        return int(next(iter(row.values()))) if row else 0

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        # One COPY, rows in order (ids follow it): adapting a row is done in C.
        with self.conn.shared_cursor().copy(
            f"COPY {table} ({', '.join(columns)}) FROM STDIN".encode()
        ) as copy:
            for row in rows:
                copy.write_row(row)

    def bump(self, pairs: Iterable[tuple[str, str]]) -> None:
        # Sorted: concurrent bumps lock the pairs' rows in one order, so they queue, not deadlock.
        ordered = sorted(set(pairs))
        # The clock is read again once the row is locked (DO UPDATE runs after the lock is
        # taken): a transaction that waited for another's bump commits a higher version, so a
        # version never goes back and never stays put over a change.
        if len(ordered) == 1:  # the usual case: no arrays to adapt
            self.conn.shared_cursor().execute(_BUMP_ONE, ordered[0])
        elif ordered:
            self.conn.shared_cursor().execute(
                _BUMP, ([user for user, _ in ordered], [character for _, character in ordered])
            )

    def database(self) -> str:
        info = self.conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname}"

    def total(self, expr: str) -> str:
        # Sums of bigints are numeric in PostgreSQL: cast back, so reports hold integers.
        return f"coalesce(sum({expr}), 0)::bigint"

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def locked(self, key: str, seed: int, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """`one` once this transaction holds the advisory lock of (`key`, `seed`), in one round trip.

        Both go in one simple-protocol query (parameters bound here), as two statements: the
        read's snapshot is taken after the lock is granted, so it sees what the holder before
        committed. Seeds keep kinds of keys apart (sessions 0, inbox events 1). Reads need none.
        """
        if self.conn.read_only:
            return self.one(sql, params)
        cursor = self.conn.shared_client_cursor()
        query = f"SELECT pg_advisory_xact_lock(hashtextextended(%s, {seed:d})); ".encode() + dialect(sql)
        cursor.execute(query, (key, *params))
        cursor.nextset()
        return cursor.fetchone()
