"""`GET /metrics`: the app's registry in Prometheus's text format, plus what the database knows.

Jobs by kind and status and the database's size are read from the store when scraped, at
most once per `SNAPSHOT_S` (several Prometheus servers, or a dashboard refreshing, cost
one read). Who may scrape: what the /v1 gate admits to an admin route (anyone when no API
token is set, else the token or an admin key), unless `AGENT_MEMORY_METRICS_PUBLIC=1` opens it
to a scraper that cannot send a token.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import get_args

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent_memory.core.domain import JobKind, JobStatus
from agent_memory.errors import AgentMemoryError, Unauthorized
from agent_memory.metrics import PREFIX, Metrics
from agent_memory.settings import Settings
from agent_memory.store import ReadView, Store
from agent_memory.web.auth import GATE
from agent_memory.web.declare import Route, add_routes
from agent_memory.web.keys import AUTH_STATS

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
# How long a read of the database's figures serves scrapes.
SNAPSHOT_S = 5.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The database's figures at one moment: jobs by (kind, status), and its size."""

    jobs: dict[tuple[JobKind, JobStatus], int] = field(default_factory=dict)
    database_bytes: int = 0
    ok: bool = False
    taken: float = float("-inf")  # time.monotonic()


def read_snapshot(view: ReadView) -> Snapshot:
    """Count the jobs and size the database, in one read."""
    return Snapshot(view.jobs.counts(), view.maintenance.storage_stats()["bytes"], True, time.monotonic())


class DatabaseFigures(Collector):
    """Jobs by kind and status, dead ones included, and the database's size, as gauges."""

    def __init__(self, store: Store, backend: str) -> None:
        self.store = store
        self.backend = backend
        self.snapshot = Snapshot()
        self._reading = asyncio.Lock()

    async def refresh(self) -> None:
        """Read the figures again if the last read is older than `SNAPSHOT_S`."""
        async with self._reading:  # concurrent scrapes share one read
            if time.monotonic() - self.snapshot.taken < SNAPSHOT_S:
                return
            try:
                self.snapshot = await self.store.read(read_snapshot)
            except Exception as exc:  # a scrape must still answer: the database is down, say so
                log.warning("metrics: reading the database's figures failed: %s", exc)
                self.snapshot = Snapshot(
                    self.snapshot.jobs, self.snapshot.database_bytes, False, time.monotonic()
                )

    def collect(self) -> Iterator[Metric]:
        """The last snapshot's gauges (every kind and status, zero when there are none)."""
        snapshot = self.snapshot
        jobs = GaugeMetricFamily(
            f"{PREFIX}_jobs",
            "Background jobs by kind and status (dead: out of attempts)",
            labels=["kind", "status"],
        )
        for kind in get_args(JobKind):
            for status in get_args(JobStatus):
                jobs.add_metric([kind, status], snapshot.jobs.get((kind, status), 0))
        yield jobs
        size = GaugeMetricFamily(f"{PREFIX}_database_bytes", "Size of the database", labels=["backend"])
        size.add_metric([self.backend], snapshot.database_bytes)
        yield size
        yield GaugeMetricFamily(
            f"{PREFIX}_database_up", "1 if the last read of these figures succeeded", value=int(snapshot.ok)
        )


class MetricsEndpoint:
    """The `GET /metrics` handler over an app's `Metrics` and store."""

    def __init__(self, settings: Settings, metrics: Metrics, store: Store) -> None:
        self.settings = settings
        self.metrics = metrics
        self.database = DatabaseFigures(store, settings.backend)
        metrics.registry.register(self.database)
        metrics.describe_build(settings.backend)

    async def handle(self, request: web.Request) -> web.Response:
        """Everything the app counts, in Prometheus's text format."""
        if not self.settings.metrics_public:
            try:
                await request.app[GATE].admit(request)  # /metrics is no /v1 route: it needs admin
            except AgentMemoryError as exc:
                return refusal(exc)
        await self.database.refresh()
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def refusal(exc: AgentMemoryError) -> web.Response:
    """A refused scrape in plain text: a scraper reads text, and shows this line as the target's error."""
    message = exc.message
    if isinstance(exc, Unauthorized):
        message += "; or set AGENT_MEMORY_METRICS_PUBLIC=1"
    response = web.Response(status=exc.status, text=f"{exc.code}: {message}\n", content_type="text/plain")
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return response


def add_metrics_route(app: web.Application, settings: Settings, metrics: Metrics, store: Store) -> None:
    """Serve `GET /metrics` for `metrics`, with the database's figures read at scrape time."""
    scrape = Route(
        "GET",
        METRICS_PATH,
        "Prometheus metrics (the bearer token unless AGENT_MEMORY_METRICS_PUBLIC=1)",
        "service",
        None,
        operation_id="metrics",
        # An admin key's route like /v1's (no scope declared: the gate's default), refused in text.
        errors=(403, 429),
        text="text/plain",
        handler=MetricsEndpoint(settings, metrics, store).handle,
    )
    add_routes(app, [scrape])
    auth = app[AUTH_STATS]
    metrics.add_reported(
        "auth_refused",
        "Requests refused by the API gate, by reason",
        lambda: {str(reason): count for reason, count in auth.refused.items()},
        label="reason",
    )
