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
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .models import (
    CONVERSATIONAL_AI_PRODUCT,
    PAYLOAD_MODELS,
    AgentErrors,
    AgentHistory,
    AgentLeft,
    AgentPayload,
    Envelope,
    Identity,
    MemoryMessage,
)
from .settings import Settings
from .store import SQLiteTransaction, dumps, now_ms

log = logging.getLogger(__name__)

CONDENSE = "condense"
IDENTITY_RANK = {"channel": 0, "rtc": 1, "binding": 2, "labels": 3}
TEST_CHANNEL = "test_webhook"
# Repeated contents ("ok", "") may stand in many places; a window is placed by the
# most recent ones only.
MAX_POSITIONS_PER_FINGERPRINT = 64
KNOWN_METADATA = {"source", "user", "interrupted", "interrupt_timestamp", "original"}


@dataclass(frozen=True)
class Outcome:
    """What became of one callback or window."""

    status: str  # done, duplicate, ignored, test, failed
    agent_id: str | None = None
    new_messages: int = 0
    gap: bool = False
    user_id: str | None = None
    character_id: str | None = None
    detail: str | None = None


def fingerprint(role: str, content: str) -> str:
    """What identifies a message across windows from any source."""
    digest = hashlib.blake2b(f"{role}\x00{content.strip()}".encode(), digest_size=8)
    return digest.hexdigest()


def align(stored: Sequence[str], window: Sequence[str]) -> int | None:
    """Where `window[0]` sits in `stored` (may be negative or past the end), or None.

    The chosen offset agrees with `stored` on every position the two share and shares
    the most positions; among equals, the latest offset wins.
    """
    if not stored or not window:
        return None
    positions: dict[str, list[int]] = defaultdict(list)
    for index, fp in enumerate(stored):
        positions[fp].append(index)
    votes: Counter[int] = Counter()
    for j, fp in enumerate(window):
        for p in positions.get(fp, ())[-MAX_POSITIONS_PER_FINGERPRINT:]:
            votes[p - j] += 1
    for offset, _ in sorted(votes.items(), key=lambda item: (-item[1], -item[0])):
        start, stop = max(0, offset), min(len(stored), offset + len(window))
        if all(stored[p] == window[p - offset] for p in range(start, stop)):
            return offset
    return None


def message_row(message: MemoryMessage, at_ms: int) -> dict[str, Any]:
    """Storage columns of one short-term-memory message (without placement)."""
    meta = message.metadata
    extra: dict[str, Any] = dict(message.model_extra or {})
    for name in ("speech_start_ms", "speech_end_ms", "speech_algorithmic_delay"):
        if getattr(message, name) is not None:
            extra[name] = getattr(message, name)
    meta_extra = {k: v for k, v in (meta.model_extra or {}).items() if k not in KNOWN_METADATA}
    if meta_extra:
        extra["metadata"] = meta_extra
    return {
        "role": message.role,
        "content": message.content,
        "turn_id": message.turn_id,
        "ts_ms": message.timestamp,
        "at_ms": message.timestamp or at_ms,
        "source": meta.source,
        "speaker": meta.user,
        "interrupted": int(meta.interrupted),
        "interrupt_ms": meta.interrupt_timestamp,
        "original": meta.original,
        "fp": fingerprint(message.role, message.content),
        "extra": dumps(extra) if extra else None,
    }


ENRICHABLE = ("turn_id", "ts_ms", "source", "speaker", "interrupted", "interrupt_ms", "original")


def enrichment(stored: dict[str, Any], incoming: dict[str, Any]) -> dict[str, Any]:
    """The fields a later copy of a stored message adds or corrects."""
    changes = {
        key: incoming[key]
        for key in ENRICHABLE
        if incoming[key] not in (None, 0) and incoming[key] != stored[key]
    }
    if "ts_ms" in changes:
        changes["at_ms"] = changes["ts_ms"]
    return changes


