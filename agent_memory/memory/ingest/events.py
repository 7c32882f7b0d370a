"""Events applied: each raw event recorded once with its outcome, and what it tells applied to its session."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent_memory.core.alignment import key_of
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import ChannelBinding, InboxEntry, MessageFingerprint, Session
from agent_memory.core.events import TURN, HistoryWindow, KnownEnd, Outcome, RawEvent, SessionEvent, storable
from agent_memory.memory.ingest.arrivals import arrival
from agent_memory.memory.ingest.merge import merge
from agent_memory.memory.ingest.sessions import Sessions, Stored
from agent_memory.memory.ingest.speakers import Speakers
from agent_memory.memory.jobs import schedule_condense
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetReceipt, SessionChanges

log = logging.getLogger(__package__)  # ingest logs as one (docs/memory.md quotes its lines)

MAX_DETAIL_NOTES = 20


def stored_end(
    tx: Transaction, session: Session, window: HistoryWindow, known: KnownEnd, stamp: int
) -> MessageFingerprint | None:
    """The session's newest message when the window's first `known.repeated` messages end the
    run's window last merged and nothing changed the session since (its counts are as that merge
    left them, its newest message is the last of them): the messages after them are new and
    follow it. None when that does not hold, or the rest could not be placed alone exactly as
    the whole window would be: a speaker of another pair in it (their words are kept apart
    against the whole window), or a new message without a time of its own (`in_order` dates it
    by those before it)."""
    messages, repeated = window.messages, known.repeated
    if (
        window.discrete
        or window.skipped
        or not 0 < repeated < len(messages)
        or (session.message_count, session.gap_count) != known.counts
    ):
        return None
    owner = session.rtc_uid
    if any(m.role == "user" and m.kind == TURN and m.speaker and m.speaker != owner for m in messages):
        return None
    if any(m.ts_ms is None and m.elapsed_ms is None for m in messages[repeated:]):
        return None
    tail = tx.messages.tail(session.agent_id, 1)
    if not tail:
        return None
    last = arrival(messages[repeated - 1], session.start_ms or stamp)
    return tail[0] if key_of(tail[0]) == key_of(last) else None


def set_aside(outcome: Outcome, skipped: Sequence[str], what: str) -> Outcome:
    """The outcome of an event applied without some of its parts: partial, saying which."""
    notes = list(skipped[:MAX_DETAIL_NOTES])
    if len(skipped) > MAX_DETAIL_NOTES:
        notes.append(f"and {len(skipped) - MAX_DETAIL_NOTES} more")
    detail = f"{len(skipped)} part(s) could not be applied and were left out: " + "; ".join(notes)
    log.warning(
        "%s, agent %s: %s; the rest was applied and the raw payload is kept "
        "(`agent-memory reprocess` applies it again)",
        what,
        outcome.agent_id or "-",
        detail,
    )
    status = "partial" if outcome.status == "done" else outcome.status
    return replace(outcome, status=status, detail=detail)


def _label(labels: Mapping[str, Any], key: str) -> str | None:
    value = labels.get(key)
    return None if value is None else str(value)


class Ingestor:
    """Applies events to the store; one instance per service, used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings)
        self.speakers = Speakers(settings, self.sessions)

    def accept(self, tx: Transaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Record a raw event under its id and apply it, in one transaction.

        `event` is what the platform made of it (off the writer thread): a neutral event,
        or the outcome of one that is not used.
        """
        stored: Stored | None = None
        if isinstance(event, SessionEvent):
            # What applying it reads first is read with the check (`Sessions.opening_reads`).
            recorded, stored = self.sessions.opening_reads(tx, raw.event_id, event)
        else:
            recorded = tx.inbox.has(raw.event_id)
        if recorded:
            return Outcome("duplicate", agent_id=raw.agent_id)
        outcome = self._apply(tx, raw, event, stored)
        # Written once, with its final status: an update would rewrite (and zero) the raw body.
        # A body holding what was said before a forget is not kept (its id is: a redelivery
        # is still recognised), as the forget blanked those it found.
        tx.inbox.keep(
            InboxEntry(
                event_id=raw.event_id,
                event_type=storable(raw.event_type) or 0,
                received_ms=raw.received_ms,
                body="" if outcome.forgotten else raw.body,
                status="forgotten" if outcome.forgotten else outcome.status,
                product_id=storable(raw.product_id),
                notify_ms=storable(raw.notify_ms),
                agent_id=raw.agent_id,
                # Whose words these are, even if the event never becomes a session: forget finds them.
                label_user=_label(raw.labels, self.settings.label_user_key),
                label_character=_label(raw.labels, self.settings.label_character_key),
                error=None if outcome.forgotten else outcome.detail,
            )
        )
        return outcome

    def reapply(self, tx: Transaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply again an event already recorded (reprocessing), recording the outcome."""
        outcome = self._apply(tx, raw, event)
        if outcome.forgotten:
            tx.inbox.blank(raw.event_id)
        else:
            tx.inbox.set_status(raw.event_id, outcome.status, outcome.detail)
        return outcome

    def _apply(
        self, tx: Transaction, raw: RawEvent, event: SessionEvent | Outcome, stored: Stored | None = None
    ) -> Outcome:
        """Apply an event (`stored`: its session, read already); a failure is rolled back and returned, never raised."""
        if isinstance(event, Outcome):
            return event
        try:
            with tx.savepoint():
                outcome = self.apply_event(tx, event, raw.notify_ms or raw.received_ms, stored)
        except Exception as exc:  # the raw event stays; `agent-memory reprocess` retries it
            log.exception("callback %s (type %s) failed", raw.event_id, raw.event_type)
            return Outcome("failed", detail=f"{type(exc).__name__}: {exc}")
        if not event.skipped:
            return outcome
        return set_aside(outcome, event.skipped, f"callback {raw.event_id} (type {raw.event_type})")

    def apply_event(
        self, tx: Transaction, event: SessionEvent, stamp: int, stored: Stored | None = None
    ) -> Outcome:
        """Apply one session event to sessions, messages, watches and metrics.

        `stamp` is when the platform says it happened: it dates what has no time of its own;
        `stored`: the event's session as read already in this transaction (None: read it).
        """
        session, cutoff = self.sessions.session_to_write(tx, event, stamp, stored)
        agent_id = session.agent_id
        changes: SessionChanges = {"updated_ms": now_ms()}
        if event.kind == "history":
            # The session's new counts go in the update below, with the rest of what changed.
            outcome = merge(
                tx, self.settings, session, event.messages, stamp, ended=True, cutoff=cutoff, into=changes
            )
            outcome = self.speakers.keep_apart(tx, session, event, stamp, outcome, ended=True)
            # The whole transcript comes after the run stopped, whether or not `left` came yet.
            if session.status == "running":
                changes["status"] = "stopped"
            if event.stop_ms and not session.stop_ms:
                changes["stop_ms"] = event.stop_ms
            tx.sessions.update(agent_id, changes)
            self.stop_following(tx, session, "history delivered")
            return outcome
        if event.kind == "joined" and event.follow:
            tx.watches.follow(agent_id, "callback", first_poll_ms=now_ms())
        elif event.kind == "left":
            reason = f"agent left ({event.stop_status})" if event.stop_status else "agent left"
            self.stop_following(tx, session, reason)
            changes["status"] = "failed" if event.failed else "stopped"
            changes["stop_reason"] = event.stop_reason
            changes["stop_ms"] = event.stop_ms or session.stop_ms or stamp
        elif event.kind == "errors":
            changes["error_count"] = session.error_count + event.error_count
        elif event.kind == "metrics":
            tx.analytics.record_metrics(agent_id, event.metrics, stamp)
        elif event.kind == "turns_finished":
            tx.analytics.record_metrics(agent_id, event.metrics, stamp)
            if event.turn_count is not None:
                changes["turn_count"] = storable(event.turn_count)
            if event.truncated:
                changes["turns_truncated"] = True
        elif event.kind == "token_expiring":
            changes["token_warning_ms"] = stamp
            self.warn_token_expiring(tx, session, event)
        if event.advice and event.kind != "token_expiring":
            log.info("agent %s: %s", agent_id, event.advice)
        tx.sessions.update(agent_id, changes)
        return Outcome("done", agent_id=agent_id, user_id=session.user_id, character_id=session.character_id)

    def stop_following(self, tx: Transaction, session: Session, reason: str) -> None:
        """Stop following a run whose call ended: what its agent held itself, kept out of the
        summary while a refresh could push it back (`memory.jobs.held_from`), is condensed now."""
        watch = tx.watches.unfollow(session.agent_id, reason)
        if watch is not None and watch.refreshes:
            schedule_condense(tx, self.settings, session.user_id, session.character_id, 0, ended=True)

    @staticmethod
    def warn_token_expiring(tx: Transaction, session: Session, event: SessionEvent) -> None:
        """Say that an agent's credentials are about to expire, with the platform's advice."""
        watch = tx.watches.get(session.agent_id)
        started_here = watch is not None and watch.origin == "join"
        log.warning(
            "agent %s in channel %s%s: %s",
            session.agent_id,
            session.channel or event.channel or "-",
            " (started by this service)" if started_here else "",
            event.advice or "its credentials are about to expire",
        )

    def merge_window(
        self, tx: Transaction, window: HistoryWindow, stamp: int, known: KnownEnd | None = None
    ) -> Outcome:
        """Merge a history window read from the platform while the agent runs; `known`: what it
        repeats of the run's window last merged (only what follows is merged, when that holds)."""
        session, cutoff = self.sessions.session_to_write(tx, window, stamp)
        newest = stored_end(tx, session, window, known, stamp) if known is not None else None
        if newest is not None and known is not None:
            fresh = window.messages[known.repeated :]
            return merge(tx, self.settings, session, fresh, stamp, cutoff=cutoff, after=newest)
        outcome = merge(
            tx, self.settings, session, window.messages, stamp, cutoff=cutoff, discrete=window.discrete
        )
        outcome = self.speakers.keep_apart(tx, session, window, stamp, outcome, discrete=window.discrete)
        if window.skipped:
            return set_aside(outcome, window.skipped, "history window")
        return outcome

    # what the service asks of the sessions directly

    def ensure_session(self, tx: Transaction, event: SessionEvent | HistoryWindow, stamp: int) -> Session:
        """The event's session, created or moved to a better-founded identity (`Sessions.ensure_session`)."""
        return self.sessions.ensure_session(tx, event, stamp)

    def forget_shared_turns(self, tx: Transaction, user_id: str, character_id: str | None) -> ForgetReceipt:
        """What a forgotten user said in other users' shared calls, taken out (`Speakers`)."""
        return self.speakers.forget_shared_turns(tx, user_id, character_id)

    def bind(self, tx: Transaction, agent_id: str, user_id: str, character_id: str) -> Session | None:
        """Tie an agent run to a user and character (`Sessions.bind`)."""
        return self.sessions.bind(tx, agent_id, user_id, character_id)

    def bind_channel(
        self, tx: Transaction, channel: str, user_id: str, character_id: str
    ) -> tuple[ChannelBinding, list[str]]:
        """Tie a channel to a user and character (`Sessions.bind_channel`)."""
        return self.sessions.bind_channel(tx, channel, user_id, character_id)
