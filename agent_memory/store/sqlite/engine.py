"""The embedded SQLite store: one writer thread with group commit, pooled readers.

Every write is a function run on the writer thread inside a savepoint of a shared
transaction; many such functions commit together (one fsync), and each caller's future
resolves only after that commit. A failing function rolls back its own savepoint only.
The view and the transaction are made of one repository object per aggregate.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils import Database

from agent_memory.errors import StoreUnavailable
from agent_memory.store.protocols import Store
from agent_memory.store.shared.recall import BUSY_INDEX_EVERY_S, IDLE_AFTER_S, SEARCH_CATCH_UP
from agent_memory.store.shared.view import SharedView
from agent_memory.store.sqlite import repositories
from agent_memory.store.sqlite.common import SQLiteSql
from agent_memory.store.sqlite.maintenance import SQLiteMaintenance
from agent_memory.store.sqlite.migrations import migrations
from agent_memory.store.sqlite.recall import SQLiteRecall, forget_held
from agent_memory.store.sqlite.search import SQLiteSearch, folded_holds

__all__ = ["SQLiteStore", "SQLiteTransaction", "SQLiteView"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The writer indexes (search's and recall's) in transactions of this many messages, so that a
# callback arriving meanwhile waits little: when idle, and under load (store/shared/recall.py).
IDLE_INDEX_CHUNK = 1000
BUSY_INDEX_CHUNK = 500
# PRAGMA auto_vacuum's answer for INCREMENTAL.
AUTO_VACUUM_INCREMENTAL = 2


def _create_private(path: Path) -> None:
    """Create a new database file readable by its owner alone (0600, whatever the umask): it
    holds what users said. SQLite gives its -wal and -shm the mode of the database file."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return  # an existing file keeps the mode its operator gave it
    os.chmod(path, 0o600)  # an odd umask (0o400) would leave even the owner unable to write


