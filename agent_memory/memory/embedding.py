"""Semantic recall: embedding each pair's turns in the background, and the turns nearest to a question.

Ingest schedules a debounced `embed` job for a pair in the transaction that stores its new
spoken turns (the webhook never waits for a model). A claimed job embeds the pair's turns
that have no vector of the configured model yet, `EMBED_BATCH` per request, committing
each batch on its own: what was embedded survives a failure or a restart, and the rest is
done when the job runs again. Failures retry with the condense jobs' backoff; after
`job_max_attempts` a job is dead until retried. `semantic_candidates` is the query side:
it never fails because of the model, it answers nothing instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import threading
from collections import OrderedDict

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import EMBED, Job, Message
from agent_memory.embed import Embedder
from agent_memory.errors import EmbeddingError
from agent_memory.logs import pair_ref, user_ref
from agent_memory.memory.jobs import BACKOFF, lease_kept
from agent_memory.memory.schedule import start_interval
from agent_memory.settings import Settings
from agent_memory.store import Store, Transaction

log = logging.getLogger(__name__)

# Turns per request, and per committed batch.
EMBED_BATCH = 64
# A job gives other pairs a turn after this many batches (it is due again at once).
MAX_BATCHES_PER_RUN = 16
# A live call's turns arrive every few seconds: gather them into fuller requests, but keep
# a turn findable by meaning within seconds of being said.
EMBED_DELAY_MS = 2_000
EMBED_MAX_WAIT_MS = 10_000
# Pairs made due at start because turns of theirs have no vector (a model switched on or
# changed, or a database from before embeddings).
BACKFILL_MAX_PAIRS = 100_000
# Questions whose vectors are kept, so an app asking the same thing again waits for no model.
QUERY_CACHE_SIZE = 1024


def schedule_embedding(tx: Transaction, user_id: str, character_id: str, new: int) -> None:
    """Debounce the pair's embed job for `new` spoken turns (in the transaction that stored them)."""
    tx.jobs.schedule(
        EMBED,
        user_id,
        character_id,
        delay_ms=EMBED_DELAY_MS,
        max_wait_ms=EMBED_MAX_WAIT_MS,
        max_messages=EMBED_BATCH,
        new_messages=new,
    )


