"""What the statistics mean, and the pure helpers that shape a report (the store counts: store.shared.analytics).

Definitions (the HTTP answers and `agent-memory stats` repeat them):
- sessions: agent runs (rows of `sessions`), whatever their status.
- messages: messages ever taken in (the sessions' `message_count`, which retention does not
  lower); `messages_stored`: those still held.
- talk time: the sum over sessions of `stop_ms - start_ms`, where both are known and the run
  lasted at most a day (longer ones carry placeholder times).
- interruption rate: stored assistant messages marked interrupted / stored assistant messages.
- llm_failure rate: stored assistant messages whose source is `llm_failure` (or the older
  spelling `llm failure`) / stored assistant messages.
- latency percentiles: nearest rank (the value at rank ceil(p * n) of the sorted values),
  per metric as Agora names it (111 `metrics[]`: asr_ttlw, llm_ttfb, llm_ttfs, tts_ttfb;
  112 `turns[].metrics`: e2e_latency_ms and each segment of segmented_latency_ms; 112 turn
  timing: turn_duration_ms, speech_duration_ms, playback_duration_ms), and per stage, one
  value per turn: asr = asr_ttlw; llm = llm_ttfb, else llm_ttft, else llm_ttfa; tts =
  tts_ttfb; end_to_end = e2e_latency_ms (measured by Agora, 112), else total_delay (111),
  else asr + llm + tts of that turn (Agora's own sum, without its optional AIVAD/BHVS
  delays: a lower bound). Each stage says how many of its values were derived.
- message counts and rates count spoken turns; tool calls and tool results the LLM made
  are `tool_items`.
- callbacks: raw callbacks received in the window that failed (nothing applied) or were
  partial (some parts set aside); `agent-memory reprocess` applies them again.
- last active: the latest session stop (or start, while running) or stored message time.
- unidentified sessions: sessions no label or binding tied to a user, kept under `rtc:<uid>`
  or `channel:<name>` (identity_source rtc or channel) / sessions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
# Duration of a session when both ends are known, in order and plausible: an agent run
# longer than a day says its times are placeholders (Agora's own examples carry start_ts
# 1000), and one such run must not swamp everyone's talk time.
MAX_SESSION_MS = 24 * 3600 * 1000
# One value per turn and stage, in order of preference (see the module's definitions).
STAGES: dict[str, tuple[str, ...]] = {
    "asr": ("asr_ttlw",),
    "llm": ("llm_ttfb", "llm_ttft", "llm_ttfa"),
    "tts": ("tts_ttfb",),
    "end_to_end": ("e2e_latency_ms", "total_delay"),
}
STAGE_METRICS = tuple(dict.fromkeys(name for names in STAGES.values() for name in names))

# A latency report: per metric or stage, count, mean, min, percentiles and max.
Latencies = dict[str, dict[str, Any]]
Row = dict[str, Any]


def nearest_rank(fraction: float, count: int) -> int:
    """The index, in `count` sorted values, of the percentile `fraction` by nearest rank."""
    return max(1, math.ceil(fraction * count)) - 1


def stage_stats(turns: Iterable[Sequence[float | None]]) -> Latencies:
    """The summary of each stage over turns of (asr, llm, tts, end_to_end) values."""
    values: dict[str, list[float]] = {stage: [] for stage in STAGES}
    derived = 0
    for asr, llm, tts, end_to_end in turns:
        for stage, value in (("asr", asr), ("llm", llm), ("tts", tts)):
            if value is not None:
                values[stage].append(value)
        if end_to_end is None and asr is not None and llm is not None and tts is not None:
            end_to_end, derived = asr + llm + tts, derived + 1
        if end_to_end is not None:
            values["end_to_end"].append(end_to_end)
    stats = {stage: summary(found) for stage, found in values.items() if found}
    if "end_to_end" in stats:
        stats["end_to_end"]["derived"] = derived
    return stats


def summary(values: list[float]) -> dict[str, Any]:
    """count, mean, min, nearest-rank percentiles and max of some values, in ms."""
    ordered = sorted(values)
    entry: dict[str, Any] = {
        "count": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 2),
        "min": ordered[0],
    }
    for label, fraction in PERCENTILES:
        entry[label] = ordered[nearest_rank(fraction, len(ordered))]
    entry["max"] = ordered[-1]
    return entry


def rate(count: int, of: int) -> dict[str, Any]:
    """A count, what it is out of, and the share (None when there is nothing to divide)."""
    return {"count": count, "of": of, "rate": round(count / of, 4) if of else None}


def minutes(ms: int) -> float:
    """Milliseconds as minutes, two decimals."""
    return round(ms / 60_000, 2)


def last_active(sessions: Row, stored: Row) -> int | None:
    """The latest known session time or stored message time of aggregate rows."""
    known = [stamp for stamp in (sessions["last_session_ms"], stored["last_message_ms"]) if stamp is not None]
    return max(known) if known else None


def with_minutes(rows: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Rows holding `talk_ms`, each with its minutes too."""
    return [{**row, "minutes_talked": minutes(row["talk_ms"])} for row in rows]


def talked(sessions: Row, stored: Row) -> dict[str, Any]:
    """Messages, the stored-message counts and their two rates, and talk time of aggregate rows."""
    return {
        "messages": sessions["messages"],
        "messages_stored": stored["messages_stored"],
        "user_messages": stored["user_messages"],
        "assistant_messages": stored["assistant_messages"],
        "tool_items": stored["tool_items"],
        "interruptions": rate(stored["interrupted"], stored["assistant_messages"]),
        "llm_failures": rate(stored["llm_failures"], stored["assistant_messages"]),
        "talk_ms": sessions["talk_ms"],
        "minutes_talked": minutes(sessions["talk_ms"]),
    }
