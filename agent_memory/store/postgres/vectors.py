"""Message vectors on PostgreSQL: float32 bytes, searched exactly with numpy, as on SQLite.

Not pgvector: the extension is not part of a stock PostgreSQL (nor installed where this was
built), and a pair holds at most tens of thousands of turns, so an exact search over its rows
is one matrix product of a few milliseconds. Each pair's matrix is kept in the memory cache
of `store.shared.vectors`, read again only when the pair's vectors change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.core.domain import Message
from agent_memory.store.postgres.common import Repository
from agent_memory.store.shared.messages import READ_COLUMNS, SPOKEN
from agent_memory.store.shared.messages import message_named as message_of
from agent_memory.store.shared.vectors import (
    Floats,
    MatrixKey,
    PairMatrix,
    nearest_in,
    pair_matrices,
    stored_matrix,
    unit_rows,
)

# Spoken turns with something to embed (whitespace says nothing).
EMBEDDABLE = f"{SPOKEN} AND trim(content) != ''"
# Turns of the pair that have no vector of the model (of the asked dimensions, when given).
_WITHOUT_VECTOR = (
    "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = %s "
    "AND (%s::integer IS NULL OR v.dims = %s))"
)
_PAIR = "WHERE user_id = %s AND character_id = %s AND model = %s AND dims = %s"


@dataclass(frozen=True, slots=True)
class _SharedPairMatrix(PairMatrix):
    """A pair's matrix, also keyed by the sum of its row ids: instances commit ids out of order,
    so a late insert and a delete could leave (newest id, rows) as they were."""

    id_sum: int = 0


class PostgresVectors(Repository):
    """The `message_vectors` table (rows leave with their messages: foreign key and trigger, m004)."""

    __slots__ = ()

    # reads

    def missing(
        self, user_id: str, character_id: str, model: str, dimensions: int | None, limit: int
    ) -> list[Message]:
        """The pair's spoken turns without a vector of `model` (of `dimensions`, when given), oldest first."""
        return [
            message_of(row)
            for row in self._all(
                f"SELECT {READ_COLUMNS} FROM messages m WHERE user_id = %s AND character_id = %s "
                f"AND {EMBEDDABLE} AND {_WITHOUT_VECTOR} ORDER BY id LIMIT %s",
                (user_id, character_id, model, dimensions, dimensions, limit),
            )
        ]

    def pairs_missing(self, model: str, dimensions: int | None, limit: int) -> list[tuple[str, str]]:
        """(user, character) pairs that have spoken turns without such a vector (a full scan)."""
        rows = self._all(
            f"SELECT DISTINCT user_id, character_id FROM messages m WHERE {EMBEDDABLE} "
            f"AND {_WITHOUT_VECTOR} LIMIT %s",
            (model, dimensions, dimensions, limit),
        )
        return [(row["user_id"], row["character_id"]) for row in rows]

    def count(self, user_id: str, character_id: str | None = None) -> int:
        """Vectors held for a pair, or for all of a user's pairs."""
        if character_id is None:
            return self._count("SELECT count(*) FROM message_vectors WHERE user_id = %s", (user_id,))
        return self._count(
            "SELECT count(*) FROM message_vectors WHERE user_id = %s AND character_id = %s",
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
        if character_id is None:
            characters = [
                row["character_id"]
                for row in self._all(
                    "SELECT DISTINCT character_id FROM message_vectors WHERE user_id = %s AND model = %s "
                    "AND dims = %s",
                    (user_id, model, dims),
                )
            ]
        else:
            characters = [character_id]
        return nearest_in(
            (self._pair_matrix(user_id, character, model, dims) for character in characters), vector, k
        )

    def _pair_matrix(self, user_id: str, character_id: str, model: str, dims: int) -> PairMatrix | None:
        """The pair's matrix: cached while its vectors are unchanged, extended when some were only added."""
        params = (user_id, character_id, model, dims)
        state = self._one(
            f"SELECT coalesce(max(id), 0) AS newest, count(*) AS rows, coalesce(sum(id), 0) AS id_sum "
            f"FROM message_vectors {_PAIR}",
            params,
        )
        if not state or not state["rows"]:
            return None
        newest, rows, id_sum = int(state["newest"]), int(state["rows"]), int(state["id_sum"])
        key: MatrixKey = (self._database(), *params)
        cached = pair_matrices.get(key)
        cached_sum = cached.id_sum if isinstance(cached, _SharedPairMatrix) else None
        if cached is not None and cached.version == (newest, rows) and cached_sum == id_sum:
            return cached
        if isinstance(cached, _SharedPairMatrix) and newest > cached.version[0]:
            # A live call adds a batch every few seconds: read only what is new when nothing went.
            added = self._all(
                f"SELECT id, message_id, vector FROM message_vectors {_PAIR} AND id > %s ORDER BY id",
                (*params, cached.version[0]),
            )
            if (
                added
                and added[-1]["id"] == newest
                and cached.version[1] + len(added) == rows
                and cached.id_sum + sum(row["id"] for row in added) == id_sum
            ):
                grown = _SharedPairMatrix(
                    version=(newest, rows),
                    ids=np.concatenate([cached.ids, _ids(added)]),
                    matrix=np.concatenate([cached.matrix, _matrix(added, dims)]),
                    id_sum=id_sum,
                )
                pair_matrices.put(key, grown)
                return grown
        found = self._all(f"SELECT id, message_id, vector FROM message_vectors {_PAIR} ORDER BY id", params)
        if not found:
            return None
        # Keyed by what was read, not by what was counted before: a write in between is seen next time.
        entry = _SharedPairMatrix(
            version=(found[-1]["id"], len(found)),
            ids=_ids(found),
            matrix=_matrix(found, dims),
            id_sum=sum(row["id"] for row in found),
        )
        pair_matrices.put(key, entry)
        return entry

    def _database(self) -> str:
        """Which database this connection reads (readers and writers of every instance share a key)."""
        info = self.conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname}"

    # writes

    def add(self, model: str, vectors: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Store each message's vector (at unit length), replacing one it had; returns how many.

        The owner is read from the message itself, and a message deleted meanwhile (a forget
        while its batch was being embedded) gets none. A replaced vector takes a new id, so
        every instance's cached matrix of the pair is read again.
        """
        if not vectors:
            return 0
        rows = unit_rows([vector for _, vector in vectors])
        dims = rows.shape[1]
        # The last vector given for a message is the one kept (one statement cannot touch a row twice).
        latest = {message_id: row.tobytes() for (message_id, _), row in zip(vectors, rows, strict=True)}
        return self.conn.execute(
            b"INSERT INTO message_vectors (message_id, user_id, character_id, model, dims, vector) "
            b"SELECT m.id, m.user_id, m.character_id, %s, %s, v.vector "
            b"FROM unnest(%s::bigint[], %s::bytea[]) AS v(message_id, vector) JOIN messages m ON m.id = v.message_id "
            b"ORDER BY m.id "
            b"ON CONFLICT (message_id) DO UPDATE SET id = DEFAULT, user_id = excluded.user_id, "
            b"character_id = excluded.character_id, model = excluded.model, dims = excluded.dims, "
            b"vector = excluded.vector",
            (model, dims, list(latest), list(latest.values())),
        ).rowcount


def _ids(rows: Sequence[dict[str, Any]]) -> npt.NDArray[np.int64]:
    """The message ids of (id, message_id, vector) rows."""
    return np.fromiter((row["message_id"] for row in rows), dtype=np.int64, count=len(rows))


def _matrix(rows: Sequence[dict[str, Any]], dims: int) -> Floats:
    """The vectors of (id, message_id, vector) rows, one matrix row each."""
    return stored_matrix([row["vector"] for row in rows], dims)
