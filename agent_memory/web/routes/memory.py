"""The `/v1` HTTP API and `/healthz`: memory out, facts in, forgetting, sessions.

Each handler parses its request (web/schemas.py), calls `Memory`, and shapes the answer;
the shaping functions here are the HTTP contract.
"""

from __future__ import annotations

from aiohttp import web

from agent_memory import __version__
from agent_memory.core.facts import MAX_FACT_CHARS
from agent_memory.core.limits import (
    JOBS_LIMIT,
    MAX_PERSONA_CHARS,
    MAX_QUERY_CHARS,
    MAX_TOKENS,
    MESSAGES_LIMIT,
    MIN_TOKENS,
)
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.recall import RECALL_SCOPES
from agent_memory.core.styles import style_from_query
from agent_memory.errors import DatabaseDown, NotFound, StoreUnavailable
from agent_memory.memory.condensing import JOB_STATUSES
from agent_memory.web import answers as a
from agent_memory.web.declare import (
    BODY_ERRORS,
    PAIR,
    Q_SCHEMA,
    READ_ERRORS,
    Param,
    Routes,
    limit_param,
    tokens_param,
)
from agent_memory.web.http import int_query, json_response, path_id, read_model
from agent_memory.web.keys import MEMORY, SETTINGS, STORE
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

routes = Routes()


@routes.get(
    "/healthz",
    "Is the service up and its database reachable",
    "service",
    a.Health,
    errors=(503,),
    auth="none",
)
async def healthz(request: web.Request) -> web.Response:
    memory = request.app[MEMORY]
    try:
        migrations = await memory.admin.schema_migrations()
    except Exception as exc:
        kind = DatabaseDown if isinstance(exc, DatabaseDown) else StoreUnavailable
        raise kind(f"database not reachable: {exc}") from exc
    return json_response(
        a.Health(status="ok", version=__version__, database=request.app[STORE].location, schema=migrations)
    )


