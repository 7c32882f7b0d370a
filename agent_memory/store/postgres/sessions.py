"""How PostgreSQL moves a session's messages to another pair (the rest is store/shared/sessions.py)."""

from __future__ import annotations

from agent_memory.store.shared.sessions import MOVED_COLUMNS, Sessions

# A move in one statement: the originals are deleted (their recall rows and vectors go with
# them) and inserted again under the new pair, with new ids above every other, in order.
_MOVE = (
    f"WITH gone AS (DELETE FROM messages WHERE agent_id = ? RETURNING id, {MOVED_COLUMNS}) "
    f"INSERT INTO messages (user_id, character_id, {MOVED_COLUMNS}) "
    f"SELECT ?, ?, {MOVED_COLUMNS} FROM gone ORDER BY id"
)


class PostgresSessions(Sessions):
    """The `sessions` table."""

    __slots__ = ()

    def _move_messages(self, agent_id: str, user_id: str, character_id: str) -> int:
        return self.sql.run(_MOVE, (agent_id, user_id, character_id))
