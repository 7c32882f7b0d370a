"""Whose each run is: its session created under the best-founded identity, moved when a better one comes, bound."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import ChannelBinding, Session
from agent_memory.core.events import FALLBACK_SOURCES, HistoryWindow, Identity, IdentitySource, SessionEvent
from agent_memory.logs import pair_ref, user_ref
from agent_memory.memory.embedding import schedule_embedding
from agent_memory.memory.ingest.arrivals import first_time
from agent_memory.memory.jobs import schedule_condense
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetCutoff, SessionChanges

log = logging.getLogger(__package__)  # ingest logs as one (docs/memory.md quotes its lines)

IDENTITY_RANK: dict[IdentitySource, int] = {
    "channel": 0,
    "rtc": 1,
    "channel_binding": 2,
    "binding": 3,
    # A caller's number (labels made of it): below ids the platform was given for the call.
    "phone": 4,
    "labels": 5,
}


def better_founded(identity: Identity, session: Session) -> bool:
    """Whether `identity` names another pair than the session's, on grounds at least as good."""
    moved = (identity.user_id, identity.character_id) != (session.user_id, session.character_id)
    return moved and IDENTITY_RANK[identity.source] >= IDENTITY_RANK[session.identity_source]


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


@dataclass(frozen=True, slots=True)
class Stored:
    """What applying an event reads first, read already in the transaction under its locks: the
    event's session (None: it has none), and when the pair its labels name was last forgotten
    (`cutoff`, for `pair`; None: not read)."""

    session: Session | None
    pair: tuple[str, str] | None = None
    cutoff: ForgetCutoff | None = None


class Sessions:
    """Finds, creates, moves and binds the sessions events write in; used on the writer thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

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
        labelled = self.labelled_pair(event)
        if labelled is not None:
            user, character = labelled
            uid = known_uid or self.own_speaker(event, user)
            return Identity(user_id=user, character_id=character, source=event.labels_source), uid
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

    def labelled_pair(self, event: SessionEvent | HistoryWindow) -> tuple[str, str] | None:
        """The (user, character) the event's labels name (None: no user label)."""
        labels = event.labels
        user = labels.get(self.settings.label_user_key)
        if not user:
            return None
        return user, labels.get(self.settings.label_character_key) or self.settings.default_character

    def opening_reads(
        self, tx: Transaction, event_id: str, event: SessionEvent | HistoryWindow
    ) -> tuple[bool, Stored]:
        """Whether the event was recorded (`Inbox.has`), then its session and, when its labels name
        a pair, that pair's forget cut-off, each under its lock in that order (the event's, the
        session's, the user's shared), read together: one round trip on a shared database."""
        pair = self.labelled_pair(event)
        reads = [tx.sessions.get_read(event.agent_id)]
        if pair is not None:
            reads.append(tx.maintenance.cutoff_read(*pair, event.agent_id))
        recorded, rows = tx.inbox.has_then(event_id, reads)
        session = tx.sessions.session_from(rows[0])
        if pair is None:
            return recorded, Stored(session)
        return recorded, Stored(session, pair, tx.maintenance.cutoff_from(rows[1]))

    def own_speaker(self, event: SessionEvent | HistoryWindow, user_id: str | None) -> str | None:
        """The run's own speaker (its user's RTC uid): the first to say something whom no label
        `<AGENT_MEMORY_LABEL_USER>.<uid>` names as someone else; the others' own words are also
        kept apart (`Speakers.keep_apart`)."""
        key = self.settings.label_user_key
        for message in event.messages:
            if message.role == "user" and message.speaker:
                named = event.labels.get(f"{key}.{message.speaker}")
                if named is None or str(named) == user_id:
                    return message.speaker
        return None

    def session_to_write(
        self, tx: Transaction, event: SessionEvent | HistoryWindow, stamp: int, stored: Stored | None = None
    ) -> tuple[Session, ForgetCutoff | None]:
        """The event's session (`ensure_session`; `stored`: as read already) and when its pair was
        last forgotten (None: never). On a shared database the cut-off is read under the user's
        lock: a forget of the user under way is waited for, and it may have deleted the session
        meanwhile (so it is read again)."""
        session = self.ensure_session(tx, event, stamp, stored)
        if stored is not None and stored.pair == (session.user_id, session.character_id):
            cutoff = stored.cutoff  # read already, under the same lock
        else:
            cutoff = tx.maintenance.forget_cutoff(session.user_id, session.character_id, session.agent_id)
        if cutoff is not None:
            session = self.ensure_session(tx, event, stamp)
        return session, cutoff

    def ensure_session(
        self, tx: Transaction, event: SessionEvent | HistoryWindow, stamp: int, stored: Stored | None = None
    ) -> Session:
        """The event's session, created or moved to a better-founded identity; `stored`: as read
        already in this transaction, under its lock (None: read it)."""
        session = tx.sessions.get(event.agent_id) if stored is None else stored.session
        identity, uid = self.resolve_identity(
            tx, event, session.rtc_uid if session else None, session.channel if session else None
        )
        if session is None:
            return self.create_session(tx, event, stamp, identity, uid)
        changes = session_changes(session, event, uid)
        tx.sessions.update(session.agent_id, changes)
        if better_founded(identity, session):
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
        # A condense of the old pair under way may have read this session, covered by no summary
        # yet: its result is dropped.
        tx.maintenance.mark_reset(user_id, character_id)
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
                schedule_condense(tx, self.settings, user_id, character_id, remaining)
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
            schedule_condense(tx, self.settings, identity.user_id, identity.character_id, moved)
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
