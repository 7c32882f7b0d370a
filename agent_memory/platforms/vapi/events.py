"""Vapi's server messages read into what every call platform shares: the only reader of its payloads.

A request body is validated (`read_message`), its call's identity found (`identity_of`: explicit
ids in `call.metadata` or `call.assistantOverrides.variableValues`, else the customer's number),
and an end-of-call-report's transcript read (`transcript_of`): `artifact.messages` item by item
(user, bot or assistant; tool calls and results as their own kinds; the system prompt left out),
else the transcript text (`AI: …` / `User: …` lines). Pure and free of the database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from agent_memory.core.clock import as_number, possible_ms, to_ms
from agent_memory.core.events import TOOL_CALL, TOOL_RESULT, IncomingMessage, RawEvent, SessionEvent
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import InvalidField, InvalidJSON
from agent_memory.platforms.calls import (
    CallIdentity,
    CallTranscript,
    call_identity,
    identity_labels,
    labels_source,
    recorded_event,
    session_key,
)
from agent_memory.platforms.vapi.payloads import (
    END_OF_CALL_REPORT,
    PHONE_CALLS,
    STATUS_UPDATE,
    Call,
    Customer,
    Envelope,
    ServerMessage,
    TranscriptItem,
)
from agent_memory.settings import Settings

ModelT = TypeVar("ModelT", Call, Customer)

PLATFORM = "vapi"
# Where a Vapi call takes explicit ids (ingest appends the key: `call.metadata.user_id`), named
# in the warning about an unidentified call; assistantOverrides.variableValues works too.
IDS_FIELD = "call.metadata"
USER_ROLES = ("user",)
ASSISTANT_ROLES = ("bot", "assistant")
# The assistant's prompt, as Vapi lists it first: never said, and it holds the call-start memory.
SKIPPED_ROLES = ("system",)
TOOL_CALL_ROLES = ("tool_calls",)
TOOL_RESULT_ROLES = ("tool_call_result", "tool")
# Fields of a transcript item read into columns; the rest is kept as sent, but for `metadata`
# (the transcriber's word-level confidences: the words again, several times their size).
READ_FIELDS = {"role", "message", "time", "toolCalls", "toolCallId", "name", "result", "metadata"}
# The messages kept in the inbox and applied to the call's session.
RECORDED_TYPES = (END_OF_CALL_REPORT, STATUS_UPDATE)
# The statuses of a status-update that change the call's session: it started, it ended.
OPENED, ENDED = "in-progress", "ended"
# `AI: …` and `User: …`: the lines of Vapi's transcript text.
SPEAKER = re.compile(r"^\s*(AI|Assistant|Bot|User)\s*:\s?(.*)$", re.IGNORECASE)


def read_message(body: bytes) -> tuple[ServerMessage, str]:
    """The server message of a request body and the body as text, or a 4xx saying what is wrong."""
    data = read_json(body)  # the raw bytes were valid UTF-8 if this returns
    if not isinstance(data, dict):
        raise InvalidJSON('the body must be a JSON object: {"message": {"type": …, …}}')
    if "message" not in data and isinstance(data.get("type"), str):
        # The message alone, as some of Vapi's pages and relays show it: read as if wrapped.
        data = {"message": data}
    try:
        envelope = Envelope.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(part) for part in err["loc"]) or "body" for err in exc.errors())
        raise InvalidField(
            f'not a Vapi server message ({{"message": {{"type": "<type>", "call": {{…}}, …}}}}): missing or '
            f"invalid {fields}"
        ) from None
    return envelope.message, body.decode("utf-8")


def call_id_of(message: ServerMessage) -> str | None:
    """`message.call.id`, the call's id everywhere (its session key)."""
    call = message.call
    return call.id.strip() or None if call is not None and call.id is not None else None


def required_call_id(message: ServerMessage) -> str:
    """The call's id, or a 422 naming the field: without it nothing can be kept under the call."""
    call_id = call_id_of(message)
    if call_id is None:
        raise InvalidField(
            f"message.call.id is missing: every {message.type} message names the call it is about"
        )
    return call_id


def identity_of(settings: Settings, message: ServerMessage) -> CallIdentity:
    """Whose call a server message is about (docs/identity.md): `call_identity_of` its call,
    with the message's own `customer` where the call carries none."""
    return call_identity_of(settings, message.call, message.customer)


def identity_from(settings: Settings, call: Any, customer: Any = None) -> CallIdentity:
    """The identity of a call given as JSON (`call` and `customer` objects as Vapi sends them,
    e.g. in a custom-LLM request); what is not an object of Vapi's shape names no one."""
    return call_identity_of(settings, _model(Call, call), _model(Customer, customer))


