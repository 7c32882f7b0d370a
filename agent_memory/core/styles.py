"""The one place memory is shaped into `llm.system_messages` for an agent's `llm.style`.

Agora's join reference lists `llm.style` as `openai` (the default), `gemini`, `anthropic`
and `dify`, and its model pages show what each style's `system_messages` look like:

- `openai`: `{"role": "system", "content": text}` (custom-LLM and short-term-memory pages);
- `gemini`: `{"role": "user", "parts": [{"text": text}]}` (models/llm/gemini);
- `anthropic`: `{"role": "user", "content": text}` (models/llm/claude, 2025). The page's later
  revision shows `{"role": "system", ...}` instead; the user-role reading is the one that
  also fits Anthropic's Messages API, which has no system role inside `messages`.

Agora documents no `system_messages` shape for `dify`, and nothing ties the style to
`llm.vendor` or the URL, so the style is read from `llm.style` alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.errors import BadRequest, InvalidField

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
    """The `?style=` of a request: one of STYLES (default openai), else a 400 saying which."""
    if value is None or value == "":
        return DEFAULT_STYLE
    style = value.strip().lower()
    if style not in STYLES:
        raise BadRequest(f"style must be one of {', '.join(STYLES)}; got {value!r}")
    return style


def style_of_llm(llm: Mapping[str, Any]) -> str:
    """The style an Agora join body's `llm` block asks for; 422 for one memory cannot take."""
    value = llm.get("style")
    if value is None:
        return DEFAULT_STYLE
    style = value.strip().lower() if isinstance(value, str) else value
    if style not in STYLES:
        raise InvalidField(
            f"join.properties.llm.style {value!r} is not one the service can put memory in "
            f"({', '.join(STYLES)}); Agora documents no system_messages shape for it. Start "
            "such an agent yourself and follow it with POST /v1/sessions/{agent_id}/watch"
        )
    return style
