"""Templates to HTML: one Jinja2 environment (autoescaped), the headers every page carries."""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Final
from urllib.parse import quote

import jinja2
from aiohttp import web

from agent_memory import __version__
from agent_memory.core.clock import format_datetime
from agent_memory.web.console.sessions import CSRF_FIELD, Viewer

# Nothing but the service itself: no other origin's scripts, styles, images (a transcript's
# images are links, never loaded), frames or form targets; no referrer sent to another site when a link is followed (to the
# service itself it is, so its forms carry their Origin).
HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def when(ms: int | None) -> str:
    """Epoch ms as `2026-11-03 20:15 UTC` ('-' for none)."""
    return "-" if ms is None else format_datetime(ms)


def part(value: str) -> str:
    """A path segment, escaped (ids may hold slashes, spaces, anything)."""
    return quote(value, safe="")


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agent_memory.web.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["part"] = part
    env.filters["pretty"] = lambda value: json.dumps(value, indent=1, ensure_ascii=False)
    env.globals["version"] = __version__
    env.globals["csrf_field"] = CSRF_FIELD
    return env


def render(
    request: web.Request, template: str, viewer: Viewer | None, *, status: int = 200, **values: Any
) -> web.Response:
    """A page: the template with the viewer (None before sign-in) and `values`."""
    html = (
        environment().get_template(template).render(viewer=viewer, path=request.path, status=status, **values)
    )
    return web.Response(text=html, status=status, content_type="text/html", headers=HEADERS)
