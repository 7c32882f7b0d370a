"""How SQLite moves a session's messages to another pair (the rest is store/shared/sessions.py)."""

from __future__ import annotations

from agent_memory.store.shared.sessions import MOVED_COLUMNS, Sessions

# What a session's messages are moved by while their (unique per session) seq is rewritten;
# sequence numbers stay far below it (gaps leave 2**20 of room each).
MOVE_SEQ_SHIFT = 1 << 52
_COPIED = MOVED_COLUMNS.replace("seq, ", "")


class SQLiteSessions(Sessions):
    """The `sessions` table."""

    __slots__ = ()

    def _move_messages(self, agent_id: str, user_id: str, character_id: str) -> int:
        # Copies first (new ids above every other), shifted out of the originals' seq range
        # (seq is unique per session); then the originals go and the copies take their seq.
        moved = self.sql.run(
            f"INSERT INTO messages (user_id, character_id, seq, {_COPIED}) "
            f"SELECT ?, ?, seq + {MOVE_SEQ_SHIFT}, {_COPIED} FROM messages WHERE agent_id = ? ORDER BY id",
            (user_id, character_id, agent_id),
        )
        self.sql.run(f"DELETE FROM messages WHERE agent_id = ? AND seq < {MOVE_SEQ_SHIFT // 2}", (agent_id,))
        self.sql.run(f"UPDATE messages SET seq = seq - {MOVE_SEQ_SHIFT} WHERE agent_id = ?", (agent_id,))
        return moved
