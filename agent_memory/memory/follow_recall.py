"""Memory that follows the conversation in a running call, for agents without the custom-LLM endpoint.

While the poller reads a running agent's history, the user's new turns say what is being
discussed. After a debounce (`follow_recall_debounce_s`: the turns of polls inside it go into
one push) the pair's memory is recalled for them (`Reading.recall`, the agent's own run left
out: it holds those turns), and what is new is pushed with the live refresh: the agent's own
system messages, its memory, then one block of recalled memories within
`follow_recall_max_tokens`. A memory the agent still holds (in that block, in the memory it is
sent, or among the turns of its window) is never pushed again; when nothing new is recalled,
nothing is pushed. The update endpoint replaces the whole list, so the block goes with every
later push, newest memories first, until newer ones crowd the oldest out of its budget: only
then does the agent no longer hold them.

What is held here (turns waiting for their push, the agent's window, the block) is this
process's and holds user text: a forget drops it at once here, and before any push from its
cut-off (a forget made by another instance).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Watch
from agent_memory.core.events import HistoryWindow, Outcome
from agent_memory.core.recall import RecalledMemory, text_key
from agent_memory.core.recall_fit import context_line, memory_line
from agent_memory.core.styles import DEFAULT_STYLE, shape_system_messages
from agent_memory.core.tokens import count_message_tokens, count_tokens
from agent_memory.errors import AgentMemoryError, Conflict, NotFound
from agent_memory.memory.refresh import Composed, Refresher, SystemMessages
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import Store

log = logging.getLogger(__name__)

HEADING = (
    "Memories recalled for what is being discussed now, from earlier conversations with this user "
    "(newest first; dates UTC):"
)
# The user's latest turns that make the question (older ones were recalled for already).
QUERY_TURNS = 3
QUERY_CHARS = 500
# The recall reads this many times the block's budget: memories the agent holds are passed
# over, and the new ones below them must still be found.
RECALL_HEADROOM = 2
# What is held for an agent no poll merged for this many poll intervals (nor five minutes) goes:
# its call ended (a 102 or 103 ends following) or another instance follows it now.
STALE_POLLS = 10
STALE_MIN_MS = 300_000


@dataclass(frozen=True, slots=True)
class Item:
    """One memory as the block shows it: its key (its words), its lines and their tokens."""

    key: str
    text: str
    tokens: int


@dataclass(slots=True)
class Followed:
    """What is held for one running agent."""

    user_id: str
    character_id: str
    # When the oldest text held here was taken: a forget at or after it drops all of it.
    since_ms: int
    # The user's turns not recalled for yet, latest last.
    pending: list[str] = field(default_factory=list)
    due_ms: int | None = None
    # The words of the turns in the agent's window at the last poll (what it holds itself).
    window: frozenset[str] = frozenset()
    # The memories pushed and still held by the agent, newest first.
    block: list[Item] = field(default_factory=list)
    # Why no recall is pushed to this agent (it uses the custom-LLM endpoint), if so.
    off: str | None = None
    # When a poll of the agent last merged its window (held text of an agent no longer polled goes).
    polled_ms: int = 0


@dataclass(slots=True)
class FollowStats:
    """What following the conversation did (reported as /metrics counters)."""

    pushes: int = 0
    memories_pushed: int = 0
    skipped_repeat: int = 0
    debounced: int = 0
    nothing_recalled: int = 0
    # What was recalled was new but longer than the block's whole budget.
    over_budget: int = 0
    failed: int = 0
    not_pushable: int = 0
    custom_llm: int = 0
    dropped_by_forget: int = 0

    def report(self) -> dict[str, int]:
        return asdict(self)


class FollowRecall:
    """Recalls for a running call's new user turns and pushes what the agent does not hold."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        memory: Memory,
        refresher: Refresher,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        """Push through `refresher`, whose every push then carries the agent's block too."""
        self.memory = memory
        self.settings = settings
        self.store = store
        self.refresher = refresher
        self.clock = clock
        self.stats = FollowStats()
        self._followed: dict[str, Followed] = {}
        refresher.extra = self.held_block
        memory.forget_listeners.append(self.forgotten)

    # what the poller tells

    def seen(self, watch: Watch, window: HistoryWindow, outcome: Outcome) -> None:
        """A poll merged `window`: its new user turns ask for a push after the debounce."""
        stamp = self.clock()
        followed = self._followed.get(watch.agent_id)
        if followed is not None:
            followed.polled_ms = stamp
        if not self.settings.follow_recall or not outcome.new_messages or not watch.refreshes:
            return
        if outcome.user_id is None or outcome.character_id is None:
            return
        if followed is None or (followed.user_id, followed.character_id) != (
            outcome.user_id,
            outcome.character_id,
        ):
            # `since_ms` is compared with a forget's time, so it is the wall clock's, not the debounce's.
            followed = Followed(outcome.user_id, outcome.character_id, since_ms=now_ms(), polled_ms=stamp)
            self._followed[watch.agent_id] = followed
        if followed.off is not None:
            return
        followed.window = frozenset(
            text_key(item.content) for item in window.messages if item.content.strip()
        )
        said = [
            item.content
            for item in window.messages[-outcome.new_messages :]
            if item.role == "user" and item.kind == "turn" and item.content.strip()
        ]
        if not said:
            return
        followed.pending = (followed.pending + said)[-QUERY_TURNS:]
        if followed.due_ms is None:
            followed.due_ms = stamp + round(self.settings.follow_recall_debounce_s * 1000)
        else:
            self.stats.debounced += 1

    def due(self) -> list[str]:
        """The agents whose debounce is over (and what is held for agents no longer polled goes)."""
        stamp = self.clock()
        stale = stamp - max(STALE_MIN_MS, round(STALE_POLLS * self.settings.poll_interval_s * 1000))
        for agent_id in [agent_id for agent_id, held in self._followed.items() if held.polled_ms < stale]:
            self.ended(agent_id)
        return [
            agent_id
            for agent_id, followed in self._followed.items()
            if followed.due_ms is not None and followed.due_ms <= stamp
        ]

    def ended(self, agent_id: str) -> None:
        """The agent is no longer followed: what is held for it goes."""
        self._followed.pop(agent_id, None)

    def forgotten(self, user_id: str, character_id: str | None) -> None:
        """A forget was committed: what is held for the pair (or the user's pairs) goes."""
        for agent_id, followed in list(self._followed.items()):
            if followed.user_id == user_id and character_id in (None, followed.character_id):
                del self._followed[agent_id]

    # pushing

    async def push_due(self, agent_id: str) -> None:
        """Recall for the agent's waiting turns and push what it does not hold; never raises
        for the platform's failure (counted; the next new turn tries again)."""
        followed = self._followed.get(agent_id)
        if followed is None or followed.due_ms is None:
            return
        query = " ".join(followed.pending)[-QUERY_CHARS:]
        followed.pending, followed.due_ms = [], None
        try:
            await self._push(agent_id, followed, query)
        except AgentMemoryError as exc:
            self.stats.failed += 1
            log.warning("pushing recalled memory into agent %s failed: %s", agent_id, exc.message)

    async def _push(self, agent_id: str, followed: Followed, query: str) -> None:
        if await self.store.read(lambda view: bool(view.llm_routes.of_agent(agent_id))):
            # Its every turn is recalled for at the custom-LLM endpoint already.
            followed.off, followed.block, followed.window = "custom-llm", [], frozenset()
            self.stats.custom_llm += 1
            return
        try:
            composed = await self.refresher.compose(agent_id)
        except (Conflict, NotFound):  # not refreshed, stopped or gone: nothing may be pushed
            self.stats.not_pushable += 1
            self.ended(agent_id)
            return
        session = composed.session
        if (session.user_id, session.character_id) != (followed.user_id, followed.character_id):
            self.ended(agent_id)  # the run moved to another pair: what it held is not that pair's
            return
        budget = self.settings.follow_recall_max_tokens
        found = await self.memory.reading.recall(
            session.user_id,
            session.character_id,
            query,
            max_tokens=budget * RECALL_HEADROOM,
            exclude_session=agent_id,
        )
        if not found.memories:
            self.stats.nothing_recalled += 1
            return
        if not await self._current(agent_id, followed):
            return
        held = {item.key for item in followed.block} | followed.window | texts_of(composed.messages)
        unheld = [memory for memory in found.memories if not _held(memory, held)]
        if not unheld:
            self.stats.skipped_repeat += 1
            return
        room = budget - count_message_tokens(HEADING)
        fresh = [item for item in (_item(memory, room) for memory in unheld) if item is not None]
        if not fresh:
            self.stats.over_budget += 1
            return
        block = _fit(fresh + followed.block, room)
        messages = composed.messages + _shaped(block, composed.watch.style)
        await self.refresher.send(agent_id, messages, composed.tokens + _tokens(block))
        followed.block = block
        self.stats.pushes += 1
        self.stats.memories_pushed += sum(item in block for item in fresh)

    async def _current(self, agent_id: str, followed: Followed) -> bool:
        """Whether what is held for the agent is still its own and said after any forget of its pair."""
        if self._followed.get(agent_id) is not followed:
            return False  # dropped meanwhile (a forget, the call's end)
        cutoff = await self.store.read(
            lambda view: view.maintenance.forget_cutoff(followed.user_id, followed.character_id, agent_id)
        )
        if cutoff is not None and cutoff.at_ms >= followed.since_ms:
            self.stats.dropped_by_forget += 1
            self.ended(agent_id)
            return False
        return self._followed.get(agent_id) is followed

    async def held_block(self, composed: Composed) -> SystemMessages:
        """The block the agent holds, for any push to carry (the update replaces the whole list)."""
        agent_id = composed.watch.agent_id
        followed = self._followed.get(agent_id)
        if followed is None or not followed.block:
            return []
        session = composed.session
        if (session.user_id, session.character_id) != (followed.user_id, followed.character_id):
            self.ended(agent_id)
            return []
        if not await self._current(agent_id, followed):
            return []
        return _shaped(followed.block, composed.watch.style)