@routes.get(
    PAIR + "/system-messages",
    "The pair's memory as system_messages",
    "memory",
    a.SystemMessagesAnswer,
    scope="read",
    errors=(400, 422),
    query=(
        tokens_param("the token budget (default AGENT_MEMORY_MAX_TOKENS)"),
        Param(
            "persona",
            {"type": "string", "maxLength": MAX_PERSONA_CHARS},
            "the character's persona, put first",
        ),
        Param(
            "style",
            {"type": "string", "enum": ["openai", "gemini", "anthropic"], "default": "openai"},
            "the agent's llm.style: the shape of the messages",
        ),
        Param("exclude_agent_id", {"type": "string"}, "leave out this running call's own turns"),
        Param(
            "query",
            {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "what the call is about: memories recalled for it are included",
            example="wedding",
        ),
    ),
    description="Facts, the rolling summary, recalled memories and the latest turns, within max_tokens, "
    "shaped for the agent's llm.style: what an agent's join body carries.",
)
async def system_messages(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    memory = request.app[MEMORY]
    max_tokens = int_query(
        request, "max_tokens", request.app[SETTINGS].context_max_tokens, low=MIN_TOKENS, high=MAX_TOKENS
    )
    # The shape the agent's llm.style wants; `exclude_agent_id` leaves out a running call's
    # own turns, which that agent already holds (what a live refresh sends).
    context = await memory.reading.system_messages(
        user_id,
        character_id,
        max_tokens=max_tokens,
        persona=persona_query(request),
        style=style_from_query(request.query.get("style")),
        exclude_agent_id=request.query.get("exclude_agent_id") or None,
        query=optional_query(request),
    )
    return json_response({"user_id": user_id, "character_id": character_id, **context.as_json()})


@routes.get(
    PAIR + "/recall",
    "Memories recalled for a question",
    "memory",
    a.RecallAnswer,
    scope="read",
    errors=READ_ERRORS,
    query=(
        Param("q", Q_SCHEMA, "the question, or what was just said", required=True, example="cat"),
        tokens_param("the token budget of the memories", DEFAULT_RECALL_TOKENS),
        Param(
            "scope",
            {"type": "string", "enum": list(RECALL_SCOPES), "default": "pair"},
            "user: the user's memories with every character",
        ),
        Param(
            "exclude_agent_id",
            {"type": "string"},
            "leave out this running conversation's own turns (its session: an agent id, api:<session_id>), "
            "which its LLM holds already",
        ),
    ),
)
async def recall(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    q = query_text(request)
    max_tokens = int_query(request, "max_tokens", DEFAULT_RECALL_TOKENS, low=MIN_TOKENS, high=MAX_TOKENS)
    scope = one_of(
        RECALL_SCOPES,
        request.query.get("scope", "pair"),
        f"scope must be one of {', '.join(RECALL_SCOPES)} (user: all the user's characters)",
    )
    exclude = request.query.get("exclude_agent_id") or None
    answer = await request.app[MEMORY].reading.recall(
        user_id, character_id, q, max_tokens=max_tokens, scope=scope, exclude_session=exclude
    )
    return json_response(a.RecallAnswer.shape(user_id, character_id, scope, answer))


@routes.get(
    PAIR + "/messages",
    "The pair's latest messages, oldest first",
    "memory",
    a.MessagesAnswer,
    scope="read",
    errors=READ_ERRORS,
    query=(limit_param(*MESSAGES_LIMIT),),
)
async def messages(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    limit = int_query(request, "limit", MESSAGES_LIMIT[0], low=1, high=MESSAGES_LIMIT[1])
    messages = await request.app[MEMORY].reading.messages(user_id, character_id, limit)
    shaped = [a.MessageOut.of(message) for message in messages]
    return json_response(a.MessagesAnswer(user_id=user_id, character_id=character_id, messages=shaped))


@routes.get(PAIR + "/summary", "The pair's rolling summary", "memory", a.SummaryAnswer, scope="read")
async def summary(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    state = await request.app[MEMORY].reading.summary(user_id, character_id)
    summary = a.SummaryOut.of(state.summary) if state.summary is not None else None
    answer = a.SummaryAnswer(
        user_id=user_id, character_id=character_id, summary=summary, messages_not_yet_covered=state.uncovered
    )
    return json_response(answer)


@routes.get(PAIR + "/facts", "The facts remembered for the pair", "memory", a.FactsAnswer, scope="read")
async def list_facts(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    facts = await request.app[MEMORY].facts.of_pair(user_id, character_id)
    shaped = [a.FactOut.of(fact) for fact in facts]
    return json_response(a.FactsAnswer(user_id=user_id, character_id=character_id, facts=shaped))


@routes.post(
    PAIR + "/facts",
    "Remember a fact (pinned)",
    "memory",
    a.FactAdded,
    scope="write",
    status=201,
    body=FactBody,
    errors=BODY_ERRORS,
    extra_answers={200: a.FactAdded},
    description=f"At most {MAX_FACT_CHARS} characters, with a letter, number or symbol among them. "
    "201 when new, 200 when already held (a near-duplicate: the same words but for case, punctuation, "
    "a state's date or saying 'the user'). A new value of what holds one at a time (where the user "
    "lives, their job, name, a favourite…) supersedes the fact holding the old one: 201, same id, the "
    "old text kept in its history.",
)
async def add_fact(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    body = await read_model(request, FactBody)
    added = await request.app[MEMORY].facts.add(user_id, character_id, body.text, body.scope)
    answer = a.FactAdded(fact=a.FactOut.of(added.fact), created=added.created)
    return json_response(answer, status=201 if added.created else 200)


@routes.patch(
    "/v1/facts/{fact_id}",
    "Change a fact by hand",
    "memory",
    a.FactEdited,
    scope="write",
    body=FactPatch,
    errors=(*BODY_ERRORS, 404, 409),
    description="text and/or pinned. The old text is kept in the fact's history. A new text is said by "
    "hand, so the fact becomes pinned unless pinned is given; 409 when another fact already says it.",
)
async def edit_fact(request: web.Request) -> web.Response:
    # The body first, as every JSON route does: JSON it cannot read is a 400 whatever the path.
    body = await read_model(request, FactPatch)
    fact_id = path_id(request, "fact_id")
    fact = await request.app[MEMORY].facts.edit(fact_id, text=body.text, pinned=body.pinned)
    return json_response(a.FactEdited(fact=a.FactOut.of(fact)))


@routes.get(
    "/v1/facts/{fact_id}/history",
    "Every text a fact had",
    "memory",
    a.FactHistoryAnswer,
    scope="read",
    errors=(404, 422),
    description="Oldest first, each with when it held (valid_from, valid_to) and why it stopped: edited, "
    "updated by the model, superseded by a newer fact about the same subject, or ended. A fact that "
    "ended is no longer current but its history stays until the fact is deleted or its user forgotten.",
)
async def fact_history(request: web.Request) -> web.Response:
    fact_id = path_id(request, "fact_id")
    versions = await request.app[MEMORY].facts.history(fact_id)
    return json_response(a.FactHistoryAnswer.of(fact_id, versions))


@routes.delete(
    "/v1/facts/{fact_id}", "Forget one fact", "memory", a.FactDeleted, scope="write", errors=(404, 422)
)
async def delete_fact(request: web.Request) -> web.Response:
    fact_id = path_id(request, "fact_id")
    await request.app[MEMORY].facts.delete(fact_id)
    return json_response(a.FactDeleted(deleted=fact_id))


async def forget(request: web.Request, user_id: str, character_id: str | None) -> web.Response:
    receipt = await request.app[MEMORY].admin.forget(user_id, character_id)
    return json_response(a.ForgetAnswer(user_id=user_id, character_id=character_id, deleted=receipt))


@routes.delete(
    PAIR, "Forget everything held about a user with one character", "memory", a.ForgetAnswer, scope="admin"
)
async def forget_pair(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    return await forget(request, user_id, character_id)


@routes.delete(
    "/v1/users/{user_id}", "Forget everything held about a user", "memory", a.ForgetAnswer, scope="admin"
)
async def forget_user(request: web.Request) -> web.Response:
    return await forget(request, request.match_info["user_id"], None)


@routes.get(
    "/v1/sessions/{agent_id}",
    "An agent run's session",
    "sessions",
    a.SessionAnswer,
    scope="read",
    errors=(404,),
)
async def get_session(request: web.Request) -> web.Response:
    session = await request.app[MEMORY].identity.session(request.match_info["agent_id"])
    return json_response(a.SessionAnswer(session=a.SessionOut.of(session)))


@routes.post(
    "/v1/sessions/{agent_id}/bind",
    "Tie an agent run to a pair",
    "sessions",
    a.SessionAnswer,
    scope="write",
    body=BindBody,
    errors=BODY_ERRORS,
)
async def bind_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    body = await read_model(request, BindBody)
    session = await request.app[MEMORY].identity.bind(agent_id, body.user_id, body.character_id)
    if session is None:
        return json_response(
            a.SessionAnswer(session=a.SessionOut.unseen(agent_id, body.user_id, body.character_id))
        )
    return json_response(a.SessionAnswer(session=a.SessionOut.of(session)))


# Channel bindings: for apps that give each user a channel of their own.


@routes.post(
    "/v1/channels/{channel}/bind",
    "Tie a channel to a pair",
    "channels",
    a.ChannelBound,
    scope="write",
    body=BindBody,
    errors=BODY_ERRORS,
    description="Later calls there, and the channel's unidentified ones, go to the pair.",
)
async def bind_channel(request: web.Request) -> web.Response:
    """Tie a channel to a pair: later calls there, and the channel's unidentified ones, go to it."""
    channel = channel_of(request)
    body = await read_model(request, BindBody)
    bound = await request.app[MEMORY].identity.bind_channel(channel, body.user_id, body.character_id)
    return json_response(
        a.ChannelBound(binding=a.ChannelBindingOut.of(bound.binding), moved_sessions=bound.moved)
    )


@routes.get(
    "/v1/channels/{channel}/bind",
    "Which pair a channel is bound to",
    "channels",
    a.ChannelBindingAnswer,
    scope="read",
    errors=(404, 422),
)
async def get_channel_binding(request: web.Request) -> web.Response:
    """Which pair a channel is bound to."""
    channel = channel_of(request)
    binding = await request.app[MEMORY].identity.channel_binding(channel)
    if binding is None:
        raise NotFound(f"channel {channel} is not bound; POST /v1/channels/{channel}/bind binds it")
    return json_response(a.ChannelBindingAnswer(binding=a.ChannelBindingOut.of(binding)))


@routes.delete(
    "/v1/channels/{channel}/bind",
    "Remove a channel's binding",
    "channels",
    a.ChannelUnbound,
    scope="write",
    errors=(404, 422),
)
async def unbind_channel(request: web.Request) -> web.Response:
    """Remove a channel's binding; sessions it already tied stay where they are."""
    channel = channel_of(request)
    binding = await request.app[MEMORY].identity.unbind_channel(channel)
    if binding is None:
        raise NotFound(f"channel {channel} is not bound")
    return json_response(a.ChannelUnbound(deleted=a.ChannelBindingOut.of(binding)))


@routes.get(
    "/v1/jobs",
    "Background jobs",
    "jobs",
    a.JobsAnswer,
    scope="admin",
    errors=READ_ERRORS,
    query=(
        Param("status", {"type": "string", "enum": list(JOB_STATUSES)}, "only jobs in this status"),
        limit_param(*JOBS_LIMIT),
    ),
)
async def list_jobs(request: web.Request) -> web.Response:
    status = job_status_query(request)
    limit = int_query(request, "limit", JOBS_LIMIT[0], low=1, high=JOBS_LIMIT[1])
    jobs = await request.app[MEMORY].queue.list_jobs(status, limit)
    return json_response(a.JobsAnswer(jobs=[a.JobOut.of(job) for job in jobs]))


@routes.post(
    "/v1/jobs/{job_id}/retry",
    "Run a job again now",
    "jobs",
    a.JobAnswer,
    scope="admin",
    errors=(404, 409, 422),
)
async def retry_job(request: web.Request) -> web.Response:
    job = await request.app[MEMORY].queue.retry_job(path_id(request, "job_id"))
    return json_response(a.JobAnswer(job=a.JobOut.of(job)))


@routes.post(
    PAIR + "/condense",
    "Condense the pair's memory now",
    "memory",
    a.CondenseAnswer,
    scope="write",
    status=202,
)
async def condense(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    job = await request.app[MEMORY].queue.condense_now(user_id, character_id)
    return json_response(a.CondenseAnswer(job=a.JobOut.of(job) if job else None), status=202)
