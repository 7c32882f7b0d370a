"""The whole memory at once: health, search, statistics, export and import, and forget."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.condense.worker import WORKERS
from agent_memory.core.clock import now_ms
from agent_memory.core.search import SEARCH_KINDS, MentionRole, Mentions, SearchKind, UserSearch
from agent_memory.core.textcache import forget_texts
from agent_memory.errors import NotFound, StoreUnavailable
from agent_memory.logs import pair_ref
from agent_memory.memory.embedding import forget_questions
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.reading import ContextCache
from agent_memory.memory.restore import Importer, ImportReport, Source
from agent_memory.memory.schedule import start_interval
from agent_memory.settings import Settings
from agent_memory.store import Store, Transaction
from agent_memory.store.types import ForgetReceipt, Report

log = logging.getLogger(__name__)

EXPORT_FORMAT = "agent-memory-export/1"
# How soon another process's forget empties this one's copies of remembered text (none of
# them can be served after it: each is checked against its pair's version when read).
FORGET_WATCH_S = 1.0


class Admin:
    """What spans users: the schema, search and mentions, statistics, export, import, forget."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        ingestor: Ingestor,
        contexts: ContextCache,
        forget_listeners: list[Callable[[str, str | None], None]],
    ) -> None:
        """A forget drops the built `contexts`, and tells each of `forget_listeners`
        (user, character or None) to drop what it holds of what was forgotten."""
        self.settings = settings
        self.store = store
        self.ingestor = ingestor
        self.contexts = contexts
        self.forget_listeners = forget_listeners
        self._seen_forget: int | None = None  # not looked yet: nothing is held before
        self._watch: AsyncIOScheduler | None = None

    async def drop_held(self) -> None:
        """Drop what this process keeps of remembered text: recall's copies, built contexts,
        cached terms and dates, the offline condenser's process caches, embedded questions."""
        self.store.forget_held()
        self.contexts.clear()
        forget_texts()
        await WORKERS.forget_texts()
        forget_questions()

    def watch_forgets(self) -> None:
        """Start dropping what this process holds within `FORGET_WATCH_S` of a forget made by
        another process sharing the database (another instance, the CLI)."""
        self._watch = start_interval(self._forgot_elsewhere, FORGET_WATCH_S, "forget-watch")

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.shutdown(wait=False)
            self._watch = None

    async def _forgot_elsewhere(self) -> None:
        """Whether a forget was made since last looked; if so, drop what is held (a caller that
        forgot here dropped it already: once more costs a few cache misses)."""
        try:
            last = await self.store.read(lambda view: view.maintenance.last_forget())
        except StoreUnavailable:
            return  # the database is down or busy (said by the store): looked at again next time
        seen, self._seen_forget = self._seen_forget, last
        if seen is not None and last != seen:
            await self.drop_held()
            log.info("a forget made elsewhere: this process's copies of remembered text dropped")

    async def schema_migrations(self) -> list[str]:
        """The applied schema migrations (answering proves the database is reachable)."""
        return await self.store.read(lambda view: view.maintenance.schema())

    async def search(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] = SEARCH_KINDS,
        limit: int = 20,
    ) -> UserSearch:
        """A user's messages, facts and summaries matching `q`, best first (several words: ranked like recall)."""
        await self.store.catch_up_search()
        return await self.store.read(
            lambda view: view.search.user(user_id, q, character_id=character_id, kinds=kinds, limit=limit)
        )

    async def mentions(
        self, q: str, *, role: MentionRole = "user", character_id: str | None = None, limit: int = 100
    ) -> Mentions:
        """Which users said `q`, how often, first and last."""
        await self.store.catch_up_search()
        return await self.store.read(
            lambda view: view.search.mentions(q, role=role, character_id=character_id, limit=limit)
        )

    async def user_stats(self, user_id: str) -> Report:
        """One user's sessions, messages, talk time, favourite characters and rates, or NotFound."""
        stats = await self.store.read(lambda view: view.analytics.user_stats(user_id))
        if stats is None:
            raise NotFound(f"nothing is held about user {user_id}")
        return stats

    async def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> Report:
        """One character's active users, sessions, rates and latencies, or NotFound."""
        stats = await self.store.read(
            lambda view: view.analytics.character_stats(character_id, since_ms=since_ms, until_ms=until_ms)
        )
        if stats is None:
            raise NotFound(f"no sessions with character {character_id}")
        return stats

    async def overall_stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> Report:
        """The whole service: latencies per metric and stage, failed and partial callbacks."""
        return await self.store.read(
            lambda view: view.analytics.overall_stats(since_ms=since_ms, until_ms=until_ms)
        )

    async def export(self, user_id: str) -> Report:
        """Everything held about a user as one document, or NotFound."""
        document = await self.store.read(lambda view: view.export.user(user_id))
        if document is None:
            raise NotFound(f"nothing is held about user {user_id}")
        return {"format": EXPORT_FORMAT, "exported_ms": now_ms(), **document}

    async def import_export(self, source: Source, *, force: bool = False) -> ImportReport:
        """Restore an export (memory/restore/): checked whole first, then written idempotently;
        a user forgotten since it was taken is refused (Conflict) unless `force`."""
        return await Importer(self.settings, self.store, source, force=force).run()

    async def forget(self, user_id: str, character_id: str | None = None) -> ForgetReceipt:
        """Delete everything held about a user (or one of its pairs); returns counts per table."""

        def forget(tx: Transaction) -> tuple[ForgetReceipt, int]:
            shared = self.ingestor.forget_shared_turns(tx, user_id, character_id)
            receipt = tx.maintenance.forget(user_id, character_id)
            receipt["messages"] = receipt.get("messages", 0) + shared["shared_call_turns"]
            receipt["raw_callbacks"] = receipt.get("raw_callbacks", 0) + shared["shared_call_raw_callbacks"]
            return receipt, tx.maintenance.last_forget()

        receipt, self._seen_forget = await self.store.write(forget)  # this forget (and any before) seen
        # Once the forget is committed: a read before would bring it back.
        await self.drop_held()
        for listener in self.forget_listeners:
            # What a platform holds to record later (a live call's held reply): what it would
            # still record would be dropped by the cut-off, but it goes now all the same.
            listener(user_id, character_id)
        # Until the WAL is checkpointed the forgotten text still sits in it.
        await self.store.checkpoint()
        log.info("forgot %s: %s", pair_ref(user_id, character_id), receipt)
        return receipt
