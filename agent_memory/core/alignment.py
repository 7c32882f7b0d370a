"""Transcript alignment: where a window of messages sits in a stored transcript.

Pure functions. The stored transcript is a session's `MessageFingerprint`s in order; the
window is anything `Comparable` (ingest's incoming messages). Each message is fingerprinted
by role and content (the fields every source sends); a window is placed where it agrees with
the stored transcript on every overlapping position, and only what lies outside the stored
part is new. Overlapping messages that arrive with more detail (turn, time, interruption)
enrich the stored row. A window that overlaps nothing is placed by time, as a new part after
a gap.

A reply this service relayed from the upstream model (`RELAYED`) is its own copy, kept until
the platform's arrives: it may say more or less than what the user heard, so at its place any
copy of the same role is it, and the platform's copy (text, interruption) wins over it,
whichever of the two was merged first.

Tool calls and results (never said) are not evidence of where a window sits: one source may
send them and another not, or in another shape (a custom-LLM request's OpenAI messages, a
platform's end-of-call report). Where either side holds any, the spoken turns are aligned
alone, and each tool item of the window is the stored one of its kind between the same two
turns (its own copy by fingerprint first, else the next of its kind, in order).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from agent_memory.core.domain import MessageChanges, MessageFingerprint
from agent_memory.core.events import RELAYED, TURN

# Repeated contents ("ok", "") may stand in many places; a window is placed by the
# most recent ones only.
MAX_POSITIONS_PER_FINGERPRINT = 64


def fingerprint(role: str, content: str, tool: str = "", item_id: str | None = None) -> str:
    """What identifies a message across windows from any source.

    A spoken turn is its role and content; a tool call or result adds its tool data
    (`tool`, canonical JSON), which every copy of it carries. An item its source names by an
    id (`item_id`) is that id and its role: its copies are the same item whatever their words.
    """
    if item_id is not None:
        text = f"{role}\x00\x01id\x00{item_id}"
    else:
        text = f"{role}\x00{content.strip()}" + (f"\x00{tool}" if tool else "")
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def canonical(value: Any) -> str:
    """JSON that is the same for equal values, whatever the key order."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


class Comparable(Protocol):
    """What alignment compares of a message: its fingerprint, and its time and turn when known."""

    @property
    def role(self) -> str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def fp(self) -> str: ...
    @property
    def ts_ms(self) -> int | None: ...
    @property
    def turn_id(self) -> int | None: ...
    @property
    def kind(self) -> str: ...


class Identified(Comparable, Protocol):
    """A message that names itself: by its source's id (`keyed`), else by its role, words and time."""

    @property
    def keyed(self) -> bool: ...


class Enrichable(Comparable, Protocol):
    """A later copy of a message: the fields it may add to or correct in the stored one."""

    @property
    def content(self) -> str: ...
    @property
    def speaker(self) -> str | None: ...
    @property
    def interrupted(self) -> bool: ...
    @property
    def interrupt_ms(self) -> int | None: ...
    @property
    def original(self) -> str | None: ...
    @property
    def images_json(self) -> str | None: ...


# A message as alignment sees it: its fingerprint, its time and turn when known, and its
# role, marked `~` for a relayed copy (which stands for any copy of that role at its place).
Key = tuple[str, int | None, int | None, str]


def relayed(message: Comparable) -> bool:
    """Whether a message is this service's own copy of a reply it relayed (the platform's wins)."""
    return message.source == RELAYED


def key_of(message: Comparable) -> Key:
    """What alignment compares of a stored or incoming message."""
    return (
        message.fp,
        message.ts_ms,
        message.turn_id,
        f"~{message.role}" if relayed(message) else message.role,
    )


def keys_of(messages: Sequence[Comparable]) -> list[Key]:
    """`key_of` each message, in order."""
    return [key_of(m) for m in messages]


def same_message(a: Key | str, b: Key | str) -> bool:
    """Same role and content (or a relayed copy and another of its role), and no disagreement
    on time or turn where both know it."""
    a_fp, a_ts, a_turn, a_role = (a, None, None, "") if isinstance(a, str) else a
    b_fp, b_ts, b_turn, b_role = (b, None, None, "") if isinstance(b, str) else b
    if a_fp != b_fp and not ("~" in a_role + b_role and a_role.lstrip("~") == b_role.lstrip("~") != ""):
        return False
    return (a_ts is None or b_ts is None or a_ts == b_ts) and (
        a_turn is None or b_turn is None or a_turn == b_turn
    )