def _connect(path: Path, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 5000")
    # What confirms the trigram index's rows hold a word (store/sqlite/search.py).
    conn.create_function("folded_holds", 2, folded_holds, deterministic=True)
    if writer:
        # Only takes effect on a new file: lets retention give space back without VACUUM. Set
        # only when it differs: setting it writes (and fsyncs) a transaction at every open.
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a 200 to Agora promises the callback survives a power cut.
        conn.execute("PRAGMA synchronous = FULL")
        # Forgotten text must not linger in freed pages.
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA foreign_keys = ON")
    else:
        # A reader begins no transaction of its own: one begun for a write it refuses (query_only)
        # would stay open, and the reader read its snapshot from then on.
        conn.isolation_level = None
        conn.execute("PRAGMA query_only = ON")
    return conn


class SQLiteView(SharedView):
    """The repositories over one connection: a reader's (query_only), or the writer's."""

    search: SQLiteSearch
    recall: SQLiteRecall

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(sql := SQLiteSql(conn), facts=repositories.SQLiteFacts)
        # Backend-specific: tests and benchmarks of this backend may run SQL on it.
        self.conn = conn
        self.sessions = repositories.SQLiteSessions(sql)
        self.jobs = repositories.SQLiteJobs(sql)
        self.watches = repositories.SQLiteWatches(sql)
        self.search = SQLiteSearch(conn)
        self.recall = self.search.recall
        self.vectors = repositories.SQLiteVectors(sql)
        self.maintenance = SQLiteMaintenance(conn)


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, committed when the block ends and rolled back if it raises.

    It takes the write lock as it begins (BEGIN IMMEDIATE), while the busy timeout still
    covers waiting for another process's writer (a CLI command beside the service). A
    transaction that read first and wrote later would instead fail at once with "database
    is locked" whenever another connection wrote meanwhile: SQLite cannot upgrade a read
    snapshot that is no longer the newest.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class SQLiteTransaction(SQLiteView):
    """The repositories on the writer connection, inside the current transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.leases = repositories.SQLiteLeases(self.sql)
        # How many savepoints are open: a savepoint is named by its depth, so that its
        # statements are the same few texts, prepared once (sqlite3's statement cache), where
        # a name per savepoint made two new statements to prepare for every write.
        self._depth = 0

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        name = f"sp_{self._depth}"
        self.conn.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                self.conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        finally:
            self._depth -= 1
        self.conn.execute(f"RELEASE SAVEPOINT {name}")


@dataclass(eq=False)
class _Work:
    fn: Callable[[SQLiteTransaction], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    transactional: bool = True
    outcome: tuple[bool, Any] = field(default=(False, None))


_STOP = object()


def _settle_all(works: list[_Work]) -> None:
    for work in works:
        if work.future.done():
            continue  # the caller gave up waiting
        ok, value = work.outcome
        if ok:
            work.future.set_result(value)
        else:
            work.future.set_exception(value)


class SQLiteStore(Store):
    """The SQLite implementation of the store: `open`, `read`, `write`, `checkpoint`, `close`."""

    def __init__(self, path: Path | str, *, group_commit_max: int = 256, readers: int = 4) -> None:
        self.path = Path(path)
        self.group_commit_max = group_commit_max
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="store-read")
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        self._last_indexed = 0.0

    @property
    def location(self) -> str:
        """The database file."""
        return str(self.path)

    # lifecycle

    def open(self) -> None:
        """Create or migrate the database and start the writer thread."""
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _create_private(self.path)
        self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
        self._writer.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise StoreUnavailable(f"cannot open {self.path}: {self._startup_error}")

    def close(self) -> None:
        """Finish the queued writes, stop the writer and close every connection."""
        if self._writer is not None and self._writer.is_alive():
            self._queue.put(_STOP)
            self._writer.join()
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    # reads

    def _reader(self) -> SQLiteView:
        view = getattr(self._local, "view", None)
        if view is None:
            conn = _connect(self.path, writer=False)
            with self._reader_lock:
                self._reader_conns.append(conn)
            view = self._local.view = SQLiteView(conn)
        return view

    def read_now(self, fn: Callable[[SQLiteView], T]) -> T:
        return fn(self._reader())

    def read_here(self, fn: Callable[[SQLiteView], T]) -> T:
        """Run a brief `fn(view)` on the calling thread (the event loop) and its own reader
        connection; raises NotBrief, before any slow step, when it would search SQLite for a
        pair not held in memory."""
        view = self._reader()
        view.recall.brief = True
        try:
            return fn(view)
        finally:
            view.recall.brief = False

    # writes

    async def write(self, fn: Callable[[SQLiteTransaction], T]) -> T:
        """Run `fn(tx)` on the writer thread; returns once its transaction is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        # In the caller's context, so that what `fn` logs carries the caller's request id.
        context = contextvars.copy_context()
        self._queue.put(_Work(lambda tx: context.run(fn, tx), loop, future))
        return await future

    async def catch_up_search(self) -> int:
        """Index what the idle writer has not yet indexed (bounded); returns how many."""
        return await self.write(
            lambda tx: tx.search.catch_up(SEARCH_CATCH_UP) + tx.recall.catch_up(SEARCH_CATCH_UP)
        )

    forget_held = staticmethod(forget_held)

    async def checkpoint(self) -> tuple[int, int, int]:
        """Copy the WAL into the database file and truncate it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, int, int]] = loop.create_future()

        def run(tx: SQLiteTransaction) -> tuple[int, int, int]:
            row = tx.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            return (row[0], row[1], row[2])

        self._queue.put(_Work(run, loop, future, transactional=False))
        return await future

    def _write_loop(self) -> None:
        try:
            conn = _connect(self.path, writer=True)
            db = Database(conn, execute_plugins=False)
            migrations.apply(db)
        except BaseException as exc:  # reported by open()
            self._startup_error = exc
            self._ready.set()
            return
        tx = SQLiteTransaction(conn)
        self._ready.set()
        log.info("store ready: %s", self.path)
        taking = True
        while taking:
            try:
                first = self._queue.get(timeout=IDLE_AFTER_S)
            except queue.Empty:
                self._idle_step(tx)
                first = self._queue.get()
            if first is _STOP:
                break
            batch: list[_Work] = [first]
            taking = self._run_batch(tx, batch, self._take(batch))
            if time.monotonic() - self._last_indexed >= BUSY_INDEX_EVERY_S:
                self._index_step(tx, BUSY_INDEX_CHUNK)
        conn.close()

    def _take(self, batch: list[_Work]) -> bool:
        """Move the writes waiting in the queue into `batch`, up to `group_commit_max`; False
        once it took the stop (the writes before it are in the batch)."""
        while len(batch) < self.group_commit_max:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True
            if item is _STOP:
                return False
            batch.append(item)
        return True

    def _idle_step(self, tx: SQLiteTransaction) -> None:
        """While no write waits, bring the search and recall indexes up to date in short transactions."""
        while self._queue.empty() and self._index_step(tx, IDLE_INDEX_CHUNK, recall=True) == IDLE_INDEX_CHUNK:
            pass

    def _index_step(self, tx: SQLiteTransaction, limit: int, *, recall: bool = False) -> int:
        """Index up to `limit` messages in a transaction of their own; returns how many.

        Between bursts of writes only the search index keeps up: the recall index (stemming
        in Python) waits for an idle writer, or for a question that needs it.
        """
        self._last_indexed = time.monotonic()
        try:
            with _immediate(tx.conn):
                indexed = tx.search.catch_up(limit)
                return max(indexed, tx.recall.catch_up(limit)) if recall else indexed
        except Exception:
            log.exception("indexing messages for search failed; it is tried again later")
            return 0

    def _run_batch(self, tx: SQLiteTransaction, batch: list[_Work], taking: bool) -> bool:
        """Run a batch's writes in one transaction, with those that arrive while they run (while
        `taking`); returns `taking`, False once the stop was taken."""
        transactional = [work for work in batch if work.transactional]
        if transactional:
            try:
                with _immediate(tx.conn):
                    ran = 0
                    while ran < len(transactional):
                        for work in transactional[ran:]:
                            try:
                                with tx.savepoint():
                                    work.outcome = (True, work.fn(tx))
                            except Exception as exc:
                                work.outcome = (False, exc)
                        ran = len(transactional)
                        if taking:
                            # Writes that came while these ran join their commit: one fsync for
                            # all, and they need not wait for this one to begin their own (a
                            # burst's commits were of ~8 callbacks at 16 in flight; a commit's
                            # CPU is mostly its own, ~0.35 ms, not its writes').
                            start = len(batch)
                            taking = self._take(batch)
                            transactional.extend(work for work in batch[start:] if work.transactional)
            except Exception as exc:
                log.exception("commit of %d writes failed", len(transactional))
                failure = StoreUnavailable(f"the database could not commit: {exc}")
                for work in transactional:
                    work.outcome = (False, failure)
        for work in batch:
            if not work.transactional:
                try:
                    work.outcome = (True, work.fn(tx))
                except Exception as exc:
                    work.outcome = (False, exc)
        # One wake-up per event loop for the whole batch, not one per write.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Work]] = {}
        for work in batch:
            by_loop.setdefault(work.loop, []).append(work)
        for loop, works in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, works)
            except RuntimeError:
                pass  # the caller's loop is gone; the writes are committed all the same
        return taking
