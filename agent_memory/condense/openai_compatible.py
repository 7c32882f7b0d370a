"""The OpenAI-compatible condenser: one chat completion with a strict JSON schema per job; and
the reranker of recalled memories (`LLMRanker`, off unless AGENT_MEMORY_RECALL_RERANK).

Works with OpenAI and any server speaking its chat completions API (vLLM, Ollama, LM Studio,
…). This is the only module of the service that imports `openai`; the prompt and schema are
`prompt.py`'s, the models and the sanitiser `base.py`'s.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from functools import cache
from typing import cast

import httpx2
import openai
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionUserMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import ValidationError

from agent_memory.condense.base import CondenseInput, CondenseResult, sanitize, unchanged
from agent_memory.condense.prompt import (
    RETRY_NOTE,
    SCHEMA_NAME,
    SYSTEM_PROMPT,
    build_user_content,
    describe_problem,
    parse_answer,
    response_format,
)
from agent_memory.condense.rerank import RERANK_PROMPT, parse_order, rerank_content, rerank_format
from agent_memory.core.clock import retry_after_s
from agent_memory.core.render import render_transcript
from agent_memory.core.tokens import count_message_tokens
from agent_memory.errors import LLMBadOutput, LLMError, LLMUnavailable
from agent_memory.logs import pair_ref
from agent_memory.settings import Settings

log = logging.getLogger(__name__)

# One call, then one corrective call: more attempts rarely fix a model that ignores the schema.
MAX_ATTEMPTS = 2
# Statuses that mean "the endpoint is busy or broken right now", not "your request is wrong".
UNAVAILABLE_STATUSES = frozenset({408, 429})


def map_openai_error(exc: openai.OpenAIError, timeout_s: float, *, url: str, model: str) -> LLMError:
    """Translate an SDK error into the service's LLM errors, naming the endpoint and the model."""
    if isinstance(exc, openai.APITimeoutError):
        return LLMUnavailable(
            f"the LLM at {url} (model {model}) did not answer within {timeout_s:g}s "
            "(AGENT_MEMORY_LLM_TIMEOUT_S)"
        )
    if isinstance(exc, openai.APIConnectionError):
        return LLMUnavailable(f"the LLM endpoint {url} is unreachable (OPENAI_BASE_URL): {exc.message}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        said = f"the LLM endpoint {url} answered {status} for model {model}: {exc.message}"
        if status >= 500 or status in UNAVAILABLE_STATUSES:
            return LLMUnavailable(said, retry_after=retry_after_s(exc.response.headers))
        # A 4xx other than those is our request or our credentials: retrying will not help.
        return LLMError(said)
    return LLMError(f"the LLM call to {url} (model {model}) failed: {exc}")


@cache
def tls_context() -> ssl.SSLContext:
    """The TLS context the SDK's HTTP client would build (httpx2's default), built once per
    process: building one reads the system's CA certificates, ~30 ms of CPU per client."""
    return httpx2.create_ssl_context()


def openai_client(*, api_key: str, base_url: str | None, timeout: float, max_retries: int) -> AsyncOpenAI:
    """An SDK client as `AsyncOpenAI(...)` builds one, its HTTP client on the shared TLS context."""
    return AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=max_retries,
        http_client=DefaultAsyncHttpxClient(timeout=timeout, verify=tls_context()),
    )


