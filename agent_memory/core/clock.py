"""Time, the one way: epoch milliseconds, timestamp conversion, UTC formatting, backoff, Retry-After.

Storage, wire formats and prompts all count time in integer milliseconds since the epoch;
`to_ms` turns whatever a platform sends into that. Every retry in the service waits by the
one `Backoff` policy (each caller with its own base and cap), and every `Retry-After` header
is read by `retry_after_s`.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

# Below 10^11 a timestamp is seconds (10^11 ms is 1973, 10^11 s is the year 5138);
# above 10^14 it is microseconds.
SECONDS_BELOW = 10**11
MICROSECONDS_ABOVE = 10**14
# The last millisecond a date can name (9999-12-31 23:59:59.999 UTC): a time after it cannot be
# formatted, and from a platform it can only be a fault (a bit flip, a wrong unit, a fuzzer).
LAST_MS = 253_402_300_799_999
DAY_MS = 86_400_000
# 2**62 s is far past any cap; the bound only keeps the float power finite.
_MAX_DOUBLINGS = 62


def now_ms() -> int:
    """Milliseconds since the epoch: the only time unit in storage."""
    return time.time_ns() // 1_000_000


def as_number(value: Any) -> float | int | None:
    """A finite number from an int, float or numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return None


def to_ms(value: Any) -> int | None:
    """Normalise an epoch timestamp in s, ms or µs (int, float or digit string) to ms.

    None for what is no time: not a number, negative, or after the last day a date can name.
    """
    value = as_number(value)
    if value is None or value < 0 or value > LAST_MS * 1000:
        return None
    if value < SECONDS_BELOW:
        return round(value * 1000)
    if value > MICROSECONDS_ABOVE:
        return possible_ms(round(value / 1000))
    return possible_ms(round(value))


def possible_ms(ms: int | None) -> int | None:
    """`ms` if it names a moment from 1970 to the end of year 9999, else None."""
    return ms if ms is not None and 0 <= ms <= LAST_MS else None


def impossible_time(value: Any) -> bool:
    """Whether `value` is a number that no reading (s, ms or µs) makes a possible time."""
    return as_number(value) is not None and to_ms(value) is None


def format_day(ms: int) -> str:
    """`2026-11-03` (UTC)."""
    return _day(ms // DAY_MS)


@lru_cache(maxsize=4096)
def _day(day: int) -> str:
    # Every recalled memory shows its day: formatted once per day, not per memory.
    return datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")


def format_minute(ms: int) -> str:
    """`20:15` (UTC)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def format_datetime(ms: int) -> str:
    """`2026-11-03 20:15 UTC`."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- waiting before a retry --------------------------------------------------------------------
def retry_after_s(headers: Mapping[str, str] | None, *, now_s: float | None = None) -> float | None:
    """Seconds a server asks us to wait, from `Retry-After-Ms` or `Retry-After`.

    `Retry-After` may be delta-seconds or an HTTP date. None when neither header is present
    and readable; a date in the past or a negative value is 0; NaN and infinity are unreadable.
    """
    if not headers:
        return None
    # Header names are case-insensitive; plain dicts (tests, some clients) are not.
    by_name = {str(name).lower(): value for name, value in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = by_name.get(name)
        if value is None:
            continue
        seconds = _delta_seconds(str(value), divisor, now_s)
        if seconds is not None:
            return seconds
    return None


def _delta_seconds(value: str, divisor: float, now_s: float | None) -> float | None:
    """One header value as non-negative seconds, or None when it cannot be read."""
    try:
        seconds = float(value.strip()) / divisor
    except ValueError:
        if divisor != 1.0:
            return None  # only Retry-After may be a date
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now_s is None else now_s)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: `base_s` doubled per attempt, capped, jittered, honouring Retry-After.

    The delay before retry `attempt` (1-based) is drawn from the top `jitter` share of
    `min(cap_s, base_s * 2**(attempt - 1))` (1.0: anywhere from zero, "full jitter"; 0.5:
    the upper half), so it never exceeds `cap_s`. A server's Retry-After, capped at
    `retry_after_cap_s`, is honoured one of two ways: as a floor under our own delay
    (`"floor"`: never sooner than asked, nor sooner than our policy), or in place of it
    (`"exact"`: the server knows when it is free again, even when that is now).
    """

    base_s: float
    cap_s: float
    jitter: float = 1.0
    retry_after_cap_s: float = math.inf
    retry_after_mode: Literal["floor", "exact"] = "floor"

    def ceiling_s(self, attempt: int) -> float:
        """The longest wait before retry `attempt`."""
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        return min(self.cap_s, self.base_s * 2.0**doublings)

    def delay_s(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry `attempt`, honouring the server's `retry_after` if given."""
        asked = None if retry_after is None else min(retry_after, self.retry_after_cap_s)
        if asked is not None and self.retry_after_mode == "exact":
            return asked
        ceiling = self.ceiling_s(attempt)
        delay = rng.uniform(ceiling * (1.0 - self.jitter), ceiling)
        return delay if asked is None else max(delay, asked)
