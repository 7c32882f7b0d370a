"""Live refresh: keep a running agent's memory current while its call goes on.

When a pair's summary or facts change while one of its agents runs, the whole
system_messages list (the caller's own, then fresh memory) is sent to the agent, at most
once per `refresh_interval_s` per agent. The memory is shaped for the LLM style the agent
was started with, and its recent transcript leaves out the agent's own turns: they are in
its short-term memory already. What is decided and recorded here is the platform's
business only in the last step: `AgentControl.update_system_messages`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Session, Watch
from agent_memory.core.styles import DEFAULT_STYLE
from agent_memory.errors import AgentMemoryError, Conflict, NotFound
from agent_memory.memory.reading import Reading
from agent_memory.settings import Settings
from agent_memory.store import Store, Transaction

log = logging.getLogger(__name__)

SystemMessages = list[dict[str, Any]]
# A failed push is tried again after the refresh interval, but not sooner than this.
MIN_RETRY_S = 5


class AgentControl(Protocol):
    """What a platform offers to change a running agent (Agora: its update endpoint)."""

    async def update_system_messages(self, agent_id: str, system_messages: SystemMessages) -> Any:
        """Replace the running agent's whole system messages list."""
        ...


@dataclass(frozen=True, slots=True)
class Composed:
    """What a push to a running agent starts from: its watch, its session, and its own system
    messages followed by its pair's memory (`tokens`: the memory's)."""

    watch: Watch
    session: Session
    messages: SystemMessages
    tokens: int


# What a push sends after the memory (the in-call recall's block, memory/follow_recall.py).
Extra = Callable[[Composed], Awaitable[SystemMessages]]


class Refresher:
    """Decides when a running agent's memory is pushed, builds it, and records what went."""

    def __init__(self, settings: Settings, store: Store, reading: Reading, control: AgentControl) -> None:
        """Refresh the agents of the store's pairs, with what `reading` builds, through `control`."""
        self.reading = reading
        self.settings = settings
        self.store = store
        self.control = control
        self.extra: Extra | None = None

    def on_condensed(self, tx: Transaction, user_id: str, character_id: str) -> int:
        """A pair's memory changed (in the transaction that changes it): ask for a push into each
        of its running agents; how many."""
        interval_ms = round(self.settings.refresh_interval_s * 1000)
        agents = tx.watches.running_for(user_id, character_id)
        for agent in agents:
            earliest = (agent.last_push_ms or 0) + interval_ms
            tx.watches.request_push(agent.agent_id, max(now_ms(), earliest))
        return len(agents)

    async def push_quietly(self, agent_id: str) -> None:
        """A due push: a failure is logged and the push asked for again later."""
        try:
            await self.push(agent_id)
        except AgentMemoryError as exc:
            log.warning("refresh of %s failed: %s", agent_id, exc.message)
            retry_at = now_ms() + round(max(self.settings.refresh_interval_s, MIN_RETRY_S) * 1000)
            await self.store.write(lambda tx: tx.watches.request_push(agent_id, retry_at))

    async def push(self, agent_id: str, *, force: bool = False) -> SystemMessages:
        """Send the full system_messages list to a running agent; returns what was sent.

        Without `force` a list equal to the last one sent is not sent again.
        """
        composed = await self.compose(agent_id)
        messages = composed.messages
        if self.extra is not None:
            messages = messages + await self.extra(composed)
        watch = composed.watch
        if not force and watch.last_pushed_json and watch.last_pushed == messages:
            await self.store.write(lambda tx: tx.watches.pushed(agent_id, None))
            return messages
        await self.send(agent_id, messages, composed.tokens)
        return messages

    async def compose(self, agent_id: str) -> Composed:
        """The running agent's own system messages followed by its pair's memory, fresh."""
        watch = await self.store.read(lambda view: view.watches.get(agent_id))
        if watch is None:
            raise NotFound(f"agent {agent_id} is not followed by this service")
        base = watch.base_system_messages
        if base is None:
            raise Conflict(
                f"agent {agent_id} was not started through this service with its system "
                "messages (or it was started without giving them), so they are "
                "unknown and an update would erase them; start it with POST /v1/agents or "
                "register it with POST /v1/sessions/{agent_id}/watch giving its system_messages"
            )
        if watch.status != "watching":
            raise Conflict(f"agent {agent_id} is not running ({watch.stop_reason})")
        session = await self.store.read(lambda view: view.sessions.get(agent_id))
        if session is None:
            raise NotFound(f"no session for agent {agent_id} yet")
        context = await self.reading.system_messages(
            session.user_id,
            session.character_id,
            max_tokens=watch.max_tokens,
            persona=watch.persona,
            style=watch.style or DEFAULT_STYLE,
            exclude_agent_id=agent_id,
        )
        return Composed(watch, session, base + context.system_messages, context.tokens)

    async def send(self, agent_id: str, messages: SystemMessages, tokens: int) -> None:
        """Replace the running agent's system messages with `messages`, and record them as sent."""
        await self.control.update_system_messages(agent_id, messages)
        await self.store.write(lambda tx: tx.watches.pushed(agent_id, messages))
        log.info("pushed %d system messages (%d tokens) into agent %s", len(messages), tokens, agent_id)
