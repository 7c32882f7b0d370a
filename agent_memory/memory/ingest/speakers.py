"""The other speakers of a shared call: each one's own words kept in a session of their own."""

from __future__ import annotations

import logging
from dataclasses import replace

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import Session
from agent_memory.core.events import (
    FALLBACK_SOURCES,
    TURN,
    HistoryWindow,
    Identity,
    IncomingMessage,
    Outcome,
    SessionEvent,
)
from agent_memory.logs import pair_ref, user_ref
from agent_memory.memory.ingest.arrivals import speaker_session_id
from agent_memory.memory.ingest.merge import merge
from agent_memory.memory.ingest.sessions import Sessions, better_founded
from agent_memory.memory.jobs import schedule_condense
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetReceipt

log = logging.getLogger(__package__)  # ingest logs as one (docs/memory.md quotes its lines)


class Speakers:
    """Merges each other speaker's turns of a shared call into their own session."""

    def __init__(self, settings: Settings, sessions: Sessions) -> None:
        self.settings = settings
        self.sessions = sessions

    def keep_apart(
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
        if not by_uid:  # the usual call: no one else spoke
            return outcome
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
            merged = merge(
                tx, self.settings, companion, messages, stamp, ended=ended, cutoff=cutoff, discrete=discrete
            )
            forgotten += merged.forgotten
        # A raw body holding words said before a speaker's forget is not kept either.
        return replace(outcome, forgotten=outcome.forgotten + forgotten) if forgotten else outcome

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
        if better_founded(identity, companion):
            self.sessions.move_session(tx, companion, identity)
        elif not (ended and companion.status == "running"):
            return companion
        if ended and companion.status == "running":
            tx.sessions.update(agent_id, {"status": "stopped", "stop_ms": session.stop_ms})
        return tx.sessions.get(agent_id) or companion

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
            # A condense of the owner under way read these turns: its result is dropped too.
            tx.maintenance.mark_reset(run.user_id, run.character_id)
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
                schedule_condense(tx, self.settings, run.user_id, run.character_id, remaining)
        return {"shared_call_turns": turns, "shared_call_raw_callbacks": raw}
