"""A recorded raw event read again (`agent-memory reprocess`), by the platform that sent it."""

from __future__ import annotations

from collections.abc import Callable

from agent_memory.core.domain import InboxEntry
from agent_memory.core.events import Outcome, RawEvent, SessionEvent
from agent_memory.errors import InvalidJSON
from agent_memory.platforms.agora.events import parse_callback
from agent_memory.platforms.calls import CallTranscript, recorded_event
from agent_memory.platforms.elevenlabs.transcripts import recorded_transcript as elevenlabs_transcript
from agent_memory.platforms.retell.events import recorded_transcript as retell_transcript
from agent_memory.platforms.vapi.events import recorded_transcript as vapi_transcript
from agent_memory.settings import Settings

# A platform's reading of one of its payloads as recorded: the transcript it carries, None when
# it carries none; BadRequest when it cannot be read.
TranscriptReader = Callable[[str, Settings], CallTranscript | None]
# By the prefix of the event ids the platform records under (`platforms/calls.session_key`);
# an id with no registered prefix is Agora's noticeId.
READERS: dict[str, TranscriptReader] = {
    "elevenlabs": elevenlabs_transcript,
    "retell": retell_transcript,
    "vapi": vapi_transcript,
}


def reread(entry: InboxEntry, settings: Settings) -> tuple[RawEvent, SessionEvent | Outcome]:
    """The recorded event as its inbox record and what it means, as when it arrived; BadRequest
    (InvalidJSON for Agora's) when this version still cannot read it."""
    platform, _, _ = entry.event_id.partition(":")
    reader = READERS.get(platform)
    if reader is None:
        return parse_callback(entry.body, entry.received_ms, follow=settings.agora_configured)
    transcript = reader(entry.body, settings)
    if transcript is None:
        raise InvalidJSON(f"the recorded {platform} event carries no transcript")
    return recorded_event(settings, transcript, body=entry.body, received_ms=entry.received_ms)
