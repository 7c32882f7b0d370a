"""Charts as SVG drawn here (no script, no other origin): data in, a small chart out, as
plain shapes and text the template places inline."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from agent_memory.core.clock import DAY_MS

WIDTH: Final = 360
BAR: Final = 14
GAP: Final = 6
LABEL: Final = 84
# The percentiles a stage's bars show, lightest last.
MARKS: Final = ("p50", "p90", "p99")


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"


@dataclass(frozen=True, slots=True)
class Chart:
    """What the template draws: the box, its bars and labels, and what it shows in words."""

    width: int
    height: int
    bars: list[Bar]
    texts: list[Text]
    title: str


def latency_chart(stages: dict[str, Any]) -> Chart | None:
    """Per stage, its p50, p90 and p99 as nested horizontal bars on one scale; None without data."""
    rows = [
        (stage, values)
        for stage, values in stages.items()
        if isinstance(values, dict) and values.get("count")
    ]
    if not rows:
        return None
    top = max(float(values.get("p99") or values.get("max") or 0) for _, values in rows) or 1.0
    span = WIDTH - LABEL - 60
    bars: list[Bar] = []
    texts: list[Text] = []
    row_height = BAR * len(MARKS) + GAP * 2
    for index, (stage, values) in enumerate(rows):
        y0 = 8 + index * row_height
        texts.append(Text(0, y0 + BAR * 1.5 + 4, stage))
        for depth, mark in enumerate(MARKS):
            value = float(values.get(mark) or 0)
            width = max(1.0, span * value / top)
            title = f"{stage} {mark}: {value:g} ms"
            bars.append(Bar(LABEL, y0 + depth * BAR, width, BAR - 2, f"bar {mark}", title))
            texts.append(Text(LABEL + width + 4, y0 + depth * BAR + BAR - 4, f"{mark} {value:g}"))
    height = 8 + len(rows) * row_height
    return Chart(WIDTH, height, bars, texts, "latency per stage, ms (p50, p90, p99)")


def day_chart(per_day: dict[int, int], days: int, now: int) -> Chart:
    """Callbacks per UTC day over the last `days` days, a vertical bar each (zero days too)."""
    today = now // DAY_MS * DAY_MS
    starts = [today - (days - 1 - index) * DAY_MS for index in range(days)]
    counts = [per_day.get(start, 0) for start in starts]
    top = max(counts) or 1
    plot = 120
    step = (WIDTH - 10) / days
    bars, texts = [], []
    for index, (start, count) in enumerate(zip(starts, counts, strict=True)):
        height = plot * count / top
        x = 5 + index * step
        day = _day(start)
        bars.append(Bar(x, 10 + plot - height, step - 3, max(height, 0.5), "bar day", f"{day}: {count}"))
        if index % 2 == 0 or days <= 7:
            texts.append(Text(x + (step - 3) / 2, plot + 26, day[5:], "middle"))
    texts.append(Text(WIDTH - 5, 9, f"most: {top}", "end"))
    return Chart(WIDTH, plot + 32, bars, texts, f"callbacks per day, last {days} days (UTC)")


def _day(start_ms: int) -> str:
    return dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC).strftime("%Y-%m-%d")
