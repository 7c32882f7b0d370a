"""Reading a pair's memory: its start context (built contexts cached), recall (with the index
caught up first, turns found by meaning, an optional rerank), its messages and summary, and
warming a starting call's recall index."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from agent_memory.condense import make_ranker
from agent_memory.condense.offline import shorten_summary
from agent_memory.core.context import Context, build_context, recall_budget, with_recall
from agent_memory.core.domain import Message, Summary
from agent_memory.core.people import asked_about, linked_terms, named_speaker, named_terms, speaker_names
from agent_memory.core.recall import (
    CANDIDATES as RECALL_CANDIDATES,
)
from agent_memory.core.recall import (
    DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS,
)
from agent_memory.core.recall import (
    Recall,
    RecallScope,
    TermStats,
    TurnHit,
    asks_when,
    candidates_for,
    fuse,
    rank,
    weighted_terms,
)
from agent_memory.core.recall_fit import fit
from agent_memory.core.styles import DEFAULT_STYLE
from agent_memory.embed import Embedder
from agent_memory.errors import DatabaseDown, InvalidField, StoreUnavailable
from agent_memory.memory.embedding import semantic_candidates
from agent_memory.memory.rerank import Rerank
from agent_memory.memory.warming import Warming
from agent_memory.metrics import Metrics
from agent_memory.settings import Settings
from agent_memory.store import NotBrief, ReadsHere, ReadView, Store

log = logging.getLogger(__name__)

# How many bounded index catch-ups a recall waits for before it answers from what is indexed,
# and for how long at most (then its answer says how many turns it could not see: `index_lag`).
CATCH_UP_ROUNDS = 20
CATCH_UP_WAIT_S = 2.0
# Start contexts kept built (a few kB each).
CONTEXT_CACHE_SIZE = 2048
T = TypeVar("T")
# A recall's read wrapped (memory/recall_reuse.py: a live call's last recall answered again).
Reuse = Callable[[Callable[[ReadView], Recall]], Callable[[ReadView], Recall]]


@dataclass(frozen=True, slots=True)
class SummaryState:
    """A pair's summary (None before the first condense) and how many messages it does not cover."""

    summary: Summary | None
    uncovered: int


class Reading:
    """A pair's memory read: start contexts, recall, messages, summary; warming as calls start."""

    def __init__(
        self, settings: Settings, store: Store, *, embedder: Embedder | None, metrics: Metrics | None
    ) -> None:
        """With an `embedder` recall also finds turns by meaning; `metrics` times recalls."""
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.metrics = metrics
        self.contexts = ContextCache()
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

    async def close(self) -> None:
        """Before the store closes: no warming read left, the reranker's connections closed."""
        await self.warming.close()
        if self.rerank is not None:
            await self.rerank.close()

    def warm(self, user_id: str, character_id: str) -> None:
        """A call of the pair is starting: read its recall index into memory now, in the
        background, so the call's first question does not find it cold."""
        self.warming.warm(user_id, character_id)

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
        reuse: Reuse | None = None,
    ) -> Recall:
        """The memories that answer `q`, best first, within `max_tokens`; scope user reads
        all the user's characters (and always includes the user-wide facts). `indexed_only`
        answers from what the recall index holds without first catching it up: for a caller
        that already has the latest turns (a live call's own request carries them), whose
        own agent run `exclude_session` names; `reuse` wraps the read (the run's last recall
        answered again where it stands: memory/recall_reuse.py), without an embeddings model."""
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
        if reuse is not None and self.embedder is None:
            read = reuse(read)
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
        self,
        user_id: str,
        character_id: str,
        q: str,
        *,
        max_tokens: int,
        exclude_session: str | None,
        reuse: Reuse | None = None,
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
        read = _recall_read(user_id, character_id, q, max_tokens, (), exclude_session)
        found = self.store.read_here(reuse(read) if reuse is not None else read)
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
            answer = await self.store.read(lambda view: view.recall.read_if_caught_up(lambda: read(view)))
            if answer is not None:
                return answer[0]
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
    weighted = weighted_terms(q)
    limit = candidates_for(max_tokens)
    stats, keyword = _asked(view, user_id, character_id, weighted, limit)
    # The people the question names one way ("my sister") and the turns found name another
    # ("my sister Maya"): asked again with both (`core.people`).
    linked = linked_terms(
        q,
        (term for term, _ in weighted),
        [(hit.message.content, hit.message.role == "user") for hit in keyword],
    )
    if linked:
        stats, keyword = _asked(view, user_id, character_id, (*weighted, *linked), limit)
    # After the turns: PostgreSQL reads the facts with them, in one round trip (one snapshot: the same facts).
    facts = view.recall.facts(user_id, character_id)
    names = speaker_names(fact.text for fact in facts)
    # A speaker asked about by name ("What did Sam win?"): the name finds the greetings said to
    # them, not their life, so it is asked again without it (and prefers their turns: `rank`).
    named = named_terms(q, names, stats.idfs)
    if named:
        kept = [(term, weight) for term, weight in (*weighted, *linked) if term not in named]
        stats, keyword = _asked(view, user_id, character_id, kept, limit)
    nearest = _nearest(view, semantic)
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
        when=asks_when(q),
        speaker=asked_about(q) or named_speaker(q, names),
    )
    return fit(
        q,
        ranked,
        max_tokens,
        neighbours=view.recall.neighbours,
        candidates=len(ranked),
        linked=[term for term, _ in linked],
    )


def _asked(
    view: ReadView, user_id: str, character_id: str | None, weighted: Sequence[tuple[str, float]], limit: int
) -> tuple[TermStats, list[TurnHit]]:
    """The question's terms over the turns in scope, and the best `limit` turns by them."""
    stats = view.recall.term_stats(user_id, character_id, weighted)
    return stats, view.recall.turns(stats, limit) if stats.idfs else []


def _nearest(view: ReadView, semantic: Sequence[tuple[int, float]]) -> list[TurnHit]:
    """The turns nearest in meaning (message id, similarity), read."""
    if not semantic:
        return []
    messages = view.recall.messages([message_id for message_id, _ in semantic])
    return [
        TurnHit(message, similarity) for message, (_, similarity) in zip(messages, semantic, strict=False)
    ]


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
