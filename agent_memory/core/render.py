"""Turning stored messages into text a language model reads.

`transcript_lines` is the compact dated transcript used in system_messages and sent to
the condensing LLM; interrupted replies show what the user heard and what was meant.
(A platform's own message format is rendered in its folder, e.g.
`platforms/agora/custom_llm.py`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

ROLE_NAMES = {"user": "User", "assistant": "Assistant"}


def speaker_label(message: Mapping[str, Any], several_speakers: bool) -> str:
    """`User`, `Assistant`, or `User 1001` when several users share the channel."""
    role = message["role"]
    name = ROLE_NAMES.get(role, role.capitalize())
    if several_speakers and role == "user" and message.get("speaker"):
        return f"{name} {message['speaker']}"
    return name


def has_several_speakers(messages: Iterable[Mapping[str, Any]]) -> bool:
    speakers = {m.get("speaker") for m in messages if m["role"] == "user" and m.get("speaker")}
    return len(speakers) > 1


def message_text(message: Mapping[str, Any]) -> str:
    """The content, with an interrupted reply marked and what was meant appended."""
    content = message["content"].strip()
    if not message.get("interrupted"):
        return content
    original = (message.get("original") or "").strip()
    if original and original != content:
        if content and original.startswith(content):
            return (
                f"{content}… [interrupted by the user; the unheard rest: {original[len(content) :].strip()}]"
            )
        return f"{content}… [interrupted by the user; it was going to say: {original}]"
    return f"{content}… [interrupted by the user]"


def is_renderable(message: Mapping[str, Any]) -> bool:
    """Empty contents, tool calls and tool results are kept in storage but never rendered."""
    said = bool((message["content"] or "").strip()) or bool(
        message.get("interrupted") and (message.get("original") or "").strip()
    )
    return said and message.get("kind", "turn") == "turn"


GAP_LINE = "(… part of the conversation was not recorded …)"


@dataclass(frozen=True, slots=True)
class Entry:
    """One renderable message of a transcript: where it is, its day, and its line(s)."""

    index: int
    day: str
    text: str


def day_header(day: str) -> str:
    return f"— {day} —"


def transcript_entries(messages: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """The renderable messages as transcript lines, without day headers."""
    several = has_several_speakers(messages)
    entries = []
    for index, message in enumerate(messages):
        if not is_renderable(message):
            continue
        at = datetime.fromtimestamp((message.get("ts_ms") or message["at_ms"]) / 1000, UTC)
        line = f"[{at:%H:%M}] {speaker_label(message, several)}: {message_text(message)}"
        if message.get("gap_before"):
            line = f"{GAP_LINE}\n{line}"
        entries.append(Entry(index, f"{at:%Y-%m-%d}", line))
    return entries


def join_entries(entries: Sequence[Entry]) -> Iterator[str]:
    """The entries' lines with a date header whenever the day changes."""
    day = None
    for entry in entries:
        if entry.day != day:
            day = entry.day
            yield day_header(day)
        yield entry.text


def transcript_lines(messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """One line per renderable message, with a date header whenever the day changes."""
    return join_entries(transcript_entries(messages))


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(transcript_lines(messages))
