"""What the statistics mean, and the pure helpers that shape a report, whichever backend counts.

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
from typing import Any

from agent_memory.core.events import FALLBACK_SOURCES

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
# Identity sources that are only a fallback (see ingest.resolve_identity), as an SQL list.
UNIDENTIFIED_SOURCES = ", ".join(f"'{source}'" for source in FALLBACK_SOURCES)
FAVOURITES = 5
TOP = 10
# Duration of a session when both ends are known, in order and plausible: an agent run
# longer than a day says its times are placeholders (Agora's own examples carry start_ts
# 1000), and one such run must not swamp everyone's talk time.
MAX_SESSION_MS = 24 * 3600 * 1000
# One session's talk time, in SQL both backends speak (over sessions `s`).
TALK_MS = (
    "CASE WHEN s.start_ms IS NOT NULL AND s.stop_ms IS NOT NULL AND s.stop_ms > s.start_ms "
    f"AND s.stop_ms - s.start_ms <= {MAX_SESSION_MS} THEN s.stop_ms - s.start_ms ELSE 0 END"
)

# One value per turn and stage, in order of preference (see the module's definitions).
STAGES: dict[str, tuple[str, ...]] = {
    "asr": ("asr_ttlw",),
    "llm": ("llm_ttfb", "llm_ttft", "llm_ttfa"),
    "tts": ("tts_ttfb",),
    "end_to_end": ("e2e_latency_ms", "total_delay"),
}
STAGE_METRICS = tuple(dict.fromkeys(name for names in STAGES.values() for name in names))


def summary(values: list[float]) -> dict[str, Any]:
    """count, mean, min, nearest-rank percentiles and max of some values, in ms."""
    ordered = sorted(values)
    entry: dict[str, Any] = {
        "count": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 2),
        "min": ordered[0],
    }
    for label, fraction in PERCENTILES:
        entry[label] = ordered[max(1, math.ceil(fraction * len(ordered))) - 1]
    entry["max"] = ordered[-1]
    return entry


def rate(count: int, of: int) -> dict[str, Any]:
    """A count, what it is out of, and the share (None when there is nothing to divide)."""
    return {"count": count, "of": of, "rate": round(count / of, 4) if of else None}


def minutes(ms: int) -> float:
    """Milliseconds as minutes, two decimals."""
    return round(ms / 60_000, 2)


def message_rates(row: dict[str, Any]) -> dict[str, Any]:
    """The stored-message counts and the two rates of one aggregate row."""
    return {
        "messages_stored": row["messages_stored"],
        "user_messages": row["user_messages"],
        "assistant_messages": row["assistant_messages"],
        "tool_items": row["tool_items"],
        "interruptions": rate(row["interrupted"], row["assistant_messages"]),
        "llm_failures": rate(row["llm_failures"], row["assistant_messages"]),
    }


def last_active(*stamps: int | None) -> int | None:
    """The latest of the known timestamps."""
    known = [stamp for stamp in stamps if stamp is not None]
    return max(known) if known else None
