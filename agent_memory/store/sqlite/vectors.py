"""How SQLite stores vectors (the rest is store/shared/vectors.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.store.shared.vectors import Vectors, unit_rows


class SQLiteVectors(Vectors):
    """The `message_vectors` table (rows leave with their messages, by trigger: see m012)."""

    __slots__ = ()

    def add(self, model: str, vectors: Sequence[tuple[int, Sequence[float]]]) -> int:
        """One statement a vector (REPLACE gives a replaced vector a new id)."""
        if not vectors:
            return 0
        rows = unit_rows([vector for _, vector in vectors])
        dims = rows.shape[1]
        stored = 0
        for (message_id, _), row in zip(vectors, rows, strict=True):
            stored += self.sql.run(
                "INSERT OR REPLACE INTO message_vectors (message_id, user_id, character_id, model, dims, "
                "vector) SELECT id, user_id, character_id, ?, ?, ? FROM messages WHERE id = ?",
                (model, dims, row.tobytes(), message_id),
            )
        return stored
