"""The `/v1` HTTP API and `/healthz`: memory out, facts in, forgetting, sessions.

Each handler parses its request (web/schemas.py), calls `Memory`, and shapes the answer;
the shaping functions here are the HTTP contract.
"""

from __future__ import annotations

from aiohttp import web

from agent_memory import __version__
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.recall import RECALL_SCOPES
from agent_memory.core.styles import style_from_query
from agent_memory.errors import DatabaseDown, NotFound, StoreUnavailable
from agent_memory.web.http import int_query, json_response, path_id, read_model
from agent_memory.web.keys import MEMORY
from agent_memory.web.schemas import (
    BindBody,
    FactBody,
    FactPatch,
    channel_of,
    job_status_query,
    one_of,
    optional_query,
    pair,
    persona_query,
    query_text,
)
from agent_memory.web.shapes import (
    channel_binding_json,
    fact_json,
    fact_version_json,
    job_json,
    message_json,
    recall_json,
    session_json,
    summary_json,
    unseen_session_json,
)

routes = web.RouteTableDef()

PAIR = "/v1/users/{user_id}/characters/{character_id}"


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    memory = request.app[MEMORY]
    try:
        migrations = await memory.schema_migrations()
    except Exception as exc:
        kind = DatabaseDown if isinstance(exc, DatabaseDown) else StoreUnavailable
        raise kind(f"database not reachable: {exc}") from exc
    return json_response(
        {"status": "ok", "version": __version__, "database": memory.store.location, "schema": migrations}
    )


