"""Bindings: agent runs and channels tied to a (user, character) through the API."""

from __future__ import annotations

from agent_memory.core.domain import Binding, ChannelBinding
from agent_memory.store.postgres.common import Repository, now_ms

CHANNEL_COLUMNS = "channel, user_id, character_id, created_ms, updated_ms"


class PostgresBindings(Repository):
    """The `bindings` and `channel_bindings` tables."""

    __slots__ = ()

    def of_agent(self, agent_id: str) -> Binding | None:
        row = self._one(
            "SELECT agent_id, user_id, character_id, created_ms FROM bindings WHERE agent_id = %s",
            (agent_id,),
        )
        return Binding(*row.values()) if row is not None else None

    def of_channel(self, channel: str) -> ChannelBinding | None:
        row = self._one(f"SELECT {CHANNEL_COLUMNS} FROM channel_bindings WHERE channel = %s", (channel,))
        return ChannelBinding(*row.values()) if row is not None else None

    def bind_agent(self, agent_id: str, user_id: str, character_id: str) -> None:
        """Tie an agent run to a pair (binding it again replaces the binding)."""
        self.conn.execute(
            b"INSERT INTO bindings (agent_id, user_id, character_id, created_ms) VALUES (%s, %s, %s, %s) "
            b"ON CONFLICT (agent_id) DO UPDATE SET user_id = excluded.user_id, "
            b"character_id = excluded.character_id, created_ms = excluded.created_ms",
            (agent_id, user_id, character_id, now_ms()),
        )

    def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBinding:
        """Tie a channel to a pair (a rebinding keeps its created_ms); returns the binding."""
        stamp = now_ms()
        row = self._one(
            "INSERT INTO channel_bindings (channel, user_id, character_id, created_ms, updated_ms) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (channel) DO UPDATE SET user_id = excluded.user_id, "
            f"character_id = excluded.character_id, updated_ms = excluded.updated_ms RETURNING {CHANNEL_COLUMNS}",
            (channel, user_id, character_id, stamp, stamp),
        )
        assert row is not None  # an upsert always returns its row
        return ChannelBinding(*row.values())

    def unbind_channel(self, channel: str) -> ChannelBinding | None:
        """Remove a channel's binding; returns what it was, or None if there was none."""
        row = self._one(
            f"DELETE FROM channel_bindings WHERE channel = %s RETURNING {CHANNEL_COLUMNS}", (channel,)
        )
        return ChannelBinding(*row.values()) if row is not None else None
