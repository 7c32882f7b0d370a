"""Ingest: platform events and history windows become sessions and one transcript per agent run.

A platform maps what it receives to `core.events` (SessionEvent, HistoryWindow, RawEvent);
this module applies them. Everything here runs on the store's writer thread, inside the
transaction that also records the raw event, so an event is either fully taken in or not
at all. Windows are merged by `core.alignment`: only what lies outside the stored
transcript is inserted, overlapping copies enrich the stored rows, and a window that
overlaps nothing is recorded after a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent_memory.core.alignment import (
    Placement,
    align,
    canonical,
    enrichment,
    fingerprint,
    key_of,
    place_window,
)
from agent_memory.core.domain import CONDENSE
from agent_memory.core.events import (
    TURN,
    HistoryWindow,
    Identity,
    IdentitySource,
    IncomingMessage,
    Outcome,
    RawEvent,
    SessionEvent,
    storable,
)
from agent_memory.settings import Settings
from agent_memory.store import SQLiteTransaction, dumps, now_ms

log = logging.getLogger(__name__)

IDENTITY_RANK: dict[IdentitySource, int] = {
    "channel": 0, "rtc": 1, "channel_binding": 2, "binding": 3, "labels": 4,
}  # fmt: skip
# Sessions whose identity is only a guess: kept under `rtc:<uid>` or `channel:<name>`.
FALLBACK_SOURCES: tuple[IdentitySource, ...] = ("rtc", "channel")
MAX_DETAIL_NOTES = 20


def message_row(message: IncomingMessage, at_ms: int) -> dict[str, Any]:
    """Storage columns of one incoming message (without placement).

    `at_ms` is the session's start: it dates a message that carries no time of its own.
    Tool calls and results keep their text and tool data in `extra`, not in `content`:
    they were never said, so transcripts, search and summaries do not see them.
    """
    extra: dict[str, Any] = dict(message.extra) if message.extra else {}
    content, tool = message.content, ""
    if message.kind != TURN:
        tool_data = message.tool or {}
        tool = canonical(tool_data)
        extra.update(tool_data)
        extra["content"] = message.content if message.content_is_text else message.raw_content
        content = ""
    timestamp = message.ts_ms
    if timestamp is None and message.elapsed_ms is not None:
        timestamp = at_ms + message.elapsed_ms
    return {
        "role": message.role,
        "content": content,
        "kind": message.kind,
        "turn_id": message.turn_id,
        "ts_ms": timestamp,
        "at_ms": timestamp or at_ms,
        "source": message.source,
        "speaker": message.speaker,
        "interrupted": int(message.interrupted),
        "interrupt_ms": message.interrupt_ms,
        "original": message.original,
        "fp": fingerprint(message.role, message.content, tool),
        "extra": dumps(extra) if extra else None,
    }


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


def _label(labels: Mapping[str, Any], key: str) -> str | None:
    value = labels.get(key)
    return None if value is None else str(value)


class Ingestor:
    """Applies events to the store; one instance per service, used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # events

    def accept(self, tx: SQLiteTransaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Record a raw event under its id and apply it, in one transaction.

        `event` is what the platform made of it (off the writer thread): a neutral event,
        or the outcome of one that is not used.
        """
        if tx.inbox_has(raw.event_id):
            return Outcome("duplicate", agent_id=raw.agent_id)
        outcome = self._apply(tx, raw, event)
        # Written once, with its final status: an update would rewrite (and zero) the raw body.
        tx.insert_inbox(
            {
                "notice_id": raw.event_id,
                "event_type": storable(raw.event_type) or 0,
                "product_id": storable(raw.product_id),
                "notify_ms": storable(raw.notify_ms),
                "received_ms": raw.received_ms,
                "agent_id": raw.agent_id,
                # Whose words these are, even if the event never becomes a session: forget finds them.
                "label_user": _label(raw.labels, self.settings.label_user_key),
                "label_character": _label(raw.labels, self.settings.label_character_key),
                "body": raw.body,
                "status": outcome.status,
                "error": outcome.detail,
            }
        )
        return outcome

    def reapply(self, tx: SQLiteTransaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply again an event already recorded (reprocessing), recording the outcome."""
        outcome = self._apply(tx, raw, event)
        tx.set_inbox_status(raw.event_id, outcome.status, outcome.detail)
        return outcome

    def _apply(self, tx: SQLiteTransaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply an event; a failure is rolled back and returned, never raised."""
        if isinstance(event, Outcome):
            return event
        try:
            with tx.savepoint():
                outcome = self.apply_event(tx, event, raw.notify_ms or now_ms())
        except Exception as exc:  # the raw event stays; `agent-memory reprocess` retries it
            log.exception("callback %s (type %s) failed", raw.event_id, raw.event_type)
            return Outcome("failed", detail=f"{type(exc).__name__}: {exc}")
        if not event.skipped:
            return outcome
        return set_aside(outcome, event.skipped, f"callback {raw.event_id} (type {raw.event_type})")

    def apply_event(self, tx: SQLiteTransaction, event: SessionEvent, stamp: int) -> Outcome:
        """Apply one session event to sessions, messages, watches and metrics.

        `stamp` is when the platform says it happened: it dates what has no time of its own.
        """
        session = self.ensure_session(tx, event, stamp)
        agent_id = session["agent_id"]
        changes: dict[str, Any] = {"updated_ms": now_ms()}
        if event.kind == "history":
            outcome = self.merge(tx, session, event.messages, stamp)
            # The whole transcript comes after the run stopped, whether or not `left` came yet.
            if session["status"] == "running":
                changes["status"] = "stopped"
            if event.stop_ms and not session["stop_ms"]:
                changes["stop_ms"] = event.stop_ms
            tx.update_session(agent_id, changes)
            tx.unwatch(agent_id, "history delivered")
            return outcome
        if event.kind == "joined" and event.follow:
            tx.watch(agent_id, "callback", first_poll_ms=now_ms())
        elif event.kind == "left":
            tx.unwatch(agent_id, f"agent left ({event.stop_status})" if event.stop_status else "agent left")
            changes["status"] = "failed" if event.failed else "stopped"
            changes["stop_reason"] = event.stop_reason
            changes["stop_ms"] = event.stop_ms or session["stop_ms"] or stamp
        elif event.kind == "errors":
            changes["error_count"] = session["error_count"] + event.error_count
        elif event.kind == "metrics":
            tx.record_agent_metrics(agent_id, event.metrics, stamp)
        elif event.kind == "turns_finished":
            tx.record_agent_metrics(agent_id, event.metrics, stamp)
            if event.turn_count is not None:
                changes["turn_count"] = storable(event.turn_count)
            if event.truncated:
                changes["turns_truncated"] = 1
        elif event.kind == "token_expiring":
            changes["token_warning_ms"] = stamp
            self.warn_token_expiring(tx, session, event)
        if event.advice and event.kind != "token_expiring":
            log.info("agent %s: %s", agent_id, event.advice)
        tx.update_session(agent_id, changes)
        return Outcome(
            "done",
            agent_id=agent_id,
            user_id=session["user_id"],
            character_id=session["character_id"],
        )

    @staticmethod
    def warn_token_expiring(tx: SQLiteTransaction, session: dict[str, Any], event: SessionEvent) -> None:
        """Say that an agent's credentials are about to expire, with the platform's advice."""
        watch = tx.get_watch(session["agent_id"])
        started_here = watch is not None and watch["origin"] == "join"
        log.warning(
            "agent %s in channel %s%s: %s",
            session["agent_id"], session["channel"] or event.channel or "-",
            " (started by this service)" if started_here else "",
            event.advice or "its credentials are about to expire",
        )  # fmt: skip

    def merge_window(self, tx: SQLiteTransaction, window: HistoryWindow, stamp: int) -> Outcome:
        """Merge a history window read from the platform while the agent runs."""
        session = self.ensure_session(tx, window, stamp)
        outcome = self.merge(tx, session, window.messages, stamp)
        if window.skipped:
            return set_aside(outcome, window.skipped, "history window")
        return outcome

    # sessions and identity

    def resolve_identity(
        self,
        tx: SQLiteTransaction,
        event: SessionEvent | HistoryWindow,
        known_uid: str | None = None,
        known_channel: str | None = None,
    ) -> tuple[Identity, str | None]:
        """Labels, then the run's binding, then its channel's binding, then the speaker's uid, then the channel.

        `known_uid` and `known_channel` are what the stored session already knows: a polled
        history window usually carries neither.
        """
        labels = event.labels
        user = labels.get(self.settings.label_user_key)
        if user:
            character = labels.get(self.settings.label_character_key) or self.settings.default_character
            return Identity(user_id=user, character_id=character, source="labels"), known_uid
        binding = tx.get_binding(event.agent_id)
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
        uid = known_uid or next((m.speaker for m in event.messages if m.role == "user" and m.speaker), None)
        character = self.settings.default_character
        if uid:
            return Identity(user_id=f"rtc:{uid}", character_id=character, source="rtc"), uid
        place = f"channel:{channel}" if channel else f"agent:{event.agent_id}"
        return Identity(user_id=place, character_id=character, source="channel"), None

    def warn_unidentified(self, event: SessionEvent | HistoryWindow, identity: Identity) -> None:
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
        self, tx: SQLiteTransaction, event: SessionEvent | HistoryWindow, stamp: int
    ) -> dict[str, Any]:
        """The event's session, created or moved to a better-founded identity."""
        agent_id = event.agent_id
        session = tx.get_session(agent_id)
        identity, uid = self.resolve_identity(
            tx, event, session["rtc_uid"] if session else None,
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
                "stop_ms": event.stop_ms if isinstance(event, SessionEvent) else None,
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
        if (
            old_summary is not None
            and stored
            and min(row["id"] for row in stored) <= old_summary["watermark_id"]
        ):
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
            log.info(
                "channel %s bound to %s/%s: %d sessions moved", channel, user_id, character_id, len(moved)
            )
        return binding, moved

    # windows

    def merge(
        self,
        tx: SQLiteTransaction,
        session: dict[str, Any],
        messages: Sequence[IncomingMessage],
        stamp: int,
    ) -> Outcome:
        """Merge one window of a session's transcript into what is stored of it."""
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