def align(stored: Sequence[Key | str], window: Sequence[Key | str]) -> int | None:
    """Where `window[0]` sits in `stored` (may be negative or past the end), or None.

    The chosen offset agrees with `stored` on every position the two share and shares
    the most positions; among equals, the latest offset wins. A repeated content ("Are
    you still there?") matches only where its time and turn do not say otherwise. Only
    equal contents vote for an offset; a relayed copy need only agree with it.
    """
    if not stored or not window:
        return None
    positions: dict[str, list[int]] = defaultdict(list)
    for index, item in enumerate(stored):
        positions[item if isinstance(item, str) else item[0]].append(index)
    votes: Counter[int] = Counter()
    for j, item in enumerate(window):
        fp, ts, turn = (item, None, None) if isinstance(item, str) else item[:3]
        found = positions.get(fp)
        if not found:
            continue
        # `same_message` of two equal fingerprints, inline (a call's repeated words put many
        # positions behind one fingerprint, and this runs for each of them).
        for p in found[-MAX_POSITIONS_PER_FINGERPRINT:]:
            other = stored[p]
            if isinstance(other, str) or (
                (ts is None or other[1] is None or other[1] == ts)
                and (turn is None or other[2] is None or other[2] == turn)
            ):
                votes[p - j] += 1
    for offset, _ in sorted(votes.items(), key=lambda item: (-item[1], -item[0])):
        start, stop = max(0, offset), min(len(stored), offset + len(window))
        if all(same_message(stored[p], window[p - offset]) for p in range(start, stop)):
            return offset
    return None


def enrichment(stored: MessageFingerprint, incoming: Enrichable) -> MessageChanges:
    """The fields a later copy of a stored message adds or corrects.

    A field the copy leaves empty says nothing: turn 0 is a turn, but time 0 and "not
    interrupted" are not (a copy without the flag must not clear it). Between a relayed copy
    and the platform's, the platform's wins (`correction`).
    """
    if relayed(incoming) != relayed(stored):
        return correction(stored, incoming) if relayed(stored) else {}
    changes = placing(stored, incoming)
    if incoming.source is not None and incoming.source != stored.source:
        changes["source"] = incoming.source
    if incoming.interrupted and not stored.interrupted:
        changes["interrupted"] = True
    if incoming.interrupt_ms and incoming.interrupt_ms != stored.interrupt_ms:
        changes["interrupt_ms"] = incoming.interrupt_ms
    if incoming.original is not None and incoming.original != stored.original:
        changes["original"] = incoming.original
    return changes


def placing(stored: MessageFingerprint, incoming: Enrichable) -> MessageChanges:
    """What any later copy adds of where and by whom a message was said, and its images."""
    changes: MessageChanges = {}
    if incoming.turn_id is not None and incoming.turn_id != stored.turn_id:
        changes["turn_id"] = incoming.turn_id
    if incoming.ts_ms and incoming.ts_ms != stored.ts_ms:
        # When it was said is also where it sits in conversation order.
        changes["ts_ms"] = changes["at_ms"] = incoming.ts_ms
    if incoming.speaker is not None and incoming.speaker != stored.speaker:
        changes["speaker"] = incoming.speaker
    if incoming.images_json and not stored.images_json:
        # A copy that lost a turn's images (text only) never clears those kept.
        changes["images"] = incoming.images_json
    return changes


def correction(stored: MessageFingerprint, incoming: Enrichable) -> MessageChanges:
    """The platform's copy of a reply stored as this service relayed it: what the user heard.

    Its text replaces what was relayed, and its source the relayed mark. A copy with
    metadata (a source) says whether the reply was interrupted, "not" included (Agora:
    absent means false); a bare copy (role and content only) leaves the relayed flag.
    """
    changes = placing(stored, incoming)
    changes["source"] = incoming.source or "llm"
    if incoming.fp != stored.fp:
        changes["content"], changes["fp"] = incoming.content, incoming.fp
    if incoming.source is not None:
        if incoming.interrupted != stored.interrupted:
            changes["interrupted"] = incoming.interrupted
        if incoming.interrupt_ms != stored.interrupt_ms:
            changes["interrupt_ms"] = incoming.interrupt_ms
        if incoming.original != stored.original:
            changes["original"] = incoming.original
    return changes


# Room left in the session's sequence numbers on each side of a gap, so that a later
# window that fills the gap can be numbered in place.
GAP_ROOM = 1 << 20

# Where one window message goes: its seq, the stored message it is (None: new), and
# whether a gap comes before it.
Position = tuple[int, MessageFingerprint | None, bool]


