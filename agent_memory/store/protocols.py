"""What the rest of the service may ask of a store; a second backend implements this."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Store(Protocol):
    """A store runs read functions on a view and write functions in a durable transaction.

    The view and transaction objects are backend-specific; they expose the methods of
    `agent_memory.store.sqlite.engine.SQLiteView` and `SQLiteTransaction`.
    """

    def open(self) -> None: ...

    def close(self) -> None: ...

    async def read(self, fn: Callable[[Any], T]) -> T: ...

    async def write(self, fn: Callable[[Any], T]) -> T: ...

    async def checkpoint(self) -> tuple[int, int, int]: ...

    async def catch_up_search(self) -> int: ...
