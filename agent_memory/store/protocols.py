"""What the rest of the service may ask of a store: a `Store` runs plain functions on a `ReadView`
(`await store.read(fn)`) or in a durable `Transaction` (`await store.write(fn)`; one that raises
leaves nothing behind). The repositories are synchronous, so a backend runs them on threads over
blocking connections and a use-case that reads and then writes stays one transaction."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar, runtime_checkable

from agent_memory.store.shared.analytics import Analytics
from agent_memory.store.shared.bindings import Bindings
from agent_memory.store.shared.console import ConsoleReads, ConsoleSessions
from agent_memory.store.shared.export import Export
from agent_memory.store.shared.facts import Facts, Summaries
from agent_memory.store.shared.inbox import Inbox
from agent_memory.store.shared.jobs import Jobs
from agent_memory.store.shared.keys import ApiKeys, LlmRoutes
from agent_memory.store.shared.maintenance import Maintenance
from agent_memory.store.shared.messages import Messages, Versions
from agent_memory.store.shared.recall import RecallReads
from agent_memory.store.shared.restore import Restore
from agent_memory.store.shared.search import SearchReads
from agent_memory.store.shared.sessions import Sessions
from agent_memory.store.shared.vectors import Vectors
from agent_memory.store.shared.watches import Watches

T = TypeVar("T")


class NotBrief(Exception):
    """A read asked for right here (`ReadsHere.read_here`) that would not be brief: read it on a thread."""


# leases: cluster-wide work that one instance at a time does


class Leases(Protocol):
    """Named leases, so that work scheduled on every instance (retention) runs on one."""

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Hold `name` for `ttl_ms` from now unless another holds it; whether this instance holds it."""
        ...


# the view, the transaction and the store


class ReadView:
    """The repositories over one consistent connection: a read calls only their reads (a write in
    a read is refused: SQLite's readers are query_only, PostgreSQL's reads READ ONLY). A backend's
    view is a `store.shared.view.SharedView`, which is a Transaction."""

    sessions: Sessions
    messages: Messages
    facts: Facts
    summaries: Summaries
    jobs: Jobs
    inbox: Inbox
    watches: Watches
    bindings: Bindings
    llm_routes: LlmRoutes
    api_keys: ApiKeys
    search: SearchReads
    recall: RecallReads
    versions: Versions
    vectors: Vectors
    analytics: Analytics
    export: Export
    restore: Restore
    maintenance: Maintenance
    console_sessions: ConsoleSessions
    console: ConsoleReads


class Transaction(ReadView):
    """The repositories inside one write transaction."""

    leases: Leases

    def savepoint(self) -> AbstractContextManager[None]:
        """Undo only what the block wrote if it raises."""
        raise NotImplementedError


class Store(ABC):
    """A database: functions run on a view or in a durable transaction; a backend's engine."""

    # The threads `read` runs its functions on (the backend's, as many as its read connections).
    _readers: ThreadPoolExecutor

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the data lives (a path, or a URL without credentials)."""

    @abstractmethod
    def open(self) -> None:
        """Create or migrate the database and get ready for work."""

    @abstractmethod
    def close(self) -> None:
        """Finish the work under way, stop the store's threads and close its connections."""

    async def read(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)` on a reader thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, self.read_now, fn)

    @abstractmethod
    def read_now(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)` on the calling thread (CLI commands and benchmarks)."""

    @abstractmethod
    async def write(self, fn: Callable[[Transaction], T]) -> T:
        """`fn(tx)` in a transaction; returns once it is durably committed."""

    @abstractmethod
    async def checkpoint(self) -> tuple[int, int, int]:
        """Make what was deleted leave the files now (busy, log pages, pages written back)."""

    @abstractmethod
    def forget_held(self) -> None:
        """Drop what this process holds of the recall index once a forget committed (a read racing
        the forget would otherwise bring its words back)."""

    @abstractmethod
    async def catch_up_search(self) -> int:
        """Bring the search index up to date (bounded), so a search sees what was just stored."""


@runtime_checkable
class ReadsHere(Protocol):
    """What only an embedded store can do: read on the calling thread (check with isinstance)."""

    def read_here(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)` on the event loop, for a read as brief as a hand-off to a thread and back;
        raises NotBrief as soon as it would not be brief (it would search SQLite)."""
        ...
