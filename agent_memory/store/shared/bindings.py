"""Bindings: agent runs and channels tied to a (user, character) through the API."""

from __future__ import annotations

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Binding, ChannelBinding
from agent_memory.store.shared.sql import Repository

CHANNEL_COLUMNS = "channel, user_id, character_id, created_ms, updated_ms"


class Bindings(Repository):
    """The `bindings` and `channel_bindings` tables."""

    def of_agent(self, agent_id: str) -> Binding | None:
        return self.sql.record(
            Binding,
            "SELECT agent_id, user_id, character_id, created_ms FROM bindings WHERE agent_id = ?",
            (agent_id,),
        )

    def of_channel(self, channel: str) -> ChannelBinding | None:
        return self.sql.record(
            ChannelBinding, f"SELECT {CHANNEL_COLUMNS} FROM channel_bindings WHERE channel = ?", (channel,)
        )

    def bind_agent(self, agent_id: str, user_id: str, character_id: str) -> None:
        """Tie an agent run to a pair (binding it again replaces the binding)."""
        self.sql.run(
            "INSERT INTO bindings (agent_id, user_id, character_id, created_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET user_id = excluded.user_id, "
            "character_id = excluded.character_id, created_ms = excluded.created_ms",
            (agent_id, user_id, character_id, now_ms()),
        )

    def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBinding:
        """Tie a channel to a pair (a rebinding keeps its created_ms); returns the binding."""
        stamp = now_ms()
        binding = self.sql.record(
            ChannelBinding,
            "INSERT INTO channel_bindings (channel, user_id, character_id, created_ms, updated_ms) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel) DO UPDATE SET user_id = excluded.user_id, "
            f"character_id = excluded.character_id, updated_ms = excluded.updated_ms RETURNING {CHANNEL_COLUMNS}",
            (channel, user_id, character_id, stamp, stamp),
        )
        assert binding is not None  # an upsert always returns its row
        return binding

    def unbind_channel(self, channel: str) -> ChannelBinding | None:
        """Remove a channel's binding; returns what it was, or None if there was none."""
        return self.sql.record(
            ChannelBinding,
            f"DELETE FROM channel_bindings WHERE channel = ? RETURNING {CHANNEL_COLUMNS}",
            (channel,),
        )
