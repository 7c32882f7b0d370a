"""Retell's webhook payloads, as Retell publishes them, and what memory reads of them.

Shapes from Retell's docs (docs.retellai.com features/webhook-overview, features/inbound-call-webhook,
api-references/get-call) and its Python SDK's call object (retell-python-sdk
`src/retell/types/phone_call_response.py`, `web_call_response.py`): every event is
`{"event": ..., "call": <the get-call object>}`, except the inbound-call webhook,
`{"event": "call_inbound", "call_inbound": {agent_id, from_number, to_number, ...}}`, which comes
before the call exists (no call id). Extra fields are kept and ignored; parts of a transcript that
cannot be read are set aside one by one, each with a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_memory.core.clock import as_number, possible_ms
from agent_memory.core.events import TOOL_CALL, TOOL_RESULT, IncomingMessage
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import InvalidField, InvalidJSON

# Events whose call object carries the whole transcript (call_ended: every field but
# call_analysis; call_analyzed: the same and call_analysis).
TRANSCRIPT_EVENTS: Final = ("call_ended", "call_analyzed")
INBOUND: Final = "call_inbound"
STARTED: Final = "call_started"
# Events Retell documents that memory has no use for: acknowledged. transcript_updated carries
# the transcript so far at each turn; the call's end carries it whole, so the partial ones (whose
# last utterance may still change) are not merged.
ACKNOWLEDGED: Final = (
    "transcript_updated",
    "transfer_started",
    "transfer_bridged",
    "transfer_cancelled",
    "transfer_ended",
    "chat_started",
    "chat_ended",
    "chat_analyzed",
    "chat_inbound",
)
KNOWN_EVENTS: Final = (*TRANSCRIPT_EVENTS, INBOUND, STARTED, *ACKNOWLEDGED)

# Retell's utterance roles, as memory's: the agent speaks as the assistant, and so does the
# person a call was transferred to (kept apart by `speaker`).
SPOKEN_ROLES: Final = {"user": "user", "agent": "assistant", "transfer_target": "assistant"}
# Items of transcript_with_tool_calls that are not conversation: keys pressed, a conversation
# flow's node changes, texts received while the agent spoke ("not part of the spoken conversation").
NOT_CONVERSATION: Final = frozenset({"dtmf", "node_transition", "sms"})
# The text transcript's speaker prefixes (`Agent: hi how are you doing?\nUser: ...`).
TEXT_ROLES: Final = {"agent": "assistant", "user": "user"}


class Lenient(BaseModel):
    """A published shape: its fields read, any other kept and ignored."""

    model_config = ConfigDict(extra="allow")


class RetellCall(Lenient):
    """The call object of an event (get-call's answer): what memory reads of it."""

    call_id: str = Field(min_length=1)
    agent_id: str | None = None
    call_type: str | None = None
    # inbound / outbound for a phone call; none for a web call.
    direction: str | None = None
    from_number: str | None = None
    to_number: str | None = None
    # "An arbitrary object"; ids are read from it when it is one.
    metadata: Any = None
    retell_llm_dynamic_variables: Any = None
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    transcript: str | None = None
    transcript_object: list[Any] | None = None
    transcript_with_tool_calls: list[Any] | None = None


class CallInbound(Lenient):
    """The inbound-call webhook's `call_inbound`: the number called, the caller, the agent if set."""

    agent_id: str | None = None
    from_number: str | None = None
    to_number: str | None = None


class Envelope(Lenient):
    """Every Retell webhook: its event, and the call (or the inbound call) it is about."""

    event: str = Field(min_length=1)
    call: RetellCall | None = None
    call_inbound: CallInbound | None = None


def read_envelope(body: bytes) -> Envelope:
    """The webhook's envelope; a 4xx naming what to fix when it is not one Retell sends."""
    data = read_json(body)
    if not isinstance(data, dict):
        raise InvalidJSON(f"the body must be a JSON object (got {type(data).__name__})")
    if _holds_nul(data):
        raise InvalidField("NUL characters (U+0000) are not accepted in a webhook body")
    event = data.get("event")
    if not isinstance(event, str) or not event.strip():
        raise InvalidField('event is missing: Retell sends {"event": "call_ended", "call": {...}}')
    if event in TRANSCRIPT_EVENTS or event == STARTED:
        call = data.get("call")
        if call is None and isinstance(data.get("data"), dict):
            # Retell's docs put the call object under `call`; its custom-LLM demo servers
            # (RetellAI/retell-custom-llm-python-demo) read it under `data`: both are read.
            call = data["data"]
        if not isinstance(call, dict):
            raise InvalidField(f'{event}: "call" must be the call object (with call_id)')
        read = {"event": event, "call": call}
    elif event == INBOUND:
        if not isinstance(data.get(INBOUND), dict):
            raise InvalidField('call_inbound: "call_inbound" must be an object (from_number, to_number)')
        read = {"event": event, INBOUND: data[INBOUND]}
    else:
        read = {"event": event}  # acknowledged whatever else it holds: only its name is read
    try:
        return Envelope.model_validate(read)
    except ValidationError as exc:
        raise InvalidField(f"{event}: {_problem(exc)}") from None


def _problem(exc: ValidationError) -> str:
    """The first thing wrong, named by its path in the payload."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    if where == "call.call_id" and error["type"] == "missing":
        return "call.call_id is missing: every call event names its call"
    return f"{where}: {error['msg']}" if where else error["msg"]


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def explicit_ids(call: RetellCall, user_key: str, character_key: str) -> tuple[Any, Any]:
    """The user and character ids the app set on the call: `metadata` first, then the dynamic variables."""
    user = character = None
    for source in (call.metadata, call.retell_llm_dynamic_variables):
        if isinstance(source, Mapping):
            user = user if _given(user) else source.get(user_key)
            character = character if _given(character) else source.get(character_key)
    return user, character


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def caller_number(call: RetellCall) -> str | None:
    """The other party's number: the caller's on an inbound call, the callee's on an outbound one.

    None when the call says no direction (a web call, or an old call object): guessing would file
    an outbound call under the agent's own number, every callee's memory together.
    """
    if call.direction == "inbound":
        return call.from_number
    if call.direction == "outbound":
        return call.to_number
    return None


def call_messages(call: RetellCall) -> tuple[list[IncomingMessage], list[str]]:
    """The call's transcript as messages, and a note for each part that could not be read.

    `transcript_with_tool_calls` when it holds items (tool calls kept as their own kind), else
    `transcript_object`: utterances dated by their first word (seconds from the call's start).
    The text `transcript` gives the turns neither lists: all of them when there is no list, else
    those after the listed ones when the list is where the text begins (Retell's own get-call
    example lists one utterance of seven); a text that says otherwise is not used.
    """
    skipped: list[str] = []
    field, items = "transcript_with_tool_calls", call.transcript_with_tool_calls
    if not items:
        field, items = "transcript_object", call.transcript_object
    messages: list[IncomingMessage] = []
    for index, item in enumerate(items or ()):
        message = _item_message(item, call.start_timestamp, f"call.{field}[{index}]", skipped)
        if message is not None:
            messages.append(message)
    spoken = [(m.role, m.content.strip()) for m in messages if m.kind == "turn"]
    lines = text_turns(call.transcript)
    if len(lines) > len(spoken) and [(m.role, m.content.strip()) for m in lines[: len(spoken)]] == spoken:
        messages.extend(lines[len(spoken) :])
    return messages, skipped


def _item_message(item: Any, start_ms: int | None, where: str, skipped: list[str]) -> IncomingMessage | None:
    """One utterance or tool item as a message; None (with a note if it is unreadable) otherwise."""
    if not isinstance(item, dict):
        skipped.append(f"{where}: not an object (got {type(item).__name__})")
        return None
    role = item.get("role")
    if role in NOT_CONVERSATION:
        return None
    if role in SPOKEN_ROLES:
        content = item.get("content")
        if not isinstance(content, str):
            skipped.append(f"{where}: content is not text (got {type(content).__name__})")
            return None
        if not content.strip():
            return None
        return _dated(
            IncomingMessage(
                role=SPOKEN_ROLES[role],
                content=content,
                speaker="transfer_target" if role == "transfer_target" else None,
            ),
            start_ms,
            _first_word_s(item.get("words")),
        )
    if role == "tool_call_invocation":
        name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("tool_call_id")
        if not isinstance(name, str) or not name:
            skipped.append(f"{where}: a tool call without a name")
            return None
        function = {"name": name, "arguments": arguments if isinstance(arguments, str) else "{}"}
        call = {"id": call_id, "type": "function", "function": function}
        return _dated(
            IncomingMessage(role="assistant", content="", kind=TOOL_CALL, tool={"tool_calls": [call]}),
            start_ms,
            as_number(item.get("time_sec")),
        )
    if role == "tool_call_result":
        content, call_id = item.get("content"), item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            skipped.append(f"{where}: a tool result without its tool_call_id")
            return None
        extra = {"successful": item["successful"]} if isinstance(item.get("successful"), bool) else None
        return _dated(
            IncomingMessage(
                role="tool",
                content=content if isinstance(content, str) else "",
                kind=TOOL_RESULT,
                tool={"tool_call_id": call_id},
                extra=extra,
            ),
            start_ms,
            as_number(item.get("time_sec")),
        )
    skipped.append(f"{where}: role {role!r} is neither an utterance nor a tool call")
    return None


def _first_word_s(words: Any) -> float | int | None:
    """When an utterance began: its first word's start (seconds from the call's start)."""
    for word in words if isinstance(words, list) else ():
        if isinstance(word, dict):
            start = as_number(word.get("start"))
            if start is not None:
                return start
    return None


def _dated(message: IncomingMessage, start_ms: int | None, offset_s: float | int | None) -> IncomingMessage:
    """`message` dated `offset_s` after the call's start (ms since it began when the start is unknown)."""
    if offset_s is None or offset_s < 0 or offset_s > 10**9:
        return message
    offset_ms = round(offset_s * 1000)
    if start_ms is not None and possible_ms(start_ms + offset_ms) is not None:
        message.ts_ms = start_ms + offset_ms
    else:
        message.elapsed_ms = offset_ms
    return message


def text_turns(transcript: str | None) -> list[IncomingMessage]:
    """The turns of a text transcript (`Agent: ...` / `User: ...` lines; other lines continue the turn)."""
    turns: list[IncomingMessage] = []
    for line in (transcript or "").splitlines():
        speaker, colon, said = line.partition(":")
        role = TEXT_ROLES.get(speaker.strip().lower()) if colon else None
        if role is not None:
            turns.append(IncomingMessage(role=role, content=said.strip()))
        elif turns and line.strip():
            turns[-1].content = f"{turns[-1].content}\n{line.strip()}"
    return [turn for turn in turns if turn.content]
