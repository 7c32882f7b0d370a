"""The LLM seam: the condenser protocol (`base`), the prompt, the OpenAI-compatible and offline condensers.

`make_condenser` picks one from the settings. The OpenAI-compatible condenser is imported
only when it is chosen, so a service without an LLM never loads the `openai` SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_memory.condense.base import Condenser
from agent_memory.condense.offline import OfflineCondenser
from agent_memory.settings import Settings

if TYPE_CHECKING:
    from agent_memory.condense.openai_compatible import LLMRanker

__all__ = ["Condenser", "make_condenser", "make_ranker"]


def make_condenser(settings: Settings) -> Condenser:
    """The LLM condenser when an endpoint or key is configured, else the offline one."""
    if settings.llm_configured:
        from agent_memory.condense.openai_compatible import LLMCondenser

        return LLMCondenser(settings)
    return OfflineCondenser()


def make_ranker(settings: Settings) -> LLMRanker | None:
    """The LLM that reorders recalled memories when AGENT_MEMORY_RECALL_RERANK is on, else None."""
    if not settings.recall_rerank:
        return None
    from agent_memory.condense.openai_compatible import LLMRanker

    return LLMRanker(settings)
