"""ElevenLabs' payloads as it publishes them: lenient on fields it adds, strict on the few read.

Sources (fixtures/elevenlabs/SOURCES.md): the post-call webhooks page, the Conversation API
model (a transcription webhook's `data` is that model), the SDKs' transcript models, and the
Twilio personalization page (the conversation-initiation webhook).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

# Ids are strings; a number is taken as its digits (calls.call_identity reads both).
Id = StrictStr | StrictInt
# No call lasts a week: a transcript time beyond it is no time in the call.
MAX_CALL_SECS = 7 * 24 * 3600
# The one event type this service takes memory from; the others are acknowledged.
TRANSCRIPTION = "post_call_transcription"
AUDIO = "post_call_audio"
INITIATION_FAILURE = "call_initiation_failure"
KNOWN_TYPES = (TRANSCRIPTION, AUDIO, INITIATION_FAILURE)


class Published(BaseModel):
    """A published shape: fields ElevenLabs adds later are kept, never refused."""

    model_config = ConfigDict(extra="allow")


class Envelope(Published):
    """Every post-call webhook: `{"type", "event_timestamp", "data"}`."""

    type: StrictStr = Field(min_length=1, max_length=200)
    event_timestamp: float | None = None
    data: dict[str, Any] | None = None


class MultivoicePart(Published):
    text: StrictStr | None = None


class MultivoiceMessage(Published):
    """A multi-voice agent's message, in parts (the Conversation API model)."""

    parts: list[MultivoicePart] = []


class TranscriptItem(Published):
    """One entry of `data.transcript` (SDK `ConversationHistoryTranscriptCommonModel`)."""

    role: Literal["user", "agent"]
    # Null on an entry that only carries tool traffic.
    message: StrictStr | None = None
    multivoice_message: MultivoiceMessage | None = None
    time_in_call_secs: float | None = Field(None, ge=0, le=MAX_CALL_SECS)
    tool_calls: list[dict[str, Any]] | None = None
    tool_results: list[dict[str, Any]] | None = None
    interrupted: bool | None = None
    original_message: StrictStr | None = None

    @property
    def text(self) -> str:
        """What was said: `message`, else the parts of a multi-voice message."""
        if self.message is not None:
            return self.message
        if self.multivoice_message is not None:
            return " ".join(part.text for part in self.multivoice_message.parts if part.text)
        return ""


class PhoneCall(Published):
    """`metadata.phone_call` (twilio, sip_trunking, exotel): `external_number` is the other party."""

    direction: StrictStr | None = None
    external_number: StrictStr | None = None
    agent_number: StrictStr | None = None


class Metadata(Published):
    start_time_unix_secs: float | None = None
    call_duration_secs: float | None = Field(None, ge=0, le=MAX_CALL_SECS)
    phone_call: PhoneCall | None = None
    # The post-call page's own examples read the user here.
    user_id: Id | None = None


class ClientData(Published):
    """`conversation_initiation_client_data`: what the call was started with."""

    dynamic_variables: dict[str, Any] | None = None
    user_id: Id | None = None


class Conversation(Published):
    """A transcription webhook's `data` (the Conversation API's model)."""

    conversation_id: StrictStr = Field(min_length=1, max_length=200)
    agent_id: Id | None = None
    user_id: Id | None = None
    # Items are read one by one (payloads.TranscriptItem), so one bad item costs only itself.
    transcript: list[Any] | None = None
    metadata: Metadata | None = None
    conversation_initiation_client_data: ClientData | None = None


class InitiationRequest(Published):
    """What the conversation-initiation webhook is sent (Twilio personalization page)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "caller_id": "+11111111111",
                    "agent_id": "xyz",
                    "called_number": "+441111111111",
                    "call_sid": "CA8367245817625617832576245724",
                }
            ]
        },
    )

    caller_id: StrictStr | None = None
    agent_id: Id | None = None
    called_number: StrictStr | None = None
    # Twilio's call SID; Amazon Connect sends `call_id` (its contact id) instead.
    call_sid: StrictStr | None = None
    call_id: StrictStr | None = None
