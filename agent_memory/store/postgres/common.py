"""What every PostgreSQL repository shares: its connection, the instance's identity and row helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar, cast

import psycopg
from psycopg import abc
from psycopg._copy_base import MAX_BUFFER_SIZE, format_row_text
from psycopg._queries import PostgresClientQuery
from psycopg.abc import PQGen
from psycopg.adapt import Transformer
from psycopg.generators import copy_to, execute, fetch_many
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg.waiting import Wait

from agent_memory.store.shared.sql import LockedRead, Row, Sql
from agent_memory.store.shared.sql import Repository as SharedRepository

R = TypeVar("R")
COPY_IN = ExecStatus.COPY_IN


@dataclass(frozen=True, slots=True)
class _Rows:
    """A `COPY … FROM STDIN` kept with its rows (text format) for the next round trip's query."""

    statement: bytes
    data: bytes


# The most bytes of rows handed to libpq at once (psycopg's Copy splits alike).
_COPY_CHUNK = MAX_BUFFER_SIZE


def _sent_with_rows(cursor: psycopg.ClientCursor[DictRow], batch: list[bytes | _Rows]) -> PQGen[None]:
    """Send `batch` as one query, each COPY's rows when the server asks for them, and read every
    statement's result into `cursor` (psycopg's execute refuses a COPY, its copy() anything else)."""
    yield from cursor._start_query()
    query = b"; ".join(each.statement if isinstance(each, _Rows) else each for each in batch)
    cursor._execute_send(cursor._convert_query(query), binary=False)  # one simple-protocol query
    pgconn = cursor._pgconn
    results = yield from execute(pgconn)
    for rows in (each for each in batch if isinstance(each, _Rows)):
        if results[-1].status != COPY_IN:
            break  # refused before it: the query ended there, with that error
        results.pop()  # the server asking for the rows, not a statement's result
        for start in range(0, len(rows.data), _COPY_CHUNK):
            yield from copy_to(pgconn, rows.data[start : start + _COPY_CHUNK], flush=False)
        while pgconn.put_copy_end(None) == 0:
            while not (yield Wait.W):
                continue
        while pgconn.flush():
            while not (yield Wait.W):
                continue
        results += yield from fetch_many(pgconn)  # the COPY's, then the next statements' up to another COPY
    cursor._check_results(results)
    cursor._set_results(results)


