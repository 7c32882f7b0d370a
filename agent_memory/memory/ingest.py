"""Ingest: Agora events and history windows become sessions and one transcript per agent run.

Everything here runs on the store's writer thread, inside the transaction that also
records the raw callback, so a callback is either fully taken in or not at all.

Windows are merged by sequence alignment: each message is fingerprinted by role and
content (the fields every source sends), the window is placed where it agrees with
the stored transcript on every overlapping position, and only what lies outside the
stored part is inserted. Overlapping messages that arrive with more detail (turn_id,
timestamp, interruption) enrich the stored row. A window that overlaps nothing is
placed by time and recorded as a gap.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from agent_memory.platforms.agora.payloads import (
    CONVERSATIONAL_AI_PRODUCT,
    DOCS_PORTAL_PRODUCT,
    MICROSECONDS_ABOVE,
    PAYLOAD_MODELS,
    TURN,
    AgentErrors,
    AgentHistory,
    AgentLeft,
    AgentMetrics,
    AgentPayload,
    AgentTokenExpiring,
    Envelope,
    HistoryWindow,
    Identity,
    MemoryMessage,
    TurnsFinished,
)
from agent_memory.settings import Settings
from agent_memory.store import SQLiteTransaction, dumps, now_ms
from agent_memory.store.sqlite.analytics import metric_rows, turn_rows

log = logging.getLogger(__name__)

CONDENSE = "condense"
IDENTITY_RANK = {"channel": 0, "rtc": 1, "channel_binding": 2, "binding": 3, "labels": 4}
# Sessions whose identity is only a guess: kept under `rtc:<uid>` or `channel:<name>`.
FALLBACK_SOURCES = ("rtc", "channel")
TEST_CHANNEL = "test_webhook"
# Repeated contents ("ok", "") may stand in many places; a window is placed by the
# most recent ones only.
MAX_POSITIONS_PER_FINGERPRINT = 64


@dataclass(frozen=True)
class Outcome:
    """What became of one callback or window."""

    status: str  # done, partial (some parts set aside), duplicate, ignored, test, failed
    agent_id: str | None = None
    new_messages: int = 0
    gap: bool = False
    user_id: str | None = None
    character_id: str | None = None
    detail: str | None = None


def storable(value: int | None) -> int | None:
    """`value` if SQLite can store it as an integer, else None."""
    return value if value is None or -(2**63) <= value < 2**63 else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def fingerprint(role: str, content: str, tool: str = "") -> str:
    """What identifies a message across windows from any source.

    A spoken turn is its role and content; a tool call or result adds its tool data
    (`tool`, canonical JSON), which every copy of it carries.
    """
    text = f"{role}\x00{content.strip()}" + (f"\x00{tool}" if tool else "")
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def canonical(value: Any) -> str:
    """JSON that is the same for equal values, whatever the key order."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


# A speech time below this is milliseconds since the agent started, not since the epoch
# (10^11 ms after 1970 is 1973; 10^11 ms of one call is three years).
RELATIVE_SPEECH_BELOW = 10**11


def speech_time(value: float | None, start_ms: int) -> int | None:
    """Epoch ms of a custom-LLM `speech_start_ms`, read by magnitude.

    Agora documents it as a Unix timestamp in milliseconds; a small value is read as
    milliseconds since the agent started, and a huge one as microseconds.
    """
    if value is None or isinstance(value, bool) or value < 0:
        return None
    if value < RELATIVE_SPEECH_BELOW:
        return start_ms + round(value)
    return storable(round(value / 1000) if value > MICROSECONDS_ABOVE else round(value))


# A message as alignment sees it: its fingerprint, and its time and turn when known.
Key = tuple[str, int | None, int | None]


def key_of(row: dict[str, Any]) -> Key:
    return (row["fp"], row["ts_ms"], row["turn_id"])


def same_message(a: Key | str, b: Key | str) -> bool:
    """Same role and content, and no disagreement on time or turn where both know it."""
    a_fp, a_ts, a_turn = (a, None, None) if isinstance(a, str) else a
    b_fp, b_ts, b_turn = (b, None, None) if isinstance(b, str) else b
    return (
        a_fp == b_fp
        and (a_ts is None or b_ts is None or a_ts == b_ts)
        and (a_turn is None or b_turn is None or a_turn == b_turn)
    )


