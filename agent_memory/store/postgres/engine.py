"""The PostgreSQL store: pooled connections on threads, one transaction per write, many instances.

Reads run in read-only REPEATABLE READ transactions (one snapshot per function), writes in READ
COMMITTED ones that lock what they must (advisory locks, leases); a write that deadlocks or loses
a serialisation race runs again (its function only touches the transaction, so that is safe).

An outage trips a circuit: while PostgreSQL does not answer, every read and write fails at once
with `DatabaseDown`, and a probe connects every `PROBE_EVERY_S`; once one answers, the pools are
made anew (psycopg_pool's own reconnection backs off for many seconds) and the store serves again.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from agent_memory.core.clock import Backoff
from agent_memory.errors import DatabaseDown, StoreUnavailable
from agent_memory.store.postgres import migrations, repositories
from agent_memory.store.postgres.common import Connection, Instance, PostgresSql
from agent_memory.store.postgres.maintenance import PostgresMaintenance
from agent_memory.store.postgres.recall import POSTINGS, PostgresRecall, forget_held
from agent_memory.store.postgres.search import PostgresSearch
from agent_memory.store.protocols import Store
from agent_memory.store.shared.recall import BUSY_INDEX_EVERY_S, IDLE_AFTER_S, SEARCH_CATCH_UP
from agent_memory.store.shared.view import SharedView

__all__ = ["PostgresStore", "PostgresTransaction", "PostgresView"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# A write that deadlocked or lost a serialisation race is run again this many times.
WRITE_ATTEMPTS = 5
RETRY_BACKOFF = Backoff(base_s=0.005, cap_s=0.2)
# How long a caller waits for a pooled connection. The executors have as many threads as the
# pools have connections, so a caller waits only while a connection is being made: longer than
# one attempt may take (connect_timeout, 2 s), since a burst on a freshly started, loaded
# instance makes its connections slowly (1.5 s answered such a burst 503). Past this,
# PostgreSQL is taken as down (the circuit trips) unless a new connection answers at once.
POOL_WAIT_S = 3.0
# The pools' first connections at startup, from a server that may be cold.
OPEN_WAIT_S = 30.0
# Every connection gives up connecting after 2 s (libpq's least), and notices within ~10 s a
# server that vanished without closing its sockets (host down, network cut), not after hours.
CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 2,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
PROBE_EVERY_S = 0.25
# The indexer looks this often whether writes paused (store/shared/recall.py), and indexes
# this many turns at a time.
INDEX_EVERY_S = 0.2
INDEX_CHUNK = 500
# The pairs whose recall index another instance forgot leave this one's memory within this.
HELD_CHECK_S = 1.0
# A write transaction's first statement, sent with its first read (`PostgresStore._transaction`).
_BEGIN = b"BEGIN ISOLATION LEVEL READ COMMITTED"
# A read's: one snapshot for all its statements, taken at its first statement.
_READ_BEGIN = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
# Savepoint names, one per block (`PostgresTransaction.savepoint`).
_savepoints = itertools.count(1)
_RETRYABLE = (errors.DeadlockDetected, errors.SerializationFailure)
# The server going away: admin shutdown, crash shutdown, starting up (besides class 08, connection).
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` says the server does not answer (not that it refused a statement)."""
    if isinstance(exc, PoolTimeout | PoolClosed):
        return True
    if isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate
        return state is None or state.startswith("08") or state in _SERVER_GONE
    return False


