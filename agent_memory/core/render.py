"""Turning stored messages into text a language model reads.

`transcript_lines` is the compact dated transcript used in system_messages and sent to
the condensing LLM; interrupted replies show what the user heard and what was meant.
`to_openai_messages` makes a custom-LLM request's messages plain OpenAI messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from agent_memory.errors import InvalidField
from agent_memory.platforms.agora.payloads import MessageMetadata, to_ms

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
    """Empty contents, tool calls and tool results are kept in storage but never rendered."""
    said = bool((message["content"] or "").strip()) or bool(
        message.get("interrupted") and (message.get("original") or "").strip()
    )
    return said and message.get("kind", "turn") == "turn"


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


# The fields an OpenAI Chat Completions message may carry; Agora's extensions (turn_id,
# timestamp, metadata, speech_*) and anything else are left out of what is returned.
OPENAI_MESSAGE_FIELDS = ("role", "name", "content", "tool_calls", "tool_call_id", "audio", "refusal")
TURN_ROLES = ("user", "assistant")


def _where(index: int) -> str:
    return f"messages[{index}]"


def _check(message: Any, index: int) -> Mapping[str, Any]:
    """A message object with a role, or a 422 saying which one is wrong."""
    if not isinstance(message, Mapping):
        raise InvalidField(f"{_where(index)} must be a message object")
    role = message.get("role")
    if not isinstance(role, str) or not role.strip():
        raise InvalidField(f"{_where(index)}.role is required (user, assistant, system or tool)")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise InvalidField(f"{_where(index)}.content must be text, a list of content parts, or null")
    if isinstance(content, list) and not all(isinstance(part, Mapping) for part in content):
        raise InvalidField(f"{_where(index)}.content parts must be objects")
    return message


def _turn_facts(message: Mapping[str, Any]) -> dict[str, Any]:
    """Time, speaker and interruption of a user/assistant turn: Agora's message or a stored row."""
    if "ts_ms" in message or "at_ms" in message:
        return {
            "at": message.get("ts_ms") or message.get("at_ms"),
            "speaker": message.get("speaker"),
            "interrupted": bool(message.get("interrupted")),
            "original": message.get("original"),
        }
    meta = MessageMetadata.model_validate(message.get("metadata") or {})
    return {
        "at": to_ms(message.get("timestamp")),
        "speaker": meta.user,
        "interrupted": meta.interrupted,
        "original": meta.original,
    }


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message's OpenAI fields only; content as given (null stays null), other nulls left out."""
    return {
        key: message[key]
        for key in OPENAI_MESSAGE_FIELDS
        if key in message and (key == "content" or message[key] is not None)
    }


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        # A part that is not text (an image, audio) is content in its own right.
        return any(part.get("type") != "text" or str(part.get("text") or "").strip() for part in content)
    return False


def _is_spoken_turn(message: Mapping[str, Any]) -> bool:
    """A user or assistant message that is conversation, not a tool call."""
    return (
        message["role"] in TURN_ROLES
        and not message.get("tool_calls")
        and message.get("kind", "turn") in (None, "turn")
    )


def _with_tool_data(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored tool call or result (`kind`) with the tool data it was stored with, as sent."""
    tool = message.get("tool")
    if message.get("kind", "turn") in (None, "turn") or not isinstance(tool, Mapping):
        return message
    return {**message, **tool}


def _with_prefix(content: Any, prefix: str) -> Any:
    """`prefix` before the text: in the first text part of a parts list, else a new first part."""
    if not prefix:
        return content
    if isinstance(content, list):
        parts = [dict(part) for part in content]
        for part in parts:
            if part.get("type") == "text":
                part["text"] = f"{prefix} {part.get('text') or ''}".rstrip()
                return parts
        return [{"type": "text", "text": prefix}, *parts]
    return f"{prefix} {content}" if content else content


def _turn_content(message: Mapping[str, Any], facts: Mapping[str, Any], options: RenderOptions) -> Any:
    """A spoken turn's content with the interruption noted (text content only)."""
    content = message.get("content")
    if isinstance(content, list):
        return content
    text = (content or "").strip()
    if options.interruptions == "note":
        return message_text({"content": text, **facts})
    return text


def _prefix(message: Mapping[str, Any], facts: Mapping[str, Any], options: RenderOptions, several: bool) -> str:
    prefix = []
    if facts["at"] and options.time != "none":
        at = facts["at"]
        prefix.append(f"[{format_datetime(at) if options.time == 'datetime' else format_minute(at)}]")
    if several and message["role"] == "user" and facts["speaker"]:
        prefix.append(f"{speaker_label({'role': 'user', 'speaker': facts['speaker']}, True)}:")
    return " ".join(prefix)


def _render_turn(
    message: Mapping[str, Any], facts: Mapping[str, Any], options: RenderOptions, several: bool
) -> dict[str, Any] | None:
    """A spoken turn as Agora advises, or None when it is empty and empties are dropped."""
    visible = _has_text(message.get("content")) or bool(
        facts["interrupted"] and (facts["original"] or "").strip()
    )
    if options.drop_empty and not visible:
        return None
    rendered = _plain(message)
    content = _turn_content(message, facts, options)
    rendered["content"] = _with_prefix(content, _prefix(message, facts, options, several))
    return rendered


def to_openai_messages(
    messages: Sequence[Any], options: RenderOptions | None = None
) -> list[dict[str, Any]]:
    """Agora's custom-LLM messages (or stored rows) as OpenAI Chat Completions messages.

    System messages (Agora puts `system_messages` first) stay `system` and where they are;
    tool results keep `tool_call_id`, assistant tool calls keep `tool_calls` (content may be
    null), content parts (images with their URLs) stay intact. Only spoken user/assistant
    turns are rewritten, as Agora advises for a custom LLM: the time before the content, the
    speaker when several users share the channel, an interrupted reply noted with `original`.
    Agora's extended fields are not passed on.
    """
    options = options or RenderOptions()
    checked = [
        _check(_with_tool_data(message) if isinstance(message, Mapping) else message, index)
        for index, message in enumerate(messages)
    ]
    facts = [_turn_facts(m) if _is_spoken_turn(m) else None for m in checked]
    speakers = {f["speaker"] for m, f in zip(checked, facts) if f and m["role"] == "user" and f["speaker"]}
    several = options.speakers == "always" or (options.speakers == "auto" and len(speakers) > 1)
    rendered: list[dict[str, Any]] = []
    for index, (message, turn) in enumerate(zip(checked, facts)):
        if turn is not None:
            out = _render_turn(message, turn, options, several)
            if out is not None:
                rendered.append(out)
            continue
        if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise InvalidField(f"{_where(index)} is a tool result without its tool_call_id")
        plain = _plain(message)
        if plain.get("tool_calls") and isinstance(plain.get("content"), str) and not plain["content"].strip():
            plain["content"] = None  # no text beside the calls, however it was stored
        rendered.append(plain)
    return rendered
