"""What both framework integrations do with the service: one conversation's memory, over the client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.client import ApiError, AsyncMemoryClient

log = logging.getLogger(__name__)

# What a recalled memory is introduced as, in the message put before the LLM's reply.
RECALLED_HEADER = "Memories of earlier conversations with this user that may bear on their last message:"
# A recall longer than this would delay the reply more than the memory helps it.
RECALL_TIMEOUT_S = 2.0
# The generic write API keeps a session_id's turns under this prefix (docs/messages.md).
SESSIONS = "api:"


class SessionMemory:
    """One conversation of a (user, character) pair: its memory read, its turns written.

    `session_id` is the app's id of the conversation (a LiveKit room's, a Pipecat call's): the
    turns are kept under it, and sending one again stores nothing new. Failures of the service
    are logged, never raised into the framework: a call goes on without memory rather than stop.
    """

    def __init__(
        self,
        client: AsyncMemoryClient,
        user_id: str,
        character_id: str,
        session_id: str,
        *,
        recall_tokens: int = 300,
        recall_timeout_s: float = RECALL_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.user_id = user_id
        self.character_id = character_id
        self.session_id = session_id
        self.recall_tokens = recall_tokens
        self.recall_timeout_s = recall_timeout_s
        self._sending: set[asyncio.Task[None]] = set()

    async def start_text(self, *, max_tokens: int | None = None) -> str:
        """The memory a conversation starts with (facts, summary, latest turns), as one text;
        empty when there is none yet or the service cannot be reached."""
        try:
            answer = await self.client.system_messages(self.user_id, self.character_id, max_tokens=max_tokens)
        except ApiError as exc:
            log.warning("agent-memory: no memory at the start of %s: %s", self.session_id, exc.message)
            return ""
        return "\n\n".join(str(message.get("content", "")) for message in answer.system_messages)

    async def recalled(self, said: str) -> str | None:
        """The memories that answer what the user just said, as one text; None when none do,
        or the service did not answer within `recall_timeout_s`."""
        if not said.strip():
            return None
        try:
            answer = await asyncio.wait_for(
                self.client.recall(
                    self.user_id,
                    self.character_id,
                    said[:500],
                    max_tokens=self.recall_tokens,
                    # This conversation's turns are in the LLM's context already (the one just
                    # said among them, which may be stored by now).
                    exclude_agent_id=f"{SESSIONS}{self.session_id}",
                ),
                self.recall_timeout_s,
            )
        except (ApiError, TimeoutError) as exc:
            reason = exc.message if isinstance(exc, ApiError) else "timed out"
            log.warning("agent-memory: no recall for a turn of %s: %s", self.session_id, reason)
            return None
        if not answer.memories:
            return None
        return f"{RECALLED_HEADER}\n{answer.system_message.content}"

    def send(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Send turns (`{"role", "content", "timestamp", "id"?}`) in the background; `flush` waits."""
        if not messages:
            return
        task = asyncio.get_running_loop().create_task(self._post(list(messages)))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _post(self, messages: list[Mapping[str, Any]]) -> None:
        try:
            await self.client.add_messages(self.user_id, self.character_id, self.session_id, messages)
        except ApiError as exc:
            log.warning(
                "agent-memory: %d turn(s) of %s not stored: %s", len(messages), self.session_id, exc.message
            )

    async def flush(self) -> None:
        """Wait until every turn sent so far has been stored (or refused)."""
        while self._sending:
            await asyncio.gather(*list(self._sending))