@routes.get(PAIR + "/system-messages")
async def system_messages(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    memory = request.app[MEMORY]
    max_tokens = int_query(request, "max_tokens", memory.settings.context_max_tokens, low=50, high=200_000)
    # The shape the agent's llm.style wants; `exclude_agent_id` leaves out a running call's
    # own turns, which that agent already holds (what a live refresh sends).
    context = await memory.system_messages(
        user_id,
        character_id,
        max_tokens=max_tokens,
        persona=persona_query(request),
        style=style_from_query(request.query.get("style")),
        exclude_agent_id=request.query.get("exclude_agent_id") or None,
        query=optional_query(request),
    )
    return json_response({"user_id": user_id, "character_id": character_id, **context.as_json()})


@routes.get(PAIR + "/recall")
async def recall(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    q = query_text(request)
    max_tokens = int_query(request, "max_tokens", DEFAULT_RECALL_TOKENS, low=50, high=200_000)
    scope = one_of(
        RECALL_SCOPES,
        request.query.get("scope", "pair"),
        f"scope must be one of {', '.join(RECALL_SCOPES)} (user: all the user's characters)",
    )
    answer = await request.app[MEMORY].recall(user_id, character_id, q, max_tokens=max_tokens, scope=scope)
    return json_response(
        {"user_id": user_id, "character_id": character_id, "scope": scope, **recall_json(answer)}
    )


@routes.get(PAIR + "/messages")
async def messages(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    messages = await request.app[MEMORY].messages(user_id, character_id, limit)
    return json_response(
        {"user_id": user_id, "character_id": character_id, "messages": [message_json(m) for m in messages]}
    )


@routes.get(PAIR + "/summary")
async def summary(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    state = await request.app[MEMORY].summary(user_id, character_id)
    return json_response(
        {
            "user_id": user_id,
            "character_id": character_id,
            "summary": summary_json(state.summary) if state.summary is not None else None,
            "messages_not_yet_covered": state.uncovered,
        }
    )


@routes.get(PAIR + "/facts")
async def list_facts(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    facts = await request.app[MEMORY].facts(user_id, character_id)
    return json_response(
        {"user_id": user_id, "character_id": character_id, "facts": [fact_json(f) for f in facts]}
    )


@routes.post(PAIR + "/facts")
async def add_fact(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    body = await read_model(request, FactBody)
    added = await request.app[MEMORY].add_fact(user_id, character_id, body.text, body.scope)
    return json_response(
        {"fact": fact_json(added.fact), "created": added.created}, status=201 if added.created else 200
    )


@routes.patch("/v1/facts/{fact_id}")
async def edit_fact(request: web.Request) -> web.Response:
    # The body first, as every JSON route does: JSON it cannot read is a 400 whatever the path.
    body = await read_model(request, FactPatch)
    fact_id = path_id(request, "fact_id")
    fact = await request.app[MEMORY].edit_fact(fact_id, text=body.text, pinned=body.pinned)
    return json_response({"fact": fact_json(fact)})


@routes.get("/v1/facts/{fact_id}/history")
async def fact_history(request: web.Request) -> web.Response:
    fact_id = path_id(request, "fact_id")
    versions = await request.app[MEMORY].fact_history(fact_id)
    return json_response(
        {
            "fact_id": fact_id,
            "current": versions[-1].valid_to is None,
            "versions": [fact_version_json(version) for version in versions],
        }
    )


@routes.delete("/v1/facts/{fact_id}")
async def delete_fact(request: web.Request) -> web.Response:
    fact_id = path_id(request, "fact_id")
    await request.app[MEMORY].delete_fact(fact_id)
    return json_response({"deleted": fact_id})


async def forget(request: web.Request, user_id: str, character_id: str | None) -> web.Response:
    receipt = await request.app[MEMORY].forget(user_id, character_id)
    return json_response({"user_id": user_id, "character_id": character_id, "deleted": receipt})


@routes.delete(PAIR)
async def forget_pair(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    return await forget(request, user_id, character_id)


@routes.delete("/v1/users/{user_id}")
async def forget_user(request: web.Request) -> web.Response:
    return await forget(request, request.match_info["user_id"], None)


@routes.get("/v1/sessions/{agent_id}")
async def get_session(request: web.Request) -> web.Response:
    session = await request.app[MEMORY].session(request.match_info["agent_id"])
    return json_response({"session": session_json(session)})


@routes.post("/v1/sessions/{agent_id}/bind")
async def bind_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    body = await read_model(request, BindBody)
    session = await request.app[MEMORY].bind(agent_id, body.user_id, body.character_id)
    if session is None:
        return json_response({"session": unseen_session_json(agent_id, body.user_id, body.character_id)})
    return json_response({"session": session_json(session)})


# Channel bindings: for apps that give each user a channel of their own.


@routes.post("/v1/channels/{channel}/bind")
async def bind_channel(request: web.Request) -> web.Response:
    """Tie a channel to a pair: later calls there, and the channel's unidentified ones, go to it."""
    channel = channel_of(request)
    body = await read_model(request, BindBody)
    bound = await request.app[MEMORY].bind_channel(channel, body.user_id, body.character_id)
    return json_response({"binding": channel_binding_json(bound.binding), "moved_sessions": bound.moved})


@routes.get("/v1/channels/{channel}/bind")
async def get_channel_binding(request: web.Request) -> web.Response:
    """Which pair a channel is bound to."""
    channel = channel_of(request)
    binding = await request.app[MEMORY].channel_binding(channel)
    if binding is None:
        raise NotFound(f"channel {channel} is not bound; POST /v1/channels/{channel}/bind binds it")
    return json_response({"binding": channel_binding_json(binding)})


@routes.delete("/v1/channels/{channel}/bind")
async def unbind_channel(request: web.Request) -> web.Response:
    """Remove a channel's binding; sessions it already tied stay where they are."""
    channel = channel_of(request)
    binding = await request.app[MEMORY].unbind_channel(channel)
    if binding is None:
        raise NotFound(f"channel {channel} is not bound")
    return json_response({"deleted": channel_binding_json(binding)})


@routes.get("/v1/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    status = job_status_query(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    jobs = await request.app[MEMORY].list_jobs(status, limit)
    return json_response({"jobs": [job_json(job) for job in jobs]})


@routes.post("/v1/jobs/{job_id}/retry")
async def retry(request: web.Request) -> web.Response:
    job = await request.app[MEMORY].retry_job(path_id(request, "job_id"))
    return json_response({"job": job_json(job)})


@routes.post(PAIR + "/condense")
async def condense(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    job = await request.app[MEMORY].condense_now(user_id, character_id)
    return json_response({"job": job_json(job) if job else None}, status=202)
