"""Bindings: agent runs and channels tied to a (user, character) through the API."""

from __future__ import annotations

from agent_memory.core.domain import Binding, ChannelBinding
from agent_memory.store.sqlite.common import Repository, now_ms

CHANNEL_COLUMNS = "channel, user_id, character_id, created_ms, updated_ms"


class SQLiteBindings(Repository):
    """The `bindings` and `channel_bindings` tables."""

    __slots__ = ()

    def of_agent(self, agent_id: str) -> Binding | None:
        row = self.conn.execute(
            "SELECT agent_id, user_id, character_id, created_ms FROM bindings WHERE agent_id = ?",
            (agent_id,),
        ).fetchone()
        return Binding(*row) if row is not None else None

    def of_channel(self, channel: str) -> ChannelBinding | None:
        row = self.conn.execute(
            f"SELECT {CHANNEL_COLUMNS} FROM channel_bindings WHERE channel = ?", (channel,)
        ).fetchone()
        return ChannelBinding(*row) if row is not None else None

    def bind_agent(self, agent_id: str, user_id: str, character_id: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO bindings (agent_id, user_id, character_id, created_ms) "
            "VALUES (?, ?, ?, ?)",
            (agent_id, user_id, character_id, now_ms()),
        )

    def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBinding:
        """Tie a channel to a pair (a rebinding keeps its created_ms); returns the binding."""
        stamp = now_ms()
        self.conn.execute(
            "INSERT INTO channel_bindings (channel, user_id, character_id, created_ms, updated_ms) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel) DO UPDATE SET user_id = excluded.user_id, "
            "character_id = excluded.character_id, updated_ms = excluded.updated_ms",
            (channel, user_id, character_id, stamp, stamp),
        )
        binding = self.of_channel(channel)
        assert binding is not None  # just written, in this transaction
        return binding

    def unbind_channel(self, channel: str) -> ChannelBinding | None:
        """Remove a channel's binding; returns what it was, or None if there was none."""
        binding = self.of_channel(channel)
        if binding is not None:
            self.conn.execute("DELETE FROM channel_bindings WHERE channel = ?", (channel,))
        return binding
