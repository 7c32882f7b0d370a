"""The PostgreSQL store: pooled connections on threads, one transaction per write, many instances.

Reads run in read-only REPEATABLE READ transactions (one consistent snapshot per function),
writes in READ COMMITTED transactions that lock what they must (a session's windows merge
under its advisory lock, jobs and followed agents are claimed with leases). A write that
deadlocks or loses a serialisation race is run again from the start; its function only
touches the transaction, so running it again is safe.
"""

from __future__ import annotations

import asyncio
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
from typing import TypeVar

import psycopg
from psycopg import IsolationLevel, errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from agent_memory.core.clock import Backoff
from agent_memory.errors import StoreUnavailable
from agent_memory.store.postgres import migrations
from agent_memory.store.postgres.analytics import PostgresAnalytics
from agent_memory.store.postgres.api_keys import PostgresApiKeys
from agent_memory.store.postgres.bindings import PostgresBindings
from agent_memory.store.postgres.common import Connection, Instance
from agent_memory.store.postgres.export import PostgresExport
from agent_memory.store.postgres.facts import PostgresFacts, PostgresSummaries
from agent_memory.store.postgres.inbox import PostgresInbox
from agent_memory.store.postgres.jobs import PostgresJobs
from agent_memory.store.postgres.leases import PostgresLeases
from agent_memory.store.postgres.llm_routes import PostgresLlmRoutes
from agent_memory.store.postgres.maintenance import PostgresMaintenance
from agent_memory.store.postgres.messages import PostgresMessages
from agent_memory.store.postgres.recall import PostgresRecall, forget_held
from agent_memory.store.postgres.search import PostgresSearch
from agent_memory.store.postgres.sessions import PostgresSessions
from agent_memory.store.postgres.vectors import PostgresVectors
from agent_memory.store.postgres.versions import PostgresVersions
from agent_memory.store.postgres.watches import PostgresWatches
from agent_memory.store.protocols import NotBrief

