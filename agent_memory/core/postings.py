"""A pair's recall index held in memory: what a question's BM25 reads, without a trip through SQL.

A live call asks about one pair every turn. Reading that pair's posting lists through the
database is most of a recall's cost (about a millisecond for a pair of 10,000 turns); held
here, they are summed in a fraction of that. A copy is never stale: the store counts every
change to a pair's index, and a copy is used only at the count it was read at. Turns indexed
since are read and appended; when the count does not add up (a turn deleted, or indexed again
after an edit) the pair is read again whole.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger(__name__)

# Turns the copies may hold in all (about 150 bytes each); the least recently asked pairs are
# dropped past it. A pair larger than this is not copied: recall reads it through SQL.
POSTINGS_BUDGET_DOCS = 300_000
# A pair of more turns than this is read into memory in the background (about 6 ms per 1,000).
READ_AT_ONCE_DOCS = 2_000

# An indexed turn: its id, its length in terms, and its terms.
Doc = tuple[int, int, Sequence[str]]
# A read of a pair's indexed turns: its change count (None when no turn came back) and the turns.
Docs = tuple[int | None, list[Doc]]


@dataclass(slots=True)
class PairPostings:
    """One pair's terms and turn lengths, as of `changes` to its index.

    Turns are numbered densely in the order they were indexed (which is id order), and the
    posting lists hold those numbers: a question's words are summed per turn by `bincount`.
    """

    changes: int
    last_id: int = 0
    ids: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    postings: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The lists as arrays, made when first asked for and extended when they grew (a live
    # call's own turns keep adding to the words it asks about).
    _arrays: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    _ids: NDArray[np.int64] | None = None
    _lengths: NDArray[np.int64] | None = None

    def add(self, docs: Iterable[Doc]) -> None:
        """Take in indexed turns, in ascending id order."""
        postings, ids, lengths = self.postings, self.ids, self.lengths
        for doc, length, terms in docs:
            at = len(ids)
            ids.append(doc)
            lengths.append(length)
            for term in dict.fromkeys(terms):  # a turn counts once per word, as in the SQL index
                found = postings.get(term)
                if found is None:
                    postings[term] = [at]
                else:
                    found.append(at)
            self.last_id = doc

    def ready(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The arrays of turn ids and lengths, brought up to date (made when the pair is read, so
        that a pair read in the background is scored without making them on a question's time)."""
        ids = self._ids = _grown(self._ids, self.ids)
        lengths = self._lengths = _grown(self._lengths, self.lengths)
        return ids, lengths

    def __len__(self) -> int:
        return len(self.ids)

    def frequency(self, term: str) -> int:
        """In how many of the pair's turns `term` is."""
        return len(self.postings.get(term, ()))

    def scores(
        self,
        weights: Sequence[tuple[str, float]],
        *,
        k1: float,
        b: float,
        average: float,
        limit: int,
        shortlist: int,
    ) -> dict[int, float]:
        """BM25 (binary term frequency) of the best `limit` turns by id, ranked as the SQL index
        ranks them: the `shortlist` with the most weighted words, then their length factor."""
        lists = [self._posting_array(term) for term, _ in weights]
        if not any(len(found) for found in lists):
            return {}
        matched = np.bincount(
            np.concatenate(lists),
            weights=np.repeat([weight for _, weight in weights], [len(found) for found in lists]),
        )
        said = (matched > 0).nonzero()[0]  # through a mask: a third of flatnonzero's time
        totals = matched[said]
        # Most matched first, then the newest (a later turn has a larger number and id).
        best = np.lexsort((-said, -totals))[:shortlist]
        said, totals = said[best], totals[best]
        # Read through locals: another thread may replace the arrays meanwhile.
        ids, lengths = self.ready()
        scores = totals * (k1 + 1) / (1 + k1 * (1 - b + b * lengths[said] / average))
        kept = np.lexsort((-said, -totals, -scores))[:limit]
        return dict(zip(ids[said[kept]].tolist(), scores[kept].tolist(), strict=True))

    def _posting_array(self, term: str) -> NDArray[np.int64]:
        listed = self.postings.get(term)
        if listed is None:  # not kept: every word ever asked about would stay
            return _NONE
        found = self._arrays[term] = _grown(self._arrays.get(term), listed)
        return found


_NONE: NDArray[np.int64] = np.empty(0, np.int64)


def _grown(held: NDArray[np.int64] | None, listed: Sequence[int]) -> NDArray[np.int64]:
    """`listed` as an array, reusing `held`, the array of it when it was shorter (the lists
    only ever grow at their end)."""
    if held is not None and len(held) == len(listed):
        return held
    added = np.array(listed[len(held) if held is not None else 0 :], dtype=np.int64)
    return added if held is None else np.concatenate((held, added))


