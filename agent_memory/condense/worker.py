"""A worker process for pure-Python condensing, so it never holds the service's GIL.

On a thread, the offline condenser's milliseconds of Python per job took the interpreter
from the event loop in 5 ms slices: every stream relayed meanwhile (the custom-LLM
endpoint's first tokens) waited. In its own process, at a lower CPU priority, it takes a
core the service is not using, or yields to the one it is.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from agent_memory.core.textcache import forget_texts
from agent_memory.errors import LLMError

log = logging.getLogger(__name__)

R = TypeVar("R")

# Above the service's priority: condensing waits, answering does not.
NICENESS = 10
ORPHAN_CHECK_S = 1.0


def _orphaned(service_pid: int) -> bool:
    try:
        os.kill(service_pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or its pid taken by another user's process
        return True
    return False


def _watch_service(service_pid: int) -> None:
    # A pool worker whose service was killed (kill -9, OOM) would wait for work forever.
    while not _orphaned(service_pid):
        time.sleep(ORPHAN_CHECK_S)
    os._exit(0)


def _start_worker(service_pid: int, prepare: tuple[Callable[..., object], tuple[object, ...]] | None) -> None:
    """In the worker: a lower priority, an exit of its own once the service is gone, and the
    service's own preparation (its tokenizer: summaries are budgeted as the service counts)."""
    if prepare is not None:
        fn, args = prepare
        fn(*args)
    nice = getattr(os, "nice", None)  # POSIX only
    try:
        if nice is not None:
            nice(NICENESS)
    except OSError:  # not allowed here: the same priority is still correct
        pass
    threading.Thread(target=_watch_service, args=(service_pid,), name="watch-service", daemon=True).start()


class WorkerPool:
    """One lazily started worker process, shared by every condenser of this process."""

    def __init__(self) -> None:
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._prepare: tuple[Callable[..., object], tuple[object, ...]] | None = None

    def prepare(self, fn: Callable[..., object], *args: object) -> None:
        """Have the worker call `fn(*args)` as it starts (a module-level function: it is pickled by
        name); a worker already started with another preparation is replaced."""
        with self._lock:
            if self._prepare == (fn, args):
                return
            self._prepare = (fn, args)
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                # Not forked: a copy of a process with running threads (the store's) may
                # inherit a lock some thread held.
                context = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
                self._executor = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=context,
                    initializer=_start_worker,
                    initargs=(os.getpid(), self._prepare),
                )
            return self._executor

    async def run(self, fn: Callable[..., R], *args: object) -> R:
        """`fn(*args)` in the worker process (started at the first call); a worker that died is
        replaced, and the call fails with LLMError so its job is retried."""
        pool = self._pool()
        try:
            return await asyncio.wrap_future(pool.submit(fn, *args))
        except BrokenProcessPool as exc:
            with self._lock:
                if self._executor is pool:
                    self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)
            log.warning("the condensing worker process died; a new one takes the next job")
            raise LLMError(f"the condensing worker process died: {exc}") from exc

    async def forget_texts(self) -> None:
        """Empty the worker's text caches (what condensing kept of words said), if it was started:
        a forget leaves none of its words in any process of the service."""
        with self._lock:
            started = self._executor is not None
        if started:
            try:
                await self.run(forget_texts)
            except LLMError:  # the worker died meanwhile: its caches went with it
                pass

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


WORKERS = WorkerPool()
