"""Incoming messages in the form they are stored in: dated, fingerprinted, kept or left out by a forget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent_memory.core.alignment import Placement, canonical, fingerprint
from agent_memory.core.domain import Session
from agent_memory.core.events import TURN, IncomingMessage, MessageKind
from agent_memory.core.jsonutil import dumps
from agent_memory.core.records import record
from agent_memory.store import Transaction
from agent_memory.store.types import ForgetCutoff

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


def stored_values(item: Arrival, session: Session, seq: int, gap_before: bool, created_ms: int) -> list[Any]:
    """A placed arrival as the values a store inserts, in `MESSAGE_COLUMNS` order (`NewMessage`'s),
    its flags as integers: a list, not a `NewMessage` dict to be read into one (32 per callback)."""
    return [
        session.agent_id,
        session.user_id,
        session.character_id,
        seq,
        item.role,
        item.kind,
        item.content,
        item.turn_id,
        item.ts_ms,
        item.at_ms,
        item.source,
        item.speaker,
        int(item.interrupted),
        item.interrupt_ms,
        item.original,
        item.fp,
        int(gap_before),
        item.extra_json,
        created_ms,
        item.images_json,
    ]


def without_forgotten_speakers(
    tx: Transaction, session: Session, messages: Sequence[IncomingMessage]
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
