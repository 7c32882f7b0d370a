"""The optional LLM rerank of recalled memories (AGENT_MEMORY_RECALL_RERANK, off by default).

The best `candidates` memories of a recall are sent to the configured model, which answers
their order; the recall is re-rendered in it. Within a deadline: past it, or on any error or
unusable answer, the order recall gave stands. Every outcome is counted
(`agent_memory_recall_rerank_<outcome>_total`). Recall calls it in one place (`Reading.recall`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from agent_memory.core.recall import HEADING, Recall
from agent_memory.core.recall_fit import context_line, memory_line
from agent_memory.core.tokens import count_message_tokens
from agent_memory.errors import LLMBadOutput, LLMError

log = logging.getLogger(__name__)


class Ranker(Protocol):
    """Anything that orders texts by how well they answer `q` (condense/openai_compatible.LLMRanker)."""

    async def order(self, q: str, texts: Sequence[str]) -> list[int]: ...

    async def close(self) -> None: ...


@dataclass
class RerankStats:
    """What became of the recalls this process sent to be reranked."""

    reordered: int = 0  # the model's order differed, and was used
    unchanged: int = 0  # the model kept recall's order
    timeouts: int = 0  # past the deadline: recall's order stands
    errors: int = 0  # the endpoint failed: recall's order stands
    bad_answers: int = 0  # the answer was no order: recall's order stands
    no_time: int = 0  # no time was left of a live call's deadline to ask
    too_few: int = 0  # fewer than two memories: nothing to order


class Rerank:
    """Reorders a recall's best memories by the model's answer, or leaves it as it is."""

    def __init__(self, ranker: Ranker, *, candidates: int, timeout_ms: float) -> None:
        self.ranker = ranker
        self.candidates = candidates
        self.timeout_ms = timeout_ms
        self.stats = RerankStats()

    async def __call__(self, found: Recall, *, within_ms: float | None = None) -> Recall:
        """`found` with its best memories in the model's order; as it was when the model does not
        answer within `timeout_ms` (or `within_ms`, what is left of a caller's deadline, if less)."""
        top = found.memories[: self.candidates]
        if len(top) < 2:
            self.stats.too_few += 1
            return found
        budget_ms = self.timeout_ms if within_ms is None else min(self.timeout_ms, within_ms)
        if budget_ms <= 0:
            self.stats.no_time += 1
            return found
        try:
            order = await asyncio.wait_for(
                self.ranker.order(found.q, [m.text for m in top]), budget_ms / 1000
            )
        except TimeoutError:
            self.stats.timeouts += 1
            return found
        except LLMBadOutput as exc:
            self.stats.bad_answers += 1
            log.warning("recall rerank: unusable answer (%s); recall's order kept", exc)
            return found
        except LLMError as exc:
            self.stats.errors += 1
            log.warning("recall rerank failed (%s); recall's order kept", exc)
            return found
        # What the model left out keeps recall's order after what it ranked.
        ranked = [top[number] for number in order] + [
            m for number, m in enumerate(top) if number not in order
        ]
        if ranked == top:
            self.stats.unchanged += 1
            return found
        self.stats.reordered += 1
        return rendered(replace(found, memories=[*ranked, *found.memories[len(top) :]]))

    def report(self) -> dict[str, int]:
        """The counters, for /metrics."""
        return {name: getattr(self.stats, name) for name in RerankStats.__dataclass_fields__}

    async def close(self) -> None:
        await self.ranker.close()


def rendered(found: Recall) -> Recall:
    """`found` with its system message (and its tokens) rendered again in its memories' order."""
    lines = [HEADING]
    for memory in found.memories:
        lines.append(memory_line(memory))
        lines.extend(context_line(turn) for turn in memory.context)
    content = "\n".join(lines) if found.memories else ""
    return replace(found, system_message=content, tokens=count_message_tokens(content) if content else 0)
