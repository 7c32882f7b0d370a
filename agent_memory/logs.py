"""Logging set-up: text lines (the default) or one JSON object per line, and request ids.

`AGENT_MEMORY_LOG_FORMAT=json` gives each record as `{"time", "level", "logger", "message"}`;
the access line the web app logs for each request adds `request_id`, `method`, `route`,
`status` and `duration_ms`, and every other line logged while a request is handled (the
webhook's, ingest's, on whichever thread) carries its `request_id` too. Routes are logged as
templates (`/v1/users/{user_id}/…`), never as paths, and a user id only as `user_ref`'s short
hash, so that no user id reaches the log.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import secrets
import sys
import time
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REQUEST_ID_HEADER = "X-Request-Id"
# What the access line adds to a record (`extra=`), in the order JSON shows them.
REQUEST_FIELDS = ("request_id", "method", "route", "status", "duration_ms")

access_log = logging.getLogger("agent_memory.access")

# A caller's own id is kept when it is one short token: anything else could forge log lines.
_SANE_ID = re.compile(r"[\w.:/+=-]{1,128}", re.ASCII)
# A random prefix per process and a counter: unique across instances, and far cheaper on
# the ingest path than a uuid4 (no system call per request).
_PREFIX = secrets.token_hex(4)
_COUNTER = itertools.count(1)


# The id of the request being handled; tasks and store threads started for it copy it along.
current_request_id: ContextVar[str | None] = ContextVar("agent_memory_request_id", default=None)


def request_id_for(given: str | None) -> str:
    """The caller's X-Request-Id if it is a sane token, else a new id."""
    if given and _SANE_ID.fullmatch(given):
        return given
    return f"{_PREFIX}-{next(_COUNTER):x}"


def user_ref(user_id: str) -> str:
    """How a log line names a user: a short stable hash (the same on every line and instance,
    so lines can be matched up), never the id itself."""
    digest = hashlib.blake2b(user_id.encode("utf-8", "surrogatepass"), digest_size=6, person=b"agent-memory")
    return f"user#{digest.hexdigest()}"


def pair_ref(user_id: str, character_id: str | None) -> str:
    """A pair in a log line: the user's hash and the character (an app's persona, not a person)."""
    return f"{user_ref(user_id)}/{character_id or '*'}"


_default_factory = logging.getLogRecordFactory()


def _record_with_request_id(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _default_factory(*args, **kwargs)
    request_id = current_request_id.get()
    if request_id is not None:
        record.request_id = request_id
    return record


def install_request_ids() -> None:
    """Give every log record made while a request is handled its `request_id` (idempotent).

    A record factory rather than a handler's filter: every handler sees the field, pytest's
    caplog too."""
    global _default_factory
    current = logging.getLogRecordFactory()
    if current is not _record_with_request_id:
        _default_factory = current
        logging.setLogRecordFactory(_record_with_request_id)


class RateLimitedLog:
    """At most one line per key (a peer address) per `every_s`, saying how many were held back."""

    def __init__(self, logger: logging.Logger, every_s: float = 60.0, keys: int = 1024) -> None:
        self.logger = logger
        self.every_s = every_s
        self.keys = keys
        # key -> (when its last line was logged, lines held back since)
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def warning(self, key: str, message: str, *args: object) -> bool:
        """Log `message % args` (plus the count held back) unless `key` had a line within
        `every_s`; returns whether it was logged."""
        stamp = time.monotonic()
        last = self._last.get(key)
        if last is not None and stamp - last[0] < self.every_s:
            self._last[key] = (last[0], last[1] + 1)
            return False
        held = last[1] if last is not None else 0
        self._last[key] = (stamp, 0)
        self._last.move_to_end(key)
        while len(self._last) > self.keys:  # many addresses: forget the longest quiet
            self._last.popitem(last=False)
        suffix = f" ({held} more since its last line, {self.every_s:g} s ago or more)" if held else ""
        self.logger.warning(message + "%s", *args, suffix)
        return True


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, and the request's id on lines logged while one is handled."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """The line, with ` (request ID)` unless it is the access line (which says it itself)."""
        line = super().format(record)
        request_id = record.__dict__.get("request_id")
        if request_id is not None and record.name != access_log.name:
            line += f" (request {request_id})"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as `{"time", "level", "logger", "message", …request fields, "exception"?}`."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        entry: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = record.__dict__
        for key in REQUEST_FIELDS:
            if key in fields:
                entry[key] = fields[key]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Send every log record to stderr at `level`, as text lines or JSON objects."""
    install_request_ids()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # Every sweep would be logged at INFO; our own logs say what the jobs did.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def log_access(request_id: str, method: str, route: str | None, status: int, started: float) -> None:
    """The one line a request leaves when it ends; `started` is its `time.perf_counter()`."""
    if not access_log.isEnabledFor(logging.INFO):
        return  # the ingest path pays for nothing it does not log
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    extra: dict[str, object] = {
        "method": method,
        "route": route,
        "status": status,
        "duration_ms": duration_ms,
    }
    if current_request_id.get() is None or logging.getLogRecordFactory() is not _record_with_request_id:
        # Else the record factory adds it (and a second would be refused).
        extra["request_id"] = request_id
    access_log.info(
        "%s %s %d %.1f ms (request %s)",
        method,
        route or "(no route)",
        status,
        duration_ms,
        request_id,
        extra=extra,
    )
