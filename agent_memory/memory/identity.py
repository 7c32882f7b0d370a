"""Who a call is: agent runs' sessions and their ties to a pair, and channels bound to a pair."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.core.domain import ChannelBinding, Session
from agent_memory.errors import NotFound
from agent_memory.memory.ingest import Ingestor
from agent_memory.store import Store


@dataclass(frozen=True, slots=True)
class ChannelBound:
    """A channel's binding and the sessions that moved to its pair."""

    binding: ChannelBinding
    moved: list[str]


class Identity:
    """Sessions and bindings: which pair an agent run or a channel belongs to."""

    def __init__(self, store: Store, ingestor: Ingestor) -> None:
        self.store = store
        self.ingestor = ingestor

    async def session(self, agent_id: str) -> Session:
        """One agent run's session, or NotFound."""
        session = await self.store.read(lambda view: view.sessions.get(agent_id))
        if session is None:
            raise NotFound(f"no session for agent {agent_id}")
        return session

    async def bind(self, agent_id: str, user_id: str, character_id: str) -> Session | None:
        """Tie an agent run to a pair; a session it already has moves there at once.

        Returns the run's session, None when the run has not been seen yet (it starts there).
        """
        return await self.store.write(lambda tx: self.ingestor.bind(tx, agent_id, user_id, character_id))

    async def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBound:
        """Tie a channel to a pair: later calls there, and its unidentified ones, go to it."""
        binding, moved = await self.store.write(
            lambda tx: self.ingestor.bind_channel(tx, channel, user_id, character_id)
        )
        return ChannelBound(binding, moved)

    async def channel_binding(self, channel: str) -> ChannelBinding | None:
        """The pair a channel is bound to, if any."""
        return await self.store.read(lambda view: view.bindings.of_channel(channel))

    async def unbind_channel(self, channel: str) -> ChannelBinding | None:
        """Remove a channel's binding (sessions it tied stay); the removed binding, if any."""
        return await self.store.write(lambda tx: tx.bindings.unbind_channel(channel))
