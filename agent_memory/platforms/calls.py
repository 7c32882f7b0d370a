"""What every phone and web-call platform does with a call, written once.

A platform folder (`platforms/<name>/`) reads its own payloads and calls these: the session a
call is kept under, whose call it is (docs/identity.md), storing its transcript through the
same merge as every other source, and the memory a call starts with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agent_memory.core.events import IncomingMessage, LabelsSource, Outcome, RawEvent, SessionEvent
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings

# Digits of an E.164 number: a country code and at most 15 digits in all (ITU-T E.164).
E164 = re.compile(r"\+[1-9]\d{6,14}")
# What people and platforms put between the digits of a number.
NUMBER_PUNCTUATION = re.compile(r"[\s().\-]")
# Between the texts of the system messages when a platform takes memory as one text.
JOIN = "\n\n"

IdentityVia = Literal["ids", "phone", "none"]


def session_key(platform: str, call_id: str) -> str:
    """The session a platform's call is kept under: `<platform>:<call id>`.

    Prefixed so that no platform's ids meet another's, Agora's agent ids or the generic API's
    session ids; every route of the platform (its webhook, per-turn endpoint, call-start
    answer) uses it, so what each of them records merges into one session.
    """
    return f"{platform}:{call_id}"


def e164(number: str | None) -> str | None:
    """`number` as E.164 (`+15551234567`), or None when it is not one (a SIP URI, a short code)."""
    if not number:
        return None
    compact = NUMBER_PUNCTUATION.sub("", number.strip())
    if compact.startswith("00"):
        compact = "+" + compact[2:]
    return compact if E164.fullmatch(compact) else None


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Whose call this is, and what said so (`none`: nobody; the call is unidentified)."""

    user_id: str | None
    character_id: str
    via: IdentityVia

    @property
    def known(self) -> bool:
        return self.user_id is not None


def call_identity(
    settings: Settings,
    *,
    user_id: str | None = None,
    character_id: str | None = None,
    phone: str | None = None,
    agent_id: str | None = None,
) -> CallIdentity:
    """The rules of docs/identity.md: explicit ids win; else, when AGENT_MEMORY_PHONE_IDENTITY is
    on, the caller's number as `tel:<E.164>` (`phone` is the caller's, or the callee's on an
    outbound call: the platform knows which); the character is the explicit one, else the
    platform's agent id, else the default character."""
    character = _text(character_id) or _text(agent_id) or settings.default_character
    user = _text(user_id)
    if user:
        return CallIdentity(user, character, "ids")
    number = e164(phone) if settings.phone_identity else None
    if number:
        return CallIdentity(f"tel:{number}", character, "phone")
    return CallIdentity(None, character, "none")


def _text(value: object) -> str | None:
    """A non-empty id as text (platforms send numbers for some ids), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | str):
        text = str(value).strip()
        return text or None
    return None


def labels_source(identity: CallIdentity) -> LabelsSource:
    """What the identity's labels record as their session's identity source."""
    return "phone" if identity.via == "phone" else "labels"


def identity_labels(settings: Settings, identity: CallIdentity) -> dict[str, str]:
    """The identity as the labels ingest reads (AGENT_MEMORY_LABEL_USER / _CHARACTER keys);
    none for an unidentified call, which ingest then keeps under `agent:<session>` and warns."""
    if identity.user_id is None:
        return {}
    return {settings.label_user_key: identity.user_id, settings.label_character_key: identity.character_id}


@dataclass(frozen=True, slots=True)
class CallTranscript:
    """A call's transcript as a platform reported it, read from its payload."""

    platform: str
    call_id: str
    # The platform's name of the event that carried it (e.g. `end-of-call-report`).
    event: str
    identity: CallIdentity
    messages: Sequence[IncomingMessage]
    start_ms: int | None = None
    stop_ms: int | None = None
    # Where the platform takes explicit ids, named in the warning about an unidentified call.
    ids_field: str | None = None
    # The parts of the payload that could not be read, one note each.
    skipped: Sequence[str] = ()


def recorded_event(
    settings: Settings, transcript: CallTranscript, *, body: str, received_ms: int
) -> tuple[RawEvent, SessionEvent]:
    """The raw payload as the inbox records it (under `<platform>:<call id>:<event>`) and the
    transcript as the session event ingest applies; `agent-memory reprocess` rebuilds both."""
    key = session_key(transcript.platform, transcript.call_id)
    labels = identity_labels(settings, transcript.identity)
    raw = RawEvent(
        event_id=f"{key}:{transcript.event}",
        event_type=0,
        body=body,
        received_ms=received_ms,
        notify_ms=transcript.stop_ms,
        agent_id=key,
        labels=labels,
    )
    event = SessionEvent(
        kind="history",
        agent_id=key,
        name=transcript.platform,
        start_ms=transcript.start_ms,
        stop_ms=transcript.stop_ms,
        labels=labels,
        labels_source=labels_source(transcript.identity),
        messages=transcript.messages,
        labels_field=transcript.ids_field,
        skipped=transcript.skipped,
    )
    return raw, event


async def store_transcript(
    memory: Memory, settings: Settings, transcript: CallTranscript, *, body: str, received_ms: int
) -> Outcome:
    """Record the raw payload and merge its transcript into the call's session, in one
    transaction. A redelivery (the same event of the same call) is a duplicate; the call's turns
    recorded live by its per-turn endpoint and those of another event merge, nothing doubled."""
    raw, event = recorded_event(settings, transcript, body=body, received_ms=received_ms)
    return await memory.accept_event(raw, event)


async def start_memory(memory: Memory, identity: CallIdentity, *, max_tokens: int | None = None) -> str:
    """The memory a call starts with, as one text (what platforms put in a prompt variable);
    empty for an unidentified call. Warms the pair's recall index for the turns to come."""
    if identity.user_id is None:
        return ""
    memory.reading.warm(identity.user_id, identity.character_id)
    context = await memory.reading.system_messages(
        identity.user_id, identity.character_id, max_tokens=max_tokens
    )
    return JOIN.join(str(message.get("content", "")) for message in context.system_messages)
