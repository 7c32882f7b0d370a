"""A transcription webhook's conversation as the neutral call transcript, and whose call it is."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agent_memory.core.clock import to_ms
from agent_memory.core.events import TOOL_CALL, TOOL_RESULT, TURN, IncomingMessage
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import InvalidField
from agent_memory.platforms.calls import CallIdentity, CallTranscript, call_identity, e164
from agent_memory.platforms.elevenlabs.payloads import TRANSCRIPTION, Conversation, TranscriptItem
from agent_memory.settings import Settings

PLATFORM = "elevenlabs"
# Where an app names the user and character of a call (the warning about an unidentified call says so).
IDS_FIELD = "conversation_initiation_client_data.dynamic_variables (user_id, character_id)"
# ElevenLabs' roles as the ones every other source uses.
ROLES = {"user": "user", "agent": "assistant"}


def conversation_identity(settings: Settings, data: Conversation) -> CallIdentity:
    """docs/identity.md for a conversation: the app's ids, else the caller's number (when allowed)."""
    client = data.conversation_initiation_client_data
    variables = (client.dynamic_variables if client is not None else None) or {}
    phone = caller_number(data, variables)
    user = plain(variables.get("user_id"))
    number = e164(phone)
    if user is None:
        for candidate in (
            data.user_id,
            data.metadata.user_id if data.metadata is not None else None,
            client.user_id if client is not None else None,
        ):
            # A user id that is the caller's own number (ElevenLabs' user tracking may fill it so)
            # is the number, allowed or not by AGENT_MEMORY_PHONE_IDENTITY, never an explicit id.
            if candidate is not None and not (number is not None and e164(str(candidate)) == number):
                user = plain(candidate)
                break
    agent = data.agent_id if data.agent_id is not None else variables.get("system__agent_id")
    return call_identity(
        settings,
        user_id=plain(user),
        character_id=plain(variables.get("character_id")),
        phone=phone,
        agent_id=plain(agent),
    )


def plain(value: Any) -> str | None:
    """An id as text: a string, or a number's digits; None for anything else (an object, a list)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value)


def caller_number(data: Conversation, variables: dict[str, Any]) -> str | None:
    """The other party's number: `metadata.phone_call.external_number` (the caller inbound, the
    callee outbound), else the system variables (`system__called_number` on an outbound call)."""
    call = data.metadata.phone_call if data.metadata is not None else None
    if call is not None and call.external_number:
        return call.external_number
    outbound = call is not None and (call.direction or "").lower() == "outbound"
    number = variables.get("system__called_number" if outbound else "system__caller_id")
    return number if isinstance(number, str) else None


def conversation_transcript(settings: Settings, data: Conversation) -> CallTranscript:
    """The conversation's turns (and tool traffic, as its own kind), dated from the call's start."""
    metadata = data.metadata
    start_ms = to_ms(metadata.start_time_unix_secs) if metadata is not None else None
    stop_ms = None
    if start_ms is not None and metadata is not None and metadata.call_duration_secs is not None:
        stop_ms = start_ms + round(metadata.call_duration_secs * 1000)
    skipped: list[str] = []
    messages: list[IncomingMessage] = []
    for index, raw in enumerate(data.transcript or ()):
        try:
            item = TranscriptItem.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            skipped.append(f"transcript[{index}]{'.' + where if where else ''}: {error['msg']}")
            continue
        messages.extend(item_messages(item, start_ms))
    return CallTranscript(
        platform=PLATFORM,
        call_id=data.conversation_id,
        event=TRANSCRIPTION,
        identity=conversation_identity(settings, data),
        messages=messages,
        start_ms=start_ms,
        stop_ms=stop_ms,
        ids_field=IDS_FIELD,
        skipped=skipped,
    )


def item_messages(item: TranscriptItem, start_ms: int | None) -> list[IncomingMessage]:
    """One transcript entry: what was said, then each tool call, then each tool result."""
    ts_ms = elapsed_ms = None
    if item.time_in_call_secs is not None:
        offset = round(item.time_in_call_secs * 1000)
        if start_ms is not None:
            ts_ms = start_ms + offset
        else:
            elapsed_ms = offset  # placed from the session's start
    role = ROLES[item.role]
    found: list[IncomingMessage] = []
    text = item.text
    if text.strip():
        found.append(
            IncomingMessage(
                role=role,
                content=text,
                kind=TURN,
                ts_ms=ts_ms,
                elapsed_ms=elapsed_ms,
                interrupted=bool(item.interrupted),
                original=item.original_message,
            )
        )
    for call in item.tool_calls or ():
        # Kept whole, as sent: the tool's name, id and arguments (params_as_json).
        found.append(
            IncomingMessage(
                role="assistant",
                content="",
                kind=TOOL_CALL,
                ts_ms=ts_ms,
                elapsed_ms=elapsed_ms,
                tool={"tool_calls": [call]},
            )
        )
    for result in item.tool_results or ():
        value = result.get("result_value")
        # The result's text is the message's content; the rest of it is kept beside.
        tool: dict[str, Any] = {"tool_result": {k: v for k, v in result.items() if k != "result_value"}}
        if isinstance(result.get("request_id"), str):
            tool["tool_call_id"] = result["request_id"]
        if isinstance(result.get("tool_name"), str):
            tool["name"] = result["tool_name"]
        found.append(
            IncomingMessage(
                role="tool",
                content=value if isinstance(value, str) else "",
                kind=TOOL_RESULT,
                ts_ms=ts_ms,
                elapsed_ms=elapsed_ms,
                tool=tool,
            )
        )
    return found


def recorded_transcript(body: str, settings: Settings) -> CallTranscript | None:
    """A recorded post-call webhook (its raw body) read again as the transcript it carries; None
    for one that carries none. Registered in platforms/recorded.py for `agent-memory reprocess`."""
    envelope = read_json(body.encode("utf-8", "surrogatepass"))
    if not isinstance(envelope, dict) or envelope.get("type") != TRANSCRIPTION:
        return None
    return conversation_transcript(settings, read_conversation(envelope.get("data")))


def read_conversation(data: Any) -> Conversation:
    """A transcription's `data` as its conversation, or a 422 naming each place that is wrong."""
    if data is None:
        raise InvalidField("data: a post_call_transcription needs its conversation in `data`")
    try:
        return Conversation.model_validate(data)
    except ValidationError as exc:
        raise InvalidField(
            "; ".join(f"{'.'.join(['data', *map(str, err['loc'])])}: {err['msg']}" for err in exc.errors())
        ) from None