class LLMCondenser:
    """Condenses through an OpenAI-compatible chat completions endpoint."""

    reads_history = False  # the model judges what matters itself

    def __init__(self, settings: Settings, *, client: AsyncOpenAI | None = None) -> None:
        """Use `client` if given (the caller then owns it), else build one from `settings`."""
        self.settings = settings
        self.model = settings.llm_model
        self._owns_client = client is None
        self.client = client or openai_client(
            # Local OpenAI-compatible servers need no key, but the SDK insists on one.
            api_key=settings.openai_api_key or "not-needed",
            base_url=settings.openai_base_url,
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )

    async def condense(self, job: CondenseInput) -> CondenseResult:
        """One chat completion (two if the first answer is unusable), sanitised."""
        if not render_transcript(job.messages):
            # Nothing new was said: the memory stays as it is and no tokens are spent.
            return CondenseResult(output=unchanged(job), method="llm", model=self.model)

        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": build_user_content(job)},
        ]
        tokens_sent = 0
        for attempt in range(1, MAX_ATTEMPTS + 1):
            content, prompt_tokens = await self._complete(messages)
            tokens_sent += prompt_tokens
            try:
                output, decisions = parse_answer(content or "")
            except ValidationError as exc:
                problem = describe_problem(exc) if content else "the answer had no text"
                log.warning(
                    "condense %s: unusable LLM answer (attempt %d of %d): %s",
                    pair_ref(job.user_id, job.character_id),
                    attempt,
                    MAX_ATTEMPTS,
                    problem,
                )
                # Say what went wrong: a pointed retry succeeds more often than a blind resend.
                retry_note: ChatCompletionUserMessageParam = {
                    "role": "user",
                    "content": RETRY_NOTE.format(problem=problem),
                }
                messages = [*messages[:2], retry_note]
                continue
            clean = sanitize(output, job.facts)
            # What is applied, by kind; the rest of what the model decided could not be used.
            made = sum(decisions.values())
            decisions.update(
                add=len(clean.add_facts), update=len(clean.update_facts), delete=len(clean.remove_facts)
            )
            decisions["ignored"] = made - sum(count for kind, count in decisions.items() if kind != "ignored")
            if decisions["ignored"]:
                log.info(
                    "condense %s: ignored %d fact decision(s): malformed, or aimed at pinned, unknown or "
                    "duplicate facts",
                    pair_ref(job.user_id, job.character_id),
                    decisions["ignored"],
                )
            return CondenseResult(
                output=clean,
                method="llm",
                model=self.model,
                tokens_sent=tokens_sent,
                fact_decisions=decisions,
            )
        raise LLMBadOutput(f"the LLM answered {MAX_ATTEMPTS} times without valid {SCHEMA_NAME} JSON")

    async def _complete(self, messages: list[ChatCompletionMessageParam]) -> tuple[str | None, int]:
        """One API call: the answer's text (None if there is none) and the prompt tokens."""
        try:
            completion = await self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                response_format=cast(ResponseFormatJSONSchema, response_format()),
            )
        except openai.OpenAIError as exc:
            raise map_openai_error(
                exc, self.settings.llm_timeout_s, url=str(self.client.base_url), model=self.model
            ) from exc

        usage = getattr(completion, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        if not isinstance(prompt_tokens, int):
            prompt_tokens = sum(count_message_tokens(str(m.get("content") or "")) for m in messages)
        choices = getattr(completion, "choices", None)
        if not choices:
            return None, prompt_tokens
        message = choices[0].message
        if getattr(message, "refusal", None):
            return None, prompt_tokens
        return message.content, prompt_tokens

    async def close(self) -> None:
        """Close the HTTP client if this condenser created it."""
        if self._owns_client:
            await self.client.close()


class LLMRanker:
    """Orders recalled memories by how well they answer what was said, through the same endpoint."""

    def __init__(self, settings: Settings, *, client: AsyncOpenAI | None = None) -> None:
        """Use `client` if given (the caller then owns it), else build one from `settings`."""
        self.model = settings.llm_model
        self.timeout_s = settings.recall_rerank_timeout_ms / 1000
        self._owns_client = client is None
        self.client = client or openai_client(
            api_key=settings.openai_api_key or "not-needed",
            base_url=settings.openai_base_url,
            timeout=self.timeout_s,
            max_retries=0,  # no time for a second try within a recall
        )

    async def order(self, q: str, texts: Sequence[str]) -> list[int]:
        """The numbers of `texts`, the most useful first (some may be left out); LLMError if
        the model cannot say."""
        try:
            completion = await self.client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": RERANK_PROMPT},
                    {"role": "user", "content": rerank_content(q, texts)},
                ],
                response_format=cast(ResponseFormatJSONSchema, rerank_format()),
                temperature=0,
            )
        except openai.OpenAIError as exc:
            raise map_openai_error(
                exc, self.timeout_s, url=str(self.client.base_url), model=self.model
            ) from exc
        choices = getattr(completion, "choices", None)
        content = choices[0].message.content if choices else None
        return parse_order(content, len(texts))

    async def close(self) -> None:
        """Close the HTTP client if this ranker created it."""
        if self._owns_client:
            await self.client.close()
