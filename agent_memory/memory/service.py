"""The use-cases, once: what the HTTP API, the CLI and the platforms ask of memory.

`Memory` is the application layer. Each method is one use-case over the store (and the
job runner or retention where it needs them); the web routes and CLI commands only parse
their input, call it, and shape or print what it returns: domain objects
(`core.domain`) and the store's reports, never database rows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar, cast

from agent_memory.condense import make_ranker
from agent_memory.condense.offline import shorten_summary
from agent_memory.condense.worker import WORKERS
from agent_memory.core.clock import now_ms
from agent_memory.core.context import Context, build_context, recall_budget, with_recall
from agent_memory.core.domain import (
    CONDENSE,
    ApiKey,
    ChannelBinding,
    Fact,
    FactScope,
    FactVersion,
    InboxEntry,
    InboxStatus,
    Job,
    JobStatus,
    KeyScope,
    LlmRoute,
    Message,
    Session,
    Summary,
    Watch,
    WatchOrigin,
    WatchResult,
)
from agent_memory.core.events import HistoryWindow, Outcome, RawEvent, SessionEvent
from agent_memory.core.facts import clean_text
from agent_memory.core.recall import (
    CANDIDATES as RECALL_CANDIDATES,
)
from agent_memory.core.recall import (
    DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS,
)
from agent_memory.core.recall import (
    Recall,
    RecallScope,
    TurnHit,
    candidates_for,
    fit,
    fuse,
    rank,
    weighted_terms,
)
from agent_memory.core.secrets import hash_key, new_api_key
from agent_memory.core.styles import DEFAULT_STYLE
from agent_memory.core.textcache import forget_texts
from agent_memory.embed import Embedder
from agent_memory.errors import Conflict, DatabaseDown, InvalidField, JobHeld, NotFound, StoreUnavailable
from agent_memory.logs import pair_ref
from agent_memory.memory.embedding import forget_questions, semantic_candidates
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.memory.rerank import Rerank
from agent_memory.memory.restore import Importer, ImportReport, Source
from agent_memory.memory.retention import Progress, PurgeReport, Retention
from agent_memory.memory.tokenizer import use_tokenizer
from agent_memory.memory.warming import Warming
from agent_memory.metrics import Metrics
from agent_memory.settings import Settings
from agent_memory.store import NotBrief, ReadsHere, ReadView, Store, Transaction
from agent_memory.store.shared.console import DAY_MS, ConsoleSession, RunningCall, UserEntry, UserPage
from agent_memory.store.types import (
    SEARCH_KINDS,
    ForgetReceipt,
    MentionRole,
    Mentions,
    Report,
    SearchKind,
    UserSearch,
)

log = logging.getLogger(__name__)

EXPORT_FORMAT = "agent-memory-export/1"
JOB_STATUSES: tuple[JobStatus, ...] = ("pending", "running", "dead")
# How many bounded index catch-ups a recall waits for before it answers from what is indexed,
# and for how long at most (then its answer says how many turns it could not see: `index_lag`).
CATCH_UP_ROUNDS = 20
CATCH_UP_WAIT_S = 2.0
# How often `condense` looks again at a job another process holds.
HELD_POLL_S = 0.25
# Start contexts kept built (a few kB each).
CONTEXT_CACHE_SIZE = 2048
# What a read answers when the recall index is behind (None may be a real answer).
_Behind: Final = object()
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SummaryState:
    """A pair's summary (None before the first condense) and how many messages it does not cover."""

    summary: Summary | None
    uncovered: int


@dataclass(frozen=True, slots=True)
class AddedFact:
    """A fact said by hand, and whether it is new (False: the same fact was already held)."""

    fact: Fact
    created: bool


@dataclass(frozen=True, slots=True)
class ChannelBound:
    """A channel's binding and the sessions that moved to its pair."""

    binding: ChannelBinding
    moved: list[str]


