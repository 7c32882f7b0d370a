"""The one place memory is shaped into system messages for an LLM's message style.

Each style is the shape an LLM's system messages take (Agora's model pages document them
for its `llm.style`; a platform reads the style from its own start request):

- `openai`: `{"role": "system", "content": text}` (custom-LLM and short-term-memory pages);
- `gemini`: `{"role": "user", "parts": [{"text": text}]}` (models/llm/gemini);
- `anthropic`: `{"role": "user", "content": text}` (models/llm/claude, 2025). The page's later
  revision shows `{"role": "system", ...}` instead; the user-role reading is the one that
  also fits Anthropic's Messages API, which has no system role inside `messages`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.errors import BadRequest

STYLES = ("openai", "gemini", "anthropic")
DEFAULT_STYLE = "openai"


def shape_system_messages(texts: Sequence[str], style: str = DEFAULT_STYLE) -> list[dict[str, Any]]:
    """The texts as system messages in `style`, in the order given."""
    if style == "gemini":
        return [{"role": "user", "parts": [{"text": text}]} for text in texts]
    if style == "anthropic":
        return [{"role": "user", "content": text} for text in texts]
    if style == "openai":
        return [{"role": "system", "content": text} for text in texts]
    raise ValueError(f"unknown style {style!r}")


def style_from_query(value: str | None) -> str:
    """The `?style=` of a request: absent is openai, else exactly one of STYLES (what the API
    documents), or a 400 saying which."""
    if value is None:
        return DEFAULT_STYLE
    if value not in STYLES:
        raise BadRequest(f"style must be one of {', '.join(STYLES)}; got {value!r}")
    return value
