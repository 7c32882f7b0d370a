"""What the custom-LLM endpoint needs of an upstream OpenAI-compatible LLM: open a request, read its events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Target:
    """Where to send a chat completion: the API's base URL (…/v1) and its key."""

    base_url: str
    api_key: str | None = None

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"


class UpstreamFailed(Exception):
    """The upstream could not be reached, or did not answer in time (no status of its own)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        # The status to answer with: 502 unreachable or broken, 504 no answer in time.
        self.status = status
        self.message = message


class UpstreamAnswer(Protocol):
    """An answer whose status and headers have arrived; its body is read as it comes."""

    status: int
    headers: Mapping[str, str]

    def events(self) -> AsyncIterator[bytes]:
        """The body as it arrives, as sent, cut at event ends: each block is one or more whole
        server-sent events (each ending in a blank line), never part of one.

        Raises UpstreamFailed when the stream breaks or stalls past the read timeout.
        """
        ...

    async def body(self) -> bytes:
        """The whole body (a non-streaming answer, or an error)."""
        ...

    def close(self) -> None:
        """Drop the connection now (the caller went away): the upstream sees it closed."""
        ...


class Upstream(Protocol):
    """Opens chat completion requests to an OpenAI-compatible LLM."""

    async def open(self, target: Target, body: bytes) -> UpstreamAnswer:
        """Send `body` (JSON) and return once the status and headers arrived (first-byte
        deadline); raises UpstreamFailed when the upstream is unreachable or silent."""
        ...

    async def close(self) -> None: ...
