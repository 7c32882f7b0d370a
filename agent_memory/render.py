"""Turning stored messages into text a language model reads.

`transcript_lines` is the compact dated transcript used in system_messages and sent to
the condensing LLM; interrupted replies show what the user heard and what was meant.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from .models import MemoryMessage

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


GAP_LINE = "(… part of the conversation was not recorded …)"


class Entry(NamedTuple):
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


class RenderOptions(BaseModel):
    """How `to_openai_messages` folds Agora's extended fields into plain content."""

    time: Literal["none", "time", "datetime"] = "datetime"
    speakers: Literal["auto", "always", "never"] = "auto"
    interruptions: Literal["note", "heard"] = "note"
    drop_empty: bool = True


def _stored_shape(message: Mapping[str, Any]) -> dict[str, Any]:
    """An Agora short-term-memory message in the shape stored rows have."""
    stored = "ts_ms" in message or "at_ms" in message
    if stored and isinstance(message.get("role"), str) and isinstance(message.get("content"), str):
        return dict(message)
    parsed = MemoryMessage.model_validate(message)
    meta = parsed.metadata
    return {
        "role": parsed.role,
        "content": parsed.content,
        "ts_ms": parsed.timestamp,
        "at_ms": parsed.timestamp,
        "speaker": meta.user,
        "interrupted": meta.interrupted,
        "original": meta.original,
    }


def to_openai_messages(
    messages: Sequence[Mapping[str, Any]], options: RenderOptions | None = None
) -> list[dict[str, str]]:
    """Agora's extended messages (or stored rows) as plain `{role, content}` messages.

    As Agora advises for a custom LLM: the time before the content, the speaker when
    several users share the channel, and for an interrupted reply what it meant to say.
    """
    options = options or RenderOptions()
    rows = [_stored_shape(message) for message in messages]
    several = options.speakers == "always" or (
        options.speakers == "auto" and has_several_speakers(rows)
    )
    rendered: list[dict[str, str]] = []
    for row in rows:
        if options.drop_empty and not is_renderable(row):
            continue
        text = message_text(row) if options.interruptions == "note" else row["content"].strip()
        prefix = []
        at = row.get("ts_ms") or row.get("at_ms")
        if at and options.time != "none":
            prefix.append(f"[{format_datetime(at) if options.time == 'datetime' else format_minute(at)}]")
        if several and row["role"] == "user" and row.get("speaker"):
            prefix.append(f"{speaker_label(row, True)}:")
        role = row["role"] if row["role"] in ("user", "assistant") else "user"
        rendered.append({"role": role, "content": " ".join([*prefix, text])})
    return rendered
