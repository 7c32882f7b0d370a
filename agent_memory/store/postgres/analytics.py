"""PostgreSQL's latency percentiles: all of a metric's in its one query (the rest is store/shared/analytics.py).

Percentiles are nearest rank, which is what `percentile_disc` computes (the value at rank ceil(p * n)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_memory.core.stats import PERCENTILES
from agent_memory.store.shared.analytics import Analytics


class PostgresAnalytics(Analytics):
    """Statistics over sessions, messages and per-turn metrics; recording the metrics."""

    __slots__ = ()
    ranks_column = ", percentile_disc(?::float8[]) WITHIN GROUP (ORDER BY a.value_ms) AS ranks"
    ranks_params = ([fraction for _, fraction in PERCENTILES],)

    def _ranks(self, row: Mapping[str, Any], source: str, where: str, params: list[Any]) -> dict[str, Any]:
        return dict(zip((label for label, _ in PERCENTILES), row["ranks"], strict=True))