class Connection(psycopg.Connection[DictRow]):
    """A pooled connection, keeping the cursors its statements reuse and the statements it has not sent.

    A statement sent on its own costs a round trip's CPU (~0.1 ms), whatever it is. In a write
    transaction (`begin_deferred`), a statement whose result nobody reads (BEGIN, SAVEPOINT, most
    writes) is bound and kept (`defer`), then sent in one simple-protocol query with the next one
    whose result is read, or with the COMMIT. Whatever executes here sends the kept ones first,
    so statements run in the order they were asked in.
    """

    # Making a cursor (it copies the connection's adapters) costs about as much CPU as a small
    # statement's round trip: statements whose small result is read at once share one.
    _shared: psycopg.Cursor[DictRow] | None = None
    _shared_client: psycopg.ClientCursor[DictRow] | None = None
    _binder: abc.Transformer | None = None
    # Statements bound and not sent yet (None: not in a write transaction that keeps them).
    deferred: list[bytes | _Rows] | None = None
    # How many times kept statements were sent or dropped (a savepoint asks whether its own was).
    deferred_batches = 0

    def shared_cursor(self) -> psycopg.Cursor[DictRow]:
        """The reused cursor: each execute replaces its result, so read that first."""
        self.send_deferred()
        if self._shared is None:
            self._shared = self.cursor()
        return self._shared

    def begin_deferred(self, begin: bytes) -> None:
        """Start keeping statements, `begin` first (autocommit: nothing is sent until a read or COMMIT)."""
        self.deferred = [begin]

    def binder(self) -> abc.Transformer:
        """The connection's adapters, without a cursor's result state: for literals and COPY rows."""
        if self._binder is None:
            self._binder = Transformer(self)
        return self._binder

    def bind(self, query: bytes, params: Sequence[Any] | None) -> bytes:
        """`query` with its parameters bound as literals, ready to be sent with others."""
        if params is None:
            return query
        # As a ClientCursor binds (psycopg's own literals).
        bound = PostgresClientQuery(self.binder())
        bound.convert(query, params)
        return bound.query

    def defer(self, statement: bytes | _Rows) -> bool:
        """Keep a bound statement (or a COPY with its rows) for the next round trip; False outside
        a write transaction that keeps them (the caller sends it now)."""
        if self.deferred is None:
            return False
        self.deferred.append(statement)
        return True

    def drop_deferred(self, since: int = 0) -> None:
        """Forget the kept statements from index `since` on (a block that raised wrote nothing)."""
        if self.deferred is not None:
            del self.deferred[since:]
            self.deferred_batches += 1

    def send_deferred(self) -> None:
        """Send the kept statements now, if any (before a statement that cannot go with them)."""
        if self.deferred:
            self.with_deferred()

    def with_deferred(self, *statements: bytes) -> psycopg.ClientCursor[DictRow]:
        """Send the kept statements, then `statements` (bound), in one query; the cursor at the last's result."""
        cursor, sent = self._send(statements)
        for _ in range(sent - 1):
            cursor.nextset()
        return cursor

    def _send(self, statements: tuple[bytes, ...]) -> tuple[psycopg.ClientCursor[DictRow], int]:
        """The kept statements and `statements` in one query: the cursor at the first's result, and how many."""
        batch = [*(self.deferred or ()), *statements]
        if self.deferred is not None:
            self.deferred = []  # sent, whatever the server answers
            self.deferred_batches += 1
        if self._shared_client is None:  # binds parameters itself: several statements in one query
            self._shared_client = psycopg.ClientCursor(self, row_factory=dict_row)
        cursor = self._shared_client
        if any(isinstance(each, _Rows) for each in batch):
            with self.lock:
                self.wait(_sent_with_rows(cursor, batch))
        else:
            cursor.execute(b"; ".join(cast("list[bytes]", batch)))
        return cursor, len(batch)

    def results(self, *statements: bytes, plain: int = 0) -> list[list[Any]]:
        """Each of `statements`' rows, sent after the kept ones in one query; the last `plain` as tuples
        (a dict per row costs ~5 us: 0.6 ms of CPU for a recall's ranked turns and neighbours)."""
        cursor, sent = self._send(statements)
        for _ in range(sent - len(statements)):
            cursor.nextset()
        found: list[list[Any]] = []
        try:
            for at in range(len(statements)):
                if at:
                    cursor.nextset()
                if at == len(statements) - plain:
                    cursor.row_factory = tuple_row  # type: ignore[assignment]  # until reset below
                found.append(cursor.fetchall())
        finally:
            cursor.row_factory = dict_row
        return found

    def commit_deferred(self) -> None:
        """Send the kept statements with COMMIT; nothing at all if only BEGIN was kept (and none sent)."""
        kept = self.deferred
        try:
            if kept is not None and (len(kept) > 1 or self.info.transaction_status != TransactionStatus.IDLE):
                self.with_deferred(b"COMMIT")
        finally:
            self.deferred = None

    # whatever else executes here sends the kept statements first

    def execute(self, *args: Any, **kwargs: Any) -> psycopg.Cursor[DictRow]:
        self.send_deferred()
        return super().execute(*args, **kwargs)

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[psycopg.Transaction]:
        self.send_deferred()
        with super().transaction(*args, **kwargs) as block:
            yield block
            # Before psycopg's RELEASE: what the block kept is the block's (its errors roll it back).
            self.send_deferred()


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
    # `fn(view)` in a read of its own on a pooled connection (`PostgresStore.read_now`): a pair's
    # recall index is read into memory with it in the background.
    read_alone: Callable[[Callable[[Any], Any]], Any]


