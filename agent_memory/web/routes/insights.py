"""Search, statistics, export and the on-demand purge, over HTTP.

| method and path | what |
|---|---|
| `GET /v1/users/{user_id}/search?q=&character_id=&kinds=&limit=` | a user's messages, facts and summaries matching `q`, best first: one word (or CJK run) as a substring, several ranked like recall |
| `GET /v1/users?q=&cursor=&limit=` | operators: users in id order (an id containing `q`), with their characters, calls and last seen |
| `GET /v1/search/mentions?q=&role=&character_id=&limit=` | operators: which users said `q`, how often, first and last |
| `GET /v1/users/{user_id}/stats` | sessions, messages, minutes talked, favourite characters, rates, last active |
| `GET /v1/characters/{character_id}/stats?since_ms=&until_ms=` | active users, sessions, rates, latencies per metric and per stage |
| `GET /v1/stats?since_ms=&until_ms=` | the whole service: latency percentiles per metric and per stage (111/112 callbacks), failed and partial callbacks |
| `GET /v1/users/{user_id}/export` | everything held about a user, one JSON document |
| `POST /v1/import?force=` | restore a user from an export, idempotently; a user forgotten since it was taken: 409 unless `force=true` |
| `POST /v1/admin/purge` | run retention now; answers what it removed |

Unknown users and characters: search answers an empty list (nothing matched); stats and
export answer 404 (nothing is held, which after a forget is the expected answer).
"""

from __future__ import annotations

from aiohttp import web

from agent_memory.core.jsonutil import refuse_deep
from agent_memory.core.limits import MAX_QUERY_CHARS, MENTIONS_LIMIT, SEARCH_LIMIT, USERS_LIMIT
from agent_memory.core.search import MENTION_ROLES, SEARCH_KINDS
from agent_memory.errors import BadRequest, InvalidField
from agent_memory.memory.restore import text_source
from agent_memory.memory.retention import PurgeReport
from agent_memory.web import answers as a
from agent_memory.web.declare import (
    CHARACTER_FILTER,
    Q_SCHEMA,
    READ_ERRORS,
    WINDOW,
    Param,
    Routes,
    limit_param,
)
from agent_memory.web.http import int_query, json_response, read_body
from agent_memory.web.keys import MEMORY, RETENTION
from agent_memory.web.schemas import bool_query, kinds_query, optional_text, query_text, role_query, window

routes = Routes()


@routes.get(
    "/v1/users/{user_id}/search",
    "Search a user's messages, facts and summaries",
    "insights",
    a.UserSearchAnswer,
    scope="read",
    errors=READ_ERRORS,
    query=(
        Param(
            "q",
            Q_SCHEMA,
            "one word (or CJK run) as a substring; several ranked like recall",
            required=True,
            example="cat",
        ),
        CHARACTER_FILTER,
        Param(
            "kinds",
            {"type": "array", "items": {"type": "string", "enum": list(SEARCH_KINDS)}},
            "what to search (comma-separated; default all)",
        ),
        limit_param(*SEARCH_LIMIT),
    ),
)
async def search(request: web.Request) -> web.Response:
    """A user's messages, facts and summaries matching `q` (one word as a substring, several ranked like recall)."""
    user_id = request.match_info["user_id"]
    q = query_text(request)
    character_id = optional_text(request, "character_id")
    kinds = kinds_query(request)
    limit = int_query(request, "limit", SEARCH_LIMIT[0], low=1, high=SEARCH_LIMIT[1])
    answer = await request.app[MEMORY].admin.search(
        user_id, q, character_id=character_id, kinds=kinds, limit=limit
    )
    return json_response(answer)


