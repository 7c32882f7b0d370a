"""Platform-neutral events: what a voice platform tells memory, and what became of it.

A platform (`platforms/<name>/`) maps its own payloads to these types once, from models it
has already validated; `memory/ingest` applies them. They are built per callback (dozens of
messages each, on the hot path), so they are plain slotted dataclasses, not validated again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

# What a transcript item is: a spoken (or typed) turn, or tool traffic of the agent's LLM.
MessageKind = Literal["turn", "tool_call", "tool_result"]
TURN: Final = "turn"
# The source of a reply as this service relayed it from the upstream model (custom LLM): kept
# until the platform's own copy, which says what the user heard, replaces it.
RELAYED: Final = "relayed"
TOOL_CALL: Final = "tool_call"
TOOL_RESULT: Final = "tool_result"

# joined: the run started; left: it ended; history: its whole transcript after it ended;
# token_expiring: the run's media credentials run out soon; errors, metrics, turns_finished:
# what the run's modules reported.
EventKind = Literal["joined", "left", "history", "token_expiring", "errors", "metrics", "turns_finished"]

# done; partial (some parts set aside); duplicate (already recorded); ignored (kept, not
# used); test (a console test); failed (kept raw, nothing applied).
OutcomeStatus = Literal["done", "partial", "duplicate", "ignored", "test", "failed"]

# Who said a session belongs to its user, weakest first (see memory/ingest).
IdentitySource = Literal["channel", "rtc", "channel_binding", "binding", "phone", "labels"]
# What a session's labels came from: the ids its platform was given, or the caller's number.
LabelsSource = Literal["phone", "labels"]
# Identities that are only a guess (no label or binding named the user): `rtc:<uid>`, `channel:<name>`.
FALLBACK_SOURCES: tuple[IdentitySource, ...] = ("rtc", "channel")

# One per-turn measurement: (turn_id, metric, value in ms, when the turn happened if known).
MetricRow = tuple[int, str, float, int | None]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def storable(value: int | None) -> int | None:
    """`value` if a 64-bit integer column can hold it, else None."""
    return value if value is None or INT64_MIN <= value <= INT64_MAX else None


@dataclass(slots=True)
class IncomingMessage:
    """One transcript item as a platform sent it, before it is placed and stored."""

    role: str
    # The text said or typed; for a tool call or result, its text if it had any.
    content: str
    kind: MessageKind = TURN
    turn_id: int | None = None
    ts_ms: int | None = None
    # Milliseconds since the run started, when that is the only time the item carries.
    elapsed_ms: int | None = None
    source: str | None = None
    speaker: str | None = None
    interrupted: bool = False
    interrupt_ms: int | None = None
    # What an interrupted reply was going to say.
    original: str | None = None
    # A tool call's or result's fields (tool_calls, tool_call_id, name) as sent.
    tool: dict[str, Any] | None = None
    # The content exactly as sent when it was not text (null, or a list of parts).
    content_is_text: bool = True
    raw_content: Any = None
    # Everything else the item carried, kept as sent.
    extra: dict[str, Any] | None = None
    # When this service saw it said, for its place in time only: not the platform's time, so it
    # never disagrees with the platform's own copy of the item (which merges into it).
    seen_ms: int | None = None
    # What is kept of the images among its content parts (core/images.py): stored with the
    # item, never part of its text.
    images: list[dict[str, Any]] | None = None
    # The source's own id of the item, when it names its items (the generic API's `id`): it
    # alone says which item this is, whatever its words (core/alignment.py fingerprint).
    item_id: str | None = None


@dataclass(slots=True)
class SessionEvent:
    """Something a platform reported about one agent run (one session)."""

    kind: EventKind
    agent_id: str
    channel: str | None = None
    name: str | None = None
    start_ms: int | None = None
    stop_ms: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # What named the labels' user: ids the platform was given, or the caller's number
    # (AGENT_MEMORY_PHONE_IDENTITY), which the session records as its identity's source.
    labels_source: LabelsSource = "labels"
    # history: the run's transcript.
    messages: Sequence[IncomingMessage] = ()
    # left: whether the run failed, its final status as the platform names it, and why.
    failed: bool = False
    stop_status: str | None = None
    stop_reason: str | None = None
    # errors: how many module errors were reported.
    error_count: int = 0
    # metrics, turns_finished: per-turn measurements.
    metrics: Sequence[MetricRow] = ()
    # turns_finished: the run's total turns, and whether the report was cut short.
    turn_count: int | None = None
    truncated: bool = False
    # joined: the platform can follow the running agent (read its transcript while it runs).
    follow: bool = False
    # What the platform advises the operator about this event (logged once it is applied).
    advice: str | None = None
    # Where the platform's start request takes labels (e.g. a field path), so that a warning
    # about a run with no user can name the fix in the platform's own terms.
    labels_field: str | None = None
    # The parts of the payload that could not be applied, one note each.
    skipped: Sequence[str] = ()


@dataclass(slots=True)
class HistoryWindow:
    """A running agent's transcript so far (or its latest part), read from its platform."""

    agent_id: str
    start_ms: int | None = None
    messages: Sequence[IncomingMessage] = ()
    skipped: Sequence[str] = ()
    channel: str | None = None
    name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    labels_source: LabelsSource = "labels"  # as SessionEvent.labels_source
    # As SessionEvent.labels_field: where the platform's start request takes labels.
    labels_field: str | None = None
    # Each item names itself (by its id, else by its role, words and time: the generic API), so
    # it is matched one by one against what is stored, not as a run of a transcript; what
    # matches nothing is new and continues the session, after no gap (alignment.place_items).
    discrete: bool = False


@dataclass(frozen=True, slots=True)
class KnownEnd:
    """What a run's window repeats of the one last merged: its first `repeated` messages end
    that window, which left the session at `counts` (messages, gaps). While the session still is
    so and its newest message is the last of them, only the messages after them are merged."""

    repeated: int
    counts: tuple[int, int]


@dataclass(slots=True)
class RawEvent:
    """A callback as received, recorded once (the inbox) whatever becomes of it."""

    event_id: str
    event_type: int
    body: str
    received_ms: int
    product_id: int | None = None
    # When the platform says the event happened.
    notify_ms: int | None = None
    agent_id: str | None = None
    # The labels the payload carried: whose words these are, even if no session comes of it.
    labels: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one callback or window."""

    status: OutcomeStatus
    agent_id: str | None = None
    new_messages: int = 0
    gap: bool = False
    user_id: str | None = None
    character_id: str | None = None
    detail: str | None = None
    # Items left out as said before a forget of their user (or pair): never stored again.
    forgotten: int = 0
    # A merged window's session as the merge left it: its message and gap counts (None: not told).
    counts: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a session belongs to, and which rule said so."""

    user_id: str
    character_id: str
    source: IdentitySource
