"""What the operator console reads: users, their calls and holdings, running calls, callbacks."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.core.clock import DAY_MS, now_ms
from agent_memory.core.domain import Message, RunningCall, Session, UserEntry, UserPage
from agent_memory.errors import NotFound
from agent_memory.store import ReadView, Store


@dataclass(frozen=True, slots=True)
class Call:
    """A call (an agent run's session) and its transcript, oldest first."""

    session: Session
    messages: list[Message]


class Console:
    """The operator console's reads over the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def users(self, q: str | None = None, cursor: str | None = None, limit: int = 50) -> UserPage:
        """Users whose id contains `q` (any case), in id order after `cursor`, and the next cursor."""
        return await self.store.read(lambda view: view.console.users(q or None, cursor or None, limit))

    async def user(self, user_id: str) -> UserEntry:
        """One user as the list shows it (its characters, calls, last seen), or NotFound."""
        entry = await self.store.read(lambda view: view.console.user(user_id))
        if entry is None:
            raise NotFound(f"nothing is held about user {user_id}")
        return entry

    async def calls(self, user_id: str, character_id: str, limit: int) -> list[Call]:
        """The pair's latest calls, newest first, each with its transcript (tool items included)."""

        def read(view: ReadView) -> list[Call]:
            sessions = view.console.calls(user_id, character_id, limit)
            return [Call(session, view.messages.of_session(session.agent_id)) for session in sessions]

        return await self.store.read(read)

    async def holdings(self, user_id: str, character_id: str | None = None) -> dict[str, int]:
        """How many calls, messages, facts and summaries a forget of the user (or pair) would take."""
        return await self.store.read(lambda view: view.console.holdings(user_id, character_id))

    async def running_calls(self, limit: int = 200) -> list[RunningCall]:
        """Agents followed now (their poll and refresh state), with their sessions."""
        return await self.store.read(lambda view: view.console.running(limit))

    async def callbacks_per_day(self, days: int) -> dict[int, int]:
        """Platform callbacks received per UTC day over the last `days` days (as retention kept them)."""
        since = (now_ms() // DAY_MS - days + 1) * DAY_MS
        return await self.store.read(lambda view: view.console.callbacks_per_day(since))
