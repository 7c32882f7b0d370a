"""Following running agents: the watches that poll an agent's history and refresh its memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Session, Watch, WatchOrigin, WatchResult
from agent_memory.core.events import SessionEvent
from agent_memory.errors import InvalidField
from agent_memory.memory.ingest import Ingestor
from agent_memory.store import Store, Transaction


@dataclass(frozen=True, slots=True)
class Following:
    """What following an agent run did: the watch's change, the watch, and the run's session."""

    result: WatchResult
    # None: the run had already stopped, so there is nothing to follow.
    watch: Watch | None
    # The run's session: created from the start event when one was given, else as found.
    session: Session | None


class Follows:
    """Followed agents: start and stop following, the due polls and refreshes, failures."""

    def __init__(self, store: Store, ingestor: Ingestor) -> None:
        self.store = store
        self.ingestor = ingestor

    async def follow(
        self,
        agent_id: str,
        *,
        origin: WatchOrigin,
        user_id: str | None = None,
        character_id: str | None = None,
        base_system_messages: list[dict[str, Any]] | None = None,
        persona: str | None = None,
        max_tokens: int | None = None,
        style: str | None = None,
        event: SessionEvent | None = None,
        max_history: int | None = None,
    ) -> Following:
        """Follow a running agent, in one transaction: tie it to a pair if given, start its session
        from `event` if given, and poll (and, with `base_system_messages`, refresh) it."""
        if (user_id is None) != (character_id is None):
            raise InvalidField("give both user_id and character_id, or neither")

        def record(tx: Transaction) -> Following:
            if user_id is not None and character_id is not None:
                self.ingestor.bind(tx, agent_id, user_id, character_id)
            session = self.ingestor.ensure_session(tx, event, now_ms()) if event is not None else None
            result = tx.watches.follow(
                agent_id,
                origin,
                first_poll_ms=now_ms(),
                base_system_messages=base_system_messages,
                persona=persona,
                max_tokens=max_tokens,
                style=style,
                max_history=max_history,
            )
            if session is None:
                session = tx.sessions.get(agent_id)
            return Following(result, tx.watches.get(agent_id), session)

        return await self.store.write(record)

    async def unfollow(self, agent_id: str, reason: str = "stopped by request") -> bool:
        """Stop following an agent; False if it was not being followed."""
        return await self.store.write(lambda tx: tx.watches.unfollow(agent_id, reason) is not None)

    async def due_follows(self, stamp: int, limit: int) -> tuple[list[Watch], list[Watch]]:
        """Followed agents whose poll is due at `stamp`, and those whose refresh is; each at most
        `limit`, and taken for this instance: others sharing the database leave them alone."""
        # An idle sweep (the usual one) only reads.
        if not await self.store.read(
            lambda view: view.watches.due_polls(stamp, 1) or view.watches.due_pushes(stamp, 1)
        ):
            return [], []
        return await self.store.write(
            lambda tx: (tx.watches.claim_polls(stamp, limit), tx.watches.claim_pushes(stamp, limit))
        )

    async def release_follows(self) -> int:
        """Give up the followed agents this instance holds (it is stopping) to whichever instance
        claims them next, instead of leaving them unpolled until their leases run out."""
        return await self.store.write(lambda tx: tx.watches.release_held())

    async def poll_failed(self, agent_id: str, *, next_poll_ms: int, error: str) -> None:
        """Record a failed poll of a followed agent and when to try again."""
        await self.store.write(lambda tx: tx.watches.polled(agent_id, next_poll_ms=next_poll_ms, error=error))

    async def agent_gone(self, agent_id: str, reason: str, stop_reason: str) -> None:
        """The platform no longer knows the agent: stop following it and end its session if still running."""

        def stop(tx: Transaction) -> None:
            session = tx.sessions.get(agent_id)
            if session is None:
                tx.watches.unfollow(agent_id, reason)
            else:
                self.ingestor.stop_following(tx, session, reason)
            if session is not None and session.status == "running":
                tx.sessions.update(agent_id, {"status": "stopped", "stop_reason": stop_reason})

        await self.store.write(stop)