class Ingestor:
    """Applies events to the store; one instance per service, used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # callbacks

    def accept_callback(
        self, tx: SQLiteTransaction, envelope: Envelope, body: str, received_ms: int
    ) -> Outcome:
        """Record the raw callback under its noticeId and apply it, in one transaction."""
        agent_id = envelope.payload.get("agent_id")
        created = tx.insert_inbox(
            {
                "notice_id": envelope.noticeId,
                "event_type": envelope.eventType,
                "product_id": envelope.productId,
                "notify_ms": envelope.notifyMs,
                "received_ms": received_ms,
                "agent_id": str(agent_id) if agent_id is not None else None,
                "body": body,
                "status": "received",
            }
        )
        if not created:
            return Outcome("duplicate", agent_id=agent_id)
        return self.apply_recorded(tx, envelope)

    def apply_recorded(self, tx: SQLiteTransaction, envelope: Envelope) -> Outcome:
        """Apply a callback already in the inbox; a failure is recorded, never raised."""
        try:
            with tx.savepoint():
                outcome = self.apply_event(tx, envelope)
        except Exception as exc:  # the raw event stays; `agent-memory reprocess` retries it
            log.exception("callback %s (type %s) failed", envelope.noticeId, envelope.eventType)
            outcome = Outcome("failed", detail=f"{type(exc).__name__}: {exc}")
        tx.set_inbox_status(envelope.noticeId, outcome.status, outcome.detail)
        return outcome

    def apply_event(self, tx: SQLiteTransaction, envelope: Envelope) -> Outcome:
        payload = envelope.payload
        if TEST_CHANNEL in (payload.get("channelName"), payload.get("channel")):
            return Outcome("test", detail="console test callback")
        if envelope.productId not in (None, CONVERSATIONAL_AI_PRODUCT):
            return Outcome("ignored", detail=f"productId {envelope.productId} is not ConvoAI")
        model = PAYLOAD_MODELS.get(envelope.eventType)
        if model is None:
            return Outcome("ignored", detail=f"event type {envelope.eventType} is kept, not used")
        try:
            event = model.model_validate(payload)
        except ValidationError as exc:
            return Outcome("failed", detail=f"payload of event {envelope.eventType}: {exc}")
        if not event.agent_id:
            return Outcome("ignored", detail="payload has no agent_id")
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
            return outcome
        session = self.ensure_session(tx, event, (), stamp)
        changes = {"updated_ms": now_ms()}
        if isinstance(event, AgentLeft):
            changes["status"] = "failed" if (event.status or "").upper() == "FAILED" else "stopped"
            changes["stop_reason"] = event.message
            changes["stop_ms"] = event.stop_ms or session["stop_ms"] or stamp
        elif isinstance(event, AgentErrors):
            changes["error_count"] = session["error_count"] + len(event.errors)
        tx.update_session(session["agent_id"], changes)
        return Outcome(
            "done",
            agent_id=session["agent_id"],
            user_id=session["user_id"],
            character_id=session["character_id"],
        )

    # sessions and identity

    def resolve_identity(
        self,
        tx: SQLiteTransaction,
        event: AgentPayload,
        messages: Sequence[MemoryMessage],
        known_uid: str | None = None,
    ) -> tuple[Identity, str | None]:
        """DESIGN's rule: labels, then a binding, then the speaker's uid, then the channel."""
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
        uid = known_uid or next(
            (m.metadata.user for m in messages if m.role == "user" and m.metadata.user), None
        )
        character = self.settings.default_character
        if uid:
            return Identity(user_id=f"rtc:{uid}", character_id=character, source="rtc"), uid
        place = f"channel:{event.channel}" if event.channel else f"agent:{event.agent_id}"
        return Identity(user_id=place, character_id=character, source="channel"), None

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
            tx, event, messages, session["rtc_uid"] if session else None
        )
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
            return tx.get_session(agent_id) or row
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
        return tx.get_session(agent_id) or session

    def move_session(self, tx: SQLiteTransaction, session: dict[str, Any], identity: Identity) -> None:
        """Give a session, and its messages, to another (user, character)."""
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
        stored = tx.session_fingerprints(agent_id) if session["message_count"] else []
        offset = align([row["fp"] for row in stored], [row["fp"] for row in incoming])
        gap = False
        if not stored:
            offset = 0
        elif offset is None:
            gap = True
            offset = self._place_without_overlap(stored, incoming)
        first_seq = stored[0]["seq"] if stored else 0
        new_rows: list[dict[str, Any]] = []
        for index, row in enumerate(incoming):
            position = offset + index
            if 0 <= position < len(stored):
                changes = enrichment(stored[position], row)
                tx.update_message(stored[position]["id"], changes)
                continue
            if position < 0:
                seq = first_seq + position
            else:
                seq = stored[-1]["seq"] + (position - len(stored) + 1) if stored else position
            new_rows.append(
                {
                    **row,
                    "agent_id": agent_id,
                    "user_id": session["user_id"],
                    "character_id": session["character_id"],
                    "seq": seq,
                    "gap_before": 0,
                    "created_ms": now_ms(),
                }
            )
        if gap and new_rows:
            if offset < 0:
                # The late older window ends before the stored part begins.
                tx.update_message(stored[0]["id"], {"gap_before": 1})
            else:
                new_rows[0]["gap_before"] = 1
            log.warning("session %s: window of %d does not overlap, gap recorded", agent_id, len(incoming))
        tx.insert_messages(new_rows)
        if new_rows or gap:
            tx.update_session(
                agent_id,
                {
                    "message_count": session["message_count"] + len(new_rows),
                    "gap_count": session["gap_count"] + int(gap and bool(new_rows)),
                },
            )
            session["message_count"] += len(new_rows)
        if new_rows:
            self.schedule_condense(tx, session["user_id"], session["character_id"], len(new_rows))
        return Outcome(
            "done",
            agent_id=agent_id,
            new_messages=len(new_rows),
            gap=gap and bool(new_rows),
            user_id=session["user_id"],
            character_id=session["character_id"],
        )

    @staticmethod
    def _place_without_overlap(stored: list[dict[str, Any]], incoming: list[dict[str, Any]]) -> int:
        """Before the stored part if the window's times say it is older, else after it."""
        window_last = max((row["ts_ms"] for row in incoming if row["ts_ms"]), default=None)
        stored_first = min((row["ts_ms"] for row in stored if row["ts_ms"]), default=None)
        if window_last is not None and stored_first is not None and window_last < stored_first:
            return -len(incoming)
        return len(stored)

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
