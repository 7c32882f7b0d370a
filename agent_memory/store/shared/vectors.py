"""Message vectors: embeddings of spoken turns, stored as float32 bytes, searched by core.vectors
(not sqlite-vec nor pgvector: this sqlite3 loads no extensions, a stock PostgreSQL has no pgvector)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agent_memory.core.domain import Message
from agent_memory.core.vectors import (
    VECTOR_DTYPE,
    Floats,
    MatrixKey,
    PairMatrix,
    nearest_in,
    pair_matrices,
    unit_rows,
)
from agent_memory.store.shared.messages import READ_COLUMNS, SPOKEN, message_of
from agent_memory.store.shared.sql import Repository, Row, pair_scope

# Spoken turns with something to embed (whitespace says nothing).
EMBEDDABLE = f"{SPOKEN} AND trim(content) <> ''"
# Turns of the pair that have no vector of the model (of the asked dimensions, when given).
_WITHOUT_VECTOR = (
    "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = ? "
    "AND (CAST(? AS integer) IS NULL OR v.dims = ?))"
)
_PAIR = "WHERE user_id = ? AND character_id = ? AND model = ? AND dims = ?"


class Vectors(Repository):
    """The `message_vectors` table (rows leave with their messages, by trigger or foreign key)."""

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
        where, params = pair_scope(user_id, character_id)
        return self.sql.count(f"SELECT count(*) FROM message_vectors WHERE {where}", params)

    def nearest(
        self, user_id: str, character_id: str | None, query: Sequence[float], model: str, k: int
    ) -> list[tuple[int, float]]:
        """The `k` messages of a pair (or the user's) whose vectors are most like `query`: (id, cosine)."""
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

    def add(self, model: str, vectors: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Store each message's unit vector, replacing one it had (under a new id); how many. A message
        deleted meanwhile (a forget while its batch was embedded) gets none."""
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