def _settle(answer: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    """Give a read's waiter its result or error, once (its COMMIT may fail after it answered)."""
    if answer.done():  # answered already, or the request went away
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(cast(T, result))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@dataclass(frozen=True, slots=True)
class _Outage:
    """Why and since when (monotonic) PostgreSQL is taken as down."""

    reason: str
    since: float


def index_due(now: float, last_write: float, last_indexed: float) -> bool | None:
    """Whether the background indexer runs now: True until caught up (writes have paused), False
    for one chunk (writes keep coming, and the last chunk is a while ago), None not yet."""
    if now - last_write >= IDLE_AFTER_S:
        return True
    if now - last_indexed >= BUSY_INDEX_EVERY_S:
        return False
    return None


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def instance_name() -> str:
    """A name for this process that no other instance shares, readable in the database."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class PostgresView(SharedView):
    """The repositories over one pooled connection, inside the caller's transaction."""

    recall: PostgresRecall

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(sql := PostgresSql(conn, instance), analytics=repositories.PostgresAnalytics)
        # Backend-specific: tests and benchmarks of this backend may run SQL on it.
        self.conn = conn
        self.sessions = repositories.PostgresSessions(sql)
        self.jobs = repositories.PostgresJobs(sql)
        self.watches = repositories.PostgresWatches(sql)
        self.search = PostgresSearch(conn, instance)
        self.recall = PostgresRecall(conn, instance)
        self.vectors = repositories.PostgresVectors(sql)
        self.maintenance = PostgresMaintenance(conn, instance)


class PostgresTransaction(PostgresView):
    """The repositories inside one write transaction."""

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(conn, instance)
        self.leases = repositories.PostgresLeases(self.sql)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only what the block wrote if it raises (never released: that is a round trip more
        per callback, and the commit ends it; its own name keeps an outer block's rollback its own)."""
        conn = self.conn
        name = f"am_{next(_savepoints)}".encode()
        kept = conn.deferred
        since, batches = len(kept) if kept is not None else 0, conn.deferred_batches
        if not conn.defer(b"SAVEPOINT " + name):
            conn.shared_cursor().execute(b"SAVEPOINT " + name)
        try:
            yield
            # What the block kept is sent now: its errors are the block's, undone by its rollback.
            conn.send_deferred()
        except BaseException:
            if kept is not None and conn.deferred_batches == batches:
                conn.drop_deferred(since)  # the SAVEPOINT and the block's statements were never sent
            else:
                conn.drop_deferred()
                if conn.info.transaction_status != TransactionStatus.UNKNOWN:
                    conn.shared_cursor().execute(b"ROLLBACK TO SAVEPOINT " + name)
            raise


class PostgresStore(Store):
    """The PostgreSQL implementation of the store: `open`, `read`, `write`, `checkpoint`, `close`."""

    def __init__(self, url: str, *, lease_s: float = 30.0, pool_size: int = 8, index: bool = True) -> None:
        self.url = url
        self.instance = Instance(instance_name(), int(lease_s * 1000), self.read_now)
        self.pool_size = pool_size
        self._index = index
        self._reads: ConnectionPool[Connection] | None = None
        self._writes: ConnectionPool[Connection] | None = None
        self._readers = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="pg-read")
        self._writers = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="pg-write")
        self._stop = threading.Event()
        self._indexer: threading.Thread | None = None
        # When a write of this instance (not the indexer's) last began, and the indexer last ran.
        self._last_write = self._last_indexed = 0.0
        self._held_checked = 0.0  # when the recall copies held were last checked against forgets
        self._rng = random.Random()
        # The circuit: set while PostgreSQL is down; the prober waits for `_tripped`.
        self._outage: _Outage | None = None
        self._circuit = threading.Lock()
        self._tripped = threading.Event()
        self._prober: threading.Thread | None = None

    @property
    def location(self) -> str:
        return redact(self.url)

    # lifecycle

    def open(self) -> None:
        """Migrate the database (one instance at a time), open the pools and start indexing; DatabaseDown
        when the server does not answer (the service tries again), StoreUnavailable when it refuses."""
        try:
            with psycopg.connect(self.url, **CONNECT_OPTIONS) as conn:
                ran = migrations.apply(conn)
            if ran:
                log.info("migrated %s: %s", self.location, ", ".join(ran))
            self._open_pools(OPEN_WAIT_S)
        except psycopg.Error as exc:
            error = DatabaseDown if is_outage(exc) else StoreUnavailable
            raise error(
                f"cannot open PostgreSQL at {self.location}: {_first_line(exc)}"
                + " (check AGENT_MEMORY_DB, and that the server is up and the database exists)"
            ) from exc
        self._prober = threading.Thread(target=self._probe_loop, name="pg-probe", daemon=True)
        self._prober.start()
        if self._index:
            self._indexer = threading.Thread(target=self._index_loop, name="pg-index", daemon=True)
            self._indexer.start()
        log.info("store ready: %s as instance %s", self.location, self.instance.name)

    def _open_pools(self, wait_s: float) -> None:
        """Open new pools (each with its first connection made) in place of the old ones."""
        reads = self._pool("reads", read_only=True, size=self.pool_size, wait_s=wait_s)
        try:
            # One more writer than writer threads: the indexing thread's.
            writes = self._pool("writes", read_only=False, size=self.pool_size + 1, wait_s=wait_s)
        except BaseException:
            reads.close()
            raise
        self._reads, self._writes = reads, writes

    def _pool(self, name: str, *, read_only: bool, size: int, wait_s: float) -> ConnectionPool[Connection]:
        def configure(conn: Connection) -> None:
            conn.read_only = read_only  # the repositories ask (`PostgresSql.locked`)
            conn.autocommit = True  # each transaction sends its BEGIN with its first statement

        pool: ConnectionPool[Connection] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=size,
            connection_class=Connection,
            kwargs={"row_factory": dict_row, **CONNECT_OPTIONS},
            configure=configure,
            name=f"agent-memory-{name}",
            open=False,
            timeout=POOL_WAIT_S,
        )
        pool.open(wait=True, timeout=wait_s)
        return pool

    def close(self) -> None:
        self._stop.set()
        self._tripped.set()  # wakes the prober, which sees the stop
        for thread in (self._indexer, self._prober):
            if thread is not None:
                thread.join()
        self._readers.shutdown(wait=True)
        self._writers.shutdown(wait=True)
        for pool in (self._reads, self._writes):
            if pool is not None:
                pool.close()

    # reads

    async def read(self, fn: Callable[[PostgresView], T]) -> T:
        """`fn(view)` on a reader thread, answered before its COMMIT (which changes nothing it answered:
        a round trip less); a scrub after a forget waits for the snapshot to end, as for any other."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()

        def run() -> None:
            try:
                self._read(fn, lambda result: loop.call_soon_threadsafe(_settle, answer, result, None))
            except BaseException as exc:  # the caller's to see, unless it was answered already
                try:
                    loop.call_soon_threadsafe(_settle, answer, None, exc)
                except RuntimeError:
                    pass  # the loop is closed: nobody waits

        self._readers.submit(run)
        return await answer

    def read_now(self, fn: Callable[[PostgresView], T]) -> T:
        return self._read(fn)

    def _read(self, fn: Callable[[PostgresView], T], answered: Callable[[T], object] | None = None) -> T:
        pool = self._pool_of(self._reads)
        try:
            with pool.connection() as conn:
                return self._transaction(
                    conn, _READ_BEGIN, lambda: fn(PostgresView(conn, self.instance)), answered
                )
        except psycopg.OperationalError as exc:
            raise self._failure(exc) from exc

    # writes

    async def write(self, fn: Callable[[PostgresTransaction], T]) -> T:
        loop = asyncio.get_running_loop()
        self._last_write = time.monotonic()
        # In the caller's context, so that what `fn` logs carries the caller's request id.
        return await loop.run_in_executor(self._writers, contextvars.copy_context().run, self.write_now, fn)

    def write_now(self, fn: Callable[[PostgresTransaction], T]) -> T:
        """Run `fn(tx)` in a transaction on the calling thread, again if it deadlocked."""
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            pool = self._pool_of(self._writes)
            try:
                with pool.connection() as conn:
                    return self._transaction(
                        conn, _BEGIN, lambda: fn(PostgresTransaction(conn, self.instance))
                    )
            except _RETRYABLE as exc:
                if attempt == WRITE_ATTEMPTS:
                    raise StoreUnavailable(f"a write kept conflicting with others: {exc}") from exc
                time.sleep(RETRY_BACKOFF.delay_s(attempt, self._rng))
            except psycopg.OperationalError as exc:
                raise self._failure(exc) from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _transaction(
        conn: Connection, begin: bytes, fn: Callable[[], T], answered: Callable[[T], object] | None = None
    ) -> T:
        """`fn()` in one transaction on an autocommit connection: `begin`, and what `fn` sends unread,
        go with its next read (`Connection.defer`); `answered` gets a read's result before its COMMIT."""
        conn.begin_deferred(begin)
        try:
            result = fn()
            if answered is not None:
                answered(result)
            conn.commit_deferred()
        except BaseException:
            conn.deferred = None  # the transaction failed: what it kept is rolled back
            if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                try:
                    conn.rollback()
                except psycopg.Error:
                    pass  # a broken connection: the pool discards it
            raise
        return result

    def run_outside_transaction(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` on a writer connection in autocommit mode (VACUUM cannot run in a transaction)."""
        pool = self._pool_of(self._writes)
        try:
            with pool.connection() as conn:  # writers' connections are in autocommit mode
                return fn(conn)
        except psycopg.OperationalError as exc:
            raise self._failure(exc) from exc

    forget_held = staticmethod(forget_held)

    async def checkpoint(self) -> tuple[int, int, int]:
        # What forget owes the table files: PostgresMaintenance.scrub.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._writers, self.run_outside_transaction, PostgresMaintenance.scrub
        )

    async def catch_up_search(self) -> int:
        # The recall index (search needs no catching up: PostgreSQL keeps its trigram index itself).
        return await self.write(lambda tx: tx.recall.catch_up(SEARCH_CATCH_UP))

    # the circuit

    def _pool_of(self, pool: ConnectionPool[Connection] | None) -> ConnectionPool[Connection]:
        """`pool`, unless PostgreSQL is down (DatabaseDown at once) or the store is not open."""
        outage = self._outage
        if outage is not None:
            raise self._down(outage)
        if pool is None:
            raise StoreUnavailable("the store is not open")
        return pool

    def _down(self, outage: _Outage) -> DatabaseDown:
        return DatabaseDown(
            f"PostgreSQL at {self.location} is down ({outage.reason}; for "
            f"{time.monotonic() - outage.since:.1f} s): the service serves again as soon as it answers"
        )

    def _failure(self, exc: psycopg.OperationalError) -> StoreUnavailable:
        """What a caller is told of `exc`; when the server does not answer, the circuit trips."""
        if not is_outage(exc):
            return StoreUnavailable(f"PostgreSQL at {self.location} gave up a statement: {_first_line(exc)}")
        if isinstance(exc, PoolTimeout) and self._outage is None and self._responds():
            # A connection made slowly on a loaded machine is not an outage: tripping would
            # answer every request 503 and drop every pooled connection, for this one wait.
            return StoreUnavailable(
                f"PostgreSQL at {self.location} answers, but no pooled connection was free within "
                f"{POOL_WAIT_S} s (the service is overloaded): try again"
            )
        with self._circuit:
            outage = self._outage
            if outage is None:
                outage = self._outage = _Outage(_first_line(exc), time.monotonic())
                self._tripped.set()
                log.error(
                    "PostgreSQL at %s is down (%s): every request is answered 503 at once until it answers again",
                    self.location,
                    outage.reason,
                )
        return self._down(outage)

    def _probe_loop(self) -> None:
        """While the circuit is tripped: drop the dead pools, probe until PostgreSQL answers, make new ones."""
        # close() sets _stop before _tripped, and _tripped is already set during an outage: when
        # the clear below swallows close()'s wake-up, this check sees its stop (else close() hung).
        while not self._stop.is_set():
            self._tripped.wait()
            if self._stop.is_set():
                return
            for pool in (self._reads, self._writes):
                if pool is not None:
                    # Its connections are dead, and its own reconnection would back off for seconds.
                    pool.close(timeout=1.0)
            while not self._answers():
                if self._stop.wait(PROBE_EVERY_S):
                    return
            with self._circuit:
                outage, self._outage = self._outage, None
                self._tripped.clear()
            if outage is not None:
                log.warning(
                    "PostgreSQL at %s answers again after %.1f s down: serving",
                    self.location,
                    time.monotonic() - outage.since,
                )

    def _answers(self) -> bool:
        """Whether PostgreSQL answers now; if it does, the pools are made anew first."""
        if not self._responds():
            return False
        try:
            self._open_pools(POOL_WAIT_S)
        except psycopg.Error:
            return False
        return True

    def _responds(self) -> bool:
        """Whether a new connection to PostgreSQL is made and answers a statement now."""
        try:
            with psycopg.connect(self.url, autocommit=True, **CONNECT_OPTIONS) as conn:
                conn.execute(b"SELECT 1")
        except psycopg.Error:
            return False
        return True

    # background indexing

    def _drop_forgotten(self) -> None:
        """Every `HELD_CHECK_S`, drop the copies of recall indexes whose pairs another instance forgot."""
        now = time.monotonic()
        if now - self._held_checked < HELD_CHECK_S or not POSTINGS.held_keys():
            return
        self._held_checked = now
        self.read_now(lambda view: view.recall.drop_gone())

    def _index_loop(self) -> None:
        """Keep the recall index up to date, a chunk at a time, whichever instance stored the turns."""
        while not self._stop.wait(INDEX_EVERY_S):
            if self._outage is not None:
                continue  # said once, when the circuit tripped
            try:
                self._drop_forgotten()
                due = index_due(time.monotonic(), self._last_write, self._last_indexed)
                while due is not None and not self._stop.is_set():
                    self._last_indexed = time.monotonic()
                    if self.write_now(lambda tx: tx.recall.catch_up(INDEX_CHUNK)) < INDEX_CHUNK or not due:
                        break
                    # More is queued: indexed on while writes stay paused, else after them.
                    due = True if time.monotonic() - self._last_write >= IDLE_AFTER_S else None
            except DatabaseDown:
                pass
            except Exception:
                log.exception("indexing messages for recall failed; it is tried again later")
