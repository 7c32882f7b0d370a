"""The `/v1` HTTP API and `/healthz`: memory out, facts in, forgetting, sessions."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, Field, ValidationError

from agent_memory import __version__
from agent_memory.core.context import load_context
from agent_memory.errors import InvalidField, NotFound, StoreUnavailable
from agent_memory.core.facts import add_pinned_fact
from agent_memory.web.http import int_query, json_response, path_id, read_model, validation_message
from agent_memory.memory.ingest import TEST_CHANNEL
from agent_memory.memory.jobs import condense_now, retry_job
from agent_memory.core.render import RenderOptions, to_openai_messages
from agent_memory.web.keys import INGESTOR, SETTINGS, STORE
from agent_memory.core.styles import style_from_query

log = logging.getLogger(__name__)
routes = web.RouteTableDef()

PAIR = "/v1/users/{user_id}/characters/{character_id}"
MAX_PERSONA_CHARS = 20_000


class FactBody(BaseModel):
    text: str = Field(min_length=1, max_length=500)
    scope: Literal["character", "user"] = "character"


class RenderBody(BaseModel):
    messages: list[dict[str, Any]] = Field(max_length=5000)
    options: RenderOptions = Field(default_factory=RenderOptions)


class BindBody(BaseModel):
    user_id: str = Field(min_length=1, max_length=256)
    character_id: str = Field(min_length=1, max_length=256)


def pair(request: web.Request) -> tuple[str, str]:
    return request.match_info["user_id"], request.match_info["character_id"]


TOOL_FIELDS = ("tool_calls", "tool_call_id", "name", "content")


def message_json(row: dict[str, Any]) -> dict[str, Any]:
    """A stored message; a tool call or result (`kind`) also carries its tool data as sent."""
    kind = row.get("kind") or "turn"
    body = {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "role": row["role"],
        "kind": kind,
        "content": row["content"],
        "turn_id": row["turn_id"],
        "ts_ms": row["at_ms"] if row["ts_ms"] is None else row["ts_ms"],
        "timestamp_known": row["ts_ms"] is not None,
        "source": row["source"],
        "speaker": row["speaker"],
        "interrupted": bool(row["interrupted"]),
        "interrupt_ms": row["interrupt_ms"],
        "original": row["original"],
        "gap_before": bool(row["gap_before"]),
    }
    if kind != "turn":
        extra = json.loads(row["extra"]) if row.get("extra") else {}
        body["tool"] = {name: extra[name] for name in TOOL_FIELDS if name in extra}
    return body


def fact_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "text": row["text"],
        "scope": "user" if row["character_id"] == "" else "character",
        "pinned": bool(row["pinned"]),
        "origin": row["origin"],
        "created_ms": row["created_ms"],
        "updated_ms": row["updated_ms"],
    }


def session_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: row.get(k) for k in (
            "agent_id", "user_id", "character_id", "identity_source", "channel", "name",
            "status", "stop_reason", "start_ms", "stop_ms", "rtc_uid", "message_count",
            "gap_count", "error_count", "token_warning_ms", "turn_count",
        )},
        # 104: when Agora last warned that the agent's RTC token is about to expire.
        "token_expiring": row.get("token_warning_ms") is not None,
        # 112: Agora reported only part of the session's turns.
        "turns_truncated": bool(row.get("turns_truncated")),
        "labels": json.loads(row["labels"]) if row.get("labels") else {},
    }  # fmt: skip


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    store = request.app[STORE]
    try:
        migrations = await store.read(lambda view: view.schema_migrations())
    except Exception as exc:
        raise StoreUnavailable(f"database not reachable: {exc}") from exc
    return json_response(
        {"status": "ok", "version": __version__, "database": str(store.path), "schema": migrations}
    )


@routes.get(PAIR + "/system-messages")
async def system_messages(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    user_id, character_id = pair(request)
    max_tokens = int_query(request, "max_tokens", settings.context_max_tokens, low=50, high=200_000)
    persona = request.query.get("persona") or None
    if persona and len(persona) > MAX_PERSONA_CHARS:
        raise InvalidField(f"persona is at most {MAX_PERSONA_CHARS} characters")
    # The shape the agent's llm.style wants; `exclude_agent_id` leaves out a running call's
    # own turns, which that agent already holds (what a live refresh sends).
    style = style_from_query(request.query.get("style"))
    context = await load_context(
        request.app[STORE],
        user_id=user_id,
        character_id=character_id,
        max_tokens=max_tokens,
        recent_messages=settings.context_recent_messages,
        persona=persona,
        style=style,
        exclude_agent_id=request.query.get("exclude_agent_id") or None,
    )
    return json_response({"user_id": user_id, "character_id": character_id, **context.as_json()})


@routes.get(PAIR + "/messages")
async def messages(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    # Tool calls and results too: each says its kind.
    rows = await request.app[STORE].read(
        lambda view: view.latest_messages(user_id, character_id, limit, spoken_only=False)
    )
    return json_response(
        {"user_id": user_id, "character_id": character_id, "messages": [message_json(r) for r in rows]}
    )


@routes.get(PAIR + "/summary")
async def summary(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)

    def read(view: Any) -> tuple[dict[str, Any] | None, int]:
        row = view.get_summary(user_id, character_id)
        watermark = row["watermark_id"] if row else 0
        return row, view.count_messages_after(user_id, character_id, watermark)

    row, uncovered = await request.app[STORE].read(read)
    body: dict[str, Any] = {"user_id": user_id, "character_id": character_id, "summary": None}
    if row is not None:
        body["summary"] = {
            "text": row["text"],
            "method": row["method"],
            "model": row["model"],
            "covered_until_ms": row["covered_until_ms"],
            "messages_covered": row["message_count"],
            "watermark_id": row["watermark_id"],
            "updated_ms": row["updated_ms"],
        }
    body["messages_not_yet_covered"] = uncovered
    return json_response(body)


@routes.get(PAIR + "/facts")
async def list_facts(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    rows = await request.app[STORE].read(lambda view: view.list_facts(user_id, character_id))
    return json_response(
        {"user_id": user_id, "character_id": character_id, "facts": [fact_json(r) for r in rows]}
    )


@routes.post(PAIR + "/facts")
async def add_fact(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    body = await read_model(request, FactBody)
    scope_character = "" if body.scope == "user" else character_id
    fact, created = await request.app[STORE].write(
        lambda tx: add_pinned_fact(tx, user_id, scope_character, body.text)
    )
    return json_response({"fact": fact_json(fact), "created": created}, status=201 if created else 200)


@routes.delete("/v1/facts/{fact_id}")
async def delete_fact(request: web.Request) -> web.Response:
    fact_id = path_id(request, "fact_id")
    deleted = await request.app[STORE].write(lambda tx: tx.delete_fact(fact_id))
    if not deleted:
        raise NotFound(f"no fact with id {fact_id}")
    return json_response({"deleted": fact_id})


async def forget(request: web.Request, user_id: str, character_id: str | None) -> web.Response:
    store = request.app[STORE]
    receipt = await store.write(lambda tx: tx.forget(user_id, character_id))
    # Until the WAL is checkpointed the forgotten text still sits in it.
    await store.checkpoint()
    log.info("forgot %s/%s: %s", user_id, character_id or "*", receipt)
    return json_response(
        {"user_id": user_id, "character_id": character_id, "deleted": receipt}
    )


@routes.delete(PAIR)
async def forget_pair(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    return await forget(request, user_id, character_id)


@routes.delete("/v1/users/{user_id}")
async def forget_user(request: web.Request) -> web.Response:
    return await forget(request, request.match_info["user_id"], None)


@routes.get("/v1/sessions/{agent_id}")
async def get_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    row = await request.app[STORE].read(lambda view: view.get_session(agent_id))
    if row is None:
        raise NotFound(f"no session for agent {agent_id}")
    return json_response({"session": session_json(row)})


@routes.post("/v1/sessions/{agent_id}/bind")
async def bind_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    body = await read_model(request, BindBody)
    ingestor = request.app[INGESTOR]
    row = await request.app[STORE].write(
        lambda tx: ingestor.bind(tx, agent_id, body.user_id, body.character_id)
    )
    return json_response({"session": session_json(row)})


# Channel bindings: for apps that give each user a channel of their own.

MAX_CHANNEL_BYTES = 64  # Agora's limit for a channel name


def check_channel(channel: str) -> str:
    """A channel name that can be bound, or a 422 that says what is wrong with it."""
    if not channel:
        raise InvalidField("channel must not be empty")
    if len(channel.encode()) > MAX_CHANNEL_BYTES:
        raise InvalidField(
            f"channel must be at most {MAX_CHANNEL_BYTES} bytes (Agora's limit for channel names), "
            f"got {len(channel.encode())}"
        )
    if channel == TEST_CHANNEL:
        raise InvalidField(f"{TEST_CHANNEL} is the console's test channel: its callbacks never become sessions")
    return channel


def channel_of(request: web.Request) -> str:
    """The checked channel name of the path."""
    return check_channel(request.match_info["channel"])


def channel_binding_json(row: dict[str, Any]) -> dict[str, Any]:
    """A channel binding as the API answers it."""
    return {k: row[k] for k in ("channel", "user_id", "character_id", "created_ms", "updated_ms")}


@routes.post("/v1/channels/{channel}/bind")
async def bind_channel(request: web.Request) -> web.Response:
    """Tie a channel to a pair: later calls there, and the channel's unidentified ones, go to it."""
    channel = channel_of(request)
    body = await read_model(request, BindBody)
    ingestor = request.app[INGESTOR]
    binding, moved = await request.app[STORE].write(
        lambda tx: ingestor.bind_channel(tx, channel, body.user_id, body.character_id)
    )
    return json_response({"binding": channel_binding_json(binding), "moved_sessions": moved})