@dataclass(slots=True)
class Placement:
    """Where each message of a window goes."""

    positions: list[Position]
    gap_after_id: int | None  # a stored message that now follows a gap
    gap_count: int
    new_gap: bool
    # Stored messages renumbered to make room (id, new seq), highest first: the order in which
    # moving them never meets a seq still taken.
    moves: list[tuple[int, int]] = field(default_factory=list)


def segments_of(stored: Sequence[MessageFingerprint]) -> list[list[MessageFingerprint]]:
    """The stored transcript cut at its gaps."""
    segments: list[list[MessageFingerprint]] = []
    for row in stored:
        if not segments or row.gap_before:
            segments.append([])
        segments[-1].append(row)
    return segments


def map_window(
    stored: Sequence[MessageFingerprint],
    incoming: Sequence[Comparable],
    aligned: tuple[list[Key], int | None] | None = None,
) -> list[MessageFingerprint | None]:
    """The stored message each window message is: the spoken turns aligned (`map_run`), then
    the tool items matched between them (`match_tools`); `aligned`: the window's keys and their
    `align` against the whole of `stored`, already found."""
    if all(row.kind == TURN for row in stored) and all(m.kind == TURN for m in incoming):
        if aligned is not None:
            return map_run(segments_of(stored), stored, aligned[0], known=aligned[1])
        return map_run(segments_of(stored), stored, keys_of(incoming))
    said = [j for j, message in enumerate(incoming) if message.kind == TURN]
    segments = [[row for row in segment if row.kind == TURN] for segment in segments_of(stored)]
    segments = [segment for segment in segments if segment]
    turns = map_run(
        segments, [row for segment in segments for row in segment], keys_of([incoming[j] for j in said])
    )
    if not any(turns):
        # No spoken turn in common (a window of tool items alone): placed as one run.
        return map_run(segments_of(stored), stored, keys_of(incoming))
    mapping: list[MessageFingerprint | None] = [None] * len(incoming)
    for j, row in zip(said, turns, strict=True):
        mapping[j] = row
    match_tools(stored, incoming, mapping)
    return mapping


def map_run(
    segments: Sequence[Sequence[MessageFingerprint]],
    stored: Sequence[MessageFingerprint],
    window: Sequence[Key],
    *,
    known: int | Literal[False] | None = False,
) -> list[MessageFingerprint | None]:
    """The stored message each of `window` is, aligning against each gap-free segment of `stored`
    (`known`: the window's `align` against the whole of `stored`, when already found)."""
    mapping: list[MessageFingerprint | None] = [None] * len(window)
    # One segment is the whole of `stored`: its alignment may be known already.
    whole = known is not False and len(segments) == 1
    for segment in segments:
        offset = known if whole and known is not False else align(keys_of(segment), window)
        if offset is None:
            continue
        for j in range(max(0, -offset), min(len(window), len(segment) - offset)):
            mapping[j] = mapping[j] or segment[offset + j]
    mapped_seqs = [row.seq for row in mapping if row is not None]
    if mapped_seqs != sorted(mapped_seqs):
        # Segments disagree (repeated contents): trust the single best alignment only.
        offset = align(keys_of(stored), window)
        mapping = [
            stored[offset + j] if offset is not None and 0 <= offset + j < len(stored) else None
            for j in range(len(window))
        ]
    return mapping


def match_tools(
    stored: Sequence[MessageFingerprint],
    incoming: Sequence[Comparable],
    mapping: list[MessageFingerprint | None],
) -> None:
    """Map each tool item of the window (in place) to a stored one of its kind and role between
    the stored turns its window neighbours are; one with nothing to match stays new."""
    turn_seqs = [row.seq for row in stored if row.kind == TURN]
    j = 0
    while j < len(incoming):
        if incoming[j].kind == TURN:
            j += 1
            continue
        end = j
        while end < len(incoming) and incoming[end].kind != TURN:
            end += 1
        low, high = _between(
            turn_seqs, mapping[j - 1] if j else None, mapping[end] if end < len(mapping) else None
        )
        if low is not None or high is not None:
            candidates = [
                row
                for row in stored
                if row.kind != TURN and (low is None or row.seq > low) and (high is None or row.seq < high)
            ]
            _pair_tools(incoming, mapping, range(j, end), candidates)
        j = end


def _between(
    turn_seqs: Sequence[int], before: MessageFingerprint | None, after: MessageFingerprint | None
) -> tuple[int | None, int | None]:
    """The stored seqs a run of tool items lies strictly between: the stored turns its window
    neighbours are, or the stored turn next to the one that is known; (None, None): neither is."""
    if before is None and after is None:
        return None, None
    if before is not None and after is not None:
        return before.seq, after.seq
    if before is not None:
        return before.seq, next((seq for seq in turn_seqs if seq > before.seq), None)
    assert after is not None
    return next((seq for seq in reversed(turn_seqs) if seq < after.seq), None), after.seq