def call_identity_of(settings: Settings, call: Call | None, customer: Customer | None = None) -> CallIdentity:
    """Explicit ids, else the customer's number (docs/identity.md).

    The ids are looked up under AGENT_MEMORY_LABEL_USER / _CHARACTER (`user_id`, `character_id`)
    in `call.metadata`, then `call.assistantOverrides.variableValues`, then
    `call.assistantOverrides.metadata`. The customer (`call.customer`, else the message's) is the
    caller of an inbound call and the callee of an outbound one: either way the person the
    assistant talks to. A web call's customer number is not used. The character is never the
    assistant: Vapi names none at call start (an assistant-request comes before one is chosen),
    so the end of the call keeps the default character too, and its memory is found again.
    """
    ids: dict[str, Any] = {}
    if call is not None:
        overrides = call.assistantOverrides
        if overrides is not None:
            ids.update(overrides.metadata or {})
            ids.update(overrides.variableValues or {})
        ids.update(call.metadata or {})
    phone = None
    if call is None or call.type is None or call.type in PHONE_CALLS:
        party = (call.customer if call is not None else None) or customer
        phone = party.number if party is not None else None
    return call_identity(
        settings,
        user_id=ids.get(settings.label_user_key),
        character_id=ids.get(settings.label_character_key),
        phone=phone,
    )


def recorded_transcript(body: str, settings: Settings) -> CallTranscript | None:
    """A recorded Vapi message's transcript again, for `agent-memory reprocess`
    (platforms/recorded.py): an end-of-call-report's, None for a status-update (nothing of it
    can be set aside to apply again)."""
    message, _text = read_message(body.encode("utf-8"))
    return transcript_of(settings, message) if message.type == END_OF_CALL_REPORT else None


def recorded_message(
    settings: Settings, message: ServerMessage, text: str, received_ms: int
) -> tuple[RawEvent, SessionEvent] | None:
    """The inbox record and session event of an end-of-call-report or a status-update (None when
    it says nothing to keep: a report without a transcript, a status other than in-progress or
    ended). Its inbox id is `vapi:<call id>:<type>` (`:<status>` for a status): a redelivery is
    a duplicate."""
    if message.type == END_OF_CALL_REPORT:
        transcript = transcript_of(settings, message)
        if transcript is None:
            return None
        return recorded_event(settings, transcript, body=text, received_ms=received_ms)
    if message.type != STATUS_UPDATE or message.status not in (OPENED, ENDED):
        return None
    key = session_key(PLATFORM, required_call_id(message))
    call = message.call
    identity = identity_of(settings, message)
    labels = identity_labels(settings, identity)
    event = SessionEvent(
        kind="joined" if message.status == OPENED else "left",
        agent_id=key,
        name=PLATFORM,
        start_ms=time_ms(call.startedAt) if call is not None else None,
        labels=labels,
        labels_source=labels_source(identity),
        labels_field=IDS_FIELD,
    )
    if message.status == ENDED:
        event.stop_ms = (time_ms(call.endedAt) if call is not None else None) or time_ms(message.timestamp)
        event.stop_status = message.status
        event.stop_reason = message.endedReason
    raw = RawEvent(
        event_id=f"{key}:{STATUS_UPDATE}:{message.status}",
        event_type=0,
        body=text,
        received_ms=received_ms,
        notify_ms=time_ms(message.timestamp),
        agent_id=key,
        labels=labels,
    )
    return raw, event


def transcript_of(settings: Settings, message: ServerMessage) -> CallTranscript | None:
    """An end-of-call-report's transcript, or None when it carries no transcript at all."""
    call_id = required_call_id(message)
    items: Any = None
    text: Any = None
    if message.artifact is not None:
        items, text = message.artifact.messages, message.artifact.transcript
    if items is None:
        items = message.messages
    if text is None:
        text = message.transcript
    messages, skipped = read_items(items)
    if not messages and not skipped:
        messages, skipped = read_text(text)
    if not messages and not skipped:
        return None
    call = message.call
    start_ms = time_ms(message.startedAt) or (time_ms(call.startedAt) if call is not None else None)
    stop_ms = time_ms(message.endedAt) or (time_ms(call.endedAt) if call is not None else None)
    return CallTranscript(
        platform=PLATFORM,
        call_id=call_id,
        event=END_OF_CALL_REPORT,
        identity=identity_of(settings, message),
        messages=messages,
        start_ms=start_ms,
        stop_ms=stop_ms or time_ms(message.timestamp),
        ids_field=IDS_FIELD,
        skipped=skipped,
    )


