"""Memory for LiveKit Agents (1.x): recalled memory before each LLM reply, the turns sent after.

    memory = LiveKitMemory(AsyncMemoryClient(url, key), user_id, character_id, session_id=ctx.room.name)
    agent = MemoryAgent(memory, instructions=PERSONA + "\\n\\n" + await memory.start_text())
    await session.start(agent=agent, room=ctx.room)
    ctx.add_shutdown_callback(memory.flush)

`MemoryAgent.llm_node` puts the memories that answer the user's latest turn before it in the
context the LLM reads (that generation only: the agent's own chat context keeps no copy), and
the session's `conversation_item_added` events send each user and assistant message, with its
LiveKit id and time, to `POST …/messages`. The hook is `llm_node`, not `on_user_turn_completed`:
LiveKit calls that one only at the end of a spoken turn, so a typed message (text input,
`session.run(user_input=…)`) would get no memory. A realtime model has no LLM node: its turns are
still sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from livekit.agents import (
    Agent,
    AgentSession,
    ChatContext,
    ChatMessage,
    ConversationItemAddedEvent,
    ModelSettings,
    llm,
)

from agent_memory.integrations.session import SessionMemory

# The roles of a LiveKit chat context that are the conversation (system and developer are the app's).
SAID = ("user", "assistant")


class LiveKitMemory(SessionMemory):
    """One LiveKit conversation's memory: `attach` it to the session, use it in a `MemoryAgent`."""

    def __init__(self, *args: Any, role: llm.ChatRole = "system", **kwargs: Any) -> None:
        """`role` is the role of the recalled memory's message (LiveKit's own RAG example puts
        retrieved text in an assistant message; a system message keeps it out of the character's mouth)."""
        super().__init__(*args, **kwargs)
        self.role: llm.ChatRole = role
        self._attached: set[int] = set()
        # The memory recalled for a user message, by its id: a tool call's second generation
        # for the same turn reuses it.
        self._recalled: dict[str, str | None] = {}

    def attach(self, session: AgentSession[Any]) -> None:
        """Send the session's user and assistant messages as they are added (once per session)."""
        if id(session) in self._attached:
            return
        self._attached.add(id(session))
        session.on("conversation_item_added", self.on_item_added)

    def on_item_added(self, event: ConversationItemAddedEvent) -> None:
        """A message the session added to the conversation: sent to memory, with its id and time."""
        item = event.item
        if not isinstance(item, ChatMessage) or item.role not in SAID:
            return
        text = item.text_content
        if not text or not text.strip():
            return
        self.send([{"role": item.role, "content": text, "timestamp": item.created_at, "id": item.id}])

    async def with_memory(self, chat_ctx: ChatContext) -> ChatContext:
        """`chat_ctx` with the memories that answer its latest user message put before that
        message (a copy; `chat_ctx` itself unchanged when there are some)."""
        items = chat_ctx.items
        index, latest = next(
            (
                (i, item)
                for i in range(len(items) - 1, -1, -1)
                if isinstance(item := items[i], ChatMessage) and item.role == "user"
            ),
            (None, None),
        )
        if index is None or latest is None:
            return chat_ctx
        if latest.id not in self._recalled:
            self._recalled = {latest.id: await self.recalled(latest.text_content or "")}
        recalled = self._recalled[latest.id]
        if recalled is None:
            return chat_ctx
        copy = chat_ctx.copy()
        copy.items.insert(index, ChatMessage(role=self.role, content=[recalled]))
        return copy


class MemoryAgent(Agent):
    """A LiveKit `Agent` whose LLM reads the memories that answer each user turn."""

    def __init__(self, memory: LiveKitMemory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memory = memory

    async def on_enter(self) -> None:
        """Send this session's turns to memory from now on."""
        self.memory.attach(self.session)

    async def llm_node(
        self, chat_ctx: ChatContext, tools: list[llm.Tool], model_settings: ModelSettings
    ) -> AsyncIterable[Any]:
        """The default LLM node, reading the context with memory added."""
        with_memory = await self.memory.with_memory(chat_ctx)
        async for chunk in Agent.default.llm_node(self, with_memory, tools, model_settings):
            yield chunk
