"""How PostgreSQL stores vectors, all of a batch in one statement (the rest is store/shared/vectors.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.store.shared.vectors import Vectors


class PostgresVectors(Vectors):
    """The `message_vectors` table (rows leave with their messages: foreign key and trigger, m004)."""

    __slots__ = ()

    def _store(self, model: str, dims: int, vectors: Sequence[tuple[int, bytes]]) -> int:
        # The last vector given for a message is the one kept (one statement cannot touch a row twice).
        latest = dict(vectors)
        return self.sql.run(
            "INSERT INTO message_vectors (message_id, user_id, character_id, model, dims, vector) "
            "SELECT m.id, m.user_id, m.character_id, ?, ?, v.vector "
            "FROM unnest(?::bigint[], ?::bytea[]) AS v(message_id, vector) JOIN messages m ON m.id = v.message_id "
            "ORDER BY m.id ON CONFLICT (message_id) DO UPDATE SET id = DEFAULT, user_id = excluded.user_id, "
            "character_id = excluded.character_id, model = excluded.model, dims = excluded.dims, vector = excluded.vector",
            (model, dims, list(latest), list(latest.values())),
        )