def align(stored: Sequence[Key | str], window: Sequence[Key | str]) -> int | None:
    """Where `window[0]` sits in `stored` (may be negative or past the end), or None.

    The chosen offset agrees with `stored` on every position the two share and shares
    the most positions; among equals, the latest offset wins. A repeated content ("Are
    you still there?") matches only where its time and turn do not say otherwise.
    """
    if not stored or not window:
        return None
    positions: dict[str, list[int]] = defaultdict(list)
    for index, item in enumerate(stored):
        positions[item if isinstance(item, str) else item[0]].append(index)
    votes: Counter[int] = Counter()
    for j, item in enumerate(window):
        fp = item if isinstance(item, str) else item[0]
        for p in positions.get(fp, ())[-MAX_POSITIONS_PER_FINGERPRINT:]:
            if same_message(stored[p], item):
                votes[p - j] += 1
    for offset, _ in sorted(votes.items(), key=lambda item: (-item[1], -item[0])):
        start, stop = max(0, offset), min(len(stored), offset + len(window))
        if all(same_message(stored[p], window[p - offset]) for p in range(start, stop)):
            return offset
    return None


def message_row(message: MemoryMessage, at_ms: int) -> dict[str, Any]:
    """Storage columns of one short-term-memory message (without placement).

    `at_ms` is the session's start: it dates a message that carries no time of its own.
    Tool calls and results keep their text and tool data in `extra`, not in `content`:
    they were never said, so transcripts, search and summaries do not see them.
    """
    meta = message.metadata
    extra: dict[str, Any] = dict(message.model_extra) if message.model_extra else {}
    if message.speech_start_ms is not None or message.speech_end_ms is not None or (
        message.speech_algorithmic_delay is not None
    ):
        for name in ("speech_start_ms", "speech_end_ms", "speech_algorithmic_delay"):
            if getattr(message, name) is not None:
                extra[name] = getattr(message, name)
    if meta.model_extra:
        extra["metadata"] = meta.model_extra
    kind = message.kind
    content, tool = message.content, ""
    if kind != TURN:
        tool_data = message.tool_data()
        tool = canonical(tool_data)
        extra.update(tool_data)
        extra["content"] = message.content if message.content_is_text else message.raw_content
        content = ""
    # With llm.vendor "custom" the speech start is the only time a message has.
    timestamp = message.timestamp
    if timestamp is None:
        timestamp = speech_time(message.speech_start_ms, at_ms)
    return {
        "role": message.role,
        "content": content,
        "kind": kind,
        "turn_id": message.turn_id,
        "ts_ms": timestamp,
        "at_ms": timestamp or at_ms,
        "source": meta.source,
        "speaker": meta.user,
        "interrupted": int(meta.interrupted),
        "interrupt_ms": meta.interrupt_timestamp,
        "original": meta.original,
        "fp": fingerprint(message.role, message.content, tool),
        "extra": dumps(extra) if extra else None,
    }


ENRICHABLE = ("turn_id", "ts_ms", "source", "speaker", "interrupted", "interrupt_ms", "original")


def has_value(key: str, value: Any) -> bool:
    """Whether a later copy's field says something: turn 0 is a turn, time 0 and "not
    interrupted" are not (a copy without the flag must not clear it)."""
    return value is not None and (value != 0 or key == "turn_id")


