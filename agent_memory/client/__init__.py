"""A Python client for the agent-memory HTTP API: `AsyncMemoryClient` and the blocking `MemoryClient`.

    from agent_memory.client import MemoryClient

    with MemoryClient("http://127.0.0.1:8080", api_key="…") as memory:
        memory.add_fact("u-alice", "luna", "has a cat named Miso")
        print(memory.recall("u-alice", "luna", "what is my cat called?").system_message.content)

Answers are the API's own pydantic models (`agent_memory.web.answers`); errors are
`agent_memory.errors.ApiError` (`status`, `code`, `message`).
"""

from agent_memory.client.async_client import AsyncMemoryClient, read_answer
from agent_memory.client.sync_client import MemoryClient
from agent_memory.errors import ApiError

__all__ = ["ApiError", "AsyncMemoryClient", "MemoryClient", "read_answer"]
