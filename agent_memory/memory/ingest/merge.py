"""A window of a transcript merged into its stored session: only what is new inserted, the rest enriched."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agent_memory.core.alignment import Placement, align, enrichment, keys_of, place_items, place_window
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import MessageChanges, MessageFingerprint, Session
from agent_memory.core.events import TURN, IncomingMessage, Outcome
from agent_memory.memory.embedding import schedule_embedding
from agent_memory.memory.ingest.arrivals import (
    Arrival,
    in_order,
    said_after,
    stored_values,
    without_forgotten_speakers,
)
from agent_memory.memory.jobs import schedule_condense
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetCutoff, SessionChanges

log = logging.getLogger(__package__)  # ingest logs as one (docs/memory.md quotes its lines)


def merge(
    tx: Transaction,
    settings: Settings,
    session: Session,
    messages: Sequence[IncomingMessage],
    stamp: int,
    *,
    ended: bool = False,
    cutoff: ForgetCutoff | None = None,
    discrete: bool = False,
    into: SessionChanges | None = None,
    after: MessageFingerprint | None = None,
) -> Outcome:
    """Merge one window of a session's transcript into what is stored of it; `ended`: the
    call is over (its whole transcript), so no more turns are coming to wait for; `cutoff`:
    when the pair was last forgotten (what was said before it is left out); `discrete`: each
    message names itself (HistoryWindow.discrete); `into`: the caller's own changes to the
    session, which it writes after: the session's new counts go there (one update, not two);
    `after`: the session's newest message, which every message of the window is known to follow
    at once (`Ingestor.merge_window` checked it): they are placed after it, not aligned."""
    agent_id = session.agent_id
    messages, unspoken = without_forgotten_speakers(tx, session, messages)
    base_ms = session.start_ms or stamp
    incoming = in_order(messages, base_ms)
    placed = place(tx, session, incoming, discrete, after)
    forgotten = 0
    if cutoff is not None:
        kept = said_after(messages, incoming, placed, cutoff)
        forgotten = len(incoming) - len(kept)
        if forgotten:
            # Placed again without them, as if they had never been sent.
            incoming = [incoming[index] for index in kept]
            placed = (
                place(tx, session, incoming, discrete, after)
                if incoming
                else Placement([], None, session.gap_count, False)
            )
    for message_id, seq in placed.moves:
        tx.messages.update(message_id, {"seq": seq})
    created_ms = now_ms()
    new_rows: list[list[Any]] = []
    spoken = 0
    for item, (seq, existing, gap_before) in zip(incoming, placed.positions, strict=True):
        if existing is not None:
            changes: MessageChanges = enrichment(existing, item)
            if existing.gap_before and not gap_before:
                changes["gap_before"] = False  # this window proves the gap was none
            tx.messages.update(existing.id, changes)
            continue
        new_rows.append(stored_values(item, session, seq, gap_before, created_ms))
        spoken += item.kind == TURN
    if placed.gap_after_id is not None:
        tx.messages.update(placed.gap_after_id, {"gap_before": True})
    tx.messages.insert_values(new_rows)
    gaps = placed.gap_count
    if new_rows or gaps != session.gap_count:
        counts: SessionChanges = {"message_count": session.message_count + len(new_rows), "gap_count": gaps}
        if into is None:
            tx.sessions.update(agent_id, counts)
        else:
            into.update(counts)
    if placed.new_gap:
        log.warning(
            "session %s: a window of %d messages overlaps nothing stored; gap recorded",
            agent_id,
            len(incoming),
        )
    if spoken:
        schedule_condense(tx, settings, session.user_id, session.character_id, spoken, ended=ended)
        if settings.embeddings_model:
            schedule_embedding(tx, session.user_id, session.character_id, spoken)
    return Outcome(
        "done",
        agent_id=agent_id,
        new_messages=len(new_rows),
        gap=placed.new_gap,
        user_id=session.user_id,
        character_id=session.character_id,
        forgotten=forgotten + unspoken,
        counts=(session.message_count + len(new_rows), gaps),
    )


def place(
    tx: Transaction,
    session: Session,
    incoming: list[Arrival],
    discrete: bool = False,
    after: MessageFingerprint | None = None,
) -> Placement:
    """Place a window against the stored tail when that explains it, else the whole session;
    messages that each name themselves, one by one against the whole session; messages known
    to follow the session's newest, `after`, right after it."""
    agent_id, count = session.agent_id, session.message_count
    if after is not None:
        return Placement(
            [(after.seq + 1 + j, None, False) for j in range(len(incoming))], None, session.gap_count, False
        )
    if discrete:
        return place_items(tx.messages.fingerprints(agent_id) if count else [], incoming)
    if not count:
        return place_window([], incoming)
    # A poll's window overlaps the newest messages: reading a long call whole each time
    # would make every merge cost as much as the call so far.
    tail_size = 2 * len(incoming) + 16
    if count > tail_size and not session.gap_count:
        tail = tx.messages.tail(agent_id, tail_size)
        window = keys_of(incoming)
        offset = align(keys_of(tail), window)
        if offset is not None and offset >= 0:
            return place_window(tail, incoming, (window, offset))
    return place_window(tx.messages.fingerprints(agent_id), incoming)
