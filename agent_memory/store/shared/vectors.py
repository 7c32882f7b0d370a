"""Message vectors: embeddings of spoken turns, stored as float32 bytes and searched exactly with numpy.

Not sqlite-vec nor pgvector: this Python's sqlite3 cannot load extensions, and pgvector is not
part of a stock PostgreSQL. A pair holds at most tens of thousands of turns, so an exact search
over its rows is one matrix product of a few milliseconds; the matrices of pairs searched
recently stay in one cache (keyed by database), read again only when the pair's vectors change.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent_memory.core.domain import Message
from agent_memory.store.shared.messages import READ_COLUMNS, SPOKEN, message_of
from agent_memory.store.shared.sql import Repository, Row

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


# Spoken turns with something to embed (whitespace says nothing).
EMBEDDABLE = f"{SPOKEN} AND trim(content) <> ''"
# Turns of the pair that have no vector of the model (of the asked dimensions, when given).
_WITHOUT_VECTOR = (
    "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = ? "
    "AND (CAST(? AS integer) IS NULL OR v.dims = ?))"
)
_PAIR = "WHERE user_id = ? AND character_id = ? AND model = ? AND dims = ?"


class VectorReads(Repository):
    """The `message_vectors` table, read (rows leave with their messages, by trigger or foreign key)."""

    __slots__ = ()

    def missing(
        self, user_id: str, character_id: str, model: str, dimensions: int | None, limit: int
    ) -> list[Message]:
        """The pair's spoken turns without a vector of `model` (of `dimensions`, when given), oldest first."""
        return self.sql.records(
            lambda *row: message_of(row),
            f"SELECT {READ_COLUMNS} FROM messages m WHERE user_id = ? AND character_id = ? "
            f"AND {EMBEDDABLE} AND {_WITHOUT_VECTOR} ORDER BY id LIMIT ?",
            (user_id, character_id, model, dimensions, dimensions, limit),
        )

    def pairs_missing(self, model: str, dimensions: int | None, limit: int) -> list[tuple[str, str]]:
        """(user, character) pairs that have spoken turns without such a vector (a full scan)."""
        return self.sql.records(
            lambda user, character: (user, character),
            f"SELECT DISTINCT user_id, character_id FROM messages m WHERE {EMBEDDABLE} AND {_WITHOUT_VECTOR} LIMIT ?",
            (model, dimensions, dimensions, limit),
        )

    def count(self, user_id: str, character_id: str | None = None) -> int:
        """Vectors held for a pair, or for all of a user's pairs."""
        if character_id is None:
            return self.sql.count("SELECT count(*) FROM message_vectors WHERE user_id = ?", (user_id,))
        return self.sql.count(
            "SELECT count(*) FROM message_vectors WHERE user_id = ? AND character_id = ?",
            (user_id, character_id),
        )

    def nearest(
        self, user_id: str, character_id: str | None, query: Sequence[float], model: str, k: int
    ) -> list[tuple[int, float]]:
        """The `k` messages whose `model` vectors are most like `query`: (message id, cosine), best first.

        Within one pair, or within all of the user's pairs when `character_id` is None.
        """
        if k <= 0 or not query:
            return []
        vector = unit_rows([query])[0]
        dims = len(vector)
        characters = (
            [character_id]
            if character_id is not None
            else self.sql.records(
                str,
                "SELECT DISTINCT character_id FROM message_vectors WHERE user_id = ? AND model = ? AND dims = ?",
                (user_id, model, dims),
            )
        )
        return nearest_in(
            (self._pair_matrix(user_id, character, model, dims) for character in characters), vector, k
        )

    def _pair_matrix(self, user_id: str, character_id: str, model: str, dims: int) -> PairMatrix | None:
        """The pair's matrix: cached while its vectors are unchanged, extended when some were only added."""
        params = (user_id, character_id, model, dims)
        state = self.sql.one(
            "SELECT coalesce(max(id), 0) AS newest, count(*) AS n, coalesce(sum(id), 0) AS id_sum "
            f"FROM message_vectors {_PAIR}",
            params,
        )
        if not state or not state["n"]:
            return None
        version = (int(state["newest"]), int(state["n"]), int(state["id_sum"]))
        key: MatrixKey = (self.sql.database(), *params)
        cached = pair_matrices.get(key)
        if cached is not None and cached.version == version:
            return cached
        if cached is not None and version[0] > cached.version[0]:
            # A live call adds a batch every few seconds: read only what is new when nothing went.
            added = self.sql.all(
                f"SELECT id, message_id, vector FROM message_vectors {_PAIR} AND id > ? ORDER BY id",
                (*params, cached.version[0]),
            )
            if added and _version(added, cached.version) == version:
                grown = PairMatrix(
                    version,
                    np.concatenate([cached.ids, _ids(added)]),
                    np.concatenate([cached.matrix, _matrix(added, dims)]),
                )
                pair_matrices.put(key, grown)
                return grown
        found = self.sql.all(
            f"SELECT id, message_id, vector FROM message_vectors {_PAIR} ORDER BY id", params
        )
        if not found:
            return None
        # Keyed by what was read, not by what was counted before: a write in between is seen next time.
        entry = PairMatrix(_version(found, (0, 0, 0)), _ids(found), _matrix(found, dims))
        pair_matrices.put(key, entry)
        return entry


class Vectors(VectorReads):
    """The `message_vectors` table; how a batch is stored is the backend's."""

    __slots__ = ()

    def add(self, model: str, vectors: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Store each message's vector (at unit length), replacing one it had (under a new id, so
        cached matrices are read again); returns how many. The owner is read from the message,
        and a message deleted meanwhile (a forget while its batch was embedded) gets none."""
        if not vectors:
            return 0
        rows = unit_rows([vector for _, vector in vectors])
        stored = [(message_id, row.tobytes()) for (message_id, _), row in zip(vectors, rows, strict=True)]
        return self._store(model, rows.shape[1], stored)

    @abstractmethod
    def _store(self, model: str, dims: int, vectors: Sequence[tuple[int, bytes]]) -> int:
        """`add` the (message id, unit vector as float32 bytes) of a batch; returns how many."""


def _version(rows: Sequence[Row], before: tuple[int, int, int]) -> tuple[int, int, int]:
    """The version of a matrix of `before`'s rows and these (in id order)."""
    return (rows[-1]["id"], before[1] + len(rows), before[2] + sum(row["id"] for row in rows))


def _ids(rows: Sequence[Row]) -> npt.NDArray[np.int64]:
    """The message ids of (id, message_id, vector) rows."""
    return np.fromiter((row["message_id"] for row in rows), dtype=np.int64, count=len(rows))


def _matrix(rows: Sequence[Row], dims: int) -> Floats:
    """The vectors (float32 bytes each) of (id, message_id, vector) rows, one matrix row each."""
    return np.frombuffer(b"".join(row["vector"] for row in rows), dtype=VECTOR_DTYPE).reshape(len(rows), dims)