def _pair_tools(
    incoming: Sequence[Comparable],
    mapping: list[MessageFingerprint | None],
    run: range,
    candidates: Sequence[MessageFingerprint],
) -> None:
    """Pair a run of window tool items with stored ones, in order: the same fingerprint first,
    else the next of the same kind and role."""
    start = 0
    for j in run:
        item = incoming[j]
        rest = candidates[start:]
        found = next((k for k, row in enumerate(rest) if row.fp == item.fp), None)
        if found is None:
            found = next(
                (k for k, row in enumerate(rest) if row.kind == item.kind and row.role == item.role), None
            )
        if found is not None:
            mapping[j] = rest[found]
            start += found + 1


def place_window(
    stored: Sequence[MessageFingerprint],
    incoming: Sequence[Comparable],
    aligned: tuple[list[Key], int | None] | None = None,
) -> Placement:
    """Number a window's messages relative to what is stored, and mark the gaps (`aligned`: as
    `map_window` takes it)."""
    if not stored:
        return Placement([(j, None, False) for j in range(len(incoming))], None, 0, False)
    gaps_before = sum(1 for row in stored if row.gap_before)
    mapping = map_window(stored, incoming, aligned)
    first = next((j for j, row in enumerate(mapping) if row is not None), None)
    if first is None:
        return _place_apart(stored, incoming, gaps_before)
    positions = _positions(mapping, first)
    taken = {row.seq for row in stored}
    crowded = [j for j, (seq, row, _) in enumerate(positions) if row is None and seq in taken]
    if crowded and all(incoming[j].kind != TURN for j in crowded):
        # Tool items one copy lacked (between two turns both have): room is made for them.
        return _with_room(stored, mapping, first, gaps_before)
    if crowded:
        # No room where the window belongs: keep it, after everything, as a separate part.
        return _place_apart(stored, incoming, gaps_before, force_after=True)
    return _with_edges(stored, mapping, positions, gaps_before)


def _with_room(
    stored: Sequence[MessageFingerprint],
    mapping: Sequence[MessageFingerprint | None],
    first: int,
    gaps_before: int,
) -> Placement:
    """The window placed where it belongs, the stored messages after each new one numbered on
    (as far as they must be) to make room: new ones before the first stored one go right
    before it, each other one right after the message before it in the window."""
    anchor = mapping[first]
    assert anchor is not None
    ordered = sorted(stored, key=lambda row: row.seq)
    seqs, moved = _make_room(ordered, anchor.id, list(range(first)), _new_after(mapping, first))
    placed = [moved[row.id] if row is not None else None for row in mapping]
    positions: list[Position] = [
        (row.seq, row, row.gap_before and j == 0) if row is not None else (seqs[j], None, False)
        for j, row in enumerate(placed)
    ]
    shifted = [moved[row.id] for row in ordered]
    placement = _with_edges(shifted, placed, positions, gaps_before)
    placement.moves = [
        (row.id, moved[row.id].seq) for row in reversed(ordered) if moved[row.id].seq != row.seq
    ]
    return placement


def _new_after(mapping: Sequence[MessageFingerprint | None], first: int) -> dict[int, list[int]]:
    """The new window items from `first` on, under the id of the stored message before each."""
    after: dict[int, list[int]] = defaultdict(list)
    previous: int | None = None
    for j in range(first, len(mapping)):
        row = mapping[j]
        if row is not None:
            previous = row.id
        else:
            assert previous is not None
            after[previous].append(j)
    return after


def _make_room(
    ordered: Sequence[MessageFingerprint],
    anchor_id: int,
    before_first: Sequence[int],
    after: dict[int, list[int]],
) -> tuple[dict[int, int], dict[int, MessageFingerprint]]:
    """Each new item's seq (by window index) and each stored message as renumbered (by id):
    `before_first` right before the anchor, the items `after` a stored message right after it,
    every stored message moved on only as far as they push it."""
    seqs: dict[int, int] = {}
    moved: dict[int, MessageFingerprint] = {}
    last: int | None = None
    for row in ordered:
        if row.id == anchor_id and before_first:
            start = row.seq - len(before_first) if last is None else last + 1
            for k, j in enumerate(before_first):
                seqs[j] = start + k
            last = start + len(before_first) - 1
        seq = row.seq if last is None else max(row.seq, last + 1)
        moved[row.id] = replace(row, seq=seq) if seq != row.seq else row
        last = seq
        for j in after.get(row.id, ()):
            last += 1
            seqs[j] = last
    return seqs, moved