def enrichment(stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The fields a later copy of a stored message adds or corrects."""
    changes = {
        key: incoming[key]
        for key in ENRICHABLE
        if has_value(key, incoming[key]) and incoming[key] != stored[key]
    }
    if "ts_ms" in changes:
        changes["at_ms"] = changes["ts_ms"]
    return changes


# Room left in the session's sequence numbers on each side of a gap, so that a later
# window that fills the gap can be numbered in place.
GAP_ROOM = 1 << 20


@dataclass
class Placement:
    """Where each message of a window goes: (seq, stored row or None, gap_before)."""

    positions: list[tuple[int, dict[str, Any] | None, bool]]
    gap_after_id: int | None  # a stored row that now follows a gap
    gap_count: int
    new_gap: bool


def segments_of(stored: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The stored transcript cut at its gaps."""
    segments: list[list[dict[str, Any]]] = []
    for row in stored:
        if not segments or row["gap_before"]:
            segments.append([])
        segments[-1].append(row)
    return segments


def map_window(
    stored: Sequence[dict[str, Any]], incoming: Sequence[dict[str, Any]]
) -> list[dict[str, Any] | None]:
    """The stored row each window message is, aligning against each gap-free segment."""
    window = [key_of(row) for row in incoming]
    mapping: list[dict[str, Any] | None] = [None] * len(incoming)
    for segment in segments_of(stored):
        offset = align([key_of(row) for row in segment], window)
        if offset is None:
            continue
        for j in range(max(0, -offset), min(len(window), len(segment) - offset)):
            mapping[j] = mapping[j] or segment[offset + j]
    mapped_seqs = [row["seq"] for row in mapping if row is not None]
    if mapped_seqs != sorted(mapped_seqs):
        # Segments disagree (repeated contents): trust the single best alignment only.
        offset = align([key_of(row) for row in stored], window)
        mapping = [
            stored[offset + j] if offset is not None and 0 <= offset + j < len(stored) else None
            for j in range(len(window))
        ]
    return mapping


def place_window(stored: Sequence[dict[str, Any]], incoming: Sequence[dict[str, Any]]) -> Placement:
    """Number a window's messages relative to what is stored, and mark the gaps."""
    if not stored:
        return Placement([(j, None, False) for j in range(len(incoming))], None, 0, False)
    gaps_before = sum(1 for row in stored if row["gap_before"])
    mapping = map_window(stored, incoming)
    first = next((j for j, row in enumerate(mapping) if row is not None), None)
    if first is None:
        return _place_apart(stored, incoming, gaps_before)
    taken = {row["seq"] for row in stored}
    anchor = mapping[first]
    assert anchor is not None
    positions: list[tuple[int, dict[str, Any] | None, bool]] = []
    for j in range(first):
        positions.append((anchor["seq"] - (first - j), None, False))
    previous_seq = anchor["seq"] - 1
    for j in range(first, len(incoming)):
        row = mapping[j]
        if row is not None:
            positions.append((row["seq"], row, bool(row["gap_before"]) and j == 0))
            previous_seq = row["seq"]
        else:
            previous_seq += 1
            positions.append((previous_seq, None, False))
    new_seqs = [seq for seq, row, _ in positions if row is None]
    if any(seq in taken for seq in new_seqs):
        # No room where the window belongs: keep it, after everything, as a separate part.
        return _place_apart(stored, incoming, gaps_before, force_after=True)
    lowest_seq, highest_seq = positions[0][0], positions[-1][0]
    earlier = [row for row in stored if row["seq"] < lowest_seq]
    later = [row for row in stored if row["seq"] > highest_seq]
    if positions[0][1] is None and earlier:
        seq, _, _ = positions[0]
        positions[0] = (seq, None, True)
    gap_after_id = None
    if positions[-1][1] is None and later and not later[0]["gap_before"]:
        gap_after_id = later[0]["id"]
    # Recount: gaps the window closed go, the ones at its edges stay or appear.
    closed = {row["id"] for j, row in enumerate(mapping) if row is not None and j > 0}
    remaining = sum(1 for row in stored if row["gap_before"] and row["id"] not in closed)
    gap_count = remaining + int(positions[0][2] and positions[0][1] is None) + int(gap_after_id is not None)
    return Placement(positions, gap_after_id, gap_count, gap_count > gaps_before)


def _place_apart(
    stored: Sequence[dict[str, Any]],
    incoming: Sequence[dict[str, Any]],
    gaps_before: int,
    *,
    force_after: bool = False,
) -> Placement:
    """A window that overlaps nothing: before or after the stored parts, by time, as a new part."""
    count = len(incoming)
    window_last = max((row["ts_ms"] for row in incoming if row["ts_ms"]), default=None)
    segments = segments_of(stored)
    index = len(segments)  # the new part goes before segments[index]
    if window_last is not None and not force_after:
        for k, segment in enumerate(segments):
            first_ts = min((row["ts_ms"] for row in segment if row["ts_ms"]), default=None)
            if first_ts is not None and window_last < first_ts:
                index = k
                break
    if index == len(segments):
        start = segments[-1][-1]["seq"] + GAP_ROOM
    elif index == 0:
        start = segments[0][0]["seq"] - GAP_ROOM - count
    else:
        low, high = segments[index - 1][-1]["seq"], segments[index][0]["seq"]
        start = low + (high - low - count) // 2
        if high - low <= count + 1:
            return _place_apart(stored, incoming, gaps_before, force_after=True)
    positions: list[tuple[int, dict[str, Any] | None, bool]] = [
        (start + j, None, j == 0 and index > 0) for j in range(count)
    ]
    gap_after_id = None
    if index < len(segments) and not segments[index][0]["gap_before"]:
        gap_after_id = segments[index][0]["id"]
    gap_count = gaps_before + int(index > 0) + int(gap_after_id is not None)
    return Placement(positions, gap_after_id, gap_count, True)


MAX_DETAIL_NOTES = 20


def set_aside(outcome: Outcome, skipped: Sequence[str], what: str) -> Outcome:
    """The outcome of an event applied without some of its parts: partial, saying which."""
    notes = list(skipped[:MAX_DETAIL_NOTES])
    if len(skipped) > MAX_DETAIL_NOTES:
        notes.append(f"and {len(skipped) - MAX_DETAIL_NOTES} more")
    detail = f"{len(skipped)} part(s) could not be applied and were left out: " + "; ".join(notes)
    log.warning(
        "%s, agent %s: %s; the rest was applied and the raw payload is kept "
        "(`agent-memory reprocess` applies it again)",
        what, outcome.agent_id or "-", detail,
    )  # fmt: skip
    status = "partial" if outcome.status == "done" else outcome.status
    return replace(outcome, status=status, detail=detail)


def product_outcome(envelope: Envelope) -> Outcome | None:
    """None for a ConvoAI envelope; else the outcome of one another product sent.

    productId 17 is the Conversational AI Engine. Payloads copied from Agora's docs portal
    carry productId 1, which is also the RTC product, whose channel events reuse our
    eventType numbers: productId 1 counts as ConvoAI only for one of our event types whose
    payload names an agent.
    """
    product = envelope.productId
    if product in (None, CONVERSATIONAL_AI_PRODUCT):
        return None
    agent_event = envelope.eventType in PAYLOAD_MODELS and bool(envelope.fields.get("agent_id"))
    if product == DOCS_PORTAL_PRODUCT and agent_event:
        log.info(
            "callback %s has productId 1 (as Agora's docs portal shows) but is an agent event "
            "(type %s, agent %s): read as ConvoAI", envelope.noticeId, envelope.eventType,
            envelope.fields.get("agent_id"),
        )  # fmt: skip
        return None
    if product == DOCS_PORTAL_PRODUCT:
        log.info(
            "callback %s (productId 1, type %s) names no agent: an RTC channel event, kept, "
            "not used", envelope.noticeId, envelope.eventType,
        )  # fmt: skip
        return Outcome("ignored", detail="productId 1 without agent_id: an RTC channel event")
    log.warning(
        "callback %s is from productId %s, not the Conversational AI Engine (17): kept, not "
        "used; check which products notify this URL in Agora's console", envelope.noticeId,
        product,
    )  # fmt: skip
    return Outcome("ignored", detail=f"productId {product} is not ConvoAI")


class Ingestor:
    """Applies events to the store; one instance per service, used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # callbacks

    def accept_callback(
        self,
        tx: SQLiteTransaction,
        envelope: Envelope,
        body: str,
        received_ms: int,
        parsed: AgentPayload | Outcome | None = None,
    ) -> Outcome:
        """Record the raw callback under its noticeId and apply it, in one transaction.

        `parsed` is `classify(envelope)` when the caller already did it off the writer thread.
        """
        if tx.inbox_has(envelope.noticeId):
            return Outcome("duplicate", agent_id=envelope.fields.get("agent_id"))
        outcome = self._apply(tx, envelope, parsed)
        fields = envelope.fields
        agent_id = fields.get("agent_id")
        raw_labels = fields.get("labels")
        labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
        # Written once, with its final status: an update would rewrite (and zero) the raw body.
        tx.insert_inbox(
            {
                "notice_id": envelope.noticeId,
                "event_type": storable(envelope.eventType) or 0,
                "product_id": storable(envelope.productId),
                "notify_ms": storable(envelope.notifyMs),
                "received_ms": received_ms,
                "agent_id": str(agent_id) if agent_id is not None else None,
                # Whose words these are, even if the callback never becomes a session: forget finds them.
                "label_user": _text(labels.get(self.settings.label_user_key)),
                "label_character": _text(labels.get(self.settings.label_character_key)),
                "body": body,
                "status": outcome.status,
                "error": outcome.detail,
            }
        )
        return outcome

    def apply_recorded(self, tx: SQLiteTransaction, envelope: Envelope) -> Outcome:
        """Apply again a callback already in the inbox (reprocessing), recording the outcome."""
        outcome = self._apply(tx, envelope, None)
        tx.set_inbox_status(envelope.noticeId, outcome.status, outcome.detail)
        return outcome

    def _apply(
        self, tx: SQLiteTransaction, envelope: Envelope, parsed: AgentPayload | Outcome | None
    ) -> Outcome:
        """Apply a callback; a failure is rolled back and returned, never raised."""
        try:
            with tx.savepoint():
                event = self.classify(envelope) if parsed is None else parsed
                if isinstance(event, Outcome):
                    return event
                outcome = self.apply_event(tx, envelope, event)
        except Exception as exc:  # the raw event stays; `agent-memory reprocess` retries it
            log.exception("callback %s (type %s) failed", envelope.noticeId, envelope.eventType)
            return Outcome("failed", detail=f"{type(exc).__name__}: {exc}")
        if not event.skipped:
            return outcome
        what = f"callback {envelope.noticeId} (type {envelope.eventType})"
        return set_aside(outcome, event.skipped, what)

    @staticmethod
    def classify(envelope: Envelope) -> AgentPayload | Outcome:
        """The validated payload of an agent event, or the outcome of one that is not used.

        Pure and free of the database, so the webhook handler runs it off the writer thread.
        """
        payload = envelope.fields
        if TEST_CHANNEL in (payload.get("channelName"), payload.get("channel")):
            return Outcome("test", detail="console test callback")
        if not isinstance(envelope.payload, dict):
            return Outcome("failed", detail="payload is not a JSON object; kept raw")
        other_product = product_outcome(envelope)
        if other_product is not None:
            return other_product
        model = PAYLOAD_MODELS.get(envelope.eventType)
        if model is None:
            return Outcome("ignored", detail=f"event type {envelope.eventType} is kept, not used")
        try:
            event = model.model_validate(payload)
        except ValidationError as exc:
            return Outcome("failed", detail=f"payload of event {envelope.eventType}: {exc}")
        if not event.agent_id:
            return Outcome("ignored", detail="payload has no agent_id")
        return event

    def apply_event(self, tx: SQLiteTransaction, envelope: Envelope, event: AgentPayload) -> Outcome:
        """Apply a classified agent event to sessions, messages, watches and metrics."""
        stamp = envelope.notifyMs or now_ms()
        if isinstance(event, AgentHistory):
            session = self.ensure_session(tx, event, event.contents, stamp)
            outcome = self.merge_window(tx, session, event.contents, stamp)
            # 103 is sent after the agent stopped, whether or not its 102 came yet.
            changes: dict[str, Any] = {"updated_ms": now_ms()}
            if session["status"] == "running":
                changes["status"] = "stopped"
            if event.stop_ms and not session["stop_ms"]:
                changes["stop_ms"] = event.stop_ms
            tx.update_session(session["agent_id"], changes)
            tx.unwatch(session["agent_id"], "history delivered (103)")
            return outcome
        session = self.ensure_session(tx, event, (), stamp)
        changes = {"updated_ms": now_ms()}
        if envelope.eventType == 101 and self.settings.agora_configured:
            tx.watch(session["agent_id"], "callback", first_poll_ms=now_ms())
        if isinstance(event, AgentLeft):
            tx.unwatch(session["agent_id"], f"agent left (102 {event.status or ''})".strip())
            changes["status"] = "failed" if (event.status or "").upper() == "FAILED" else "stopped"
            changes["stop_reason"] = event.message
            changes["stop_ms"] = event.stop_ms or session["stop_ms"] or stamp
        elif isinstance(event, AgentErrors):
            changes["error_count"] = session["error_count"] + len(event.errors)
        elif isinstance(event, AgentMetrics):
            tx.record_agent_metrics(session["agent_id"], metric_rows(event.metrics), stamp)
        elif isinstance(event, TurnsFinished):
            changes.update(self.turns_finished(tx, session, event, stamp))
        elif isinstance(event, AgentTokenExpiring):
            changes["token_warning_ms"] = stamp
            self.warn_token_expiring(tx, session, event)
        tx.update_session(session["agent_id"], changes)
        return Outcome(
            "done",
            agent_id=session["agent_id"],
            user_id=session["user_id"],
            character_id=session["character_id"],
        )

    @staticmethod
    def turns_finished(
        tx: SQLiteTransaction, session: dict[str, Any], event: TurnsFinished, stamp: int
    ) -> dict[str, Any]:
        """Keep a 112's per-turn latencies and durations; the session changes it implies."""
        tx.record_agent_metrics(session["agent_id"], turn_rows(event.turns), stamp)
        changes: dict[str, Any] = {}
        if event.total_turn_count is not None:
            changes["turn_count"] = storable(event.total_turn_count)
        if event.is_truncated:
            changes["turns_truncated"] = 1
            log.info(
                "agent %s: Agora cut its turn list (112 is_truncated): %d of %s turns reported; "
                "GET …/agents/%s/turns pages through all of them for 7 days",
                session["agent_id"], len(event.turns), event.total_turn_count or "more",
                session["agent_id"],
            )  # fmt: skip
        return changes

    @staticmethod
    def warn_token_expiring(
        tx: SQLiteTransaction, session: dict[str, Any], event: AgentTokenExpiring
    ) -> None:
        """Say that an agent's RTC token is about to expire, and how to renew it."""
        watch = tx.get_watch(session["agent_id"])
        started_here = watch is not None and watch["origin"] == "join"
        log.warning(
            "agent %s in channel %s%s: its RTC token is about to expire (104%s). Renew it now: "
            "POST /v2/projects/{appid}/agents/%s/update with {\"properties\": {\"token\": "
            "\"<a new RTC token for this channel and the agent's uid>\"}} (Agora's update "
            "endpoint); otherwise the agent loses the channel when the token expires",
            session["agent_id"], session["channel"] or event.channel or "-",
            " (started by this service)" if started_here else "",
            f": {event.message}" if event.message else "", session["agent_id"],
        )  # fmt: skip

    def apply_window(
        self, tx: SQLiteTransaction, agent_id: str, window: HistoryWindow, stamp: int
    ) -> Outcome:
        """Merge a history window read from Agora while the agent runs."""
        event = AgentPayload.model_validate({"agent_id": agent_id, "start_ts": window.start_ms})
        session = self.ensure_session(tx, event, window.contents, stamp)
        outcome = self.merge_window(tx, session, window.contents, stamp)
        if window.skipped:
            return set_aside(outcome, window.skipped, "history window")
        return outcome

    # sessions and identity

    def resolve_identity(
        self,
        tx: SQLiteTransaction,
        event: AgentPayload,
        messages: Sequence[MemoryMessage],
        known_uid: str | None = None,
        known_channel: str | None = None,
    ) -> tuple[Identity, str | None]:
        """Labels, then the run's binding, then its channel's binding, then the speaker's uid, then the channel.

        `known_uid` and `known_channel` are what the stored session already knows: a polled
        history window carries neither.
        """
        labels = event.labels
        user = labels.get(self.settings.label_user_key)
        if user:
            character = labels.get(self.settings.label_character_key) or self.settings.default_character
            return Identity(user_id=user, character_id=character, source="labels"), known_uid
        binding = tx.get_binding(event.agent_id or "")
        if binding is not None:
            identity = Identity(
                user_id=binding["user_id"], character_id=binding["character_id"], source="binding"
            )
            return identity, known_uid
        channel = event.channel or known_channel
        bound = tx.get_channel_binding(channel) if channel else None
        if bound is not None:
            identity = Identity(
                user_id=bound["user_id"], character_id=bound["character_id"], source="channel_binding"
            )
            return identity, known_uid
        uid = known_uid or next(
            (m.metadata.user for m in messages if m.role == "user" and m.metadata.user), None
        )
        character = self.settings.default_character
        if uid:
            return Identity(user_id=f"rtc:{uid}", character_id=character, source="rtc"), uid
        place = f"channel:{channel}" if channel else f"agent:{event.agent_id}"
        return Identity(user_id=place, character_id=character, source="channel"), None

    def warn_unidentified(self, event: AgentPayload, identity: Identity) -> None:
        """Say that a new session has no user, which labels it had (keys only), and how to fix it."""
        settings = self.settings
        keys = ", ".join(sorted(event.labels)) or "none"
        channel = event.channel or "<unknown>"
        log.warning(
            "agent %s (name %s, channel %s) names no user: its labels (keys: %s) have no %r, so its "
            "memory is kept under %s/%s, where the next call will not find it. Start agents with "
            "properties.labels.%s (and .%s), or set AGENT_MEMORY_LABEL_USER / "
            "AGENT_MEMORY_LABEL_CHARACTER to the label keys you use, or bind it: "
            "POST /v1/sessions/%s/bind, or POST /v1/channels/%s/bind when each user has a channel of their own",
            event.agent_id, event.name or "-", channel, keys, settings.label_user_key,
            identity.user_id, identity.character_id, settings.label_user_key,
            settings.label_character_key, event.agent_id, channel,
        )  # fmt: skip

    def ensure_session(
        self,
        tx: SQLiteTransaction,
        event: AgentPayload,
        messages: Sequence[MemoryMessage],
        stamp: int,
    ) -> dict[str, Any]:
        """The event's session, created or moved to a better-founded identity."""
        agent_id = event.agent_id or ""
        session = tx.get_session(agent_id)
        identity, uid = self.resolve_identity(
            tx, event, messages, session["rtc_uid"] if session else None,
            session["channel"] if session else None,
        )  # fmt: skip
        if session is None:
            row = {
                "agent_id": agent_id,
                "user_id": identity.user_id,
                "character_id": identity.character_id,
                "identity_source": identity.source,
                "channel": event.channel,
                "name": event.name,
                "status": "running",
                "start_ms": event.start_ms or stamp,
                "stop_ms": event.stop_ms,
                "labels": dumps(event.labels) if event.labels else None,
                "rtc_uid": uid,
                "first_seen_ms": now_ms(),
                "updated_ms": now_ms(),
            }
            tx.insert_session(row)
            log.info(
                "session %s for %s/%s (%s)", agent_id, identity.user_id, identity.character_id,
                identity.source,
            )  # fmt: skip
            if identity.source in FALLBACK_SOURCES:
                # Here, where the session is created: once per session, not once per callback.
                self.warn_unidentified(event, identity)
            return {**row, "stop_reason": None, "message_count": 0, "gap_count": 0, "error_count": 0}
        changes: dict[str, Any] = {}
        for column, value in (("channel", event.channel), ("name", event.name), ("rtc_uid", uid)):
            if value and not session[column]:
                changes[column] = value
        if event.start_ms and event.start_ms != session["start_ms"]:
            changes["start_ms"] = event.start_ms
        if event.labels and not session["labels"]:
            changes["labels"] = dumps(event.labels)
        tx.update_session(agent_id, changes)
        moved = (identity.user_id, identity.character_id) != (
            session["user_id"],
            session["character_id"],
        )
        if moved and IDENTITY_RANK[identity.source] >= IDENTITY_RANK[session["identity_source"]]:
            self.move_session(tx, session, identity)
        elif not changes:
            return session
        return tx.get_session(agent_id) or session

    def move_session(self, tx: SQLiteTransaction, session: dict[str, Any], identity: Identity) -> None:
        """Give a session, and its messages, to another (user, character)."""
        old_summary = tx.get_summary(session["user_id"], session["character_id"])
        stored = tx.session_fingerprints(session["agent_id"]) if old_summary is not None else []
        if old_summary is not None and stored:
            if min(row["id"] for row in stored) <= old_summary["watermark_id"]:
                # The old pair's summary holds this session's words: rebuild it without them.
                reset = tx.reset_condensed(session["user_id"], session["character_id"])
                log.info("summary of %s/%s reset: it covered moved session %s (%s)",
                         session["user_id"], session["character_id"], session["agent_id"], reset)  # fmt: skip
                remaining = tx.count_messages_after(session["user_id"], session["character_id"], 0)
                if remaining:
                    self.schedule_condense(tx, session["user_id"], session["character_id"], remaining)
        moved = tx.move_session(session["agent_id"], identity.user_id, identity.character_id)
        tx.update_session(session["agent_id"], {"identity_source": identity.source})
        log.info(
            "session %s moved from %s/%s to %s/%s (%s, %d messages)",
            session["agent_id"], session["user_id"], session["character_id"],
            identity.user_id, identity.character_id, identity.source, moved,
        )  # fmt: skip
        if moved:
            self.schedule_condense(tx, identity.user_id, identity.character_id, moved)

    def bind(self, tx: SQLiteTransaction, agent_id: str, user_id: str, character_id: str) -> dict[str, Any]:
        """Tie an agent run to a user and character; an existing session moves at once."""
        tx.set_binding(agent_id, user_id, character_id)
        session = tx.get_session(agent_id)
        if session is not None and (session["user_id"], session["character_id"]) != (
            user_id,
            character_id,
        ):
            self.move_session(
                tx, session, Identity(user_id=user_id, character_id=character_id, source="binding")
            )
        elif session is not None:
            tx.update_session(agent_id, {"identity_source": "binding"})
        return tx.get_session(agent_id) or {
            "agent_id": agent_id,
            "user_id": user_id,
            "character_id": character_id,
            "identity_source": "binding",
            "status": "unknown",
        }

    def bind_channel(
        self, tx: SQLiteTransaction, channel: str, user_id: str, character_id: str
    ) -> tuple[dict[str, Any], list[str]]:
        """Tie a channel to a user and character; returns the binding and the sessions moved.

        The channel's sessions that only it identified (under `channel:<name>` or `rtc:<uid>`,
        or tied by an earlier binding of this channel) move at once; labelled and bound runs stay.
        """
        binding = tx.set_channel_binding(channel, user_id, character_id)
        identity = Identity(user_id=user_id, character_id=character_id, source="channel_binding")
        moved: list[str] = []
        for session in tx.channel_sessions(channel, (*FALLBACK_SOURCES, "channel_binding")):
            if (session["user_id"], session["character_id"]) != (user_id, character_id):
                self.move_session(tx, session, identity)
                moved.append(session["agent_id"])
            elif session["identity_source"] != "channel_binding":
                tx.update_session(session["agent_id"], {"identity_source": "channel_binding"})
        if moved:
            log.info("channel %s bound to %s/%s: %d sessions moved", channel, user_id, character_id, len(moved))
        return binding, moved

    # windows

    def merge_window(
        self,
        tx: SQLiteTransaction,
        session: dict[str, Any],
        messages: Sequence[MemoryMessage],
        stamp: int,
    ) -> Outcome:
        """Merge one window of a session's short-term memory into its stored transcript."""
        agent_id = session["agent_id"]
        base_ms = session["start_ms"] or stamp
        incoming = [message_row(message, base_ms) for message in messages]
        placed = self._place(tx, session, incoming)
        created_ms = now_ms()
        new_rows: list[dict[str, Any]] = []
        for row, (seq, existing, gap_before) in zip(incoming, placed.positions, strict=True):
            if existing is not None:
                changes = enrichment(existing, row)
                if existing["gap_before"] and not gap_before:
                    changes["gap_before"] = 0  # this window proves the gap was none
                tx.update_message(existing["id"], changes)
                continue
            new_rows.append(
                {
                    **row,
                    "agent_id": agent_id,
                    "user_id": session["user_id"],
                    "character_id": session["character_id"],
                    "seq": seq,
                    "gap_before": int(gap_before),
                    "created_ms": created_ms,
                }
            )
        if placed.gap_after_id is not None:
            tx.update_message(placed.gap_after_id, {"gap_before": 1})
        tx.insert_messages(new_rows)
        gaps = placed.gap_count
        if new_rows or gaps != session["gap_count"]:
            tx.update_session(
                agent_id,
                {"message_count": session["message_count"] + len(new_rows), "gap_count": gaps},
            )
            session["message_count"] += len(new_rows)
        if placed.new_gap:
            log.warning(
                "session %s: a window of %d messages overlaps nothing stored; gap recorded",
                agent_id, len(incoming),
            )  # fmt: skip
        spoken = sum(1 for row in new_rows if row["kind"] == TURN)
        if spoken:
            self.schedule_condense(tx, session["user_id"], session["character_id"], spoken)
        return Outcome(
            "done",
            agent_id=agent_id,
            new_messages=len(new_rows),
            gap=placed.new_gap,
            user_id=session["user_id"],
            character_id=session["character_id"],
        )

    @staticmethod
    def _place(tx: SQLiteTransaction, session: dict[str, Any], incoming: list[dict[str, Any]]) -> Placement:
        """Place a window against the stored tail when that explains it, else the whole session."""
        agent_id, count = session["agent_id"], session["message_count"]
        if not count:
            return place_window([], incoming)
        # A poll's window overlaps the newest messages: reading a long call whole each time
        # would make every merge cost as much as the call so far.
        tail_size = 2 * len(incoming) + 16
        if count > tail_size and not session["gap_count"]:
            tail = tx.session_tail(agent_id, tail_size)
            offset = align([key_of(row) for row in tail], [key_of(row) for row in incoming])
            if offset is not None and offset >= 0:
                return place_window(tail, incoming)
        return place_window(tx.session_fingerprints(agent_id), incoming)

    def schedule_condense(self, tx: SQLiteTransaction, user_id: str, character_id: str, new: int) -> None:
        """Debounce the pair's condense job (the database is the queue)."""
        settings = self.settings
        tx.schedule_job(
            CONDENSE,
            user_id,
            character_id,
            delay_ms=round(settings.summary_delay_s * 1000),
            max_wait_ms=round(settings.summary_max_wait_s * 1000),
            max_messages=settings.summary_max_messages,
            new_messages=new,
        )
