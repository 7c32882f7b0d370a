"""What the rest of the service may ask of a store: one protocol (or shared class) per repository.

A backend (`store/sqlite/`, later `store/postgres/`) implements `Store`. Work runs as plain
functions: `await store.read(fn)` calls `fn(view)` with a `ReadView` (consistent reads),
`await store.write(fn)` calls `fn(tx)` with a `Transaction` and returns once it is durably
committed; a function that raises leaves nothing behind. The repositories are synchronous,
so a backend may run them on threads over blocking connections (SQLite, psycopg) and a
use-case that reads and then writes stays one transaction.

Each repository comes as its read half (what a `ReadView` offers) and its full form (what a
`Transaction` offers). They take and return `agent_memory.core.domain` objects and the types
of `agent_memory.store.types`; how those are encoded in tables is the backend's business.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar, runtime_checkable

from agent_memory.store.shared.analytics import Analytics, AnalyticsReads
from agent_memory.store.shared.bindings import BindingReads, Bindings
from agent_memory.store.shared.console import ConsoleReads, ConsoleSessionReads, ConsoleSessions
from agent_memory.store.shared.export import Export
from agent_memory.store.shared.facts import FactReads, Facts, Summaries, SummaryReads
from agent_memory.store.shared.inbox import Inbox, InboxReads
from agent_memory.store.shared.jobs import JobReads, Jobs
from agent_memory.store.shared.keys import ApiKeyReads, ApiKeys, LlmRouteReads, LlmRoutes
from agent_memory.store.shared.maintenance import Maintenance, MaintenanceReads
from agent_memory.store.shared.messages import MessageReads, Messages
from agent_memory.store.shared.messages import Versions as VersionReads
from agent_memory.store.shared.recall import RecallReads
from agent_memory.store.shared.restore import Restore
from agent_memory.store.shared.search import Search, SearchReads
from agent_memory.store.shared.sessions import SessionReads, Sessions
from agent_memory.store.shared.vectors import VectorReads, Vectors
from agent_memory.store.shared.watches import Watches, WatchReads

T = TypeVar("T")


class NotBrief(Exception):
    """A read asked for right here (`ReadsHere.read_here`) that would not be brief: read it on a thread."""


# leases: cluster-wide work that one instance at a time does


class Leases(Protocol):
    """Named leases, so that work scheduled on every instance (retention) runs on one."""

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Hold `name` for `ttl_ms` from now if nobody else holds it (a holder extends it);
        whether this instance holds it. One process alone always does."""
        ...


# the view, the transaction and the store


class ReadView(Protocol):
    """Read-only repositories over one consistent connection."""

    @property
    def sessions(self) -> SessionReads: ...
    @property
    def messages(self) -> MessageReads: ...
    @property
    def facts(self) -> FactReads: ...
    @property
    def summaries(self) -> SummaryReads: ...
    @property
    def jobs(self) -> JobReads: ...
    @property
    def inbox(self) -> InboxReads: ...
    @property
    def watches(self) -> WatchReads: ...
    @property
    def bindings(self) -> BindingReads: ...
    @property
    def llm_routes(self) -> LlmRouteReads: ...
    @property
    def api_keys(self) -> ApiKeyReads: ...
    @property
    def search(self) -> SearchReads: ...
    @property
    def recall(self) -> RecallReads: ...
    @property
    def versions(self) -> VersionReads: ...
    @property
    def vectors(self) -> VectorReads: ...
    @property
    def analytics(self) -> AnalyticsReads: ...
    @property
    def export(self) -> Export: ...
    @property
    def restore(self) -> Restore: ...
    @property
    def maintenance(self) -> MaintenanceReads: ...
    @property
    def console_sessions(self) -> ConsoleSessionReads: ...
    @property
    def console(self) -> ConsoleReads: ...


class Transaction(ReadView, Protocol):
    """The writable repositories inside one transaction."""

    @property
    def sessions(self) -> Sessions: ...
    @property
    def messages(self) -> Messages: ...
    @property
    def facts(self) -> Facts: ...
    @property
    def summaries(self) -> Summaries: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def watches(self) -> Watches: ...
    @property
    def bindings(self) -> Bindings: ...
    @property
    def llm_routes(self) -> LlmRoutes: ...
    @property
    def api_keys(self) -> ApiKeys: ...
    @property
    def search(self) -> Search: ...
    @property
    def vectors(self) -> Vectors: ...
    @property
    def analytics(self) -> Analytics: ...
    @property
    def maintenance(self) -> Maintenance: ...
    @property
    def console_sessions(self) -> ConsoleSessions: ...
    @property
    def leases(self) -> Leases: ...

    def savepoint(self) -> AbstractContextManager[None]:
        """Undo only what the block wrote if it raises."""
        ...


class Store(Protocol):
    """A database: functions run on a view or in a durable transaction."""

    @property
    def location(self) -> str:
        """Where the data lives (a path, or a URL without credentials)."""
        ...

    def open(self) -> None:
        """Create or migrate the database and get ready for work."""
        ...

    def close(self) -> None: ...

    async def read(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)`, off the event loop."""
        ...

    def read_now(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)` on the calling thread (CLI commands and benchmarks)."""
        ...

    async def write(self, fn: Callable[[Transaction], T]) -> T:
        """`fn(tx)` in a transaction; returns once it is durably committed."""
        ...

    async def checkpoint(self) -> tuple[int, int, int]:
        """Make what was deleted leave the files now (busy, log pages, pages written back)."""
        ...

    def forget_held(self) -> None:
        """Drop what this process holds in memory of the recall index (after a forget has
        committed: a read racing the forget would otherwise bring its words back)."""
        ...

    async def catch_up_search(self) -> int:
        """Bring the search index up to date (bounded), so a search sees what was just stored."""
        ...


@runtime_checkable
class ReadsHere(Protocol):
    """What only an embedded store can do: read on the calling thread. A store across the
    network never reads on the event loop, so it has no `read_here` (check with isinstance)."""

    def read_here(self, fn: Callable[[ReadView], T]) -> T:
        """`fn(view)` right here, on the calling thread (the event loop), for a read known to
        take a millisecond or two: a hand-off to a reader thread and back costs about as much.
        Raises NotBrief as soon as the read would not be brief (it would search SQLite)."""
        ...
