"""Exact nearest-neighbour search over embeddings with numpy, and the matrices of recently searched pairs.

A pair holds at most tens of thousands of turns, so an exact search over its rows is one
matrix product of a few milliseconds; the matrices of pairs searched recently stay in one
cache (keyed by database), read again by the store only when the pair's vectors change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

VECTOR_DTYPE = np.dtype("<f4")
# Matrices kept in memory, all pairs together (10k turns of 1536 dimensions are 61 MB).
CACHE_MAX_BYTES = 256 * 1024 * 1024

Floats = npt.NDArray[np.float32]
MatrixKey = tuple[str, str, str, str, int]  # (database, user, character, model, dims)


def unit_rows(vectors: Sequence[Sequence[float]]) -> Floats:
    """Vectors as float32 rows of length one (a zero row stays zero)."""
    matrix = np.asarray(vectors, dtype=VECTOR_DTYPE)
    if matrix.ndim != 2:
        raise ValueError("vectors must be a sequence of equally long sequences of numbers")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(VECTOR_DTYPE)


@dataclass(frozen=True, slots=True)
class PairMatrix:
    """One pair's vectors of one model: message ids and unit rows, and what they were read at."""

    # (newest vector id, rows, sum of the ids): changes with every insert and delete, even where
    # instances commit ids out of order (a late insert and a delete keep the newest and the count).
    version: tuple[int, int, int]
    ids: npt.NDArray[np.int64]
    matrix: Floats


class MatrixCache:
    """Pairs' matrices, least recently used dropped first, at most `max_bytes` in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[MatrixKey, PairMatrix] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: MatrixKey) -> PairMatrix | None:
        """The entry, whatever its version (the caller compares)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: MatrixKey, entry: PairMatrix) -> None:
        """Keep `entry` under `key`, dropping the least recently used beyond the budget."""
        size = entry.matrix.nbytes + entry.ids.nbytes
        with self._lock:
            self._drop(key)
            if size > self.max_bytes:
                return
            self._entries[key] = entry
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def _drop(self, key: MatrixKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.matrix.nbytes + entry.ids.nbytes


# One cache for the process: readers and writers of every store share it, keyed by database.
pair_matrices = MatrixCache(CACHE_MAX_BYTES)


def top(scores: Floats, k: int) -> npt.NDArray[np.intp]:
    """Indices of the `k` highest scores, highest first."""
    if len(scores) > k:
        candidates = np.argpartition(-scores, k - 1)[:k]
        return candidates[np.argsort(-scores[candidates], kind="stable")]
    return np.argsort(-scores, kind="stable")


def nearest_in(pairs: Iterable[PairMatrix | None], vector: Floats, k: int) -> list[tuple[int, float]]:
    """The `k` rows of these matrices most like unit `vector`: (message id, cosine), best first."""
    ids: list[npt.NDArray[np.int64]] = []
    scores: list[Floats] = []
    for pair in pairs:
        if pair is None:
            continue
        similarity = pair.matrix @ vector
        best = top(similarity, k)
        ids.append(pair.ids[best])
        scores.append(similarity[best])
    if not ids:
        return []
    all_ids, all_scores = np.concatenate(ids), np.concatenate(scores)
    best = top(all_scores, k)
    return [(int(all_ids[i]), float(all_scores[i])) for i in best]
