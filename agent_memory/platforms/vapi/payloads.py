"""Pydantic models of what Vapi posts to a server URL (Vapi's wire format).

Only `platforms/vapi` reads these; `events.py` maps them to `platforms.calls` and `core.events`.
The shapes are Vapi's published ones (docs.vapi.ai, VapiAI/docs, VapiAI/server-sdk-python:
`ServerMessage*`, `Call`, `Artifact`, `UserMessage`, `BotMessage`, `ToolCallMessage`,
`ToolCallResultMessage`; fixtures/vapi/SOURCES.md). They are permissive: every field Vapi may
leave out is optional, fields not listed are kept, ids sent as numbers are read as text, and a
transcript item is validated on its own (events.py), so that one odd item costs only itself.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


def _to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


def _object_or_none(value: Any) -> Any:
    # Variables and metadata are the sender's own objects: anything else in their place is no
    # ids at all, not a reason to refuse the whole message.
    return value if isinstance(value, dict) else None


LooseStr = Annotated[str | None, BeforeValidator(_to_str)]
LooseObject = Annotated[dict[str, Any] | None, BeforeValidator(_object_or_none)]

# The call types whose customer is a telephone party (Vapi's CallType); a web call's customer,
# when it has one, is whatever the web client said.
PHONE_CALLS = ("inboundPhoneCall", "outboundPhoneCall")
# The server messages this service acts on; Vapi sends many more (transcript, speech-update,
# conversation-update, tool-calls…), which are acknowledged and not used.
ASSISTANT_REQUEST = "assistant-request"
END_OF_CALL_REPORT = "end-of-call-report"
STATUS_UPDATE = "status-update"
USED_TYPES = (ASSISTANT_REQUEST, END_OF_CALL_REPORT, STATUS_UPDATE)


class Loose(BaseModel):
    """A Vapi object: the fields we read, the rest kept as sent."""

    model_config = ConfigDict(extra="allow")


class Customer(Loose):
    """`call.customer` (Vapi's CreateCustomerDto): the other party of a phone call."""

    number: LooseStr = None


class AssistantOverrides(Loose):
    """`call.assistantOverrides`: where a call's template variables are set."""

    variableValues: LooseObject = None
    # Vapi's AssistantOverrides also carries the assistant's `metadata`.
    metadata: LooseObject = None


class Call(Loose):
    """Vapi's Call object, as far as memory reads it."""

    id: LooseStr = None
    # inboundPhoneCall, outboundPhoneCall, webCall (and whatever Vapi adds).
    type: LooseStr = None
    customer: Customer | None = None
    metadata: LooseObject = None
    assistantOverrides: AssistantOverrides | None = None
    assistantId: LooseStr = None
    # ISO 8601 date-times.
    startedAt: Any = None
    endedAt: Any = None


class Artifact(Loose):
    """`message.artifact` of an end-of-call-report: the call's messages and its transcript text."""

    # Read item by item (TranscriptItem): kept as sent here.
    messages: Any = None
    transcript: Any = None


class TranscriptItem(Loose):
    """One item of `artifact.messages`: user, bot (or assistant), system, tool_calls, tool_call_result.

    `time` is epoch milliseconds and `secondsFromStart` seconds into the call (the SDK's
    UserMessage, BotMessage…); tool calls carry `toolCalls`, results `toolCallId`, `name`, `result`.
    """

    role: str
    message: Any = None
    time: Any = None
    secondsFromStart: Any = None
    toolCalls: Any = None
    toolCallId: LooseStr = None
    name: LooseStr = None
    result: Any = None


class ServerMessage(Loose):
    """The `message` of every request Vapi sends to a server URL."""

    type: str
    call: Call | None = None
    # Top-level copies Vapi sends beside the call (the assistant-request sample has the
    # customer only here).
    customer: Customer | None = None
    # Epoch ms in the assistant-request sample and the newer SDKs; ISO 8601 in older ones.
    timestamp: Any = None
    artifact: Artifact | None = None
    # Before `artifact` (Vapi's earlier docs) the report carried these at the top level.
    messages: Any = None
    transcript: Any = None
    # status-update: scheduled, queued, ringing, in-progress, forwarding, ended.
    status: LooseStr = None
    endedReason: LooseStr = None
    startedAt: Any = None
    endedAt: Any = None


class Envelope(Loose):
    """A request body: `{"message": {"type": …, …}}`."""

    message: ServerMessage
