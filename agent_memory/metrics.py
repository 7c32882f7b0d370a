"""The service's Prometheus instruments, one registry per application.

Each app gets its own `CollectorRegistry` (tests run many apps in one process, and the
global registry would mix them). The hot paths (a request, a callback) pay for a cached
child's increment and observe only; what the database knows (jobs by status, its size) is
read when `/metrics` is scraped (`web/metrics.py`), not counted as it happens.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from agent_memory import __version__

PREFIX = "agent_memory"
# Requests take a millisecond when all is well; the upper buckets catch a stuck database.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A condenser call is one LLM round trip: seconds, up to the configured timeout.
LLM_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
# Recall answers within the custom-LLM endpoint's deadline (30 ms by default).
RECALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 1.0)
# How late a poll starts after it was due: the sweep runs every half second.
LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
# Requests that matched no route share one label: a scanner must not mint a series per path.
UNMATCHED = "unmatched"
# Any other method a client invents is counted as OTHER, for the same reason.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

CondenseOutcome = Literal["done", "failed", "dead", "superseded", "forgotten"]
PollOutcome = Literal["merged", "failed", "gone"]
PushOutcome = Literal["sent", "failed"]


class ReportedCounters(Collector):
    """Counters a component already keeps (a `report()` of totals), read when scraped."""

    def __init__(
        self, name: str, documentation: str, report: Callable[[], Mapping[str, int]], label: str | None
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.report = report
        self.label = label

    def collect(self) -> Iterator[Metric]:
        """One counter per total the report holds, or one counter labelled by them."""
        if self.label is not None:
            family = CounterMetricFamily(f"{PREFIX}_{self.name}", self.documentation, labels=[self.label])
            for key, value in self.report().items():
                family.add_metric([key], value)
            yield family
            return
        for key, value in self.report().items():
            yield CounterMetricFamily(
                f"{PREFIX}_{self.name}_{key}", f"{self.documentation}: {key}", value=value
            )


class Metrics:
    """What the service counts and times as it runs, ready to be scraped."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds… (Linux's /proc)
        ProcessCollector(registry=registry)
        self.build = Info(
            f"{PREFIX}_build", "The running build: its version, Python and backend", registry=registry
        )

        def counter(name: str, documentation: str, *labels: str, known: tuple[str, ...] = ()) -> Counter:
            """A counter of this registry; the `known` outcomes start at zero, so that a rate over
            the first one is not lost."""
            made = Counter(f"{PREFIX}_{name}", documentation, labels, registry=registry)
            for outcome in known:
                made.labels(outcome)
            return made

        def histogram(name: str, documentation: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
            """A histogram of this registry."""
            return Histogram(f"{PREFIX}_{name}", documentation, labels, buckets=buckets, registry=registry)

        self._requests = histogram(
            "http_request_duration_seconds",
            "HTTP requests by method and route template, until answered (a stream: until it ended)",
            REQUEST_BUCKETS,
            "method",
            "route",
        )
        self._responses = counter(
            "http_responses",
            "HTTP answers by method, route template and status (499: the client went away)",
            "method",
            "route",
            "status",
        )
        self._callbacks = counter(
            "callbacks",
            "Platform callbacks by event type and what became of them (done, duplicate, ignored, "
            "partial, test, failed; rejected_signature, rejected_body, refused_unconfigured, error)",
            "event_type",
            "outcome",
        )
        self._condense_runs = counter(
            "condense_runs",
            "Condense job runs by outcome (failed: retried later; dead: out of attempts)",
            "outcome",
            known=get_args(CondenseOutcome),
        )
        self._condense_seconds = histogram(
            "condense_llm_duration_seconds",
            "Condenser calls that answered, by method (llm, or offline without a model)",
            LLM_BUCKETS,
            "method",
        )
        self._condense_tokens = counter("condense_llm_tokens_sent", "Tokens sent to the condensing LLM")
        self._condense_messages = counter("condense_messages", "Messages condensed into summaries and facts")
        self._fact_decisions = counter(
            "condense_fact_decisions",
            "The condensing LLM's decisions on candidate facts (add, update, delete, none), and those "
            "ignored (malformed, or aimed at an unknown or pinned fact)",
            "decision",
            known=("add", "update", "delete", "none", "ignored"),
        )
        self._polls = counter(
            "poll_windows",
            "History windows polled from running agents, by outcome (gone: the agent ended)",
            "outcome",
            known=get_args(PollOutcome),
        )
        self._poll_lag = histogram(
            "poll_lag_seconds", "How long after its due time a followed agent's poll started", LAG_BUCKETS
        )
        self._poll_messages = counter("poll_new_messages", "New messages merged from polled history windows")
        self._pushes = counter(
            "live_pushes",
            "Memory pushed into running agents (live refresh), by outcome",
            "outcome",
            known=get_args(PushOutcome),
        )
        self._recalls = histogram(
            "recall_duration_seconds",
            "Recalls that answered (HTTP and the custom-LLM endpoint), by scope",
            RECALL_BUCKETS,
            "scope",
        )
        self._recall_empty = counter(
            "recall_empty", "Recalls that found nothing to answer with, by scope", "scope"
        )
        # Children by label values: `labels()` validates and locks on every call, a dict does not.
        self._request_children: dict[tuple[str, str], Histogram] = {}
        self._response_children: dict[tuple[str, str, int], Counter] = {}
        self._callback_children: dict[tuple[str, str], Counter] = {}

    def request(self, method: str, route: str | None, status: int, seconds: float) -> None:
        """One HTTP request ended with `status` after `seconds`; `route` None: it matched none."""
        key = (method if method in METHODS else "OTHER", route or UNMATCHED)
        timer = self._request_children.get(key)
        if timer is None:
            timer = self._request_children[key] = self._requests.labels(*key)
        timer.observe(seconds)
        answered = self._response_children.get((*key, status))
        if answered is None:
            answered = self._response_children[(*key, status)] = self._responses.labels(*key, str(status))
        answered.inc()

    def callback(self, event_type: str, outcome: str) -> None:
        """A platform callback was answered: its (bounded) event type and what became of it."""
        counter = self._callback_children.get((event_type, outcome))
        if counter is None:
            counter = self._callback_children[(event_type, outcome)] = self._callbacks.labels(
                event_type, outcome
            )
        counter.inc()

    def condense_run(self, outcome: CondenseOutcome) -> None:
        """A claimed condense job ended."""
        self._condense_runs.labels(outcome).inc()

    def condensed(self, method: str, seconds: float, *, tokens_sent: int, messages: int) -> None:
        """The condenser answered after `seconds`, for `messages` messages and `tokens_sent` tokens."""
        self._condense_seconds.labels(method).observe(seconds)
        self._condense_tokens.inc(tokens_sent)
        self._condense_messages.inc(messages)

    def fact_decisions(self, counts: Mapping[str, int]) -> None:
        """The condensing LLM decided these about candidate facts (none for the offline condenser)."""
        for decision, count in counts.items():
            if count:
                self._fact_decisions.labels(decision).inc(count)

    def polled(self, outcome: PollOutcome, *, lag_s: float, new_messages: int = 0) -> None:
        """A followed agent's poll ended; it started `lag_s` after it was due."""
        self._polls.labels(outcome).inc()
        self._poll_lag.observe(max(lag_s, 0.0))
        if new_messages:
            self._poll_messages.inc(new_messages)

    def pushed(self, outcome: PushOutcome) -> None:
        """A running agent's system messages were sent (or sending them failed)."""
        self._pushes.labels(outcome).inc()

    def recalled(self, scope: str, seconds: float, *, found: bool) -> None:
        """A recall answered after `seconds`; `found` False: with no memories."""
        self._recalls.labels(scope).observe(seconds)
        if not found:
            self._recall_empty.labels(scope).inc()

    def add_reported(
        self,
        name: str,
        documentation: str,
        report: Callable[[], Mapping[str, int]],
        *,
        label: str | None = None,
    ) -> None:
        """Expose the totals `report()` returns as counters `agent_memory_<name>_<key>_total`,
        or with `label` as one counter `agent_memory_<name>_total{<label>=key}`."""
        self.registry.register(ReportedCounters(name, documentation, report, label))

    def describe_build(self, backend: str) -> None:
        """`agent_memory_build_info{version, python, backend} 1`: which build a series came from."""
        self.build.info({"version": __version__, "python": platform.python_version(), "backend": backend})

    def exposition(self) -> bytes:
        """Everything in the registry, in Prometheus's text format."""
        return generate_latest(self.registry)
