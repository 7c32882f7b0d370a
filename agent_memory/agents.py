"""Agents through the service: start with memory, follow, refresh, leave."""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from .api import session_json
from .context import load_context
from .errors import Conflict, InvalidField
from .http import json_response, read_model
from .models import AgentPayload
from .state import AGORA, INGESTOR, POLLER, SETTINGS, STORE
from .store import now_ms

routes = web.RouteTableDef()

SystemMessages = list[dict[str, Any]]


class StartBody(BaseModel):
    user_id: str = Field(min_length=1, max_length=256)
    character_id: str = Field(min_length=1, max_length=256)
    persona: str | None = Field(None, max_length=20_000)
    max_tokens: int | None = Field(None, ge=50, le=200_000)
    join: dict[str, Any] = Field(description="Agora's join body: name, properties, …")


class WatchBody(BaseModel):
    user_id: str | None = Field(None, min_length=1, max_length=256)
    character_id: str | None = Field(None, min_length=1, max_length=256)
    # The agent's own system messages; given (even []), refreshes may replace the list.
    system_messages: SystemMessages | None = None
    persona: str | None = Field(None, max_length=20_000)
    max_tokens: int | None = Field(None, ge=50, le=200_000)


def with_memory(
    join: dict[str, Any], labels: dict[str, str], memory: SystemMessages
) -> tuple[dict[str, Any], SystemMessages]:
    """Agora's join body with our labels added and memory after the caller's system messages."""
    body = copy.deepcopy(join)
    properties = body.setdefault("properties", {})
    if not isinstance(properties, dict):
        raise InvalidField("join.properties must be an object")
    for name in ("labels", "llm"):
        if not isinstance(properties.get(name) or {}, dict):
            raise InvalidField(f"join.properties.{name} must be an object")
    properties["labels"] = {**(properties.get("labels") or {}), **labels}
    llm = properties.setdefault("llm", {})
    own = llm.get("system_messages") or []
    if not isinstance(own, list) or not all(isinstance(m, dict) for m in own):
        raise InvalidField("join.properties.llm.system_messages must be a list of message objects")
    own = list(own)
    llm["system_messages"] = own + memory
    return body, own


@routes.post("/v1/agents")
async def start_agent(request: web.Request) -> web.Response:
    app = request.app
    settings, store, ingestor = app[SETTINGS], app[STORE], app[INGESTOR]
    body = await read_model(request, StartBody)
    max_tokens = body.max_tokens or settings.context_max_tokens
    context = await load_context(
        store,
        user_id=body.user_id,
        character_id=body.character_id,
        max_tokens=max_tokens,
        recent_messages=settings.context_recent_messages,
        persona=body.persona,
    )
    labels = {
        settings.label_user_key: body.user_id,
        settings.label_character_key: body.character_id,
    }
    join, own = with_memory(body.join, labels, context.system_messages)
    answer = await app[AGORA].join(join)
    agent_id = str(answer["agent_id"])
    properties = join["properties"]
    event = AgentPayload.model_validate(
        {
            "agent_id": agent_id,
            "channel": properties.get("channel"),
            "name": join.get("name"),
            "labels": properties["labels"],
            "start_ts": answer.get("create_ts"),
        }
    )

    def record(tx: Any) -> dict[str, Any]:
        ingestor.bind(tx, agent_id, body.user_id, body.character_id)
        session = ingestor.ensure_session(tx, event, (), now_ms())
        tx.watch(
            agent_id, "join", first_poll_ms=now_ms(), base_system_messages=own,
            persona=body.persona, max_tokens=max_tokens,
        )  # fmt: skip
        return session

    session = await store.write(record)
    return json_response(
        {
            "agent_id": agent_id,
            "agora": answer,
            "session": session_json(session),
            "system_messages": properties["llm"]["system_messages"],
            "memory_tokens": context.tokens,
            "included": context.included,
        },
        status=201,
    )


@routes.post("/v1/agents/{agent_id}/refresh")
async def refresh_agent(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    messages = await request.app[POLLER].push(agent_id, force=True)
    return json_response({"agent_id": agent_id, "system_messages": messages})


@routes.post("/v1/agents/{agent_id}/leave")
async def leave_agent(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    answer = await request.app[AGORA].leave(agent_id)
    # Following ends with the 102/103 or the 404 that comes after a leave.
    return json_response({"agent_id": agent_id, "agora": answer})


@routes.post("/v1/sessions/{agent_id}/watch")
async def watch_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    body = await read_model(request, WatchBody)
    ingestor = request.app[INGESTOR]
    if (body.user_id is None) != (body.character_id is None):
        raise InvalidField("give both user_id and character_id, or neither")

    def record(tx: Any) -> tuple[str, dict[str, Any] | None]:
        if body.user_id and body.character_id:
            ingestor.bind(tx, agent_id, body.user_id, body.character_id)
        result = tx.watch(
            agent_id, "manual", first_poll_ms=now_ms(),
            base_system_messages=body.system_messages, persona=body.persona,
            max_tokens=body.max_tokens,
        )  # fmt: skip
        return result, tx.get_watch(agent_id)

    result, watch = await request.app[STORE].write(record)
    created = result == "created"
    if watch is None:
        raise Conflict(f"agent {agent_id} has already stopped; there is nothing to follow")
    return json_response(
        {"agent_id": agent_id, "following": watch["status"] == "watching", "created": created,
         "refresh_enabled": watch["base_system_messages"] is not None},
        status=201 if created else 200,
    )  # fmt: skip


@routes.delete("/v1/sessions/{agent_id}/watch")
async def unwatch_session(request: web.Request) -> web.Response:
    agent_id = request.match_info["agent_id"]
    stopped = await request.app[STORE].write(lambda tx: tx.unwatch(agent_id, "stopped by request"))
    return json_response({"agent_id": agent_id, "stopped": stopped})