def _positions(mapping: Sequence[MessageFingerprint | None], first: int) -> list[Position]:
    """Each message's place: a stored one's where it is stored, a new one numbered on from the
    message before it (those before the first stored one, back from it)."""
    anchor = mapping[first]
    assert anchor is not None
    positions: list[Position] = [(anchor.seq - (first - j), None, False) for j in range(first)]
    previous_seq = anchor.seq - 1
    for j in range(first, len(mapping)):
        row = mapping[j]
        if row is not None:
            positions.append((row.seq, row, row.gap_before and j == 0))
            previous_seq = row.seq
        else:
            previous_seq += 1
            positions.append((previous_seq, None, False))
    return positions


def _with_edges(
    stored: Sequence[MessageFingerprint],
    mapping: Sequence[MessageFingerprint | None],
    positions: list[Position],
    gaps_before: int,
) -> Placement:
    """The window placed, with the gaps at its edges marked and the session's gaps recounted."""
    lowest_seq, highest_seq = positions[0][0], positions[-1][0]
    if positions[0][1] is None and any(row.seq < lowest_seq for row in stored):
        positions[0] = (lowest_seq, None, True)
    later = [row for row in stored if row.seq > highest_seq]
    gap_after_id = None
    if positions[-1][1] is None and later and not later[0].gap_before:
        gap_after_id = later[0].id
    # Recount: gaps the window closed go, the ones at its edges stay or appear.
    closed = {row.id for j, row in enumerate(mapping) if row is not None and j > 0}
    remaining = sum(1 for row in stored if row.gap_before and row.id not in closed)
    gap_count = remaining + int(positions[0][2] and positions[0][1] is None) + int(gap_after_id is not None)
    return Placement(positions, gap_after_id, gap_count, gap_count > gaps_before)


def place_items(stored: Sequence[MessageFingerprint], incoming: Sequence[Identified]) -> Placement:
    """Place messages that each name themselves (HistoryWindow.discrete), one by one.

    Each is the stored message of its id (`keyed`), else of its role and words said at the same
    time (where both copies are dated): the same words at another time are another message.
    Each stored message is matched once, so a message said twice in one post is two. What
    matches nothing is new and follows everything stored, in the order given, with no gap
    before it: such a source sends what it has, not overlapping windows of a transcript, so a
    post that overlaps nothing is not evidence of anything missed.
    """
    rows: dict[str, list[MessageFingerprint]] = defaultdict(list)
    for row in stored:
        rows[row.fp].append(row)
    matched: set[int] = set()
    next_seq = max((row.seq for row in stored), default=-1) + 1
    positions: list[Position] = []
    for item in incoming:
        match = next(
            (
                row
                for row in rows.get(item.fp, ())
                if row.id not in matched
                and (item.keyed or item.ts_ms is None or row.ts_ms is None or row.ts_ms == item.ts_ms)
            ),
            None,
        )
        if match is None:
            positions.append((next_seq, None, False))
            next_seq += 1
        else:
            matched.add(match.id)
            positions.append((match.seq, match, False))
    gaps = sum(1 for row in stored if row.gap_before)
    return Placement(positions, None, gaps, False)


def _place_apart(
    stored: Sequence[MessageFingerprint],
    incoming: Sequence[Comparable],
    gaps_before: int,
    *,
    force_after: bool = False,
) -> Placement:
    """A window that overlaps nothing: before or after the stored parts, by time, as a new part."""
    count = len(incoming)
    window_last = max((row.ts_ms for row in incoming if row.ts_ms), default=None)
    segments = segments_of(stored)
    index = len(segments)  # the new part goes before segments[index]
    if window_last is not None and not force_after:
        for k, segment in enumerate(segments):
            first_ts = min((row.ts_ms for row in segment if row.ts_ms), default=None)
            if first_ts is not None and window_last < first_ts:
                index = k
                break
    if index == len(segments):
        start = segments[-1][-1].seq + GAP_ROOM
    elif index == 0:
        start = segments[0][0].seq - GAP_ROOM - count
    else:
        low, high = segments[index - 1][-1].seq, segments[index][0].seq
        start = low + (high - low - count) // 2
        if high - low <= count + 1:
            return _place_apart(stored, incoming, gaps_before, force_after=True)
    positions: list[Position] = [(start + j, None, j == 0 and index > 0) for j in range(count)]
    gap_after_id = None
    if index < len(segments) and not segments[index][0].gap_before:
        gap_after_id = segments[index][0].id
    gap_count = gaps_before + int(index > 0) + int(gap_after_id is not None)
    return Placement(positions, gap_after_id, gap_count, True)
