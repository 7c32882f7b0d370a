"""PostgreSQL's latency percentiles: all of a metric's in its one query (the rest is store/shared/analytics.py).

Percentiles are nearest rank, which is what `percentile_disc` computes (the value at rank ceil(p * n)).
"""

from __future__ import annotations

from typing import Any

from agent_memory.store.shared.analytics import PERCENTILES, Analytics, Latencies, metrics_source

_FRACTIONS = [fraction for _, fraction in PERCENTILES]


class PostgresAnalytics(Analytics):
    """Statistics over sessions, messages and per-turn metrics; recording the metrics."""

    __slots__ = ()

    def latency_percentiles(
        self, *, character_id: str | None = None, since_ms: int | None = None, until_ms: int | None = None
    ) -> Latencies:
        """count, mean, min, p50, p90, p99 and max of each metric, in ms."""
        source, where, params = metrics_source(character_id, since_ms, until_ms)
        stats: Latencies = {}
        for row in self.sql.all(
            "SELECT a.metric, count(*) AS n, avg(a.value_ms) AS mean, min(a.value_ms) AS min, max(a.value_ms) AS max, "
            "percentile_disc(?::float8[]) WITHIN GROUP (ORDER BY a.value_ms) AS ranks "
            f"{source} WHERE true{where} GROUP BY a.metric ORDER BY a.metric{self.sql.binary}",
            (_FRACTIONS, *params),
        ):
            entry: dict[str, Any] = {"count": row["n"], "mean": round(row["mean"], 2), "min": row["min"]}
            entry.update((label, value) for (label, _), value in zip(PERCENTILES, row["ranks"], strict=True))
            entry["max"] = row["max"]
            stats[row["metric"]] = entry
        return stats