@dataclass(frozen=True, slots=True)
class Following:
    """What following an agent run did: the watch's change, the watch, and the run's session."""

    result: WatchResult
    # None: the run had already stopped, so there is nothing to follow.
    watch: Watch | None
    # The run's session: created from the start event when one was given, else as found.
    session: Session | None


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just made: its record, and the key itself, which is never stored nor shown again."""

    record: ApiKey
    key: str


@dataclass(frozen=True, slots=True)
class Call:
    """A call (an agent run's session) and its transcript, oldest first."""

    session: Session
    messages: list[Message]


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A live console session and the stored key it was opened with (None: not a stored key)."""

    session: ConsoleSession
    key: ApiKey | None


@dataclass(frozen=True, slots=True)
class Condensed:
    """A pair's summary and condense job after condensing it now."""

    summary: Summary | None
    job: Job | None


class Memory:
    """Long-term memory of (user, character) pairs: read it, change it, forget it, take events in."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        jobs: CondenseJobs | None = None,
        retention: Retention | None = None,
        embedder: Embedder | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """`jobs` is needed to condense and wait (`condense`), `retention` to `purge`;
        with an `embedder` recall also finds turns by meaning; `metrics` times recalls."""
        self.settings = settings
        self.store = store
        use_tokenizer(settings.tokenizer)
        WORKERS.prepare(use_tokenizer, settings.tokenizer)
        self.ingestor = Ingestor(settings)
        self.contexts = ContextCache()
        self.jobs = jobs
        self.retention = retention
        self.embedder = embedder
        self.metrics = metrics
        # Told of every committed forget (user, character or None), to drop what they hold of it.
        self.forget_listeners: list[Callable[[str, str | None], None]] = []
        # Pairs' recall indexes read into memory as their calls start.
        self.warming = Warming(store)
        ranker = make_ranker(settings)
        self.rerank = (
            None
            if ranker is None
            else Rerank(
                ranker,
                candidates=settings.recall_rerank_candidates,
                timeout_ms=settings.recall_rerank_timeout_ms,
            )
        )
        if metrics is not None:
            contexts = self.contexts
            metrics.add_reported(
                "context_cache",
                "Start contexts served from the cache, or built",
                lambda: {"hits": contexts.hits, "misses": contexts.misses},
            )
            metrics.add_reported(
                "recall_warming",
                "Pairs' recall indexes read into memory as their calls started",
                self.warming.report,
            )
            if self.rerank is not None:
                metrics.add_reported(
                    "recall_rerank",
                    "Recalls sent to the LLM to be reordered, by outcome (only reordered uses its answer)",
                    self.rerank.report,
                )

    # health

    async def schema_migrations(self) -> list[str]:
        """The applied schema migrations (answering proves the database is reachable)."""
        return await self.store.read(lambda view: view.maintenance.schema())

    # memory out

    async def system_messages(
        self,
        user_id: str,
        character_id: str,
        *,
        max_tokens: int | None = None,
        persona: str | None = None,
        style: str = DEFAULT_STYLE,
        exclude_agent_id: str | None = None,
        query: str | None = None,
    ) -> Context:
        """The pair's memory as system_messages within `max_tokens` (default: the setting);
        with `query` (what the call is about) the memories recalled for it are included."""
        request = ContextRequest(
            user_id=user_id,
            character_id=character_id,
            max_tokens=max_tokens or self.settings.context_max_tokens,
            recent_messages=self.settings.context_recent_messages,
            persona=persona,
            style=style,
            exclude_agent_id=exclude_agent_id,
            query=query.strip() if query and query.strip() else None,
        )
        if request.query:
            return await self._read_indexed(lambda view: self.contexts.get(view, request))
        return await self.store.read(lambda view: self.contexts.get(view, request))

    async def recall(
        self,
        user_id: str,
        character_id: str,
        q: str,
        *,
        max_tokens: int = DEFAULT_RECALL_TOKENS,
        scope: RecallScope = "pair",
        indexed_only: bool = False,
        exclude_session: str | None = None,
    ) -> Recall:
        """The memories that answer `q`, best first, within `max_tokens`; scope user reads
        all the user's characters (and always includes the user-wide facts). `indexed_only`
        answers from what the recall index holds without first catching it up: for a caller
        that already has the latest turns (a live call's own request carries them), whose
        own agent run `exclude_session` names."""
        _check_question(q)
        started = time.perf_counter()
        scoped = None if scope == "user" else character_id
        semantic: list[tuple[int, float]] = []
        if self.embedder is not None:
            semantic = await semantic_candidates(
                self.store,
                self.embedder,
                user_id=user_id,
                character_id=scoped,
                q=q,
                k=RECALL_CANDIDATES,
                timeout_s=self.settings.embeddings_timeout_s,
            )
        read = _recall_read(user_id, scoped, q, max_tokens, semantic, exclude_session)
        if indexed_only:
            found = await self.store.read(read)
        else:
            found = await self._read_indexed(
                read, behind=lambda view: replace(read(view), index_lag=view.recall.lag(user_id, scoped))
            )
        if self.rerank is not None:
            # A live call's recall (indexed_only) is cut at its deadline: leave it time to answer.
            left_ms = self.settings.recall_timeout_ms - (time.perf_counter() - started) * 1000 - 1
            found = await self.rerank(found, within_ms=left_ms if indexed_only else None)
        self._recalled(scope, started, found)
        return found

    def recall_here(
        self, user_id: str, character_id: str, q: str, *, max_tokens: int, exclude_session: str | None
    ) -> Recall:
        """`recall(indexed_only=True)` of one pair, read right here on the calling thread (the
        event loop) for a pair whose recall is known to be brief (`ReadsHere.read_here`). Raises
        NotBrief when it cannot be: an embeddings model would be asked over the network, or
        the store cannot read here (across the network) or will not (the read would be slow)."""
        _check_question(q)
        if self.embedder is not None:
            raise NotBrief("recall asks the embeddings model first, over the network")
        if not isinstance(self.store, ReadsHere):
            raise NotBrief("this store is read over the network, on a reader thread")
        started = time.perf_counter()
        found = self.store.read_here(_recall_read(user_id, character_id, q, max_tokens, (), exclude_session))
        self._recalled("pair", started, found)
        return found

    def _recalled(self, scope: RecallScope, started: float, found: Recall) -> None:
        if self.metrics is not None:
            self.metrics.recalled(scope, time.perf_counter() - started, found=bool(found.memories))

    async def _read_indexed(
        self, read: Callable[[ReadView], T], behind: Callable[[ReadView], T] | None = None
    ) -> T:
        """`read` once the recall index holds every stored turn (catching it up first when it
        is behind), in one read; after `CATCH_UP_ROUNDS` bounded catch-ups or `CATCH_UP_WAIT_S`,
        or when the catch-up gives up (another drain holds the queue), `behind` (or `read`) from
        what is indexed."""
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        for _ in range(CATCH_UP_ROUNDS):
            answer = await self.store.read(lambda view: _Behind if view.recall.behind() else read(view))
            if answer is not _Behind:
                return cast(T, answer)
            if time.monotonic() >= deadline:
                break
            # Turns were stored since the index last caught up: recall must see them.
            try:
                if not await self.store.catch_up_search():
                    break
            except DatabaseDown:
                raise
            except StoreUnavailable as exc:  # a statement or lock wait past its bound
                log.warning(
                    "recall answers from what is indexed: catching the index up failed: %s", exc.message
                )
                break
        return await self.store.read(behind or read)

    async def messages(self, user_id: str, character_id: str, limit: int) -> list[Message]:
        """The pair's `limit` latest messages, oldest first, tool calls and results included."""
        return await self.store.read(
            lambda view: view.messages.latest(user_id, character_id, limit, spoken_only=False)
        )

    async def summary(self, user_id: str, character_id: str) -> SummaryState:
        """The pair's summary and the count of messages it does not cover yet."""

        def read(view: ReadView) -> SummaryState:
            summary = view.summaries.get(user_id, character_id)
            watermark = summary.watermark_id if summary else 0
            return SummaryState(summary, view.messages.count_after(user_id, character_id, watermark))

        return await self.store.read(read)

    # facts

    async def facts(self, user_id: str, character_id: str) -> list[Fact]:
        """The facts remembered for the pair, the user-wide ones included."""
        return await self.store.read(lambda view: view.facts.of_pair(user_id, character_id))

    async def add_fact(
        self, user_id: str, character_id: str, text: str, scope: FactScope = "character"
    ) -> AddedFact:
        """Remember a fact said by hand: pinned, so condensing never changes or removes it."""
        cleaned = clean_text(text)
        fact, created = await self.store.write(
            lambda tx: tx.facts.add(user_id, character_id, cleaned, scope=scope, pinned=True, origin="manual")
        )
        return AddedFact(fact, created)

    async def edit_fact(self, fact_id: int, *, text: str | None = None, pinned: bool | None = None) -> Fact:
        """Change a fact by hand: its text (the old one kept as its history) and whether it is
        pinned; a new text is said by hand, so it is pinned unless `pinned` says otherwise."""
        if text is None and pinned is None:
            raise InvalidField("give the fact's new text, pinned (true or false), or both")
        cleaned = None if text is None else clean_text(text)
        keep = pinned if pinned is not None or cleaned is None else True
        fact = await self.store.write(lambda tx: tx.facts.edit(fact_id, text=cleaned, pinned=keep))
        if fact is None:
            raise NotFound(f"no fact with id {fact_id}")
        return fact

    async def fact_history(self, fact_id: int) -> list[FactVersion]:
        """Every text a fact had and when it held, oldest first (the current one last, valid_to None)."""
        versions = await self.store.read(lambda view: view.facts.history(fact_id))
        if not versions:
            raise NotFound(f"no fact with id {fact_id}")
        return versions

    async def delete_fact(self, fact_id: int) -> None:
        """Forget one fact (and every text it had), or NotFound."""
        if not await self.store.write(lambda tx: tx.facts.delete(fact_id)):
            raise NotFound(f"no fact with id {fact_id}")

    # forgetting

    async def forget(self, user_id: str, character_id: str | None = None) -> ForgetReceipt:
        """Delete everything held about a user (or one of its pairs); returns counts per table."""

        def forget(tx: Transaction) -> ForgetReceipt:
            shared = self.ingestor.forget_shared_turns(tx, user_id, character_id)
            receipt = tx.maintenance.forget(user_id, character_id)
            receipt["messages"] = receipt.get("messages", 0) + shared["shared_call_turns"]
            receipt["raw_callbacks"] = receipt.get("raw_callbacks", 0) + shared["shared_call_raw_callbacks"]
            return receipt

        receipt = await self.store.write(forget)
        # What this process keeps of remembered text (recall's copies, built contexts, cached terms
        # and dates) goes too, once the forget is committed: a read before would bring it back.
        self.store.forget_held()
        self.contexts.clear()
        forget_texts()
        await WORKERS.forget_texts()  # the offline condenser's process caches what it read too
        forget_questions()
        for listener in self.forget_listeners:
            # What a platform holds to record later (a live call's held reply): what it would
            # still record would be dropped by the cut-off, but it goes now all the same.
            listener(user_id, character_id)
        # Until the WAL is checkpointed the forgotten text still sits in it.
        await self.store.checkpoint()
        log.info("forgot %s: %s", pair_ref(user_id, character_id), receipt)
        return receipt

    # sessions and bindings

    async def session(self, agent_id: str) -> Session:
        """One agent run's session, or NotFound."""
        session = await self.store.read(lambda view: view.sessions.get(agent_id))
        if session is None:
            raise NotFound(f"no session for agent {agent_id}")
        return session

    async def bind(self, agent_id: str, user_id: str, character_id: str) -> Session | None:
        """Tie an agent run to a pair; a session it already has moves there at once.

        Returns the run's session, None when the run has not been seen yet (it starts there).
        """
        return await self.store.write(lambda tx: self.ingestor.bind(tx, agent_id, user_id, character_id))

    async def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBound:
        """Tie a channel to a pair: later calls there, and its unidentified ones, go to it."""
        binding, moved = await self.store.write(
            lambda tx: self.ingestor.bind_channel(tx, channel, user_id, character_id)
        )
        return ChannelBound(binding, moved)

    async def channel_binding(self, channel: str) -> ChannelBinding | None:
        """The pair a channel is bound to, if any."""
        return await self.store.read(lambda view: view.bindings.of_channel(channel))

    async def unbind_channel(self, channel: str) -> ChannelBinding | None:
        """Remove a channel's binding (sessions it tied stay); the removed binding, if any."""
        return await self.store.write(lambda tx: tx.bindings.unbind_channel(channel))

    # following running agents

    async def follow(
        self,
        agent_id: str,
        *,
        origin: WatchOrigin,
        user_id: str | None = None,
        character_id: str | None = None,
        base_system_messages: list[dict[str, Any]] | None = None,
        persona: str | None = None,
        max_tokens: int | None = None,
        style: str | None = None,
        event: SessionEvent | None = None,
        max_history: int | None = None,
    ) -> Following:
        """Follow a running agent, in one transaction: tie it to a pair if given, start its session
        from `event` if given, and poll (and, with `base_system_messages`, refresh) it."""
        if (user_id is None) != (character_id is None):
            raise InvalidField("give both user_id and character_id, or neither")

        def record(tx: Transaction) -> Following:
            if user_id is not None and character_id is not None:
                self.ingestor.bind(tx, agent_id, user_id, character_id)
            session = self.ingestor.ensure_session(tx, event, now_ms()) if event is not None else None
            result = tx.watches.follow(
                agent_id,
                origin,
                first_poll_ms=now_ms(),
                base_system_messages=base_system_messages,
                persona=persona,
                max_tokens=max_tokens,
                style=style,
                max_history=max_history,
            )
            if session is None:
                session = tx.sessions.get(agent_id)
            return Following(result, tx.watches.get(agent_id), session)

        return await self.store.write(record)

    async def unfollow(self, agent_id: str, reason: str = "stopped by request") -> bool:
        """Stop following an agent; False if it was not being followed."""
        return await self.store.write(lambda tx: tx.watches.unfollow(agent_id, reason))

    async def due_follows(self, stamp: int, limit: int) -> tuple[list[Watch], list[Watch]]:
        """Followed agents whose poll is due at `stamp`, and those whose refresh is; each at most
        `limit`, and taken for this instance: others sharing the database leave them alone."""
        # An idle sweep (the usual one) only reads.
        if not await self.store.read(
            lambda view: view.watches.due_polls(stamp, 1) or view.watches.due_pushes(stamp, 1)
        ):
            return [], []
        return await self.store.write(
            lambda tx: (tx.watches.claim_polls(stamp, limit), tx.watches.claim_pushes(stamp, limit))
        )

    async def release_follows(self) -> int:
        """Give up the followed agents this instance holds (it is stopping) to whichever instance
        claims them next, instead of leaving them unpolled until their leases run out."""
        return await self.store.write(lambda tx: tx.watches.release_held())

    async def poll_failed(self, agent_id: str, *, next_poll_ms: int, error: str) -> None:
        """Record a failed poll of a followed agent and when to try again."""
        await self.store.write(lambda tx: tx.watches.polled(agent_id, next_poll_ms=next_poll_ms, error=error))

    async def agent_gone(self, agent_id: str, reason: str, stop_reason: str) -> None:
        """The platform no longer knows the agent: stop following it and end its session if still running."""

        def stop(tx: Transaction) -> None:
            session = tx.sessions.get(agent_id)
            if session is None:
                tx.watches.unfollow(agent_id, reason)
            else:
                self.ingestor.stop_following(tx, session, reason)
            if session is not None and session.status == "running":
                tx.sessions.update(agent_id, {"status": "stopped", "stop_reason": stop_reason})

        await self.store.write(stop)

    # condensing

    async def list_jobs(self, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        """Condense jobs, optionally of one status."""
        return await self.store.read(lambda view: view.jobs.by_status(status, limit))

    async def retry_job(self, job_id: int) -> Job:
        """Make a dead job pending now, or NotFound."""
        if not await self.store.write(lambda tx: tx.jobs.revive(job_id)):
            raise NotFound(f"no dead job with id {job_id}")
        job = await self.store.read(lambda view: view.jobs.by_id(job_id))
        if job is None:
            raise NotFound(f"job {job_id} was deleted meanwhile")
        return job

    async def condense_now(self, user_id: str, character_id: str) -> Job | None:
        """Make the pair's condense job due now (creating it); returns the job."""

        def due(tx: Transaction) -> Job | None:
            tx.jobs.make_due(CONDENSE, user_id, character_id)
            return tx.jobs.get(CONDENSE, user_id, character_id)

        return await self.store.write(due)

    async def condense(
        self,
        user_id: str,
        character_id: str,
        *,
        wait_s: float = 0.0,
        waiting: Callable[[Job, float], None] | None = None,
    ) -> Condensed:
        """Condense the pair now and wait for it; needs the job runner.

        A job another process holds (the running service condensing the pair) is waited for
        up to `wait_s` (`waiting` is told how long so far), then condensed here too: JobHeld
        when it is still held by then."""
        if self.jobs is None:
            raise RuntimeError("this Memory was built without a job runner")
        started = time.monotonic()
        while (job := await self.condense_now(user_id, character_id)) is not None:
            if await self.jobs.run(job.id):
                break
            waited = time.monotonic() - started
            if waited >= wait_s:
                raise JobHeld(
                    f"{user_id}/{character_id} is being condensed by the running service (job {job.id} "
                    f"is {job.status}); waited {waited:.0f}s for it",
                    job_id=job.id,
                )
            if waiting is not None:
                waiting(job, waited)
            await asyncio.sleep(min(HELD_POLL_S, max(0.0, wait_s - waited)))
        return Condensed(
            *await self.store.read(
                lambda view: (
                    view.summaries.get(user_id, character_id),
                    view.jobs.get(CONDENSE, user_id, character_id),
                )
            )
        )

    # search, statistics, export, retention

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
        """Restore an export (memory/restore.py): checked whole first, then written idempotently;
        a user forgotten since it was taken is refused (Conflict) unless `force`."""
        return await Importer(self.settings, self.store, source, force=force).run()

    async def purge(self, progress: Progress | None = None) -> PurgeReport:
        """Apply retention now; returns what it removed and gave back. Needs retention."""
        if self.retention is None:
            raise RuntimeError("this Memory was built without retention")
        return await self.retention.purge_once(progress)

    # events in

    def warm(self, user_id: str, character_id: str) -> None:
        """A call of the pair is starting: read its recall index into memory now, in the
        background, so the call's first question does not find it cold."""
        self.warming.warm(user_id, character_id)

    async def accept_event(self, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Record a platform event under its id and apply it, in one transaction; a call's
        start warms its pair's recall index."""
        outcome = await self.store.write(lambda tx: self.ingestor.accept(tx, raw, event))
        if (
            isinstance(event, SessionEvent)
            and event.kind == "joined"
            and outcome.user_id
            and outcome.character_id
        ):
            self.warming.warm(outcome.user_id, outcome.character_id)
        return outcome

    async def reapply_event(self, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply again an event already recorded (one that failed or was applied in part)."""
        return await self.store.write(lambda tx: self.ingestor.reapply(tx, raw, event))

    async def recorded_events(self, statuses: Sequence[InboxStatus], limit: int) -> list[InboxEntry]:
        """Recorded raw events of the given statuses, oldest first, at most `limit`."""

        def read(view: ReadView) -> list[InboxEntry]:
            return [entry for status in statuses for entry in view.inbox.by_status(status, limit)]

        entries = await self.store.read(read)
        return sorted(entries, key=lambda entry: (entry.received_ms, entry.event_id))[:limit]

    async def llm_route(self, key: str) -> LlmRoute | None:
        """The per-agent custom-LLM route a bearer key was minted for, looked up by its hash."""
        key_hash = hash_key(key)
        return await self.store.read(lambda view: view.llm_routes.by_key_hash(key_hash))

    async def add_llm_route(self, route: LlmRoute) -> None:
        """Keep a per-agent custom-LLM route (its key by hash only) for the endpoint to find."""
        await self.store.write(lambda tx: tx.llm_routes.add(route))

    async def drop_llm_route(self, key_hash: str) -> bool:
        """Forget a route whose agent never started (Agora refused the join)."""
        return await self.store.write(lambda tx: tx.llm_routes.delete(key_hash))

    async def tie_llm_route(self, key_hash: str, agent_id: str) -> bool:
        """Tie a route to the agent run its key was minted for; False if there is no such route."""
        return await self.store.write(lambda tx: tx.llm_routes.set_agent(key_hash, agent_id))

    async def create_api_key(self, scope: KeyScope, name: str | None = None) -> IssuedKey:
        """A new /v1 API key of `scope`, stored by its hash only."""
        key = new_api_key()
        record = await self.store.write(lambda tx: tx.api_keys.add(name, scope, hash_key(key), now_ms()))
        return IssuedKey(record, key)

    async def api_keys(self) -> list[ApiKey]:
        """Every /v1 API key, revoked ones too, oldest first."""
        return await self.store.read(lambda view: view.api_keys.all())

    async def api_key(self, key: str) -> ApiKey | None:
        """The /v1 API key `key` is (revoked or not), looked up by its hash."""
        key_hash = hash_key(key)
        return await self.store.read(lambda view: view.api_keys.by_hash(key_hash))

    async def revoke_api_key(self, key_id: int) -> ApiKey:
        """Revoke a key for good (again: no change); NotFound if there is no such key."""

        def revoke(tx: Transaction) -> ApiKey | None:
            key = tx.api_keys.revoke(key_id, now_ms())
            if key is not None:
                tx.console_sessions.end_for_key(key.key_hash)  # its console sign-ins end with it
            return key

        revoked = await self.store.write(revoke)
        if revoked is None:
            raise NotFound(f"no API key {key_id}; GET /v1/keys (agent-memory keys list) lists them")
        return revoked

    async def api_key_used(self, key_id: int, at_ms: int) -> None:
        await self.store.write(lambda tx: tx.api_keys.used(key_id, at_ms))

    # the operator console

    async def users(self, q: str | None = None, cursor: str | None = None, limit: int = 50) -> UserPage:
        """Users whose id contains `q` (any case), in id order after `cursor`, and the next cursor."""
        return await self.store.read(lambda view: view.console.users(q or None, cursor or None, limit))

    async def user(self, user_id: str) -> UserEntry:
        """One user as the list shows it (its characters, calls, last seen), or NotFound."""
        entry = await self.store.read(lambda view: view.console.user(user_id))
        if entry is None:
            raise NotFound(f"nothing is held about user {user_id}")
        return entry

    async def calls(self, user_id: str, character_id: str, limit: int) -> list[Call]:
        """The pair's latest calls, newest first, each with its transcript (tool items included)."""

        def read(view: ReadView) -> list[Call]:
            sessions = view.console.calls(user_id, character_id, limit)
            return [Call(session, view.messages.of_session(session.agent_id)) for session in sessions]

        return await self.store.read(read)

    async def holdings(self, user_id: str, character_id: str | None = None) -> dict[str, int]:
        """How many calls, messages, facts and summaries a forget of the user (or pair) would take."""
        return await self.store.read(lambda view: view.console.holdings(user_id, character_id))

    async def running_calls(self, limit: int = 200) -> list[RunningCall]:
        """Agents followed now (their poll and refresh state), with their sessions."""
        return await self.store.read(lambda view: view.console.running(limit))

    async def callbacks_per_day(self, days: int) -> dict[int, int]:
        """Platform callbacks received per UTC day over the last `days` days (as retention kept them)."""
        since = (now_ms() // DAY_MS - days + 1) * DAY_MS
        return await self.store.read(lambda view: view.console.callbacks_per_day(since))

    async def open_console_session(self, key_hash: str, ttl_ms: int) -> str:
        """Sign in to the console with the key of this hash: a new session token (kept by hash only)."""
        token = new_api_key()
        stamp = now_ms()
        session = ConsoleSession(hash_key(token), key_hash, stamp, stamp + ttl_ms)
        await self.store.write(lambda tx: tx.console_sessions.open(session))
        return token

    async def console_session(self, token: str) -> SignedIn | None:
        """The live console session of `token` and the stored key it was opened with (None: the
        admin token, or a key since deleted); None when there is no such session or it expired."""
        token_hash = hash_key(token)

        def read(view: ReadView) -> SignedIn | None:
            session = view.console_sessions.get(token_hash, now_ms())
            if session is None:
                return None
            return SignedIn(session, view.api_keys.by_hash(session.key_hash))

        return await self.store.read(read)

    async def end_console_session(self, token: str) -> bool:
        """Sign out of the console: the session ends at once, on every instance."""
        token_hash = hash_key(token)
        return await self.store.write(lambda tx: tx.console_sessions.end(token_hash))

    async def merge_window(
        self, window: HistoryWindow, stamp: int, *, then: Callable[[Transaction], object] | None = None
    ) -> Outcome:
        """Merge a running agent's history window; `then(tx)` runs in the same transaction."""

        def merge(tx: Transaction) -> Outcome:
            outcome = self.ingestor.merge_window(tx, window, stamp)
            if then is not None:
                then(tx)
            return outcome

        return await self.store.write(merge)

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
            return self.ingestor.merge_window(tx, window, stamp)

        return await self.store.write(merge)


def _check_question(q: str) -> None:
    if not q.strip():
        raise InvalidField("q is empty: pass the question to recall memories for, e.g. q=when is my exam")


def _recall_read(
    user_id: str,
    character_id: str | None,
    q: str,
    max_tokens: int,
    semantic: Sequence[tuple[int, float]],
    exclude_session: str | None,
) -> Callable[[ReadView], Recall]:
    """Recall as one read, timed where it runs (`Recall.read_ms`: a thread hand-off not counted)."""

    def read(view: ReadView) -> Recall:
        reading = time.perf_counter()
        found = recall_in(
            view, user_id, character_id, q, max_tokens, semantic=semantic, exclude_session=exclude_session
        )
        return replace(found, read_ms=(time.perf_counter() - reading) * 1000)

    return read


def recall_in(
    view: ReadView,
    user_id: str,
    character_id: str | None,
    q: str,
    max_tokens: int,
    *,
    semantic: Sequence[tuple[int, float]] = (),
    exclude_session: str | None = None,
) -> Recall:
    """Recall in one read (of a pair, or of all the user's pairs when `character_id` is None);
    `semantic` are the turns nearest in meaning (message id, similarity), fused with the keywords';
    the turns of `exclude_session` are left out (a live call holds its own)."""
    stats = view.recall.term_stats(user_id, character_id, weighted_terms(q))
    facts = view.recall.facts(user_id, character_id)
    limit = candidates_for(max_tokens)
    keyword = view.recall.turns(stats, limit) if stats.idfs else []
    nearest = (
        [
            TurnHit(message, similarity)
            for message, similarity in zip(
                view.recall.messages([message_id for message_id, _ in semantic]),
                (s for _, s in semantic),
                strict=False,
            )
        ]
        if semantic
        else []
    )
    hits = fuse(keyword, nearest)
    if exclude_session is not None:
        hits = [hit for hit in hits if hit.message.agent_id != exclude_session]
    ranked = rank(
        hits=hits[:limit],
        facts=facts,
        summaries=view.recall.summaries(user_id, character_id),
        idfs=stats.idfs,
        average_length=stats.average_length,
        always=[fact for fact in facts if fact.scope == "user"] if character_id is None else (),
    )
    return fit(q, ranked, max_tokens, neighbours=view.recall.neighbours, candidates=len(ranked))


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a start context is asked for: the pair and every argument that shapes it."""

    user_id: str
    character_id: str
    max_tokens: int
    recent_messages: int
    persona: str | None = None
    style: str = DEFAULT_STYLE
    # Leaves out that agent run's own turns (a live refresh: the agent already holds them).
    exclude_agent_id: str | None = None
    query: str | None = None


class ContextCache:
    """Built start contexts, reused until their pair's memory changes.

    A pair's context only changes when its messages, facts or summary do (or the user's
    user-wide facts), and the store counts those changes (`view.versions`), whichever
    process made them; so a context is rebuilt only when its version moved.
    """

    def __init__(self, size: int = CONTEXT_CACHE_SIZE) -> None:
        self.size = size
        self._built: OrderedDict[ContextRequest, tuple[tuple[int, int], Context]] = OrderedDict()
        self._lock = threading.Lock()  # reads run on several reader threads
        self.hits = self.misses = 0

    def clear(self) -> None:
        with self._lock:
            self._built.clear()

    def get(self, view: ReadView, request: ContextRequest) -> Context:
        """The context for `request`, from the cache when its pair has not changed since; a new
        query reuses the cached context of the rest of the budget and recalls for the query."""
        version = view.versions.of_pair(request.user_id, request.character_id)
        with self._lock:
            cached = self._built.get(request)
            if cached is not None and cached[0] == version:
                self._built.move_to_end(request)
                self.hits += 1
                return cached[1]
            self.misses += 1
        context = with_query(view, request, self.get) if request.query else build_in(view, request)
        with self._lock:
            self._built[request] = (version, context)
            self._built.move_to_end(request)
            while len(self._built) > self.size:
                self._built.popitem(last=False)
        return context


def build_in(view: ReadView, request: ContextRequest) -> Context:
    """Read a pair's memory in one go and build its system_messages (on the reader thread:
    a millisecond of rendering stays off the event loop)."""
    if request.query:
        return with_query(view, request, build_in)
    user_id, character_id = request.user_id, request.character_id
    messages = view.messages.latest(
        user_id, character_id, request.recent_messages, exclude_agent_id=request.exclude_agent_id
    )
    context = build_context(
        facts=view.facts.of_pair(user_id, character_id),
        summary=view.summaries.get(user_id, character_id),
        messages=messages,
        max_tokens=request.max_tokens,
        persona=request.persona,
        style=request.style,
        shorten_summary=shorten_summary,
    )
    if request.exclude_agent_id is not None:
        context.included["excluded_agent_id"] = request.exclude_agent_id
    return context


def with_query(
    view: ReadView, request: ContextRequest, base_of: Callable[[ReadView, ContextRequest], Context]
) -> Context:
    """The context for a request with a query: `base_of` the same request without it, within
    the budget the recall leaves, and the memories recalled for the query."""
    assert request.query is not None
    budget = recall_budget(request.max_tokens, request.persona)
    base = base_of(view, replace(request, query=None, max_tokens=request.max_tokens - budget))
    found = recall_in(view, request.user_id, request.character_id, request.query, budget) if budget else None
    return with_recall(
        base,
        found.system_message if found else None,
        len(found.memories) if found else 0,
        max_tokens=request.max_tokens,
        query=request.query,
    )
