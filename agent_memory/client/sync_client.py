"""`MemoryClient`: the async client's calls, blocking, for scripts and notebooks.

Each method runs the `AsyncMemoryClient` call of the same name on an event loop the client
keeps in a thread of its own, so it works whether or not the caller is inside a running loop
(a notebook is). The methods are made from the async ones by `blocking`, which keeps their
parameters and answers for type checkers, so there is one implementation and one signature
of each call.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from agent_memory.client.async_client import AsyncMemoryClient
from agent_memory.client.transport import DEFAULT_BACKOFF
from agent_memory.core.clock import Backoff

P = ParamSpec("P")
T = TypeVar("T")


def blocking(
    call: Callable[Concatenate[AsyncMemoryClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[MemoryClient, P], T]:
    """A `MemoryClient` method that runs the `AsyncMemoryClient` coroutine method `call`."""

    @functools.wraps(call)
    def method(self: MemoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(call(self.aio, *args, **kwargs))

    return method


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

    call = blocking(AsyncMemoryClient.call)
    health = blocking(AsyncMemoryClient.health)
    system_messages = blocking(AsyncMemoryClient.system_messages)
    recall = blocking(AsyncMemoryClient.recall)
    messages = blocking(AsyncMemoryClient.messages)
    add_messages = blocking(AsyncMemoryClient.add_messages)
    summary = blocking(AsyncMemoryClient.summary)
    facts = blocking(AsyncMemoryClient.facts)
    add_fact = blocking(AsyncMemoryClient.add_fact)
    edit_fact = blocking(AsyncMemoryClient.edit_fact)
    fact_history = blocking(AsyncMemoryClient.fact_history)
    delete_fact = blocking(AsyncMemoryClient.delete_fact)
    condense = blocking(AsyncMemoryClient.condense)
    forget = blocking(AsyncMemoryClient.forget)
    session = blocking(AsyncMemoryClient.session)
    bind = blocking(AsyncMemoryClient.bind)
    bind_channel = blocking(AsyncMemoryClient.bind_channel)
    channel_binding = blocking(AsyncMemoryClient.channel_binding)
    unbind_channel = blocking(AsyncMemoryClient.unbind_channel)
    jobs = blocking(AsyncMemoryClient.jobs)
    retry_job = blocking(AsyncMemoryClient.retry_job)
    search = blocking(AsyncMemoryClient.search)
    mentions = blocking(AsyncMemoryClient.mentions)
    users = blocking(AsyncMemoryClient.users)
    user_stats = blocking(AsyncMemoryClient.user_stats)
    character_stats = blocking(AsyncMemoryClient.character_stats)
    stats = blocking(AsyncMemoryClient.stats)
    export = blocking(AsyncMemoryClient.export)
    import_export = blocking(AsyncMemoryClient.import_export)
