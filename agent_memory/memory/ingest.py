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
    keys_of,
    place_items,
    place_window,
)
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import CONDENSE, ChannelBinding, InboxEntry, MessageChanges, Session
from agent_memory.core.events import (
    FALLBACK_SOURCES,
    TURN,
    HistoryWindow,
    Identity,
    IdentitySource,
    IncomingMessage,
    MessageKind,
    Outcome,
    RawEvent,
    SessionEvent,
    storable,
)
from agent_memory.core.jsonutil import dumps
from agent_memory.core.records import record
from agent_memory.logs import pair_ref, user_ref
from agent_memory.memory.embedding import schedule_embedding
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetCutoff, ForgetReceipt, NewMessage, SessionChanges

log = logging.getLogger(__name__)

IDENTITY_RANK: dict[IdentitySource, int] = {
    "channel": 0,
    "rtc": 1,
    "channel_binding": 2,
    "binding": 3,
    "labels": 4,
}
MAX_DETAIL_NOTES = 20
# Joins a run's agent id and a speaker's RTC uid into the key of the session holding that
# speaker's own words (`speaker_session_id`); `~` needs no percent-encoding in a URL path.
SPEAKER_SEPARATOR = "~"


def speaker_session_id(agent_id: str, uid: str) -> str:
    """The key of the session that keeps one speaker's own words of a shared call."""
    return f"{agent_id}{SPEAKER_SEPARATOR}{uid}"


@record
class Arrival:
    """An incoming message in the form it is stored in, before it is placed in its session."""

    role: str
    kind: MessageKind
    content: str
    turn_id: int | None
    ts_ms: int | None
    at_ms: int
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None
    fp: str
    # What the platform sent beyond the columns, as JSON text.
    extra_json: str | None
    # What is kept of the images shown with it, as JSON text (core/images.py).
    images_json: str | None = None
    # Named by its source's id (IncomingMessage.item_id), which its fingerprint is.
    keyed: bool = False


