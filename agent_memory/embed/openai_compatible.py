"""The OpenAI-compatible embedder: `POST /v1/embeddings` through the `openai` SDK.

Works with OpenAI and any server speaking its embeddings API (vLLM, Ollama, LM Studio, …).
With `condense/openai_compatible.py`, the only module that imports `openai`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openai
from openai import AsyncOpenAI

from agent_memory.core.clock import retry_after_s
from agent_memory.embed.base import check_vectors, clip
from agent_memory.errors import EmbeddingError
from agent_memory.settings import Settings

# Texts per request: the background worker sends one batch per request.
BATCH_SIZE = 64
# Statuses that mean "busy or broken right now", not "your request is wrong".
UNAVAILABLE_STATUSES = frozenset({408, 409, 429})
ENDPOINT = "AGENT_MEMORY_EMBEDDINGS_BASE_URL (or OPENAI_BASE_URL)"
KEY = "AGENT_MEMORY_EMBEDDINGS_API_KEY (or OPENAI_API_KEY)"
MODEL = "AGENT_MEMORY_EMBEDDINGS_MODEL"


def embedding_error(
    exc: openai.OpenAIError, base_url: str, timeout_s: float, *, model: str
) -> EmbeddingError:
    """An SDK error as an `EmbeddingError` naming the endpoint, the model and the setting to check."""
    if isinstance(exc, openai.APITimeoutError):
        return EmbeddingError(
            f"the embeddings endpoint {base_url} (model {model}) did not answer within {timeout_s:g}s "
            "(AGENT_MEMORY_LLM_TIMEOUT_S)"
        )
    if isinstance(exc, openai.APIConnectionError):
        return EmbeddingError(
            f"the embeddings endpoint {base_url} is unreachable ({ENDPOINT}): {exc.message}"
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        said = f"the embeddings endpoint {base_url} answered {status} for model {model}: {exc.message}"
        if status >= 500 or status in UNAVAILABLE_STATUSES:
            return EmbeddingError(said, retry_after=retry_after_s(exc.response.headers))
        if status in (401, 403):
            return EmbeddingError(f"{said} (check {KEY})")
        return EmbeddingError(f"{said} (check {MODEL} and AGENT_MEMORY_EMBEDDINGS_DIMENSIONS)")
    return EmbeddingError(f"the embeddings call to {base_url} (model {model}) failed: {exc}")


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible embeddings endpoint, `BATCH_SIZE` texts a request."""

    def __init__(
        self, settings: Settings, *, client: AsyncOpenAI | None = None, batch_size: int = BATCH_SIZE
    ) -> None:
        """Use `client` if given (the caller then owns it), else build one from `settings`."""
        if not settings.embeddings_model:
            raise ValueError("OpenAIEmbedder needs AGENT_MEMORY_EMBEDDINGS_MODEL")
        self.model: str = settings.embeddings_model
        self.dimensions: int | None = settings.embeddings_dimensions
        self.batch_size = batch_size
        self.timeout_s = settings.llm_timeout_s
        self._owns_client = client is None
        self.client = client or AsyncOpenAI(
            # Local OpenAI-compatible servers need no key, but the SDK insists on one.
            api_key=settings.embeddings_api_key or settings.openai_api_key or "not-needed",
            base_url=settings.embeddings_base_url or settings.openai_base_url,
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, one request per `batch_size` texts."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._request(texts[start : start + self.batch_size]))
        return vectors

    async def _request(self, texts: Sequence[str]) -> list[list[float]]:
        # "float", not the SDK's default base64: not every compatible server speaks base64.
        options: dict[str, Any] = {"encoding_format": "float"}
        if self.dimensions is not None:
            options["dimensions"] = self.dimensions
        try:
            answer = await self.client.embeddings.create(
                model=self.model, input=[clip(text) for text in texts], **options
            )
        except openai.OpenAIError as exc:
            raise embedding_error(exc, str(self.client.base_url), self.timeout_s, model=self.model) from exc
        data = sorted(answer.data or [], key=lambda item: item.index)
        return check_vectors([item.embedding for item in data], len(texts), self.dimensions)

    async def close(self) -> None:
        """Close the HTTP client if this embedder created it."""
        if self._owns_client:
            await self.client.close()