def texts_of(messages: SystemMessages) -> frozenset[str]:
    """The words of every text in system messages of any style, one per line."""
    texts: list[str] = []
    for message in messages:
        content: Any = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        for part in message.get("parts") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return frozenset(text_key(line) for text in texts for line in text.splitlines() if line.strip())


def _held(memory: RecalledMemory, held: AbstractSet[str]) -> bool:
    """Whether the agent holds the memory already: its words as one memory, turn or line it has."""
    key = text_key(memory.text)
    return key in held or any(key in line for line in held if len(line) >= len(key))


def _item(memory: RecalledMemory, room: int) -> Item | None:
    """The memory with the turns said around it, or alone if they do not fit in `room`; None if
    it does not either."""
    for context in (memory.context, ()):
        lines = "\n".join([memory_line(memory), *(context_line(turn) for turn in context)])
        tokens = count_tokens(lines) + 1
        if tokens <= room:
            return Item(text_key(memory.text), lines, tokens)
    return None


def _fit(items: list[Item], room: int) -> list[Item]:
    """The items in order while they fit in `room` tokens (a shorter one further down may still)."""
    kept: list[Item] = []
    used = 0
    for item in items:
        if used + item.tokens <= room:
            kept.append(item)
            used += item.tokens
    return kept


def _tokens(block: list[Item]) -> int:
    return count_message_tokens(HEADING) + sum(item.tokens for item in block)


def _shaped(block: list[Item], style: str | None) -> SystemMessages:
    text = "\n".join([HEADING, *(item.text for item in block)])
    return shape_system_messages([text], style or DEFAULT_STYLE)