@routes.get("/v1/channels/{channel}/bind")
async def get_channel_binding(request: web.Request) -> web.Response:
    """Which pair a channel is bound to."""
    channel = channel_of(request)
    row = await request.app[STORE].read(lambda view: view.get_channel_binding(channel))
    if row is None:
        raise NotFound(f"channel {channel} is not bound; POST /v1/channels/{channel}/bind binds it")
    return json_response({"binding": channel_binding_json(row)})


@routes.delete("/v1/channels/{channel}/bind")
async def unbind_channel(request: web.Request) -> web.Response:
    """Remove a channel's binding; sessions it already tied stay where they are."""
    channel = channel_of(request)
    row = await request.app[STORE].write(lambda tx: tx.delete_channel_binding(channel))
    if row is None:
        raise NotFound(f"channel {channel} is not bound")
    return json_response({"deleted": channel_binding_json(row)})


JOB_STATUSES = ("pending", "running", "dead")


def job_json(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in (
        "id", "kind", "user_id", "character_id", "status", "due_ms", "attempts", "last_error",
        "pending_messages", "updated_ms",
    )}  # fmt: skip


@routes.get("/v1/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    status = request.query.get("status") or None
    if status is not None and status not in JOB_STATUSES:
        raise InvalidField(f"status must be one of {', '.join(JOB_STATUSES)}, got {status!r}")
    limit = int_query(request, "limit", 100, low=1, high=1000)
    rows = await request.app[STORE].read(lambda view: view.jobs(status, limit))
    return json_response({"jobs": [job_json(row) for row in rows]})


@routes.post("/v1/jobs/{job_id}/retry")
async def retry(request: web.Request) -> web.Response:
    row = await retry_job(request.app[STORE], path_id(request, "job_id"))
    return json_response({"job": job_json(row)})


@routes.post(PAIR + "/condense")
async def condense(request: web.Request) -> web.Response:
    user_id, character_id = pair(request)
    store = request.app[STORE]
    await condense_now(store, user_id, character_id)
    row = await store.read(lambda view: view.get_job("condense", user_id, character_id))
    return json_response({"job": job_json(row) if row else None}, status=202)


@routes.post("/v1/render/openai-messages")
async def render_messages(request: web.Request) -> web.Response:
    """A custom-LLM request's messages as OpenAI messages: system, tool and image parts kept."""
    body = await read_model(request, RenderBody)
    try:
        messages = to_openai_messages(body.messages, body.options)
    except ValidationError as exc:
        raise InvalidField(f"messages: {validation_message(exc)}") from None
    return json_response({"messages": messages})
