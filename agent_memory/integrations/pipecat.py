"""Memory for Pipecat: a frame processor before the LLM service that gives it memory and stores the turns.

    memory = MemoryProcessor(AsyncMemoryClient(url, key), user_id, character_id, session_id=call_id)
    context = LLMContext([{"role": "system", "content": PERSONA + "\\n\\n" + await memory.start_text()}])
    aggregators = LLMContextAggregatorPair(context)
    pipeline = Pipeline([transport.input(), stt, aggregators.user(), memory, llm, tts,
                         transport.output(), aggregators.assistant()])
    await runner.add_workers(PipelineWorker(pipeline))
    await runner.run()
    await memory.flush()

On each `LLMContextFrame` going down to the LLM, the processor puts the memories that answer
the latest user message before it, in a copy of the context for that inference (the
conversation's own context keeps no copy), and sends the conversation's user and assistant
messages it has not sent yet to `POST …/messages`, dated when it first saw them. The last reply
reaches the context after the last frame passes: `flush()` (after the pipeline ends) sends it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pipecat.frames.frames import CancelFrame, EndFrame, Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent_memory.client import AsyncMemoryClient
from agent_memory.integrations.session import SessionMemory

SAID = ("user", "assistant")


def said_text(message: Any) -> tuple[str, str] | None:
    """(role, text) of a conversation message (a user's or assistant's words), else None: the
    app's system messages, tool calls and results, and LLM-specific messages are not said."""
    if not isinstance(message, dict) or message.get("role") not in SAID or message.get("tool_calls"):
        return None
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    if not isinstance(content, str) or not content.strip():
        return None
    return str(message["role"]), content


class MemoryProcessor(FrameProcessor):
    """Put it right before the LLM service (after the user context aggregator)."""

    def __init__(
        self,
        client: AsyncMemoryClient,
        user_id: str,
        character_id: str,
        session_id: str,
        *,
        recall_tokens: int = 300,
        role: str = "system",
        **kwargs: Any,
    ) -> None:
        """`role` is the role of the recalled memory's message; the rest go to `FrameProcessor`."""
        super().__init__(**kwargs)
        self.memory = SessionMemory(client, user_id, character_id, session_id, recall_tokens=recall_tokens)
        self.role = role
        self._context: LLMContext | None = None
        # How many of the conversation's said messages were sent, and when each was first seen.
        self._sent = 0
        self._seen_ms: list[int] = []
        # The memory recalled for the latest user message (by its place and words).
        self._recalled: tuple[tuple[int, str], str | None] | None = None

    async def start_text(self, *, max_tokens: int | None = None) -> str:
        """The memory a conversation starts with, as one text (for the system message)."""
        return await self.memory.start_text(max_tokens=max_tokens)

    async def flush(self) -> None:
        """Send what the conversation said that was not sent yet, and wait until it is stored."""
        if self._context is not None:
            self._send_new(self._context)
        await self.memory.flush()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM:
            if not frame.speculation:  # a provisional context is not the conversation yet
                self._context = frame.context
                self._send_new(frame.context)
            frame = await self._with_memory(frame)
        elif isinstance(frame, EndFrame | CancelFrame) and self._context is not None:
            self._send_new(self._context)
        await self.push_frame(frame, direction)

    def _send_new(self, context: LLMContext) -> None:
        """Send the said messages of `context` past those sent already."""
        said = [pair for pair in map(said_text, context.get_messages()) if pair is not None]
        now = time.time_ns() // 1_000_000
        # Each dated when first seen, a millisecond apart at least, in their order.
        while len(self._seen_ms) < len(said):
            self._seen_ms.append(max(now, self._seen_ms[-1] + 1) if self._seen_ms else now)
        if len(said) < self._sent:  # the context was cut down (summarised): what is left was sent
            self._sent, self._seen_ms = len(said), self._seen_ms[: len(said)]
            return
        new = range(self._sent, len(said))
        self.memory.send(
            [{"role": said[i][0], "content": said[i][1], "timestamp": self._seen_ms[i]} for i in new]
        )
        self._sent = len(said)

    async def _with_memory(self, frame: LLMContextFrame) -> LLMContextFrame:
        """The frame with a copy of its context holding the memories that answer its latest user message."""
        messages: Sequence[Any] = frame.context.get_messages()
        latest = next(
            (
                (index, said[1])
                for index in range(len(messages) - 1, -1, -1)
                if (said := said_text(messages[index])) is not None and said[0] == "user"
            ),
            None,
        )
        if latest is None:
            return frame
        if self._recalled is None or self._recalled[0] != latest:
            self._recalled = (latest, await self.memory.recalled(latest[1]))
        recalled = self._recalled[1]
        if recalled is None:
            return frame
        with_memory = list(messages)
        with_memory.insert(latest[0], {"role": self.role, "content": recalled})
        context = LLMContext(with_memory, tools=frame.context.tools, tool_choice=frame.context.tool_choice)
        return LLMContextFrame(context=context, speculation=frame.speculation)
