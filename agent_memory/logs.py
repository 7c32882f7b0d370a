"""Logging set-up: text lines (the default) or one JSON object per line, and request ids.

`AGENT_MEMORY_LOG_FORMAT=json` gives each record as `{"time", "level", "logger", "message"}`;
the access line the web app logs for each request adds `request_id`, `method`, `route`,
`status` and `duration_ms`. Routes are logged as templates (`/v1/users/{user_id}/…`), never
as paths, so that no user id reaches the log.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import secrets
import sys
import time
from typing import Literal

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


def request_id_for(given: str | None) -> str:
    """The caller's X-Request-Id if it is a sane token, else a new id."""
    if given and _SANE_ID.fullmatch(given):
        return given
    return f"{_PREFIX}-{next(_COUNTER):x}"


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # Every sweep would be logged at INFO; our own logs say what the jobs did.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def log_access(request_id: str, method: str, route: str | None, status: int, started: float) -> None:
    """The one line a request leaves when it ends; `started` is its `time.perf_counter()`."""
    if not access_log.isEnabledFor(logging.INFO):
        return  # the ingest path pays for nothing it does not log
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    access_log.info(
        "%s %s %d %.1f ms (request %s)", method, route or "(no route)", status, duration_ms, request_id,
        extra={
            "request_id": request_id, "method": method, "route": route,
            "status": status, "duration_ms": duration_ms,
        },
    )  # fmt: skip
