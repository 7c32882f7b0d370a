"""Search, statistics, export and the on-demand purge, over HTTP.

| method and path | what |
|---|---|
| `GET /v1/users/{user_id}/search?q=&character_id=&kinds=&limit=` | a user's messages, facts and summaries containing every word of `q`, best first |
| `GET /v1/search/mentions?q=&role=&character_id=&limit=` | operators: which users said `q`, how often, first and last |
| `GET /v1/users/{user_id}/stats` | sessions, messages, minutes talked, favourite characters, rates, last active |
| `GET /v1/characters/{character_id}/stats?since_ms=&until_ms=` | active users, sessions, rates, latencies per metric and per stage |
| `GET /v1/stats?since_ms=&until_ms=` | the whole service: latency percentiles per metric and per stage (111/112 callbacks), failed and partial callbacks |
| `GET /v1/users/{user_id}/export` | everything held about a user, one JSON document |
| `POST /v1/admin/purge` | run retention now; answers what it removed |

Unknown users and characters: search answers an empty list (nothing matched); stats and
export answer 404 (nothing is held, which after a forget is the expected answer).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agent_memory.errors import InvalidField, NotFound
from agent_memory.web.http import int_query, json_response
from agent_memory.web.keys import RETENTION, STORE
from agent_memory.store import now_ms
from agent_memory.store.sqlite.search import KINDS, MENTION_ROLES

routes = web.RouteTableDef()

MAX_QUERY_CHARS = 500
MAX_MS = 2**53


def query_text(request: web.Request) -> str:
    """The `q` parameter: required, not blank, not too long."""
    q = request.query.get("q", "")
    if not q.strip():
        raise InvalidField("q is required: give the words to search for, e.g. ?q=wedding")
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidField(f"q is at most {MAX_QUERY_CHARS} characters, got {len(q)}")
    return q


def optional_ms(request: web.Request, name: str) -> int | None:
    """An optional epoch-milliseconds query parameter."""
    if not request.query.get(name):
        return None
    return int_query(request, name, 0, low=0, high=MAX_MS)


def optional_text(request: web.Request, name: str) -> str | None:
    """A query parameter, or None when absent or empty."""
    value = request.query.get(name, "")
    return value if value != "" else None


def kinds_query(request: web.Request) -> tuple[str, ...]:
    """The `kinds` parameter: which of message, fact, summary to search."""
    raw = request.query.get("kinds", "")
    if not raw:
        return KINDS
    kinds = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise InvalidField(f"kinds is a comma-separated list of {', '.join(KINDS)}; got {raw!r}")
    return kinds


def window(request: web.Request) -> tuple[int | None, int | None]:
    """The optional `since_ms`/`until_ms` window of the stats endpoints."""
    since_ms, until_ms = optional_ms(request, "since_ms"), optional_ms(request, "until_ms")
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise InvalidField(f"since_ms ({since_ms}) must be before until_ms ({until_ms})")
    return since_ms, until_ms


@routes.get("/v1/users/{user_id}/search")
async def search(request: web.Request) -> web.Response:
    """A user's messages, facts and summaries containing every word of `q`."""
    user_id = request.match_info["user_id"]
    q = query_text(request)
    character_id = optional_text(request, "character_id")
    kinds = kinds_query(request)
    limit = int_query(request, "limit", 20, low=1, high=100)
    await request.app[STORE].catch_up_search()
    answer = await request.app[STORE].read(
        lambda view: view.search_user(
            user_id, q, character_id=character_id, kinds=kinds, limit=limit
        )
    )
    return json_response(answer)


@routes.get("/v1/search/mentions")
async def mentions(request: web.Request) -> web.Response:
    """Operators: which users said `q`, how often, first and last."""
    q = query_text(request)
    role = request.query.get("role", "user")
    if role not in MENTION_ROLES:
        raise InvalidField(f"role must be one of {', '.join(MENTION_ROLES)}, got {role!r}")
    character_id = optional_text(request, "character_id")
    limit = int_query(request, "limit", 100, low=1, high=1000)
    await request.app[STORE].catch_up_search()
    answer = await request.app[STORE].read(
        lambda view: view.search_mentions(q, role=role, character_id=character_id, limit=limit)
    )
    return json_response(answer)


@routes.get("/v1/users/{user_id}/stats")
async def user_stats(request: web.Request) -> web.Response:
    """One user's sessions, messages, talk time, favourite characters and rates."""
    user_id = request.match_info["user_id"]
    stats = await request.app[STORE].read(lambda view: view.user_stats(user_id))
    if stats is None:
        raise NotFound(f"nothing is held about user {user_id}")
    return json_response(stats)


@routes.get("/v1/characters/{character_id}/stats")
async def character_stats(request: web.Request) -> web.Response:
    """One character's active users, sessions, rates and latencies."""
    character_id = request.match_info["character_id"]
    since_ms, until_ms = window(request)
    stats = await request.app[STORE].read(
        lambda view: view.character_stats(character_id, since_ms=since_ms, until_ms=until_ms)
    )
    if stats is None:
        raise NotFound(f"no sessions with character {character_id}")
    return json_response(stats)


@routes.get("/v1/stats")
async def overall_stats(request: web.Request) -> web.Response:
    """The whole service: latencies per metric and stage, failed and partial callbacks."""
    since_ms, until_ms = window(request)
    stats = await request.app[STORE].read(
        lambda view: view.overall_stats(since_ms=since_ms, until_ms=until_ms)
    )
    return json_response(stats)


@routes.get("/v1/users/{user_id}/export")
async def export(request: web.Request) -> web.Response:
    """Everything held about a user, as one JSON document."""
    user_id = request.match_info["user_id"]
    document: dict[str, Any] | None = await request.app[STORE].read(
        lambda view: view.export_user(user_id)
    )
    if document is None:
        raise NotFound(f"nothing is held about user {user_id}")
    return json_response({"format": "agent-memory-export/1", "exported_ms": now_ms(), **document})


@routes.post("/v1/admin/purge")
async def purge(request: web.Request) -> web.Response:
    """Run retention now and answer what it removed."""
    report = await request.app[RETENTION].purge_once()
    return json_response(report)
