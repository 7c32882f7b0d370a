"""Transcript alignment: where a window of messages sits in a stored transcript.

Pure functions over message rows (dicts with the storage columns `fp`, `ts_ms`, `turn_id`,
`seq`, `id`, `gap_before`). Each message is fingerprinted by role and content (the fields
every source sends); a window is placed where it agrees with the stored transcript on every
overlapping position, and only what lies outside the stored part is new. Overlapping
messages that arrive with more detail (turn, time, interruption) enrich the stored row. A
window that overlaps nothing is placed by time, as a new part after a gap.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Repeated contents ("ok", "") may stand in many places; a window is placed by the
# most recent ones only.
MAX_POSITIONS_PER_FINGERPRINT = 64


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


# A message as alignment sees it: its fingerprint, and its time and turn when known.
Key = tuple[str, int | None, int | None]


def key_of(row: dict[str, Any]) -> Key:
    """What alignment compares of a stored or incoming row."""
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