__all__ = ["PostgresStore", "PostgresTransaction", "PostgresView"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# A write that deadlocked or lost a serialisation race is run again this many times.
WRITE_ATTEMPTS = 5
RETRY_BACKOFF = Backoff(base_s=0.005, cap_s=0.2)
# How long a caller waits for a free pooled connection before the store is "unavailable".
POOL_WAIT_S = 30.0
# The recall index is brought up to date in the background this often, this much at a time.
INDEX_EVERY_S = 0.2
INDEX_CHUNK = 500
# Messages a search or recall indexes before it reads, so that it sees what was just stored.
SEARCH_CATCH_UP = 20_000
_RETRYABLE = (errors.DeadlockDetected, errors.SerializationFailure)


def _index_chunk(tx: PostgresTransaction) -> int:
    return tx.recall.catch_up(INDEX_CHUNK)


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def instance_name() -> str:
    """A name for this process that no other instance shares, readable in the database."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class PostgresView:
    """The repositories over one pooled connection, inside the caller's transaction."""

    def __init__(self, conn: Connection, instance: Instance) -> None:
        # Backend-specific: tests and benchmarks of this backend may run SQL on it.
        self.conn = conn
        self.sessions = PostgresSessions(conn, instance)
        self.messages = PostgresMessages(conn, instance)
        self.facts = PostgresFacts(conn, instance)
        self.summaries = PostgresSummaries(conn, instance)
        self.jobs = PostgresJobs(conn, instance)
        self.inbox = PostgresInbox(conn, instance)
        self.watches = PostgresWatches(conn, instance)
        self.bindings = PostgresBindings(conn, instance)
        self.llm_routes = PostgresLlmRoutes(conn, instance)
        self.api_keys = PostgresApiKeys(conn, instance)
        self.search = PostgresSearch(conn, instance)
        self.recall = PostgresRecall(conn, instance)
        self.versions = PostgresVersions(conn, instance)
        self.vectors = PostgresVectors(conn, instance)
        self.analytics = PostgresAnalytics(conn, instance)
        self.export = PostgresExport(conn, instance)
        self.maintenance = PostgresMaintenance(conn, instance)


class PostgresTransaction(PostgresView):
    """The repositories inside one write transaction."""

    def __init__(self, conn: Connection, instance: Instance) -> None:
        super().__init__(conn, instance)
        self.leases = PostgresLeases(conn, instance)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only what the block wrote if it raises."""
        with self.conn.transaction():
            yield


class PostgresStore:
    """The PostgreSQL implementation of the store: `open`, `read`, `write`, `checkpoint`, `close`."""

    def __init__(self, url: str, *, lease_s: float = 30.0, pool_size: int = 8, index: bool = True) -> None:
        self.url = url
        self.instance = Instance(instance_name(), int(lease_s * 1000))
        self.pool_size = pool_size
        self._index = index
        self._reads: ConnectionPool[Connection] | None = None
        self._writes: ConnectionPool[Connection] | None = None
        self._readers = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="pg-read")
        self._writers = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="pg-write")
        self._stop = threading.Event()
        self._indexer: threading.Thread | None = None
        self._rng = random.Random()

    @property
    def location(self) -> str:
        """The database URL, without its password."""
        return redact(self.url)

    # lifecycle

    def open(self) -> None:
        """Migrate the database (one instance at a time), open the pools and start indexing."""
        try:
            with psycopg.connect(self.url, connect_timeout=10) as conn:
                ran = migrations.apply(conn)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot open PostgreSQL at {self.location}: {exc}".strip()
                + " (check AGENT_MEMORY_DB, and that the server is up and the database exists)"
            ) from exc
        if ran:
            log.info("migrated %s: %s", self.location, ", ".join(ran))
        self._reads = self._pool("reads", read_only=True)
        self._writes = self._pool("writes", read_only=False)
        if self._index:
            self._indexer = threading.Thread(target=self._index_loop, name="pg-index", daemon=True)
            self._indexer.start()
        log.info("store ready: %s as instance %s", self.location, self.instance.name)

    def _pool(self, name: str, *, read_only: bool) -> ConnectionPool[Connection]:
        def configure(conn: Connection) -> None:
            conn.isolation_level = (
                IsolationLevel.REPEATABLE_READ if read_only else IsolationLevel.READ_COMMITTED
            )
            conn.read_only = read_only

        pool: ConnectionPool[Connection] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            connection_class=Connection,
            kwargs={"row_factory": dict_row},
            configure=configure,
            name=f"agent-memory-{name}",
            open=False,
            timeout=POOL_WAIT_S,
        )
        pool.open(wait=True, timeout=POOL_WAIT_S)
        return pool

    def close(self) -> None:
        """Stop indexing, finish running work and close the pools."""
        self._stop.set()
        if self._indexer is not None:
            self._indexer.join()
        self._readers.shutdown(wait=True)
        self._writers.shutdown(wait=True)
        for pool in (self._reads, self._writes):
            if pool is not None:
                pool.close()

    # reads

    async def read(self, fn: Callable[[PostgresView], T]) -> T:
        """Run `fn(view)` on a reader thread, in one snapshot."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self.read_now, fn)

    def read_here(self, fn: Callable[[PostgresView], T]) -> T:
        """Never: a read over the network does not run on the event loop."""
        raise NotBrief("PostgreSQL is read over the network, on a reader thread")

    def read_now(self, fn: Callable[[PostgresView], T]) -> T:
        """Run `fn(view)` on the calling thread (CLI and benchmarks)."""
        if self._reads is None:
            raise StoreUnavailable("the store is not open")
        try:
            with self._reads.connection() as conn, conn.transaction():
                return fn(PostgresView(conn, self.instance))
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(f"PostgreSQL at {self.location} did not answer: {exc}") from exc

    # writes

    async def write(self, fn: Callable[[PostgresTransaction], T]) -> T:
        """Run `fn(tx)` in a transaction of its own; returns once it is committed."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writers, self.write_now, fn)

    def write_now(self, fn: Callable[[PostgresTransaction], T]) -> T:
        """Run `fn(tx)` in a transaction on the calling thread, again if it deadlocked."""
        if self._writes is None:
            raise StoreUnavailable("the store is not open")
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with self._writes.connection() as conn, conn.transaction():
                    return fn(PostgresTransaction(conn, self.instance))
            except _RETRYABLE as exc:
                if attempt == WRITE_ATTEMPTS:
                    raise StoreUnavailable(f"a write kept conflicting with others: {exc}") from exc
                time.sleep(RETRY_BACKOFF.delay_s(attempt, self._rng))
            except (psycopg.OperationalError, PoolTimeout) as exc:
                raise StoreUnavailable(f"PostgreSQL at {self.location} did not answer: {exc}") from exc
        raise AssertionError("unreachable")

    def run_outside_transaction(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` on a writer connection in autocommit mode (VACUUM cannot run in a transaction)."""
        if self._writes is None:
            raise StoreUnavailable("the store is not open")
        with self._writes.connection() as conn:
            conn.autocommit = True
            try:
                return fn(conn)
            finally:
                conn.autocommit = False

    def forget_held(self) -> None:
        """Drop what this process holds in memory of the recall index."""
        forget_held()

    async def checkpoint(self) -> tuple[int, int, int]:
        """Make what was deleted leave the table files now (see PostgresMaintenance.scrub)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._writers, self.run_outside_transaction, PostgresMaintenance.scrub
        )

    async def catch_up_search(self) -> int:
        """Index the turns stored but not yet in the recall index (bounded); returns how many."""
        return await self.write(lambda tx: tx.recall.catch_up(SEARCH_CATCH_UP))

    # background indexing

    def _index_loop(self) -> None:
        """Keep the recall index up to date, a chunk at a time, whichever instance stored the turns."""
        while not self._stop.wait(INDEX_EVERY_S):
            try:
                while not self._stop.is_set() and self.write_now(_index_chunk) == INDEX_CHUNK:
                    pass
            except Exception:
                log.exception("indexing messages for recall failed; it is tried again later")