def read_items(items: Any) -> tuple[list[IncomingMessage], list[str]]:
    """`artifact.messages` as incoming messages, and a note for each item that could not be read."""
    if items is None:
        return [], []
    if not isinstance(items, list):
        return [], [
            f"artifact.messages is not a list (got {type(items).__name__}); the transcript text is not used"
        ]
    messages: list[IncomingMessage] = []
    skipped: list[str] = []
    for index, raw in enumerate(items):
        try:
            item = TranscriptItem.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "item"
            skipped.append(f"artifact.messages[{index}]: {where}: {error['msg']}")
            continue
        role = item.role.strip().lower()
        if role in SKIPPED_ROLES:
            continue
        message = incoming(item, role)
        if message is None:
            skipped.append(f"artifact.messages[{index}]: role {item.role[:40]!r} is not one Vapi documents")
            continue
        messages.append(message)
    return messages, skipped


def incoming(item: TranscriptItem, role: str) -> IncomingMessage | None:
    """One transcript item as an incoming message; None for a role Vapi does not document."""
    ts_ms, elapsed_ms = item_time(item)
    extra = {key: value for key, value in (item.model_extra or {}).items() if key not in READ_FIELDS}
    if item.secondsFromStart is not None:
        extra["secondsFromStart"] = item.secondsFromStart
    if role in USER_ROLES or role in ASSISTANT_ROLES:
        text, is_text = _text(item.message)
        return IncomingMessage(
            "user" if role in USER_ROLES else "assistant",
            text,
            ts_ms=ts_ms,
            elapsed_ms=elapsed_ms,
            content_is_text=is_text,
            raw_content=None if is_text else item.message,
            extra=extra or None,
        )
    if role in TOOL_CALL_ROLES:
        text, is_text = _text(item.message)
        return IncomingMessage(
            "assistant",
            text,
            kind=TOOL_CALL,
            ts_ms=ts_ms,
            elapsed_ms=elapsed_ms,
            tool={"tool_calls": item.toolCalls},
            content_is_text=is_text,
            raw_content=None if is_text else item.message,
            extra=extra or None,
        )
    if role in TOOL_RESULT_ROLES:
        # The SDK types `result` as text (JSON); some calls show an object: kept as sent.
        result = item.result if item.result is not None else item.message
        text, is_text = _text(result)
        tool = {
            key: value for key, value in (("tool_call_id", item.toolCallId), ("name", item.name)) if value
        }
        return IncomingMessage(
            "tool",
            text,
            kind=TOOL_RESULT,
            ts_ms=ts_ms,
            elapsed_ms=elapsed_ms,
            tool=tool,
            content_is_text=is_text,
            raw_content=None if is_text else result,
            extra=extra or None,
        )
    return None


def item_time(item: TranscriptItem) -> tuple[int | None, int | None]:
    """(epoch ms, ms since the call started) of an item: its `time` (epoch ms; seconds and
    microseconds are told apart by magnitude), else its `secondsFromStart` (seconds)."""
    ts_ms = to_ms(item.time)
    if ts_ms is not None:
        return ts_ms, None
    seconds = as_number(item.secondsFromStart)
    if seconds is None or seconds < 0 or seconds > 10**7:  # more than 115 days into a call: no time
        return None, None
    return None, round(seconds * 1000)


def read_text(text: Any) -> tuple[list[IncomingMessage], list[str]]:
    """The transcript text (`AI: …\\nUser: …`) as messages without times; a line without a
    speaker continues the one before it."""
    if text is None:
        return [], []
    if not isinstance(text, str):
        return [], [f"transcript is not text (got {type(text).__name__})"]
    messages: list[IncomingMessage] = []
    skipped: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        said = SPEAKER.match(line)
        if said is not None:
            role = "user" if said.group(1).lower() == "user" else "assistant"
            messages.append(IncomingMessage(role, said.group(2).strip()))
        elif line.strip() and messages:
            messages[-1].content = f"{messages[-1].content}\n{line.strip()}"
        elif line.strip():
            skipped.append(f"transcript line {number} names no speaker (AI: or User:)")
    return [message for message in messages if message.content], skipped


def time_ms(value: Any) -> int | None:
    """Epoch ms of a Vapi time: a number (s, ms or µs by magnitude) or an ISO 8601 text."""
    if isinstance(value, str) and not value.strip().lstrip("-").replace(".", "", 1).isdigit():
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return possible_ms(round(moment.timestamp() * 1000))
    return to_ms(value)


def _model(model: type[ModelT], value: Any) -> ModelT | None:
    """`value` read as `model`, or None when it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def _text(value: Any) -> tuple[str, bool]:
    """A message's text, and whether it was text (null and other JSON are kept as sent)."""
    if isinstance(value, str):
        return value, True
    return "", value is None
