"""Turning stored messages into text a language model reads.

`transcript_lines` is the compact dated transcript used in system_messages and sent to
the condensing LLM; interrupted replies show what the user heard and what was meant, and
relative dates ("yesterday", 上周五) are followed by the absolute date they meant when said
(`core.dates.annotate`).
(A platform's own message format is rendered in its folder, e.g.
`platforms/agora/custom_llm.py`, with `speaker_label` and `said_text`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from agent_memory.core.dates import annotate
from agent_memory.core.domain import Message
from agent_memory.core.textcache import text_cache

ROLE_NAMES = {"user": "User", "assistant": "Assistant"}


def speaker_label(role: str, speaker: str | None, several_speakers: bool) -> str:
    """`User`, `Assistant`, or `User 1001` when several users share the channel."""
    name = ROLE_NAMES.get(role, role.capitalize())
    if several_speakers and role == "user" and speaker:
        return f"{name} {speaker}"
    return name


def has_several_speakers(messages: Iterable[Message]) -> bool:
    speakers = {m.speaker for m in messages if m.role == "user" and m.speaker}
    return len(speakers) > 1


def said_text(content: str, interrupted: bool, original: str | None) -> str:
    """The content, with an interrupted reply marked and what was meant appended."""
    content = content.strip()
    if not interrupted:
        return content
    original = (original or "").strip()
    if original and original != content:
        if content and original.startswith(content):
            return (
                f"{content}… [interrupted by the user; the unheard rest: {original[len(content) :].strip()}]"
            )
        return f"{content}… [interrupted by the user; it was going to say: {original}]"
    return f"{content}… [interrupted by the user]"


def is_renderable(message: Message) -> bool:
    """Empty contents, tool calls and tool results are kept in storage but never rendered."""
    said = bool(message.content.strip()) or bool(message.interrupted and (message.original or "").strip())
    return said and message.kind == "turn"


GAP_LINE = "(… part of the conversation was not recorded …)"


@dataclass(frozen=True, slots=True)
class Entry:
    """One renderable message of a transcript: where it is, its day, and its line(s)."""

    index: int
    day: str
    text: str


def day_header(day: str) -> str:
    return f"— {day} —"


def transcript_entries(messages: Sequence[Message]) -> list[Entry]:
    """The renderable messages as transcript lines, without day headers."""
    entries = list(entries_newest_first(messages))
    entries.reverse()
    return entries


@text_cache(32768)
def _dated_said(content: str, interrupted: bool, original: str | None, said_ms: int) -> str:
    """What was said with its relative dates noted (cached: the same turns are rendered often).

    The day header shows the day itself, so "today" needs no note."""
    return annotate(said_text(content, interrupted, original), said_ms, same_day=False)


def entries_newest_first(messages: Sequence[Message]) -> Iterator[Entry]:
    """`transcript_entries` from the newest back, rendered one by one as they are taken."""
    several = has_several_speakers(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not is_renderable(message):
            continue
        said_ms = message.ts_ms or message.at_ms
        at = datetime.fromtimestamp(said_ms / 1000, UTC)
        speaker = speaker_label(message.role, message.speaker, several)
        said = _dated_said(message.content, message.interrupted, message.original, said_ms)
        line = f"[{at:%H:%M}] {speaker}: {said}"
        if message.gap_before:
            line = f"{GAP_LINE}\n{line}"
        yield Entry(index, f"{at:%Y-%m-%d}", line)


def join_entries(entries: Sequence[Entry]) -> Iterator[str]:
    """The entries' lines with a date header whenever the day changes."""
    day = None
    for entry in entries:
        if entry.day != day:
            day = entry.day
            yield day_header(day)
        yield entry.text


def transcript_lines(messages: Sequence[Message]) -> Iterator[str]:
    """One line per renderable message, with a date header whenever the day changes."""
    return join_entries(transcript_entries(messages))


def render_transcript(messages: Sequence[Message]) -> str:
    return "\n".join(transcript_lines(messages))