class Repository(SharedRepository):
    """One aggregate's SQL over a pooled connection, inside the caller's transaction."""

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

    binary = ' COLLATE "C"'
    for_update = " FOR UPDATE"

    def __init__(self, conn: Connection, instance: Instance) -> None:
        self.conn = conn
        self.instance = instance

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[DictRow]:
        """On the reused cursor (its result read at once), or with the kept statements, in one round trip."""
        conn = self.conn
        if conn.deferred:
            return conn.with_deferred(conn.bind(dialect(sql), params))
        return conn.shared_cursor().execute(dialect(sql), params)

    def _rows(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[DictRow]:
        # A cursor of its own unless statements are kept: a long result would otherwise stay in
        # memory until the next statement.
        return self._execute(sql, params) if self.conn.deferred else self.conn.execute(dialect(sql), params)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._rows(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return self._execute(sql, params).fetchone()

    def records(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        return [make(*row.values()) for row in self._rows(sql, params)]

    def build(self, make: Callable[..., R], row: Row) -> R:
        return make(*row.values())

    def record(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> R | None:
        row = self._execute(sql, params).fetchone()
        return make(*row.values()) if row is not None else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._execute(sql, params).rowcount

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        # Kept for the next round trip in a write transaction; errors surface there, within
        # the same savepoint block (`PostgresTransaction.savepoint` sends what it kept).
        if not self.conn.defer(self.conn.bind(dialect(sql), params)):
            self.run(sql, params)

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.shared_cursor().executemany(dialect(sql), rows)

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        row = self._execute(sql, params).fetchone()
        return int(next(iter(row.values()))) if row else 0

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        # One COPY, rows in order (ids follow it): adapting a row is done in C. In a write it is
        # kept, rows and all, for the next round trip's query (the pairs' version bump before it,
        # the statements after it, as they were asked).
        conn, statement = self.conn, f"COPY {table} ({', '.join(columns)}) FROM STDIN".encode()
        if conn.deferred is not None:
            data = bytearray()
            for row in rows:
                format_row_text(row, conn.binder(), data)
            conn.defer(_Rows(statement, bytes(data)))
            return
        with conn.shared_cursor().copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def bump(self, pairs: Iterable[tuple[str, str]]) -> None:
        # Sorted: concurrent bumps lock the pairs' rows in one order, so they queue, not deadlock.
        # DO UPDATE reads the clock again once the row is locked: a transaction that waited for
        # another's bump commits a higher version, so a version never goes back nor stays put.
        ordered = sorted(set(pairs))
        if not ordered:
            return
        query, params = (
            (_BUMP_ONE, ordered[0])  # the usual case: no arrays to adapt
            if len(ordered) == 1
            else (_BUMP, ([user for user, _ in ordered], [character for _, character in ordered]))
        )
        # Kept for the next round trip: the COPY of the messages it guards goes in the same query.
        if not self.conn.defer(self.conn.bind(query, params)):
            self.conn.shared_cursor().execute(query, params)

    def database(self) -> str:
        info = self.conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname}"

    def total(self, expr: str) -> str:
        # Sums of bigints are numeric in PostgreSQL: cast back, so reports hold integers.
        return f"coalesce(sum({expr}), 0)::bigint"

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def locked(
        self, key: str, seed: int, sql: str, params: Sequence[Any] = (), *, shared: bool = False
    ) -> Row | None:
        """`one` once this transaction holds the advisory lock of (`key`, `seed`), both in one query: the
        read's snapshot, taken after the lock is granted, sees what the holder before committed."""
        conn = self.conn
        if conn.read_only:
            return self.one(sql, params)
        # With whatever statements are kept (BEGIN, a SAVEPOINT), in the same round trip.
        return conn.with_deferred(self._lock(key, seed, shared), conn.bind(dialect(sql), params)).fetchone()

    def locked_each(self, reads: Sequence[LockedRead]) -> list[Row | None]:
        """Each lock, then the read it guards, in order, in one round trip with the kept statements."""
        conn = self.conn
        if conn.read_only:
            return [self.one(sql, params) for _, _, sql, params, _ in reads]
        statements: list[bytes] = []
        for key, seed, sql, params, shared in reads:
            statements += (self._lock(key, seed, shared), conn.bind(dialect(sql), params))
        return [rows[0] if rows else None for rows in conn.results(*statements)[1::2]]

    def _lock(self, key: str, seed: int, shared: bool = False) -> bytes:
        """The statement taking the advisory lock of (`key`, `seed`) until commit, or a share of it."""
        # Seeds keep kinds of keys apart (sessions 0, inbox events 1, users 2, reset marks 3).
        kind = "_shared" if shared else ""
        return self.conn.bind(
            f"SELECT pg_advisory_xact_lock{kind}(hashtextextended(%s, {seed:d}))".encode(), (key,)
        )
