"""How SQLite stores vectors (the rest is store/shared/vectors.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.store.shared.vectors import Vectors


class SQLiteVectors(Vectors):
    """The `message_vectors` table (rows leave with their messages, by trigger: see m012)."""

    __slots__ = ()

    def _store(self, model: str, dims: int, vectors: Sequence[tuple[int, bytes]]) -> int:
        # One statement a vector; REPLACE gives a replaced vector a new id.
        return sum(
            self.sql.run(
                "INSERT OR REPLACE INTO message_vectors (message_id, user_id, character_id, model, dims, "
                "vector) SELECT id, user_id, character_id, ?, ?, ? FROM messages WHERE id = ?",
                (model, dims, vector, message_id),
            )
            for message_id, vector in vectors
        )
