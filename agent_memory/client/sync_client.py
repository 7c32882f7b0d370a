"""`MemoryClient`: the async client's calls, blocking, for scripts and notebooks.

Each method runs the `AsyncMemoryClient` call of the same name on an event loop the client
keeps in a thread of its own, so it works whether or not the caller is inside a running loop
(a notebook is), and there is one implementation of each call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from agent_memory.client.async_client import AnswerT, AsyncMemoryClient
from agent_memory.client.transport import DEFAULT_BACKOFF, Params
from agent_memory.core.clock import Backoff
from agent_memory.core.domain import FactScope, JobStatus
from agent_memory.core.recall import RecallScope
from agent_memory.store.types import MentionRole, SearchKind
from agent_memory.web.answers import (
    ChannelBindingAnswer,
    ChannelBound,
    ChannelUnbound,
    CharacterStats,
    CondenseAnswer,
    Export,
    FactAdded,
    FactDeleted,
    FactsAnswer,
    ForgetAnswer,
    Health,
    JobAnswer,
    JobsAnswer,
    MentionsAnswer,
    MessagesAnswer,
    OverallStats,
    RecallAnswer,
    SessionAnswer,
    Style,
    SummaryAnswer,
    SystemMessagesAnswer,
    UserSearchAnswer,
    UserStats,
)

T = TypeVar("T")


class MemoryClient:
    """The agent-memory HTTP API, typed and blocking. Use `with`, or call `close()` when done.

    Arguments and errors as `AsyncMemoryClient`'s.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.aio = AsyncMemoryClient(base_url, api_key, timeout=timeout, retries=retries, backoff=backoff)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agent-memory-client", daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return self.aio.base_url

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the client's thread (idempotent)."""
        if self.loop.is_closed():
            return
        self.run(self.aio.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Run one call on the client's loop and wait for its answer."""
        if self.loop.is_closed():
            call.close()
            raise RuntimeError("this MemoryClient is closed")
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def call(
        self,
        model: type[AnswerT],
        method: str,
        route: str,
        *,
        params: Params | None = None,
        body: dict[str, Any] | None = None,
    ) -> AnswerT:
        return self.run(self.aio.call(model, method, route, params=params, body=body))

    def health(self) -> Health:
        return self.run(self.aio.health())

    def system_messages(
        self,
        user_id: str,
        character_id: str,
        *,
        max_tokens: int | None = None,
        persona: str | None = None,
        style: Style | None = None,
        exclude_agent_id: str | None = None,
        query: str | None = None,
    ) -> SystemMessagesAnswer:
        return self.run(self.aio.system_messages(
            user_id, character_id, max_tokens=max_tokens, persona=persona, style=style,
            exclude_agent_id=exclude_agent_id, query=query,
        ))  # fmt: skip

    def recall(
        self,
        user_id: str,
        character_id: str,
        q: str,
        *,
        max_tokens: int | None = None,
        scope: RecallScope = "pair",
    ) -> RecallAnswer:
        return self.run(self.aio.recall(user_id, character_id, q, max_tokens=max_tokens, scope=scope))

    def messages(self, user_id: str, character_id: str, *, limit: int | None = None) -> MessagesAnswer:
        return self.run(self.aio.messages(user_id, character_id, limit=limit))

    def summary(self, user_id: str, character_id: str) -> SummaryAnswer:
        return self.run(self.aio.summary(user_id, character_id))

    def facts(self, user_id: str, character_id: str) -> FactsAnswer:
        return self.run(self.aio.facts(user_id, character_id))

    def add_fact(
        self, user_id: str, character_id: str, text: str, *, scope: FactScope = "character"
    ) -> FactAdded:
        return self.run(self.aio.add_fact(user_id, character_id, text, scope=scope))

    def delete_fact(self, fact_id: int) -> FactDeleted:
        return self.run(self.aio.delete_fact(fact_id))

    def condense(self, user_id: str, character_id: str) -> CondenseAnswer:
        return self.run(self.aio.condense(user_id, character_id))

    def forget(self, user_id: str, character_id: str | None = None) -> ForgetAnswer:
        return self.run(self.aio.forget(user_id, character_id))

    def session(self, agent_id: str) -> SessionAnswer:
        return self.run(self.aio.session(agent_id))

    def bind(self, agent_id: str, user_id: str, character_id: str) -> SessionAnswer:
        return self.run(self.aio.bind(agent_id, user_id, character_id))

    def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBound:
        return self.run(self.aio.bind_channel(channel, user_id, character_id))

    def channel_binding(self, channel: str) -> ChannelBindingAnswer:
        return self.run(self.aio.channel_binding(channel))

    def unbind_channel(self, channel: str) -> ChannelUnbound:
        return self.run(self.aio.unbind_channel(channel))

    def jobs(self, *, status: JobStatus | None = None, limit: int | None = None) -> JobsAnswer:
        return self.run(self.aio.jobs(status=status, limit=limit))

    def retry_job(self, job_id: int) -> JobAnswer:
        return self.run(self.aio.retry_job(job_id))

    def search(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] | None = None,
        limit: int | None = None,
    ) -> UserSearchAnswer:
        return self.run(self.aio.search(user_id, q, character_id=character_id, kinds=kinds, limit=limit))

    def mentions(
        self,
        q: str,
        *,
        role: MentionRole | None = None,
        character_id: str | None = None,
        limit: int | None = None,
    ) -> MentionsAnswer:
        return self.run(self.aio.mentions(q, role=role, character_id=character_id, limit=limit))

    def user_stats(self, user_id: str) -> UserStats:
        return self.run(self.aio.user_stats(user_id))

    def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> CharacterStats:
        return self.run(self.aio.character_stats(character_id, since_ms=since_ms, until_ms=until_ms))

    def stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> OverallStats:
        return self.run(self.aio.stats(since_ms=since_ms, until_ms=until_ms))

    def export(self, user_id: str) -> Export:
        return self.run(self.aio.export(user_id))
