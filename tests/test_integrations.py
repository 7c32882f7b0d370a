"""The LiveKit Agents and Pipecat integrations (agent_memory/integrations) with the frameworks' own
classes, against the real service on 127.0.0.1: memory before the LLM, the turns stored after.

Each is skipped when its framework is not installed (`pip install -e '.[test]'` installs both).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import TOKEN, Service

from agent_memory.client import AsyncMemoryClient

EARLIER_MS = 1_763_690_000_000
PAIR = ("u-alice", "luna")


async def earlier_call(client: AsyncMemoryClient) -> None:
    """What the user said in an earlier conversation, through the generic write API."""
    answer = await client.add_messages(
        *PAIR,
        "earlier",
        [
            {"role": "user", "content": "My dog Biscuit turned nine today", "timestamp": EARLIER_MS},
            {"role": "assistant", "content": "Happy birthday, Biscuit!", "timestamp": EARLIER_MS + 1000},
        ],
    )
    assert answer.stored == 2


async def session_messages(client: AsyncMemoryClient, session: str) -> list[Any]:
    answer = await client.messages(*PAIR, limit=100)
    return [m for m in answer.messages if m.agent_id == f"api:{session}"]


# LiveKit Agents


async def test_livekit_agent_reads_recalled_memory_and_its_turns_are_stored(service: Service) -> None:
    agents = pytest.importorskip("livekit.agents")
    from livekit.agents import llm

    from agent_memory.integrations.livekit import LiveKitMemory, MemoryAgent

    class ScriptedStream(llm.LLMStream):
        async def _run(self) -> None:
            reply = llm.ChoiceDelta(role="assistant", content="Biscuit is nine now, happy belated birthday!")
            self._event_ch.send_nowait(llm.ChatChunk(id="reply-1", delta=reply))

    class ScriptedLLM(llm.LLM):
        """An LLM that answers one line and keeps the contexts it was asked with."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[llm.ChatContext] = []

        def chat(
            self, *, chat_ctx: llm.ChatContext, tools: Any = None, conn_options: Any = None, **_: Any
        ) -> Any:
            self.asked.append(chat_ctx.copy())
            options = conn_options or llm.llm.DEFAULT_API_CONNECT_OPTIONS
            return ScriptedStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=options)

    async with AsyncMemoryClient(service.url, TOKEN) as client:
        await earlier_call(client)
        memory = LiveKitMemory(client, *PAIR, "room-7")
        start = await memory.start_text()
        assert "Biscuit" in start
        model = ScriptedLLM()
        async with agents.AgentSession(llm=model) as session:
            await session.start(MemoryAgent(memory, instructions="You are Luna.\n\n" + start))
            await session.run(user_input="How old is my dog now?")
        await memory.flush()
        # The LLM read the recalled memory just before the user's turn ...
        asked = [(item.role, item.text_content) for item in model.asked[-1].items if item.type == "message"]
        assert asked[-1] == ("user", "How old is my dog now?")
        role, recalled = asked[-2]
        assert role == "system" and recalled and "Biscuit turned nine" in recalled, asked
        # ... which stays out of the agent's own context.
        assert not any("Memories of earlier" in (m.text_content or "") for m in session.history.messages())
        # Both turns are stored under the room's session, with LiveKit's ids.
        stored = await session_messages(client, "room-7")
        assert [(m.role, m.content) for m in stored] == [
            ("user", "How old is my dog now?"),
            ("assistant", "Biscuit is nine now, happy belated birthday!"),
        ]
        # Sent again (a reconnect replays the history), nothing is stored twice.
        for item in session.history.messages():
            memory.on_item_added(agents.ConversationItemAddedEvent(item=item))
        await memory.flush()
        assert len(await session_messages(client, "room-7")) == 2


# Pipecat


async def test_pipecat_processor_gives_the_llm_memory_and_stores_the_turns(service: Service) -> None:
    pytest.importorskip("pipecat")
    from pipecat.frames.frames import EndFrame, Frame, LLMContextFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from agent_memory.integrations.pipecat import MemoryProcessor

    class ScriptedLLM(FrameProcessor):
        """Stands where the LLM service stands: keeps what it was asked, answers into the context
        as the assistant aggregator does."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[list[Any]] = []

        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, LLMContextFrame):
                self.asked.append(json.loads(json.dumps(frame.context.get_messages())))
                conversation.add_message({"role": "assistant", "content": "Biscuit is nine now!"})
                return
            await self.push_frame(frame, direction)

    async with AsyncMemoryClient(service.url, TOKEN) as client:
        await earlier_call(client)
        memory = MemoryProcessor(client, *PAIR, "call-42")
        start = await memory.start_text()
        conversation = LLMContext([{"role": "system", "content": "You are Luna.\n\n" + start}])
        conversation.add_message({"role": "user", "content": "How old is my dog now?"})
        model = ScriptedLLM()
        worker = PipelineWorker(Pipeline([memory, model]))
        await worker.queue_frames([LLMContextFrame(conversation), EndFrame()])
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        await asyncio.wait_for(runner.run(), 60)
        await memory.flush()
        asked = model.asked[-1]
        assert asked[-1] == {"role": "user", "content": "How old is my dog now?"}
        assert asked[-2]["role"] == "system" and "Biscuit turned nine" in asked[-2]["content"], asked
        # The conversation itself keeps no copy of the memory.
        assert not any("Memories of earlier" in str(m.get("content")) for m in conversation.get_messages())
        stored = await session_messages(client, "call-42")
        assert [(m.role, m.content) for m in stored] == [
            ("user", "How old is my dog now?"),
            ("assistant", "Biscuit is nine now!"),
        ]
