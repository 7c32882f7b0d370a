"""The use-cases, once: what the HTTP API, the CLI and the platforms ask of memory.

`Memory` is the application layer, a facade over one module per capability: `reading`
(start contexts and recall, memory/reading.py), `facts` (by hand), `identity` (sessions and
bindings), `follows` (running agents), `keys` (API keys, console sign-ins, custom-LLM
routes), `queue` (condense jobs), `console` (the operator's reads) and `admin` (search,
statistics, export, import, forget); taking events in is its own. The web routes, CLI
commands and platforms only parse their input, call it, and shape or print what it returns:
domain objects (`core.domain`) and the store's reports, never database rows. What they need
besides (settings, metrics, the job runner) is handed to them, not reached through `Memory`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent_memory.condense.worker import WORKERS
from agent_memory.core.domain import InboxEntry, InboxStatus
from agent_memory.core.events import HistoryWindow, KnownEnd, Outcome, RawEvent, SessionEvent
from agent_memory.embed import Embedder
from agent_memory.errors import AgentMemoryError, Conflict
from agent_memory.memory.admin import Admin
from agent_memory.memory.condensing import JobQueue
from agent_memory.memory.console import Console
from agent_memory.memory.facts import Facts
from agent_memory.memory.follows import Follows
from agent_memory.memory.identity import Identity
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.keys import Keys
from agent_memory.memory.reading import Reading
from agent_memory.memory.tokenizer import use_tokenizer
from agent_memory.metrics import Metrics
from agent_memory.settings import Settings
from agent_memory.store import ReadView, Store, Transaction

# One running agent's window to merge (`Memory.merge_windows`): what it repeats of the agent's
# window last merged, and what runs in its transaction before and after it.
WindowMerge = tuple[
    HistoryWindow,
    KnownEnd | None,
    Callable[[Transaction], object] | None,
    Callable[[Transaction], object] | None,
]


def count_tokens_with(settings: Settings) -> None:
    """Count tokens with the configured tokenizer, here and in the condenser's worker process."""
    use_tokenizer(settings.tokenizer)
    WORKERS.prepare(use_tokenizer, settings.tokenizer)


class Memory:
    """Long-term memory of (user, character) pairs: read it, change it, forget it, take events in."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        embedder: Embedder | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """With an `embedder` recall also finds turns by meaning; `metrics` times recalls."""
        self._store = store
        count_tokens_with(settings)
        self._ingestor = ingestor = Ingestor(settings)
        # Told of every committed forget (user, character or None), to drop what they hold of it.
        self.forget_listeners: list[Callable[[str, str | None], None]] = []
        self.reading = Reading(settings, store, embedder=embedder, metrics=metrics)
        self.facts = Facts(store)
        self.identity = Identity(store, ingestor)
        self.follows = Follows(store, ingestor)
        self.keys = Keys(store)
        self.queue = JobQueue(store)
        self.console = Console(store)
        self.admin = Admin(settings, store, ingestor, self.reading.contexts, self.forget_listeners)

    # events in

    async def accept_event(self, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Record a platform event under its id and apply it, in one transaction; a call's
        start warms its pair's recall index."""
        outcome = await self._store.write(lambda tx: self._ingestor.accept(tx, raw, event))
        if (
            isinstance(event, SessionEvent)
            and event.kind == "joined"
            and outcome.user_id
            and outcome.character_id
        ):
            self.reading.warm(outcome.user_id, outcome.character_id)
        return outcome

    async def reapply_event(self, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply again an event already recorded (one that failed or was applied in part)."""
        return await self._store.write(lambda tx: self._ingestor.reapply(tx, raw, event))

    async def recorded_events(self, statuses: Sequence[InboxStatus], limit: int) -> list[InboxEntry]:
        """Recorded raw events of the given statuses, oldest first, at most `limit`."""

        def read(view: ReadView) -> list[InboxEntry]:
            return [entry for status in statuses for entry in view.inbox.by_status(status, limit)]

        entries = await self._store.read(read)
        return sorted(entries, key=lambda entry: (entry.received_ms, entry.event_id))[:limit]

    async def merge_window(
        self,
        window: HistoryWindow,
        stamp: int,
        *,
        then: Callable[[Transaction], object] | None = None,
        known: KnownEnd | None = None,
        first: Callable[[Transaction], object] | None = None,
    ) -> Outcome:
        """Merge a running agent's history window; `first(tx)` and `then(tx)` run in the same
        transaction, before and after it; `known`: what the window repeats of the run's window
        last merged (`Ingestor.merge_window`)."""

        return await self._store.write(lambda tx: self._merged(tx, (window, known, first, then), stamp))

    async def merge_windows(self, merges: Sequence[WindowMerge], stamp: int) -> list[Outcome | Exception]:
        """`merge_window` of several running agents' windows in one transaction (one commit), each
        in a savepoint of its own: one refused (an `AgentMemoryError`) is undone alone and its error
        is its outcome. Anything else fails the transaction, so that a backend runs it again when
        it lost a race (PostgreSQL's deadlocks), as it would a window merged alone."""

        def merge(tx: Transaction) -> list[Outcome | Exception]:
            outcomes: list[Outcome | Exception] = []
            for each in merges:
                try:
                    with tx.savepoint():
                        outcome = self._merged(tx, each, stamp)
                except AgentMemoryError as exc:
                    outcomes.append(exc)
                else:
                    outcomes.append(outcome)
            return outcomes

        return await self._store.write(merge)

    def _merged(self, tx: Transaction, each: WindowMerge, stamp: int) -> Outcome:
        """One window merged in `tx`, its `first` and `then` run before and after it."""
        window, known, first, then = each
        if first is not None:
            first(tx)
        outcome = self._ingestor.merge_window(tx, window, stamp, known)
        if then is not None:
            then(tx)
        return outcome

    async def add_messages(
        self, window: HistoryWindow, user_id: str, character_id: str, stamp: int
    ) -> Outcome:
        """Merge the messages an app sent of one of its sessions (the generic write API), kept
        under the pair in the window's labels. A session belongs to the pair it was first stored
        under: sent for another pair (or bound to one since), it is a Conflict, which does not
        name the pair that holds it."""

        def merge(tx: Transaction) -> Outcome:
            # On a shared database this read holds the session's lock until commit: two first
            # posts of one session for two pairs cannot both create it.
            session = tx.sessions.get(window.agent_id)
            if session is not None and (session.user_id, session.character_id) != (user_id, character_id):
                raise Conflict(
                    "this session_id is kept under another user or character: a session belongs "
                    "to the pair it was first stored for; send this pair's messages under a "
                    "session_id of their own",
                    code="session_conflict",
                )
            return self._ingestor.merge_window(tx, window, stamp)

        return await self._store.write(merge)
