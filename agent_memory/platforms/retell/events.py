"""A Retell call event as the transcript memory stores: read once, by the webhook and by reprocess."""

from __future__ import annotations

from typing import Final

from agent_memory.core.clock import possible_ms
from agent_memory.platforms.calls import CallIdentity, CallTranscript, call_identity
from agent_memory.platforms.retell.payloads import (
    TRANSCRIPT_EVENTS,
    RetellCall,
    call_messages,
    caller_number,
    explicit_ids,
    read_envelope,
)
from agent_memory.settings import Settings

PLATFORM: Final = "retell"
# Where a Retell call takes explicit ids, named (`<this>.user_id`) when a call is unidentified;
# retell_llm_dynamic_variables is read too.
IDS_FIELD: Final = "call.metadata"


def call_identity_of(settings: Settings, call: RetellCall) -> CallIdentity:
    """Whose call it is (docs/identity.md): explicit ids, else the other party's number."""
    user, character = explicit_ids(call, settings.label_user_key, settings.label_character_key)
    return call_identity(
        settings, user_id=user, character_id=character, phone=caller_number(call), agent_id=call.agent_id
    )


def call_transcript(settings: Settings, event: str, call: RetellCall) -> CallTranscript:
    """The transcript a call_ended or call_analyzed carries, under the call's session."""
    messages, skipped = call_messages(call)
    return CallTranscript(
        platform=PLATFORM,
        call_id=call.call_id,
        event=event,
        identity=call_identity_of(settings, call),
        messages=messages,
        start_ms=possible_ms(call.start_timestamp),
        stop_ms=possible_ms(call.end_timestamp),
        ids_field=IDS_FIELD,
        skipped=skipped,
    )


def recorded_transcript(body: str, settings: Settings) -> CallTranscript | None:
    """A recorded Retell webhook (its raw body) read again as the transcript it carries; None for
    one that carries none. Registered in platforms/recorded.py for `agent-memory reprocess`."""
    envelope = read_envelope(body.encode("utf-8", "surrogatepass"))
    if envelope.call is None or envelope.event not in TRANSCRIPT_EVENTS:
        return None
    return call_transcript(settings, envelope.event, envelope.call)