class PostingsCache:
    """Copies of the most recently asked pairs' indexes, within `budget_docs` turns in all."""

    def __init__(self, budget_docs: int = POSTINGS_BUDGET_DOCS) -> None:
        self.budget_docs = budget_docs
        self._pairs: OrderedDict[tuple[str, int], PairPostings] = OrderedDict()
        self._counted: dict[tuple[str, int], int] = {}
        self._docs = 0
        self._lock = threading.Lock()
        self._loading: set[tuple[str, int]] = set()
        # One pair read at a time: each read is tens of milliseconds of Python taken from the service.
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recall-postings")
        self.hits = self.appends = self.reads = 0
        # Counts `clear`s: a read begun before one (a forget) is not held after it.
        self._cleared = 0

    def current(
        self,
        key: tuple[str, int],
        changes: int,
        docs: int,
        *,
        newer: Callable[[int], Docs],
        whole: Callable[[], Docs],
        whole_later: Callable[[], Docs],
        at_once: bool = False,
    ) -> PairPostings | None:
        """The copy of pair `key` at `changes`: held, or brought up to date with `newer(last_id)`.

        A pair that must be read whole is read at once when small (`whole()`); a larger one is
        read in the background (`whole_later()`, on a connection of its own) and None is returned
        meanwhile, as for a pair too large to hold: the question is answered through SQL instead
        of waiting tens of milliseconds. `at_once` reads any pair whole right here (warming, on a
        reader thread, where no question waits for it).
        """
        if docs > self.budget_docs:
            return None
        cleared = self._cleared
        with self._lock:
            held = self._pairs.get(key)
            if held is not None:
                self._pairs.move_to_end(key)
        if held is not None:
            with held.lock:
                if held.changes == changes:
                    self.hits += 1
                    return held
                now, added = newer(held.last_id)
                # Only appends since the copy: every change counted is a turn read here.
                if now is not None and held.changes + len(added) == now:
                    held.add(added)
                    held.changes = now
                    self.appends += 1
                    self._account(key, held, cleared)
                    return held
        if docs > READ_AT_ONCE_DOCS and not at_once:
            self._read_later(key, changes, whole_later)
            return None
        return self._read(key, changes, whole)

    def _read(self, key: tuple[str, int], changes: int, whole: Callable[[], Docs]) -> PairPostings:
        cleared = self._cleared
        now, found = whole()
        if now is None:  # emptied since its count was read: nothing to hold
            return PairPostings(changes)
        fresh = PairPostings(now)
        fresh.add(found)
        fresh.ready()
        self.reads += 1
        self._account(key, fresh, cleared)
        return fresh

    def _read_later(self, key: tuple[str, int], changes: int, whole: Callable[[], Docs]) -> None:
        with self._lock:
            if key in self._loading:
                return
            self._loading.add(key)

        def load() -> None:
            try:
                self._read(key, changes, whole)
            except Exception:  # the next question tries again; until then SQL answers
                log.warning("reading the recall index of pair %s into memory failed", key[1], exc_info=True)
            finally:
                with self._lock:
                    self._loading.discard(key)

        self._loader.submit(load)

    def wait_for_reads(self) -> None:
        """Wait for the background reads under way (tests and benchmarks)."""
        self._loader.submit(lambda: None).result()

    def _account(self, key: tuple[str, int], postings: PairPostings, cleared: int | None = None) -> None:
        """Hold `postings` for `key`, counting its turns; drop the least recently asked past the budget.
        A copy read before the latest `clear` (`cleared`: the count when its read began) is not held."""
        with self._lock:
            if cleared is not None and cleared != self._cleared:
                return
            size = len(postings)
            self._docs += size - self._counted.pop(key, 0)
            self._pairs.pop(key, None)
            self._pairs[key], self._counted[key] = postings, size
            while self._docs > self.budget_docs and len(self._pairs) > 1:
                dropped, _ = self._pairs.popitem(last=False)
                self._docs -= self._counted.pop(dropped)

    def holds(self, key: tuple[str, int]) -> bool:
        """Whether a copy of pair `key` is held (at whatever count)."""
        with self._lock:
            return key in self._pairs

    def held_at(self, key: tuple[str, int], changes: int) -> PairPostings | None:
        """The copy of pair `key` if it is held at exactly `changes` (nothing read, nothing counted)."""
        with self._lock:
            held = self._pairs.get(key)
            if held is None or held.changes != changes:
                return None
            self._pairs.move_to_end(key)
            self.hits += 1
        return held

    def held_or_reading(self, key: tuple[str, int]) -> bool:
        """Whether a copy of pair `key` is held or being read in the background."""
        with self._lock:
            return key in self._pairs or key in self._loading

    def __len__(self) -> int:
        """How many pairs are held."""
        return len(self._pairs)

    def held_keys(self) -> list[tuple[str, int]]:
        """The keys of the pairs held."""
        with self._lock:
            return list(self._pairs)

    def drop(self, keys: Iterable[tuple[str, int]]) -> None:
        """Drop the copies of these pairs (gone from the database: another instance forgot them)."""
        with self._lock:
            self._cleared += 1  # nor a read of one under way, begun before it went
            for key in keys:
                if self._pairs.pop(key, None) is not None:
                    self._docs -= self._counted.pop(key)

    def clear(self) -> None:
        with self._lock:
            self._cleared += 1
            self._pairs.clear()
            self._counted.clear()
            self._docs = 0
