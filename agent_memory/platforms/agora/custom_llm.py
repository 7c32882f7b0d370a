"""Agora's custom-LLM messages as plain OpenAI Chat Completions messages.

With `llm.vendor` "custom" Agora sends the LLM its short-term memory with extended fields
(turn_id, timestamp, metadata.user, metadata.interrupted, metadata.original, speech_*).
`to_openai_messages` folds what matters of them into the content, as Agora advises, and
leaves the rest out; `POST /v1/render/openai-messages` serves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from agent_memory.core.clock import format_datetime, format_minute
from agent_memory.core.render import said_text, speaker_label
from agent_memory.errors import InvalidField
from agent_memory.platforms.agora.payloads import MessageMetadata, to_ms


class RenderOptions(BaseModel):
    """How `to_openai_messages` folds Agora's extended fields into plain content."""

    # JSON's types as the document states them: no 0 for false, no "5" for 5.
    model_config = ConfigDict(strict=True)
    time: Literal["none", "time", "datetime"] = "datetime"
    speakers: Literal["auto", "always", "never"] = "auto"
    interruptions: Literal["note", "heard"] = "note"
    drop_empty: bool = True


# The fields an OpenAI Chat Completions message may carry; Agora's extensions (turn_id,
# timestamp, metadata, speech_*) and anything else are left out of what is returned.
OPENAI_MESSAGE_FIELDS = ("role", "name", "content", "tool_calls", "tool_call_id", "audio", "refusal")
TURN_ROLES = ("user", "assistant")
# A message as `_check` accepts it, for the OpenAPI document: a role, content as text, parts or
# null, anything else (Agora's turn_id, timestamp, metadata, …) as it comes.
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "pattern": r"\S", "description": "user, assistant, system or tool"},
        "content": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}]
        },
    },
}
AgoraMessage = Annotated[dict[str, Any], WithJsonSchema(MESSAGE_SCHEMA)]


class ChatCompletionRequest(BaseModel):
    """What the custom-LLM endpoint takes (for the document): OpenAI's request as Agora sends it,
    `llm.params` at its top level. The endpoint reads it itself (platforms/llm_endpoint.py)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "messages": [{"role": "user", "content": "hi"}],
                    "user_id": "u-alice",
                    "character_id": "luna",
                }
            ]
        },
    )
    messages: list[AgoraMessage]
    # Untyped as the endpoint reads them: a string or number is used, anything else ignored.
    user_id: Any = Field(None, description="whose memory; needed unless the key names the pair")
    character_id: Any = Field(None, description="which character (default AGENT_MEMORY_DEFAULT_CHARACTER)")
    agent_id: Any = Field(None, description="the agent run to record the turns in")
    stream: Any = Field(None, description="true: answer server-sent events as the upstream streams them")


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
        return said_text(text, facts["interrupted"], facts["original"])
    return text


def _prefix(
    message: Mapping[str, Any], facts: Mapping[str, Any], options: RenderOptions, several: bool
) -> str:
    prefix = []
    if facts["at"] and options.time != "none":
        at = facts["at"]
        prefix.append(f"[{format_datetime(at) if options.time == 'datetime' else format_minute(at)}]")
    if several and message["role"] == "user" and facts["speaker"]:
        prefix.append(f"{speaker_label('user', facts['speaker'], True)}:")
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


@dataclass(frozen=True, slots=True)
class ReadMessage:
    """One message as rendering read it, kept for a call's next request (which repeats it)."""

    checked: Mapping[str, Any]
    facts: Mapping[str, Any] | None  # a spoken turn's; None: not a spoken turn
    alone: dict[str, Any] | None  # rendered with one speaker in the channel (None: an empty turn, dropped)


def to_openai_messages(
    messages: Sequence[Any], options: RenderOptions | None = None, known: list[Any] | None = None
) -> list[dict[str, Any]]:
    """Agora's custom-LLM messages (or stored rows) as OpenAI Chat Completions messages.

    System messages (Agora puts `system_messages` first) stay `system` and where they are;
    tool results keep `tool_call_id`, assistant tool calls keep `tool_calls` (content may be
    null), content parts (images with their URLs) stay intact. Only spoken user/assistant
    turns are rewritten, as Agora advises for a custom LLM: the time before the content, the
    speaker when several users share the channel, an interrupted reply noted with `original`.
    Agora's extended fields are not passed on.

    `known` (default options only): one slot per message, a `ReadMessage` where this message
    was read before (a live call's requests repeat its conversation), filled in for the rest.
    """
    options = options or RenderOptions()
    slots: list[Any] = known if known is not None else [None] * len(messages)
    checked = _checked(messages, slots)
    facts = _facts(checked, slots)
    several = _several_speakers(checked, facts, options)
    rendered: list[dict[str, Any]] = []
    for index, (message, turn) in enumerate(zip(checked, facts, strict=True)):
        read = slots[index]
        if isinstance(read, ReadMessage) and not several:
            out = read.alone
        else:
            out = _render_one(message, turn, options, several, index)
            if known is not None and not several:
                slots[index] = ReadMessage(message, turn, out)
        if out is not None:
            rendered.append(out)
    return rendered


def _checked(messages: Sequence[Any], slots: list[Any]) -> list[Mapping[str, Any]]:
    """Each message checked (a 422 for the first that is wrong), or as read before."""
    return [
        read.checked
        if isinstance(read := slots[index], ReadMessage)
        else _check(_with_tool_data(message) if isinstance(message, Mapping) else message, index)
        for index, message in enumerate(messages)
    ]


def _facts(checked: list[Mapping[str, Any]], slots: list[Any]) -> list[Mapping[str, Any] | None]:
    """Each spoken turn's facts (None: not a spoken turn), or as read before."""
    return [
        read.facts
        if isinstance(read := slots[index], ReadMessage)
        else (_turn_facts(m) if _is_spoken_turn(m) else None)
        for index, m in enumerate(checked)
    ]


def _several_speakers(
    checked: list[Mapping[str, Any]], facts: list[Mapping[str, Any] | None], options: RenderOptions
) -> bool:
    """Whether user turns are labelled with their speaker: always, or when several users speak."""
    if options.speakers != "auto":
        return options.speakers == "always"
    speakers = {
        f["speaker"]
        for m, f in zip(checked, facts, strict=True)
        if f and m["role"] == "user" and f["speaker"]
    }
    return len(speakers) > 1


def _render_one(
    message: Mapping[str, Any],
    turn: Mapping[str, Any] | None,
    options: RenderOptions,
    several: bool,
    index: int,
) -> dict[str, Any] | None:
    """One message as the model gets it (None: an empty turn, dropped)."""
    if turn is not None:
        return _render_turn(message, turn, options, several)
    if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise InvalidField(f"{_where(index)} is a tool result without its tool_call_id")
    plain = _plain(message)
    if plain.get("tool_calls") and isinstance(plain.get("content"), str) and not plain["content"].strip():
        plain["content"] = None  # no text beside the calls, however it was stored
    return plain
