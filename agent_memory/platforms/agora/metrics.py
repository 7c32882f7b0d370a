"""Agora's per-turn measurements (111 `metrics`, 112 `turns`) as neutral metric rows."""

from __future__ import annotations

from typing import Any

from agent_memory.core.clock import as_number, to_ms
from agent_memory.core.events import MetricRow


def metric_rows(items: Any) -> list[MetricRow]:
    """Each numeric per-turn value of a 111 payload's `metrics` (or tolerated `turns`)."""
    rows: list[MetricRow] = []
    for item in items if isinstance(items, list) else ():
        turn_id = _turn(item)
        if turn_id is None:
            continue
        for name, value in item.items():
            ms = _as_float(value)
            if name != "turn_id" and ms is not None and ms >= 0:
                rows.append((turn_id, str(name), ms, None))
    return rows


def turn_rows(turns: Any) -> list[MetricRow]:
    """The latencies and durations of a 112 payload's `turns`, dated by each turn's start.

    Agora documents a turn as `start` {start_at, type, metadata}, `end` {end_at, type,
    metadata} and `metrics` {e2e_latency_ms, segmented_latency_ms} (an object of stage -> ms,
    or a list of {name, latency}: see `stages`).
    A turn with `start_ts`/`stop_ts` instead (an early shape of ours) gives its duration.
    """
    rows: list[MetricRow] = []
    for turn in turns if isinstance(turns, list) else ():
        turn_id = _turn(turn)
        if turn_id is None:
            continue
        start, end = _object(turn.get("start")), _object(turn.get("end"))
        start_ms = to_ms(start.get("start_at", turn.get("start_ts")))
        end_ms = to_ms(end.get("end_at", turn.get("stop_ts")))
        found: dict[str, float | None] = {}
        metrics = _object(turn.get("metrics"))
        found["e2e_latency_ms"] = _as_float(metrics.get("e2e_latency_ms"))
        found.update(stages(metrics.get("segmented_latency_ms")))
        if start_ms is not None and end_ms is not None and end_ms >= start_ms:
            found["turn_duration_ms"] = float(end_ms - start_ms)
        found["speech_duration_ms"] = _as_float(_object(start.get("metadata")).get("speech_duration_ms"))
        playback = _object(end.get("metadata")).get("playback_duration_ms")
        found["playback_duration_ms"] = _as_float(playback)
        rows.extend((turn_id, name, ms, start_ms) for name, ms in found.items() if ms is not None and ms >= 0)
    return rows


def stages(segments: Any) -> dict[str, float | None]:
    """Per-stage latencies of a 112 turn, in either shape Agora documents.

    The webhook page shows an object of stage -> ms (`{"asr_ttlw": 200, "llm_ttft": 600}`);
    the turns API shows a list of `{name, latency}`. Anything else gives nothing.
    """
    if isinstance(segments, dict):
        return {str(name): _as_float(latency) for name, latency in segments.items()}
    found: dict[str, float | None] = {}
    for segment in segments if isinstance(segments, list) else ():
        if isinstance(segment, dict) and isinstance(segment.get("name"), str):
            found[segment["name"]] = _as_float(segment.get("latency"))
    return found


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _turn(item: Any) -> int | None:
    """The integer turn id of a per-turn object, or None."""
    if not isinstance(item, dict):
        return None
    turn_id = _as_float(item.get("turn_id"))
    if turn_id is None or not turn_id.is_integer() or not -(2**63) <= turn_id < 2**63:
        return None
    return int(turn_id)


def _as_float(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else float(number)