class EmbeddingJobs:
    """Runs due embed jobs one at a time (each request already carries a batch of turns)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: Embedder,
        *,
        rng: random.Random | None = None,
        sweep_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.rng = rng or random.Random()
        self.sweep_s = sweep_s
        self.scheduler: AsyncIOScheduler | None = None
        self._work: asyncio.Task[int] | None = None
        self._backfill: asyncio.Task[int] | None = None

    async def start(self) -> None:
        """Look for due jobs every `sweep_s`, and make due the pairs whose turns lack vectors.

        Jobs left `running` by an instance that is gone are made pending again by
        `CondenseJobs.start` (that query frees every kind), which the app runs first.
        """
        self._backfill = asyncio.get_running_loop().create_task(self.backfill())
        self.scheduler = start_interval(self.sweep, self.sweep_s, "embed-sweep")

    async def stop(self) -> None:
        """Stop looking; a job cut short stays `running` until the next start (or its lease) frees it."""
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        for task in (self._backfill, self._work):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.embedder.close()

    async def backfill(self) -> int:
        """Make every pair with turns lacking a vector due now; returns how many pairs."""
        model, dims = self.embedder.model, self.embedder.dimensions
        pairs = await self.store.read(
            lambda view: view.vectors.pairs_missing(model, dims, BACKFILL_MAX_PAIRS)
        )
        if pairs:

            def due(tx: Transaction) -> None:
                for user_id, character_id in pairs:
                    tx.jobs.make_due(EMBED, user_id, character_id)

            await self.store.write(due)
            log.info("embedding with %s: %d pairs have turns without vectors", model, len(pairs))
        return len(pairs)

    async def sweep(self) -> int:
        """Start working through the due jobs unless that is already under way; 1 if it started."""
        if self._work is not None and not self._work.done():
            return 0
        self._work = asyncio.get_running_loop().create_task(self._run_due())
        return 1

    async def run_due_now(self) -> int:
        """Run every due job to the end (tests and the CLI); returns how many ran."""
        if self._work is not None and not self._work.done():
            await asyncio.gather(self._work, return_exceptions=True)
        self._work = asyncio.get_running_loop().create_task(self._run_due())
        return await self._work

    async def _run_due(self) -> int:
        ran = 0
        # An idle look at the queue (the usual one) only reads.
        while await self.store.read(lambda view: view.jobs.due(EMBED, now_ms(), 1)):
            # Claimed one at a time: a job claimed is a job this instance is running.
            claimed = await self.store.write(lambda tx: tx.jobs.claim_due(EMBED, now_ms(), 1))
            if not claimed:
                return ran  # other instances took them
            await self._run_claimed(claimed[0])
            ran += 1
        return ran

    async def run(self, job_id: int) -> None:
        """Claim one job, embed what its pair lacks, finish; a failure is recorded on the job."""
        job = await self.store.write(lambda tx: tx.jobs.claim(job_id))
        if job is not None:
            await self._run_claimed(job)

    async def _run_claimed(self, job: Job) -> None:
        """Run a job this instance claimed, holding its lease meanwhile."""
        async with lease_kept(self.store, job.id, self.settings.lease_s):
            await self._embed_claimed(job)

    async def _embed_claimed(self, job: Job) -> None:
        try:
            more = await self._embed_pair(job)
        except Exception as exc:
            await self._failed(job, exc)
            return

        def finish(tx: Transaction) -> None:
            if tx.jobs.by_id(job.id) is None:
                return  # the pair was forgotten meanwhile: nothing more to embed
            if tx.jobs.finish(job, again_at_ms=now_ms()) and more:
                tx.jobs.make_due(EMBED, job.user_id, job.character_id)

        await self.store.write(finish)

    async def _embed_pair(self, job: Job) -> bool:
        """Embed the pair's turns without vectors, batch by batch; True when some are left."""
        user_id, character_id = job.user_id, job.character_id
        model, dims = self.embedder.model, self.embedder.dimensions
        for _ in range(MAX_BATCHES_PER_RUN):
            batch: list[Message] = await self.store.read(
                lambda view: view.vectors.missing(user_id, character_id, model, dims, EMBED_BATCH)
            )
            if not batch:
                return False
            vectors = await self.embedder.embed([message.content for message in batch])
            rows = [(message.id, vector) for message, vector in zip(batch, vectors, strict=True)]
            stored = await self.store.write(functools.partial(_add_vectors, model=model, rows=rows))
            log.debug("embedded %d turns of %s with %s", stored, pair_ref(user_id, character_id), model)
            if len(batch) < EMBED_BATCH:
                return False
        return True

    async def _failed(self, job: Job, exc: Exception) -> None:
        attempt = job.attempts + 1
        reason = f"{type(exc).__name__}: {exc}"
        if attempt >= self.settings.job_max_attempts:
            retry_at = None
            log.error(
                "embed %s is dead after %d attempts: %s",
                pair_ref(job.user_id, job.character_id),
                attempt,
                reason,
            )
        else:
            retry_after = exc.retry_after if isinstance(exc, EmbeddingError) else None
            delay = BACKOFF.delay_s(attempt, self.rng, retry_after)
            retry_at = now_ms() + round(delay * 1000)
            log.log(
                logging.WARNING if isinstance(exc, EmbeddingError) else logging.ERROR,
                "embed %s failed (attempt %d), retry in %.1fs: %s",
                pair_ref(job.user_id, job.character_id),
                attempt,
                delay,
                reason,
                exc_info=not isinstance(exc, EmbeddingError),
            )
        await self.store.write(lambda tx: tx.jobs.fail(job.id, reason, retry_at_ms=retry_at))


def _add_vectors(tx: Transaction, *, model: str, rows: list[tuple[int, list[float]]]) -> int:
    return tx.vectors.add(model, rows)


class _QueryVectors:
    """The vectors of recent questions, per model (least recently asked dropped first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[str, int | None, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int | None, str]) -> list[float] | None:
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
            return vector

    def put(self, key: tuple[str, int | None, str], vector: list[float]) -> None:
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()


_query_vectors = _QueryVectors(QUERY_CACHE_SIZE)


def forget_questions() -> None:
    """Drop the recent questions' vectors (their keys are what was asked): after a forget."""
    _query_vectors.clear()


async def semantic_candidates(
    store: Store,
    embedder: Embedder,
    *,
    user_id: str,
    character_id: str | None,
    q: str,
    k: int,
    timeout_s: float,
) -> list[tuple[int, float]]:
    """Message ids nearest in meaning to `q`, with their cosine similarity, best first.

    Within one pair, or all of the user's pairs when `character_id` is None. When the
    embeddings endpoint fails or takes longer than `timeout_s`, one WARNING says why and
    the answer is [] (recall goes on with keywords alone).
    """
    question = q.strip()
    if not question or k <= 0:
        return []
    key = (embedder.model, embedder.dimensions, question)
    vector = _query_vectors.get(key)
    if vector is None:
        cause: str | None = None
        try:
            vector = (await asyncio.wait_for(embedder.embed([question]), timeout_s))[0]
        except TimeoutError:
            cause = (
                f"the embeddings endpoint did not answer within {timeout_s:g}s "
                "(AGENT_MEMORY_EMBEDDINGS_TIMEOUT_S)"
            )
        except EmbeddingError as exc:
            cause = exc.message
        except Exception as exc:  # whatever the model does, recall answers
            cause = f"{type(exc).__name__}: {exc}"
        if vector is None:
            log.warning("semantic recall for %s skipped, keywords only: %s", user_ref(user_id), cause)
            return []
        _query_vectors.put(key, vector)
    found = vector
    return await store.read(
        lambda view: view.vectors.nearest(user_id, character_id, found, embedder.model, k)
    )
