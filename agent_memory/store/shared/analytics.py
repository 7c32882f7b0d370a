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
from collections.abc import Iterable, Sequence
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
# Each stage's value of one turn, as columns of a query grouped by (agent, turn), over metrics `a`.
_PICK = {name: f"max(a.value_ms) FILTER (WHERE a.metric = '{name}')" for name in STAGE_METRICS}
STAGE_COLUMNS = ", ".join(
    (f"coalesce({', '.join(_PICK[name] for name in names)})" if len(names) > 1 else _PICK[names[0]])
    + f" AS {stage}"
    for stage, names in STAGES.items()
)

# A latency report: per metric or stage, count, mean, min, percentiles and max.
Latencies = dict[str, dict[str, Any]]
Row = dict[str, Any]


def window(column: str, since_ms: int | None, until_ms: int | None, mark: str) -> tuple[str, list[Any]]:
    """` AND column >= since AND column < until` for the bounds given, `mark` being the placeholder."""
    sql, params = "", list[Any]()
    if since_ms is not None:
        sql += f" AND {column} >= {mark}"
        params.append(since_ms)
    if until_ms is not None:
        sql += f" AND {column} < {mark}"
        params.append(until_ms)
    return sql, params


def metrics_source(
    character_id: str | None, since_ms: int | None, until_ms: int | None, mark: str
) -> tuple[str, str, list[Any]]:
    """FROM, WHERE and parameters of the metrics a latency query reads (of a character, in a window)."""
    source = "FROM agent_metrics a"
    where, params = window("a.at_ms", since_ms, until_ms, mark)
    if character_id is not None:
        source += " JOIN sessions s ON s.agent_id = a.agent_id"
        where += f" AND s.character_id = {mark}"
        params.append(character_id)
    return source, where, params


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


def with_minutes(rows: Iterable[Row]) -> list[Row]:
    """Rows holding `talk_ms`, each with its minutes too."""
    return [{**row, "minutes_talked": minutes(row["talk_ms"])} for row in rows]


def talk(sessions: Row, stored: Row) -> dict[str, Any]:
    """Messages, message rates and talk time of aggregate session and message rows."""
    return {
        "messages": sessions["messages"],
        **message_rates(stored),
        "talk_ms": sessions["talk_ms"],
        "minutes_talked": minutes(sessions["talk_ms"]),
    }


def user_report(
    user_id: str,
    sessions: Row,
    stored: Row,
    *,
    characters: int,
    favourites: Iterable[Row],
    facts: int,
    summaries: int,
) -> dict[str, Any]:
    """One user's report from its aggregate rows."""
    return {
        "user_id": user_id,
        "sessions": sessions["sessions"],
        **talk(sessions, stored),
        "characters": characters,
        "favourite_characters": with_minutes(favourites),
        "first_active_ms": sessions["first_active_ms"],
        "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
        "agent_errors": sessions["agent_errors"],
        "facts": facts,
        "summaries": summaries,
    }


def character_report(
    character_id: str,
    window_ms: tuple[int | None, int | None],
    sessions: Row,
    stored: Row,
    *,
    top_users: Iterable[Row],
    latency: Latencies,
    stages: Latencies,
) -> dict[str, Any]:
    """One character's report from its aggregate rows and latencies."""
    return {
        "character_id": character_id,
        "window": {"since_ms": window_ms[0], "until_ms": window_ms[1]},
        "active_users": sessions["users"],
        "sessions": sessions["sessions"],
        **talk(sessions, stored),
        "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
        "agent_errors": sessions["agent_errors"],
        "top_users": with_minutes(top_users),
        "latency_ms": latency,
        "latency_stages_ms": stages,
    }


def overall_report(
    window_ms: tuple[int | None, int | None],
    sessions: Row,
    stored: Row,
    *,
    by_status: Iterable[Row],
    unidentified: int,
    reasons: Iterable[Row],
    top_characters: Iterable[Row],
    latency: Latencies,
    stages: Latencies,
    callbacks: dict[str, int],
) -> dict[str, Any]:
    """The whole service's report from its aggregate rows, latencies and callback problems."""
    return {
        "window": {"since_ms": window_ms[0], "until_ms": window_ms[1]},
        "users": sessions["users"],
        "characters": sessions["characters"],
        "sessions": sessions["sessions"],
        "sessions_by_status": {row["status"]: row["n"] for row in by_status},
        "unidentified_sessions": rate(unidentified, sessions["sessions"]),
        "stop_reasons": {row["reason"]: row["n"] for row in reasons},
        **talk(sessions, stored),
        "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
        "agent_errors": sessions["agent_errors"],
        "top_characters": with_minutes(top_characters),
        "latency_ms": latency,
        "latency_stages_ms": stages,
        "callbacks": callbacks,
    }
