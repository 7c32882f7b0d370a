"""core.clock: the one Retry-After reader, the one backoff policy, time conversion and formatting."""

from __future__ import annotations

import math
import random
from email.utils import formatdate
from typing import Literal

import pytest

from agent_memory.core.clock import (
    Backoff,
    as_number,
    format_datetime,
    format_day,
    format_minute,
    now_ms,
    retry_after_s,
    to_ms,
)

NOW_S = 1_793_736_900.0  # 2026-11-03 20:15 UTC


class Range(random.Random):
    """Draws the low or high end of every range asked for, and records the ranges."""

    def __init__(self, end: str) -> None:
        super().__init__(0)
        self.end = end
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return a if self.end == "low" else b


# -- Retry-After ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"RETRY-AFTER": " 4 "}, 4.0),
        ({"Retry-After-Ms": "1500"}, 1.5),
        # The millisecond header is more precise and wins.
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        # An unreadable millisecond header falls back to Retry-After.
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
    ],
)
def test_retry_after_in_seconds_and_milliseconds(headers: dict[str, str], expected: float) -> None:
    assert retry_after_s(headers) == expected


def test_retry_after_as_an_http_date() -> None:
    in_a_minute = formatdate(NOW_S + 60, usegmt=True)
    assert retry_after_s({"Retry-After": in_a_minute}, now_s=NOW_S) == 60.0
    a_minute_ago = formatdate(NOW_S - 60, usegmt=True)
    assert retry_after_s({"Retry-After": a_minute_ago}, now_s=NOW_S) == 0.0
    # Against the real clock, too.
    live = retry_after_s({"Retry-After": formatdate(None, usegmt=True)})
    assert live is not None and 0.0 <= live <= 1.0


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Content-Type": "application/json"},
        {"Retry-After": ""},
        {"Retry-After": "soon"},
        {"Retry-After": "Mon, 99 Foo 2026"},
        {"Retry-After-Ms": "Wed, 21 Oct 2026 07:28:00 GMT"},  # only Retry-After may be a date
    ],
)
def test_retry_after_absent_or_garbage_is_none(headers: dict[str, str] | None) -> None:
    assert retry_after_s(headers) is None


def test_negative_retry_after_means_now() -> None:
    assert retry_after_s({"Retry-After": "-5"}) == 0.0
    assert retry_after_s({"Retry-After-Ms": "-5"}) == 0.0


@pytest.mark.parametrize("value", ["inf", "-inf", "Infinity", "nan", "1e400"])
def test_infinite_or_nan_retry_after_is_unreadable(value: str) -> None:
    assert retry_after_s({"Retry-After": value}) is None
    assert retry_after_s({"Retry-After-Ms": value}) is None


# -- backoff -------------------------------------------------------------------------------------
def test_backoff_doubles_per_attempt_up_to_the_cap() -> None:
    backoff = Backoff(base_s=0.5, cap_s=8.0)
    assert [backoff.ceiling_s(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff.ceiling_s(10_000) == 8.0  # no overflow however long it fails


@pytest.mark.parametrize(("jitter", "low_share"), [(1.0, 0.0), (0.5, 0.5), (0.2, 0.8), (0.0, 1.0)])
def test_backoff_jitter_is_the_random_share_below_the_ceiling(jitter: float, low_share: float) -> None:
    backoff = Backoff(base_s=5.0, cap_s=600.0, jitter=jitter)
    rng = Range("low")
    assert backoff.delay_s(3, rng) == pytest.approx(20.0 * low_share)
    assert rng.ranges == [(pytest.approx(20.0 * low_share), 20.0)]
    assert backoff.delay_s(3, Range("high")) == 20.0  # never above the ceiling


def test_backoff_never_exceeds_the_cap() -> None:
    backoff = Backoff(base_s=1.0, cap_s=30.0, jitter=0.5)
    rng = random.Random(1)
    assert all(15.0 <= backoff.delay_s(attempt, rng) <= 30.0 for attempt in range(6, 60))


def test_backoff_as_a_floor_waits_at_least_retry_after() -> None:
    backoff = Backoff(base_s=5.0, cap_s=600.0, jitter=0.5)
    assert backoff.delay_s(1, Range("high"), retry_after=120.0) == 120.0
    # A short Retry-After does not shorten our own backoff.
    assert backoff.delay_s(4, Range("low"), retry_after=1.0) == 20.0


def test_backoff_exact_obeys_retry_after_even_when_it_says_now() -> None:
    backoff = Backoff(base_s=0.5, cap_s=8.0, retry_after_mode="exact")
    rng = Range("high")
    assert backoff.delay_s(5, rng, retry_after=0.0) == 0.0
    assert backoff.delay_s(1, rng, retry_after=2.0) == 2.0
    assert rng.ranges == []  # no jitter drawn: the server named the time
    assert backoff.delay_s(5, rng) == 8.0  # without one, the backoff


@pytest.mark.parametrize("mode", ["floor", "exact"])
def test_backoff_caps_retry_after_when_told_to(mode: Literal["floor", "exact"]) -> None:
    backoff = Backoff(base_s=0.5, cap_s=8.0, retry_after_cap_s=30.0, retry_after_mode=mode)
    assert backoff.delay_s(1, Range("high"), retry_after=3600.0) == 30.0
    assert backoff.delay_s(1, Range("high"), retry_after=2.0) == 2.0


# -- time ----------------------------------------------------------------------------------------
def test_now_ms_is_integer_milliseconds() -> None:
    stamp = now_ms()
    assert isinstance(stamp, int) and abs(stamp - NOW_S * 1000) < 100 * 365 * 86_400_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_793_736_900, 1_793_736_900_000),  # seconds
        (1_793_736_900.25, 1_793_736_900_250),
        ("1793736900", 1_793_736_900_000),
        (1_793_736_900_123, 1_793_736_900_123),  # milliseconds
        (1_793_736_900_123_456, 1_793_736_900_123),  # microseconds
        (0, 0),
        (-1, None),
        (None, None),
        (True, None),
        ("soon", None),
        (math.inf, None),
        (math.nan, None),
    ],
)
def test_to_ms_by_magnitude(value: object, expected: int | None) -> None:
    assert to_ms(value) == expected


def test_as_number_only_finite_numbers() -> None:
    assert as_number(" 2.5 ") == 2.5 and as_number(3) == 3
    assert as_number(False) is None and as_number("inf") is None and as_number([1]) is None


def test_utc_formats() -> None:
    ms = round(NOW_S * 1000)
    assert (format_day(ms), format_minute(ms)) == ("2026-11-03", "20:15")
    assert format_datetime(ms) == "2026-11-03 20:15 UTC"
