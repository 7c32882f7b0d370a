"""Turning stored messages into text a language model reads.

`transcript_lines` is the compact dated transcript used in system_messages and sent to
the condensing LLM; interrupted replies show what the user heard and what was meant.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

ROLE_NAMES = {"user": "User", "assistant": "Assistant"}


def format_day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def format_minute(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def format_datetime(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


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
            return f"{content}… [interrupted by the user; the unheard rest: {original[len(content):].strip()}]"
        return f"{content}… [interrupted by the user; it was going to say: {original}]"
    return f"{content}… [interrupted by the user]"


def is_renderable(message: Mapping[str, Any]) -> bool:
    """Empty contents are kept in storage but never rendered."""
    return bool(message["content"].strip()) or bool(
        message.get("interrupted") and (message.get("original") or "").strip()
    )


def transcript_lines(messages: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """One line per renderable message, with a date header whenever the day changes."""
    several = has_several_speakers(messages)
    day = None
    for message in messages:
        if not is_renderable(message):
            continue
        at = message.get("ts_ms") or message["at_ms"]
        if message.get("gap_before"):
            yield "(… part of the conversation was not recorded …)"
        if format_day(at) != day:
            day = format_day(at)
            yield f"— {day} —"
        yield f"[{format_minute(at)}] {speaker_label(message, several)}: {message_text(message)}"


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(transcript_lines(messages))
