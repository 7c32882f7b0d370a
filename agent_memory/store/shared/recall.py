"""The recall index as the rest of the store reads it, and its limits: the same on every backend so
that both rank a question's turns alike."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

from agent_memory.core.domain import Fact, Message, Summary
from agent_memory.core.postings import PairPostings, PostingsCache
from agent_memory.core.recall import BM25_B, BM25_K1, TermStats, TurnHit, weighted_idfs
from agent_memory.store.shared.facts import (
    FACT_COLUMNS,
    SUMMARY_COLUMNS,
    Facts,
    Summaries,
    fact_of,
    summary_of,
)
from agent_memory.store.shared.messages import READ_COLUMNS, message_of
from agent_memory.store.shared.sql import Repository, Sql

# A term in more of a pair's turns than this says little and costs a long posting list.
MAX_POSTINGS = 3000
# Document frequencies reused for FREQUENCY_TTL_S, across connections (keyed by database, pair,
# term): (until, count). A backend's `forget_held` drops them.
FREQUENCIES: dict[tuple[str, int, str], tuple[float, int]] = {}
FREQUENCY_TTL_S = 10.0
FREQUENCY_CACHE_SIZE = 100_000
# How many times `limit` turns, by matched words, are ranked with their lengths.
SHORTLIST_FACTOR = 4
# Both backends index in the background once writes paused IDLE_AFTER_S (a burst of callbacks
# is not slowed by the stemming), or a chunk every BUSY_INDEX_EVERY_S while they never pause;
# a search or a recall first indexes up to SEARCH_CATCH_UP messages, to see what was just stored.
IDLE_AFTER_S = 0.05
BUSY_INDEX_EVERY_S = 1.0
SEARCH_CATCH_UP = 20_000

T = TypeVar("T")


class RecallReads(Repository):
    """The word index of spoken turns as recall reads it; what recall shows besides is written here."""

    # The backend's cache of the pairs' postings held in memory (keyed by database and pair id).
    postings: PostingsCache

    def __init__(self, sql: Sql) -> None:
        super().__init__(sql)
        # The (user, character) of the pairs the last `term_stats` read: a turn is only ever theirs.
        self._owners: set[tuple[str, str]] = set()
        # The in-memory copies of the pairs the last `term_stats` read, for `turns` to score with.
        self._copies: dict[int, PairPostings] = {}

    @abstractmethod
    def behind(self) -> bool:
        """Whether messages are stored that the recall index has not taken in yet."""

    def read_if_caught_up(self, read: Callable[[], T]) -> tuple[T] | None:
        """`(read(),)` in this read when the index holds every stored turn, else None (catch it up)."""
        return None if self.behind() else (read(),)

    @abstractmethod
    def lag(self, user_id: str, character_id: str | None, exclude_session: str | None = None) -> int:
        """How many of the scope's turns (none of `exclude_session`) are stored but not in the index yet."""

    @abstractmethod
    def term_stats(
        self,
        user_id: str,
        character_id: str | None,
        weighted: Sequence[tuple[str, float]],
        *,
        idfs: bool = True,
    ) -> TermStats:
        """BM25's statistics over the turns in scope: each term's weighted idf (none without
        `idfs`: a condense job reads only the frequencies), the average length."""

    def _stats(
        self,
        weighted: Sequence[tuple[str, float]],
        pairs: list[int],
        documents: int,
        total_length: int,
        *,
        idfs: bool = True,
    ) -> TermStats:
        """`term_stats` of the scope's pairs: a term's frequency from each pair's copy, else `_counts`."""
        copies = self._copies
        only = copies.get(pairs[0]) if len(pairs) == 1 else None
        if only is not None:
            # One pair held in memory (a pair's recall, a condense job): its lists' lengths, in one
            # comprehension (a condense job asks ~140 terms).
            postings = only.postings
            frequencies = {term: len(postings.get(term, ())) for term, _ in weighted}
        else:
            cold = [pair for pair in pairs if pair not in copies]
            counts = self._counts([(pair, term) for term, _ in weighted for pair in cold]) if cold else {}
            frequencies = {
                term: sum(
                    copy.frequency(term) if (copy := copies.get(pair)) else counts[(pair, term)]
                    for pair in pairs
                )
                for term, _ in weighted
            }
        weights = weighted_idfs(weighted, frequencies, documents, max_frequency=MAX_POSTINGS) if idfs else {}
        return TermStats(
            pairs, weights, frequencies, documents, total_length / documents if documents else 1.0
        )

    def _counts(self, keys: Sequence[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """In how many of its pair's turns each (pair, term) is. A count is reused for `FREQUENCY_TTL_S`
        (a few seconds of new turns barely move an idf); a word not said yet is counted again each
        time, as a turn may say it any moment."""
        database, now = self._database(), time.monotonic()
        counts: dict[tuple[int, str], int] = {}
        for key in keys:
            cached = FREQUENCIES.get((database, *key))
            if cached is not None and cached[0] > now:
                counts[key] = cached[1]
        missing = [key for key in dict.fromkeys(keys) if key not in counts]
        if missing:
            if len(FREQUENCIES) + len(missing) > FREQUENCY_CACHE_SIZE:
                FREQUENCIES.clear()
            for key, count in zip(missing, self._count(missing), strict=True):
                counts[key] = count
                if count:
                    FREQUENCIES[(database, *key)] = (now + FREQUENCY_TTL_S, count)
        return counts

    @abstractmethod
    def _count(self, keys: Sequence[tuple[int, str]]) -> list[int]:
        """`_counts` of terms not counted lately, through the backend's index."""

    def _database(self) -> str:
        """Which database this is, as the frequencies' keys say it."""
        return self.sql.database()

    def warm(self, user_id: str, character_id: str) -> bool:
        """Read the pair's index into memory now, whatever its size (a call is starting: its
        first question should not find it cold); False when already held or nothing to hold."""
        warmed = False
        for key, docs, changes in self._pair_figures(user_id, character_id):
            if self.postings.held_or_reading(key):
                continue
            warmed = self._copy(key, docs, changes, at_once=True) is not None or warmed
        return warmed

    def held(self, user_id: str, character_id: str) -> bool:
        """Whether this process holds the pair's index in memory (False when it has none)."""
        keys = [key for key, _, _ in self._pair_figures(user_id, character_id)]
        return bool(keys) and all(self.postings.holds(key) for key in keys)

    @abstractmethod
    def _pair_figures(self, user_id: str, character_id: str) -> list[tuple[tuple[str, int], int, int]]:
        """The copy key, indexed turns and change count of each of the pair's index ids with turns."""

    @abstractmethod
    def _copy(
        self, key: tuple[str, int], docs: int, changes: int, *, at_once: bool = False
    ) -> PairPostings | None:
        """The pair's index as held in memory, brought up to date (None: not held yet, or too large)."""

    def turns(self, stats: TermStats, limit: int) -> list[TurnHit]:
        """The best turns in the scope of `stats`: from each pair's copy in memory, else the index."""
        scores: dict[int, float] = {}
        present = [(term, weight) for term, weight in stats.idfs.items() if stats.frequencies[term]]
        shortlist, average = limit * SHORTLIST_FACTOR, stats.average_length
        for pair in stats.pairs:
            copy = self._copies.get(pair)
            if copy is None:
                scores.update(self._scores(pair, stats, limit))
                continue
            scores.update(
                copy.scores(present, k1=BM25_K1, b=BM25_B, average=average, limit=limit, shortlist=shortlist)
            )
        return self._hits(scores, limit)

    @abstractmethod
    def _scores(self, pair: int, stats: TermStats, limit: int) -> dict[int, float]:
        """BM25 of a pair not held in memory, through the backend's index: the best `limit`."""

    @abstractmethod
    def neighbours(self, messages: Sequence[Message]) -> dict[int, tuple[Message | None, Message | None]]:
        """The spoken turns just before and just after each message in its session, by its id."""

    def messages(self, ids: Sequence[int]) -> list[Message]:
        """The messages with these ids, in the order asked (missing ones left out)."""
        if not ids:
            return []
        among, values = self.sql.among("id", ids)
        found = {
            message.id: message
            for message in self.sql.records(
                lambda *row: message_of(row), f"SELECT {READ_COLUMNS} FROM messages WHERE {among}", values
            )
        }
        return [found[i] for i in ids if i in found]

    def _hits(self, scores: dict[int, float], limit: int) -> list[TurnHit]:
        """The best `limit` scored turns (then the newest), best first, of the scope's pairs."""
        best = sorted(scores, key=lambda doc: (-scores[doc], -doc))[:limit]
        return [
            TurnHit(message, scores[message.id]) for message in self.messages(best) if self._owns(message)
        ]

    def _owns(self, message: Message) -> bool:
        """Whether a scored turn is one of the scope's: a copy held in memory answers by id, and a turn
        moved to another pair keeps its doc in the old one until it is indexed again."""
        return (message.user_id, message.character_id) in self._owners

    def facts(self, user_id: str, character_id: str | None) -> list[Fact]:
        """The facts in scope: a pair's and the user-wide ones, or all of the user's (None)."""
        if character_id is not None:
            return Facts(self.sql).of_pair(user_id, character_id)
        rows = self.sql.all(f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = ? ORDER BY id", (user_id,))
        return [fact_of(row) for row in rows]

    def summaries(self, user_id: str, character_id: str | None) -> list[Summary]:
        """The summary of a pair, or of each of the user's pairs (None; by character)."""
        if character_id is not None:
            summary = Summaries(self.sql).get(user_id, character_id)
            return [summary] if summary is not None else []
        rows = self.sql.all(
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = ? ORDER BY character_id{self.sql.binary}",
            (user_id,),
        )
        return [summary_of(row) for row in rows]
