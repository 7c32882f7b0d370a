"""Message vectors: embeddings of spoken turns, stored as float32 blobs and searched exactly with numpy.

Not sqlite-vec: the extension cannot be loaded into this Python's sqlite3 (built without
`enable_load_extension`). A pair holds at most tens of thousands of turns, so an exact
search over its rows is one matrix product of a few milliseconds; the matrix of each pair
searched recently is kept in memory (`store.shared.vectors`) and read again only when the
pair's vectors change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.core.domain import Message
from agent_memory.store.shared.messages import READ_COLUMNS, SPOKEN, message_of
from agent_memory.store.shared.vectors import (
    Floats,
    MatrixKey,
    PairMatrix,
    nearest_in,
    pair_matrices,
    stored_matrix,
    unit_rows,
)
from agent_memory.store.sqlite.common import Repository

# Spoken turns with something to embed (whitespace says nothing).
EMBEDDABLE = f"{SPOKEN} AND trim(content) != ''"
# Turns of the pair that have no vector of the model (of the asked dimensions, when given).
_WITHOUT_VECTOR = (
    "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = ? "
    "AND (? IS NULL OR v.dims = ?))"
)


class SQLiteVectors(Repository):
    """The `message_vectors` table (rows leave with their messages, by trigger: see m012)."""

    __slots__ = ()

    # reads

    def missing(
        self, user_id: str, character_id: str, model: str, dimensions: int | None, limit: int
    ) -> list[Message]:
        """The pair's spoken turns without a vector of `model` (of `dimensions`, when given), oldest first."""
        return [
            message_of(row)
            for row in self.conn.execute(
                f"SELECT {READ_COLUMNS} FROM messages m WHERE user_id = ? AND character_id = ? "
                f"AND {EMBEDDABLE} AND {_WITHOUT_VECTOR} ORDER BY id LIMIT ?",
                (user_id, character_id, model, dimensions, dimensions, limit),
            )
        ]

    def pairs_missing(self, model: str, dimensions: int | None, limit: int) -> list[tuple[str, str]]:
        """(user, character) pairs that have spoken turns without such a vector (a full scan)."""
        rows = self.conn.execute(
            f"SELECT DISTINCT user_id, character_id FROM messages m WHERE {EMBEDDABLE} "
            f"AND {_WITHOUT_VECTOR} LIMIT ?",
            (model, dimensions, dimensions, limit),
        )
        return [(row[0], row[1]) for row in rows]

    def count(self, user_id: str, character_id: str | None = None) -> int:
        """Vectors held for a pair, or for all of a user's pairs."""
        if character_id is None:
            return self._count("SELECT count(*) FROM message_vectors WHERE user_id = ?", (user_id,))
        return self._count(
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
        if character_id is None:
            characters = [
                row[0]
                for row in self.conn.execute(
                    "SELECT DISTINCT character_id FROM message_vectors WHERE user_id = ? AND model = ? "
                    "AND dims = ?",
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
        where = "WHERE user_id = ? AND character_id = ? AND model = ? AND dims = ?"
        params = (user_id, character_id, model, dims)
        newest, rows = self.conn.execute(
            f"SELECT coalesce(max(id), 0), count(*) FROM message_vectors {where}", params
        ).fetchone()
        if not rows:
            return None
        key: MatrixKey = (self._database(), *params)
        cached = pair_matrices.get(key)
        if cached is not None and cached.version == (newest, rows):
            return cached
        if cached is not None and newest > cached.version[0]:
            # A live call adds a batch every few seconds: read only what is new when nothing went.
            added = self.conn.execute(
                f"SELECT id, message_id, vector FROM message_vectors {where} AND id > ? ORDER BY id",
                (*params, cached.version[0]),
            ).fetchall()
            if added and added[-1][0] == newest and cached.version[1] + len(added) == rows:
                grown = PairMatrix(
                    version=(newest, rows),
                    ids=np.concatenate([cached.ids, _ids(added)]),
                    matrix=np.concatenate([cached.matrix, _matrix(added, dims)]),
                )
                pair_matrices.put(key, grown)
                return grown
        found = self.conn.execute(
            f"SELECT id, message_id, vector FROM message_vectors {where} ORDER BY id", params
        ).fetchall()
        if not found:
            return None
        # Keyed by what was read, not by what was counted before: a write in between is seen next time.
        entry = PairMatrix(version=(found[-1][0], len(found)), ids=_ids(found), matrix=_matrix(found, dims))
        pair_matrices.put(key, entry)
        return entry

    def _database(self) -> str:
        """The main database file (readers and the writer share the cache per file)."""
        for row in self.conn.execute("PRAGMA database_list"):
            if row[1] == "main":
                return str(row[2])
        return ""

    # writes

    def add(self, model: str, vectors: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Store each message's vector (at unit length), replacing one it had; returns how many.

        The owner is read from the message itself, and a message deleted meanwhile (a forget
        while its batch was being embedded) gets none.
        """
        if not vectors:
            return 0
        rows = unit_rows([vector for _, vector in vectors])
        dims = rows.shape[1]
        stored = 0
        for (message_id, _), row in zip(vectors, rows, strict=True):
            stored += self.conn.execute(
                "INSERT OR REPLACE INTO message_vectors (message_id, user_id, character_id, model, dims, "
                "vector) SELECT id, user_id, character_id, ?, ?, ? FROM messages WHERE id = ?",
                (model, dims, row.tobytes(), message_id),
            ).rowcount
        return stored


def _ids(rows: Sequence[Sequence[Any]]) -> npt.NDArray[np.int64]:
    """The message ids of (id, message_id, vector) rows."""
    return np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))


def _matrix(rows: Sequence[Sequence[Any]], dims: int) -> Floats:
    """The vectors of (id, message_id, vector) rows, one matrix row each."""
    return stored_matrix([row[2] for row in rows], dims)