@routes.get(
    "/v1/users",
    "Users, in id order: their characters, calls and when last seen",
    "insights",
    a.UsersAnswer,
    scope="admin",
    errors=READ_ERRORS,
    query=(
        Param(
            "q",
            {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "only users whose id contains this (any case)",
            example="alice",
        ),
        Param("cursor", {"type": "string"}, "the next_cursor of the page before"),
        limit_param(*USERS_LIMIT),
    ),
    description="A user is listed from its first call or fact until it is forgotten. Page by passing "
    "each answer's next_cursor back as cursor, with the same q; next_cursor is null on the last page.",
)
async def users(request: web.Request) -> web.Response:
    """Users whose id contains `q`, a page at a time."""
    q = optional_text(request, "q")
    if q is not None and len(q) > MAX_QUERY_CHARS:
        raise InvalidField(f"q is at most {MAX_QUERY_CHARS} characters, got {len(q)}")
    cursor = optional_text(request, "cursor")
    limit = int_query(request, "limit", USERS_LIMIT[0], low=1, high=USERS_LIMIT[1])
    page = await request.app[MEMORY].console.users(q, cursor, limit)
    return json_response(a.UsersAnswer.of(q, page))


@routes.get(
    "/v1/search/mentions",
    "Which users said something, how often, first and last",
    "insights",
    a.MentionsAnswer,
    scope="admin",
    errors=READ_ERRORS,
    query=(
        Param("q", Q_SCHEMA, "the phrase", required=True, example="cat"),
        Param(
            "role",
            {"type": "string", "enum": list(MENTION_ROLES), "default": "user"},
            "whose messages count",
        ),
        CHARACTER_FILTER,
        limit_param(*MENTIONS_LIMIT),
    ),
)
async def mentions(request: web.Request) -> web.Response:
    """Operators: which users said `q`, how often, first and last."""
    q = query_text(request)
    role = role_query(request)
    character_id = optional_text(request, "character_id")
    limit = int_query(request, "limit", MENTIONS_LIMIT[0], low=1, high=MENTIONS_LIMIT[1])
    answer = await request.app[MEMORY].admin.mentions(q, role=role, character_id=character_id, limit=limit)
    return json_response(answer)


@routes.get(
    "/v1/users/{user_id}/stats",
    "A user's sessions, messages, talk time and rates",
    "insights",
    a.UserStats,
    scope="admin",
    errors=(404,),
)
async def user_stats(request: web.Request) -> web.Response:
    """One user's sessions, messages, talk time, favourite characters and rates."""
    return json_response(await request.app[MEMORY].admin.user_stats(request.match_info["user_id"]))


@routes.get(
    "/v1/characters/{character_id}/stats",
    "A character's users, sessions, rates and latencies",
    "insights",
    a.CharacterStats,
    scope="admin",
    errors=(404, 422),
    query=WINDOW,
)
async def character_stats(request: web.Request) -> web.Response:
    """One character's active users, sessions, rates and latencies."""
    character_id = request.match_info["character_id"]
    since_ms, until_ms = window(request)
    stats = await request.app[MEMORY].admin.character_stats(
        character_id, since_ms=since_ms, until_ms=until_ms
    )
    return json_response(stats)


@routes.get(
    "/v1/stats",
    "The whole service: latencies, failed and partial callbacks",
    "insights",
    a.OverallStats,
    scope="admin",
    errors=READ_ERRORS,
    query=WINDOW,
)
async def overall_stats(request: web.Request) -> web.Response:
    """The whole service: latencies per metric and stage, failed and partial callbacks."""
    since_ms, until_ms = window(request)
    return json_response(await request.app[MEMORY].admin.overall_stats(since_ms=since_ms, until_ms=until_ms))


@routes.get(
    "/v1/users/{user_id}/export",
    "Everything held about a user, as one document",
    "insights",
    a.Export,
    scope="admin",
    errors=(404,),
)
async def export(request: web.Request) -> web.Response:
    """Everything held about a user, as one JSON document."""
    return json_response(await request.app[MEMORY].admin.export(request.match_info["user_id"]))


@routes.post(
    "/v1/import",
    "Restore a user from an export",
    "insights",
    a.ImportAnswer,
    scope="admin",
    body=a.Export,
    reads_body=True,
    errors=(409, 422),
    query=(
        Param(
            "force",
            {"type": "boolean"},
            "restore a user forgotten after the export was taken (otherwise refused with 409)",
            example=False,
        ),
    ),
    description="The body is an export (GET /v1/users/{user_id}/export) as it was written. It is "
    "checked whole before anything is written (a bad record is named by its line), then each record "
    "is written unless it is held already: importing twice changes nothing. Larger exports: "
    "`agent-memory import FILE` on the service's host reads a file of any size.",
)
async def import_export(request: web.Request) -> web.Response:
    """Restore what an export holds about its user."""
    force = bool_query(request, "force")
    body = await read_body(request)
    if not body.strip():
        raise BadRequest("the body is empty: send an export (GET /v1/users/{user_id}/export)")
    refuse_deep(body)  # as every JSON body (the import reads records one by one, past any depth)
    report = await request.app[MEMORY].admin.import_export(text_source(body), force=force)
    return json_response(report.to_json())


@routes.post("/v1/admin/purge", "Apply retention now", "insights", PurgeReport, scope="admin")
async def purge(request: web.Request) -> web.Response:
    """Run retention now and answer what it removed."""
    return json_response((await request.app[RETENTION].purge_once()).to_json())