def arrival(message: IncomingMessage, at_ms: int) -> Arrival:
    """One incoming message as it is stored (without its place).

    `at_ms` is the session's start: it dates a message that carries no time of its own and was
    not seen said by this service.
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
    if message.item_id is not None:
        extra["id"] = message.item_id
    timestamp = message.ts_ms
    if timestamp is None and message.elapsed_ms is not None:
        timestamp = at_ms + message.elapsed_ms
    return Arrival(
        message.role,
        message.kind,
        content,
        message.turn_id,
        timestamp,
        timestamp or message.seen_ms or at_ms,
        message.source,
        message.speaker,
        message.interrupted,
        message.interrupt_ms,
        message.original,
        fingerprint(message.role, message.content, tool, message.item_id),
        dumps(extra) if extra else None,
        dumps(message.images) if message.images else None,
        message.item_id is not None,
    )


def in_order(messages: Sequence[IncomingMessage], base_ms: int) -> list[Arrival]:
    """The `arrival` of each message; one without a time of its own (dated only by when this
    service saw it, or not at all) is placed no earlier than the message before it: its place
    in the list is evidence of when it was said (Agora's custom-LLM 103 sends a `think`
    injection without speech times, after the turns it followed)."""
    items: list[Arrival] = []
    for message in messages:
        item = arrival(message, base_ms)
        if item.ts_ms is None and items and item.at_ms < items[-1].at_ms:
            item = replace(item, at_ms=items[-1].at_ms)
        items.append(item)
    return items


def said_after(
    messages: Sequence[IncomingMessage], items: Sequence[Arrival], placed: Placement, forgot: ForgetCutoff
) -> list[int]:
    """The indexes of a window's items said after a forget, the only ones kept.

    An item is dated by its own time (the platform's, or when this service saw it said), never
    by its session's start. One already stored was kept after the forget. An undated one of a
    run the forget found (under way then) is kept when it follows, in the window, an item said
    after it (its place is its evidence), else left out: it may have been said before. An
    undated one of a run the forget did not find is kept: that run is taken as begun after it.
    """
    cutoff = forgot.at_ms
    kept: list[int] = []
    after = not forgot.run
    for index, (message, item, (_, existing, _)) in enumerate(
        zip(messages, items, placed.positions, strict=True)
    ):
        said_ms = item.ts_ms if item.ts_ms is not None else message.seen_ms
        if existing is not None or (said_ms is not None and said_ms > cutoff):
            after = True
            kept.append(index)
        elif said_ms is None and after:
            kept.append(index)
    return kept


def first_time(messages: Sequence[IncomingMessage]) -> int | None:
    """The earliest time the messages carry: a run's start when its platform gave none (or none usable)."""
    return min((message.ts_ms for message in messages if message.ts_ms is not None), default=None)


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


def stored_form(item: Arrival, session: Session, seq: int, gap_before: bool, created_ms: int) -> NewMessage:
    """A placed arrival as the row a store inserts."""
    return {
        "agent_id": session.agent_id,
        "user_id": session.user_id,
        "character_id": session.character_id,
        "seq": seq,
        "role": item.role,
        "kind": item.kind,
        "content": item.content,
        "turn_id": item.turn_id,
        "ts_ms": item.ts_ms,
        "at_ms": item.at_ms,
        "source": item.source,
        "speaker": item.speaker,
        "interrupted": item.interrupted,
        "interrupt_ms": item.interrupt_ms,
        "original": item.original,
        "fp": item.fp,
        "gap_before": gap_before,
        "extra": item.extra_json,
        "created_ms": created_ms,
        "images": item.images_json,
    }


def session_changes(session: Session, event: SessionEvent | HistoryWindow, uid: str | None) -> SessionChanges:
    """What an event tells of a stored session that it did not know yet."""
    changes: SessionChanges = {}
    if event.channel and not session.channel:
        changes["channel"] = event.channel
    if event.name and not session.name:
        changes["name"] = event.name
    if uid and not session.rtc_uid:
        changes["rtc_uid"] = uid
    if event.start_ms and event.start_ms != session.start_ms:
        changes["start_ms"] = event.start_ms
    if event.labels and not session.labels:
        changes["labels"] = event.labels
    return changes


class Ingestor:
    """Applies events to the store; one instance per service, used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # events

    def accept(self, tx: Transaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Record a raw event under its id and apply it, in one transaction.

        `event` is what the platform made of it (off the writer thread): a neutral event,
        or the outcome of one that is not used.
        """
        if tx.inbox.has(raw.event_id):
            return Outcome("duplicate", agent_id=raw.agent_id)
        outcome = self._apply(tx, raw, event)
        # Written once, with its final status: an update would rewrite (and zero) the raw body.
        # A body holding what was said before a forget is not kept (its id is: a redelivery
        # is still recognised), as the forget blanked those it found.
        tx.inbox.insert(
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

    def _apply(self, tx: Transaction, raw: RawEvent, event: SessionEvent | Outcome) -> Outcome:
        """Apply an event; a failure is rolled back and returned, never raised."""
        if isinstance(event, Outcome):
            return event
        try:
            with tx.savepoint():
                outcome = self.apply_event(tx, event, raw.notify_ms or raw.received_ms)
        except Exception as exc:  # the raw event stays; `agent-memory reprocess` retries it
            log.exception("callback %s (type %s) failed", raw.event_id, raw.event_type)
            return Outcome("failed", detail=f"{type(exc).__name__}: {exc}")
        if not event.skipped:
            return outcome
        return set_aside(outcome, event.skipped, f"callback {raw.event_id} (type {raw.event_type})")

    def apply_event(self, tx: Transaction, event: SessionEvent, stamp: int) -> Outcome:
        """Apply one session event to sessions, messages, watches and metrics.

        `stamp` is when the platform says it happened: it dates what has no time of its own.
        """
        session, cutoff = self.session_to_write(tx, event, stamp)
        agent_id = session.agent_id
        changes: SessionChanges = {"updated_ms": now_ms()}
        if event.kind == "history":
            outcome = self.merge(tx, session, event.messages, stamp, ended=True, cutoff=cutoff)
            outcome = self.merge_speakers(tx, session, event, stamp, outcome, ended=True)
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
        watch = tx.watches.get(session.agent_id)
        if tx.watches.unfollow(session.agent_id, reason) and watch is not None and watch.refreshes:
            self.schedule_condense(tx, session.user_id, session.character_id, 0, ended=True)

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

    def merge_window(self, tx: Transaction, window: HistoryWindow, stamp: int) -> Outcome:
        """Merge a history window read from the platform while the agent runs."""
        session, cutoff = self.session_to_write(tx, window, stamp)
        outcome = self.merge(tx, session, window.messages, stamp, cutoff=cutoff, discrete=window.discrete)
        outcome = self.merge_speakers(tx, session, window, stamp, outcome, discrete=window.discrete)
        if window.skipped:
            return set_aside(outcome, window.skipped, "history window")
        return outcome

    # sessions and identity

    def resolve_identity(
        self,
        tx: Transaction,
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
            uid = known_uid or self.own_speaker(event, user)
            return Identity(user_id=user, character_id=character, source="labels"), uid
        binding = tx.bindings.of_agent(event.agent_id)
        if binding is not None:
            uid = known_uid or self.own_speaker(event, binding.user_id)
            return Identity(binding.user_id, binding.character_id, "binding"), uid
        channel = event.channel or known_channel
        bound = tx.bindings.of_channel(channel) if channel else None
        if bound is not None:
            uid = known_uid or self.own_speaker(event, bound.user_id)
            return Identity(bound.user_id, bound.character_id, "channel_binding"), uid
        uid = known_uid or self.own_speaker(event, None)
        character = self.settings.default_character
        if uid:
            return Identity(user_id=f"rtc:{uid}", character_id=character, source="rtc"), uid
        place = f"channel:{channel}" if channel else f"agent:{event.agent_id}"
        return Identity(user_id=place, character_id=character, source="channel"), None

    # speakers of a shared call

    def own_speaker(self, event: SessionEvent | HistoryWindow, user_id: str | None) -> str | None:
        """The run's own speaker (its user's RTC uid): the first to say something whom no label
        `<AGENT_MEMORY_LABEL_USER>.<uid>` names as someone else; the others' own words are also
        kept apart (`merge_speakers`)."""
        key = self.settings.label_user_key
        for message in event.messages:
            if message.role == "user" and message.speaker:
                named = event.labels.get(f"{key}.{message.speaker}")
                if named is None or str(named) == user_id:
                    return message.speaker
        return None

    def merge_speakers(
        self,
        tx: Transaction,
        session: Session,
        event: SessionEvent | HistoryWindow,
        stamp: int,
        outcome: Outcome,
        *,
        ended: bool = False,
        discrete: bool = False,
    ) -> Outcome:
        """Keep each other speaker's own words of a shared call in a session of their own.

        The run's session keeps everyone's turns; a user turn whose `speaker` (the RTC uid) is
        not the run's own (`Session.rtc_uid`) is also merged, through the same merge, into
        `<agent_id>~<uid>` under that speaker's pair (`speaker_identity`), so recall and the
        call-start memory of that speaker find it. A uid's slice of a window is a run of that
        speaker's own transcript: redelivery and reordering merge as they do for the run.
        """
        owner = session.rtc_uid
        by_uid: dict[str, list[IncomingMessage]] = {}
        for message in event.messages:
            if (
                message.role == "user"
                and message.kind == TURN
                and message.speaker
                and message.speaker != owner
            ):
                by_uid.setdefault(message.speaker, []).append(message)
        forgotten = 0
        # The run's end, when this event tells it (a 103 comes with its stop time, maybe before the 102).
        stop_ms = session.stop_ms or (event.stop_ms if isinstance(event, SessionEvent) else None)
        session = replace(session, stop_ms=stop_ms)
        for uid, messages in by_uid.items():
            identity = self.speaker_identity(tx, session, event, uid)
            if identity is None:
                continue
            companion = self.speaker_session(tx, session, uid, identity, ended)
            cutoff = tx.maintenance.forget_cutoff(
                companion.user_id, companion.character_id, companion.agent_id
            )
            if cutoff is not None:
                # As in `session_to_write`: a forget under way may have deleted it meanwhile.
                companion = self.speaker_session(tx, session, uid, identity, ended)
            merged = self.merge(tx, companion, messages, stamp, ended=ended, cutoff=cutoff, discrete=discrete)
            forgotten += merged.forgotten
        # A raw body holding words said before a speaker's forget is not kept either.
        return replace(outcome, forgotten=outcome.forgotten + forgotten) if forgotten else outcome

    def without_forgotten_speakers(
        self, tx: Transaction, session: Session, messages: Sequence[IncomingMessage]
    ) -> tuple[Sequence[IncomingMessage], int]:
        """A shared call's window without the turns of a speaker forgotten since they said them
        (their forget took them from the call's session too: `forget_shared_turns`); an undated
        one may have been said before, and is left out too. Also: how many were left out."""
        uids = {
            m.speaker
            for m in messages
            if m.role == "user" and m.kind == TURN and m.speaker and m.speaker != session.rtc_uid
        }
        forgot: dict[str, int] = {}
        for uid in uids:
            cutoff = tx.maintenance.forget_cutoff(
                session.user_id, session.character_id, speaker_session_id(session.agent_id, uid)
            )
            if cutoff is not None and cutoff.run:
                forgot[uid] = cutoff.at_ms
        if not forgot:
            return messages, 0
        kept = [
            m
            for m in messages
            if not (
                m.role == "user"
                and m.kind == TURN
                and m.speaker in forgot
                and ((m.ts_ms if m.ts_ms is not None else m.seen_ms) or 0) <= forgot[m.speaker]
            )
        ]
        return kept, len(messages) - len(kept)

    def forget_shared_turns(self, tx: Transaction, user_id: str, character_id: str | None) -> ForgetReceipt:
        """Before a forget of a user (or pair): take what they said as a guest of other users'
        shared calls from those calls' sessions (their turns, the raw callbacks that carry them),
        and what was learned from those sessions (the owner's summary and unpinned facts, condensed
        again from what is left), as a move of a session out of a pair does."""
        turns = raw = 0
        for run_id, uid in tx.sessions.speaking_in(user_id, character_id):
            run = tx.sessions.get(run_id)  # PostgreSQL: the call's lock, as its merges take it
            if run is None or (run.user_id == user_id and character_id in (None, run.character_id)):
                continue  # the call's own session goes with this forget
            deleted = tx.messages.delete_said_by(run_id, uid)
            raw += tx.inbox.blank_run(run_id)
            if not deleted:
                continue
            turns += deleted
            tx.sessions.update(run_id, {"message_count": max(run.message_count - deleted, 0)})
            reset = {
                "summaries": tx.summaries.delete(run.user_id, run.character_id),
                "facts": tx.facts.delete_unpinned(run.user_id, run.character_id),
            }
            log.info(
                "summary of %s reset: session %s held a forgotten speaker's words (%s)",
                pair_ref(run.user_id, run.character_id),
                run_id,
                reset,
            )
            remaining = tx.messages.count_after(run.user_id, run.character_id, 0)
            if remaining:
                self.schedule_condense(tx, run.user_id, run.character_id, remaining)
        return {"shared_call_turns": turns, "shared_call_raw_callbacks": raw}

    def speaker_identity(
        self, tx: Transaction, session: Session, event: SessionEvent | HistoryWindow, uid: str
    ) -> Identity | None:
        """Whose words a speaker's are: the label `<AGENT_MEMORY_LABEL_USER>.<uid>` (with the run's
        character), else a binding of `<agent_id>~<uid>`, else `rtc:<uid>`; None when the label
        names the run's own user (their words are in the run's session already)."""
        # A polled window carries no labels, and the custom-LLM route knows only the pair's.
        labels = {**session.labels, **event.labels}
        user = labels.get(f"{self.settings.label_user_key}.{uid}")
        if user:
            if str(user) == session.user_id:
                return None
            return Identity(str(user), session.character_id, "labels")
        binding = tx.bindings.of_agent(speaker_session_id(session.agent_id, uid))
        if binding is not None:
            return Identity(binding.user_id, binding.character_id, "binding")
        return Identity(f"rtc:{uid}", session.character_id, "rtc")

    def speaker_session(
        self, tx: Transaction, session: Session, uid: str, identity: Identity, ended: bool
    ) -> Session:
        """The session of one speaker of a shared call, created or moved to a better-founded identity."""
        agent_id = speaker_session_id(session.agent_id, uid)
        companion = tx.sessions.get(agent_id)
        if companion is None:
            created = now_ms()
            companion = Session(
                agent_id=agent_id,
                user_id=identity.user_id,
                character_id=identity.character_id,
                identity_source=identity.source,
                status="stopped" if ended else "running",
                channel=session.channel,
                name=session.name,
                start_ms=session.start_ms,
                stop_ms=session.stop_ms,
                labels={},
                rtc_uid=uid,
                first_seen_ms=created,
                updated_ms=created,
            )
            tx.sessions.insert(companion)
            log.info(
                "session %s (a speaker of %s) for %s (%s)",
                agent_id,
                session.agent_id,
                pair_ref(identity.user_id, identity.character_id),
                identity.source,
            )
            if identity.source in FALLBACK_SOURCES:
                # Once per speaker's session, where it is created.
                log.warning(
                    "agent %s (channel %s): speaker uid %s is not named, so their own words are "
                    "kept under %s/%s (session %s), where their next call will not find them. "
                    "Start agents with the label %s.%s naming the user, or bind it: POST /v1/sessions/%s/bind",
                    session.agent_id,
                    session.channel or "<unknown>",
                    uid,
                    user_ref(identity.user_id),
                    identity.character_id,
                    agent_id,
                    self.settings.label_user_key,
                    uid,
                    agent_id,
                )
            return companion
        moved = (identity.user_id, identity.character_id) != (companion.user_id, companion.character_id)
        if moved and IDENTITY_RANK[identity.source] >= IDENTITY_RANK[companion.identity_source]:
            self.move_session(tx, companion, identity)
        elif not (ended and companion.status == "running"):
            return companion
        if ended and companion.status == "running":
            tx.sessions.update(agent_id, {"status": "stopped", "stop_ms": session.stop_ms})
        return tx.sessions.get(agent_id) or companion

    def warn_unidentified(self, event: SessionEvent | HistoryWindow, identity: Identity) -> None:
        """Say that a new session has no user, which labels it had (keys only), and how to fix it."""
        settings = self.settings
        keys = ", ".join(sorted(event.labels)) or "none"
        channel = event.channel or "<unknown>"
        user_key, character_key = settings.label_user_key, settings.label_character_key
        # The platform knows where its start request takes labels; without that, name the keys.
        fix = (
            f"{event.labels_field}.{user_key} (and .{character_key})"
            if event.labels_field
            else f"the labels {user_key!r} (and {character_key!r})"
        )
        log.warning(
            "agent %s (name %s, channel %s) names no user: its labels (keys: %s) have no %r, so its "
            "memory is kept under %s/%s, where the next call will not find it. Start agents with "
            "%s, or set AGENT_MEMORY_LABEL_USER / AGENT_MEMORY_LABEL_CHARACTER to the label keys "
            "you use, or bind it: POST /v1/sessions/%s/bind, or POST /v1/channels/%s/bind when "
            "each user has a channel of their own",
            event.agent_id,
            event.name or "-",
            channel,
            keys,
            user_key,
            user_ref(identity.user_id),
            identity.character_id,
            fix,
            event.agent_id,
            channel,
        )

    def session_to_write(
        self, tx: Transaction, event: SessionEvent | HistoryWindow, stamp: int
    ) -> tuple[Session, ForgetCutoff | None]:
        """The event's session (`ensure_session`) and when its pair was last forgotten (None:
        never). On a shared database the cut-off is read under the user's lock: a forget of the
        user under way is waited for, and it may have deleted the session meanwhile."""
        session = self.ensure_session(tx, event, stamp)
        cutoff = tx.maintenance.forget_cutoff(session.user_id, session.character_id, session.agent_id)
        if cutoff is not None:
            session = self.ensure_session(tx, event, stamp)
        return session, cutoff

    def ensure_session(self, tx: Transaction, event: SessionEvent | HistoryWindow, stamp: int) -> Session:
        """The event's session, created or moved to a better-founded identity."""
        session = tx.sessions.get(event.agent_id)
        identity, uid = self.resolve_identity(
            tx, event, session.rtc_uid if session else None, session.channel if session else None
        )
        if session is None:
            return self.create_session(tx, event, stamp, identity, uid)
        changes = session_changes(session, event, uid)
        tx.sessions.update(session.agent_id, changes)
        moved = (identity.user_id, identity.character_id) != (session.user_id, session.character_id)
        if moved and IDENTITY_RANK[identity.source] >= IDENTITY_RANK[session.identity_source]:
            self.move_session(tx, session, identity)
        elif not changes:
            return session
        return tx.sessions.get(session.agent_id) or session

    def create_session(
        self,
        tx: Transaction,
        event: SessionEvent | HistoryWindow,
        stamp: int,
        identity: Identity,
        uid: str | None,
    ) -> Session:
        """A new session for the event's run, under `identity` (warned about when only a guess)."""
        created = now_ms()
        session = Session(
            agent_id=event.agent_id,
            user_id=identity.user_id,
            character_id=identity.character_id,
            identity_source=identity.source,
            status="running",
            channel=event.channel,
            name=event.name,
            start_ms=event.start_ms or first_time(event.messages) or stamp,
            stop_ms=event.stop_ms if isinstance(event, SessionEvent) else None,
            labels=dict(event.labels),
            rtc_uid=uid,
            first_seen_ms=created,
            updated_ms=created,
        )
        tx.sessions.insert(session)
        log.info(
            "session %s for %s (%s)",
            event.agent_id,
            pair_ref(identity.user_id, identity.character_id),
            identity.source,
        )
        if identity.source in FALLBACK_SOURCES:
            # Here, where the session is created: once per session, not once per callback.
            self.warn_unidentified(event, identity)
        return session

    def move_session(self, tx: Transaction, session: Session, identity: Identity) -> None:
        """Give a session, and its messages, to another (user, character)."""
        user_id, character_id, agent_id = session.user_id, session.character_id, session.agent_id
        old_summary = tx.summaries.get(user_id, character_id)
        stored = tx.messages.fingerprints(agent_id) if old_summary is not None else []
        if old_summary is not None and stored and min(row.id for row in stored) <= old_summary.watermark_id:
            # The old pair's summary holds this session's words: rebuild it without them.
            reset = {
                "summaries": tx.summaries.delete(user_id, character_id),
                "facts": tx.facts.delete_unpinned(user_id, character_id),
            }
            log.info(
                "summary of %s reset: it covered moved session %s (%s)",
                pair_ref(user_id, character_id),
                agent_id,
                reset,
            )
            remaining = tx.messages.count_after(user_id, character_id, 0)
            if remaining:
                self.schedule_condense(tx, user_id, character_id, remaining)
        moved = tx.sessions.move(agent_id, identity.user_id, identity.character_id)
        tx.sessions.update(agent_id, {"identity_source": identity.source})
        log.info(
            "session %s moved from %s to %s (%s, %d messages)",
            agent_id,
            pair_ref(user_id, character_id),
            pair_ref(identity.user_id, identity.character_id),
            identity.source,
            moved,
        )
        if moved:
            self.schedule_condense(tx, identity.user_id, identity.character_id, moved)
            if self.settings.embeddings_model:
                # The copies have new ids; the originals' vectors went with them.
                schedule_embedding(tx, identity.user_id, identity.character_id, moved)

    def bind(self, tx: Transaction, agent_id: str, user_id: str, character_id: str) -> Session | None:
        """Tie an agent run to a user and character; an existing session moves at once.

        Returns the run's session, None when it has not been seen yet (it starts there).
        """
        tx.bindings.bind_agent(agent_id, user_id, character_id)
        session = tx.sessions.get(agent_id)
        if session is None:
            return None
        if (session.user_id, session.character_id) != (user_id, character_id):
            self.move_session(tx, session, Identity(user_id, character_id, "binding"))
        else:
            tx.sessions.update(agent_id, {"identity_source": "binding"})
        return tx.sessions.get(agent_id)

    def bind_channel(
        self, tx: Transaction, channel: str, user_id: str, character_id: str
    ) -> tuple[ChannelBinding, list[str]]:
        """Tie a channel to a user and character; returns the binding and the sessions moved.

        The channel's sessions that only it identified (under `channel:<name>` or `rtc:<uid>`,
        or tied by an earlier binding of this channel) move at once; labelled and bound runs stay.
        """
        binding = tx.bindings.bind_channel(channel, user_id, character_id)
        identity = Identity(user_id=user_id, character_id=character_id, source="channel_binding")
        moved: list[str] = []
        for session in tx.sessions.in_channel(channel, (*FALLBACK_SOURCES, "channel_binding")):
            if (session.user_id, session.character_id) != (user_id, character_id):
                self.move_session(tx, session, identity)
                moved.append(session.agent_id)
            elif session.identity_source != "channel_binding":
                tx.sessions.update(session.agent_id, {"identity_source": "channel_binding"})
        if moved:
            log.info(
                "channel %s bound to %s: %d sessions moved",
                channel,
                pair_ref(user_id, character_id),
                len(moved),
            )
        return binding, moved

    # windows

    def merge(
        self,
        tx: Transaction,
        session: Session,
        messages: Sequence[IncomingMessage],
        stamp: int,
        *,
        ended: bool = False,
        cutoff: ForgetCutoff | None = None,
        discrete: bool = False,
    ) -> Outcome:
        """Merge one window of a session's transcript into what is stored of it; `ended`: the
        call is over (its whole transcript), so no more turns are coming to wait for; `cutoff`:
        when the pair was last forgotten (what was said before it is left out); `discrete`: each
        message names itself (HistoryWindow.discrete)."""
        agent_id = session.agent_id
        messages, unspoken = self.without_forgotten_speakers(tx, session, messages)
        base_ms = session.start_ms or stamp
        incoming = in_order(messages, base_ms)
        placed = self._place(tx, session, incoming, discrete)
        forgotten = 0
        if cutoff is not None:
            kept = said_after(messages, incoming, placed, cutoff)
            forgotten = len(incoming) - len(kept)
            if forgotten:
                # Placed again without them, as if they had never been sent.
                incoming = [incoming[index] for index in kept]
                placed = (
                    self._place(tx, session, incoming, discrete)
                    if incoming
                    else Placement([], None, session.gap_count, False)
                )
        for message_id, seq in placed.moves:
            tx.messages.update(message_id, {"seq": seq})
        created_ms = now_ms()
        new_rows: list[NewMessage] = []
        spoken = 0
        for item, (seq, existing, gap_before) in zip(incoming, placed.positions, strict=True):
            if existing is not None:
                changes: MessageChanges = enrichment(existing, item)
                if existing.gap_before and not gap_before:
                    changes["gap_before"] = False  # this window proves the gap was none
                tx.messages.update(existing.id, changes)
                continue
            new_rows.append(stored_form(item, session, seq, gap_before, created_ms))
            spoken += item.kind == TURN
        if placed.gap_after_id is not None:
            tx.messages.update(placed.gap_after_id, {"gap_before": True})
        tx.messages.insert(new_rows)
        gaps = placed.gap_count
        if new_rows or gaps != session.gap_count:
            tx.sessions.update(
                agent_id, {"message_count": session.message_count + len(new_rows), "gap_count": gaps}
            )
        if placed.new_gap:
            log.warning(
                "session %s: a window of %d messages overlaps nothing stored; gap recorded",
                agent_id,
                len(incoming),
            )
        if spoken:
            self.schedule_condense(tx, session.user_id, session.character_id, spoken, ended=ended)
            if self.settings.embeddings_model:
                schedule_embedding(tx, session.user_id, session.character_id, spoken)
        return Outcome(
            "done",
            agent_id=agent_id,
            new_messages=len(new_rows),
            gap=placed.new_gap,
            user_id=session.user_id,
            character_id=session.character_id,
            forgotten=forgotten + unspoken,
        )

    @staticmethod
    def _place(
        tx: Transaction, session: Session, incoming: list[Arrival], discrete: bool = False
    ) -> Placement:
        """Place a window against the stored tail when that explains it, else the whole session;
        messages that each name themselves, one by one against the whole session."""
        agent_id, count = session.agent_id, session.message_count
        if discrete:
            return place_items(tx.messages.fingerprints(agent_id) if count else [], incoming)
        if not count:
            return place_window([], incoming)
        # A poll's window overlaps the newest messages: reading a long call whole each time
        # would make every merge cost as much as the call so far.
        tail_size = 2 * len(incoming) + 16
        if count > tail_size and not session.gap_count:
            tail = tx.messages.tail(agent_id, tail_size)
            offset = align(keys_of(tail), keys_of(incoming))
            if offset is not None and offset >= 0:
                return place_window(tail, incoming)
        return place_window(tx.messages.fingerprints(agent_id), incoming)

    def schedule_condense(
        self, tx: Transaction, user_id: str, character_id: str, new: int, *, ended: bool = False
    ) -> None:
        """Debounce the pair's condense job (the database is the queue); after a call ended the
        wait is `summary_after_call_s`: the next call may start any minute."""
        settings = self.settings
        delay_s = (
            min(settings.summary_after_call_s, settings.summary_delay_s)
            if ended
            else settings.summary_delay_s
        )
        tx.jobs.schedule(
            CONDENSE,
            user_id,
            character_id,
            delay_ms=round(delay_s * 1000),
            max_wait_ms=round(settings.summary_max_wait_s * 1000),
            max_messages=settings.summary_max_messages,
            new_messages=new,
        )
