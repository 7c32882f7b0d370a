"""Scoped keys of the /v1 API, made, listed and revoked over HTTP (admin scope: web/auth.py).

| method and path | what |
|---|---|
| `POST /v1/keys` `{"scope": "read"\\|"write"\\|"admin", "name": …}` | a new key: answered once, stored by its hash |
| `GET /v1/keys` | every key, revoked ones too (never a key or its hash) |
| `DELETE /v1/keys/{key_id}` | revoke a key for good |
"""

from __future__ import annotations

from aiohttp import web

from agent_memory.web import answers as a
from agent_memory.web.auth import GATE
from agent_memory.web.declare import BODY_ERRORS, Routes
from agent_memory.web.http import json_response, path_id, read_model
from agent_memory.web.keys import MEMORY
from agent_memory.web.schemas import KeyBody

routes = Routes()

SHOWN_ONCE = "keep the key now: only its hash is stored, and it is not shown again"


@routes.post(
    "/v1/keys",
    "Make a key of a scope: answered once, stored by its hash",
    "keys",
    a.KeyCreated,
    scope="admin",
    status=201,
    body=KeyBody,
    errors=BODY_ERRORS,
)
async def create_key(request: web.Request) -> web.Response:
    """A new key of the scope asked for; the key itself is in this answer only."""
    body = await read_model(request, KeyBody)
    issued = await request.app[MEMORY].keys.create_api_key(body.scope, body.name)
    answer = a.KeyCreated(api_key=a.KeyOut.of(issued.record), key=issued.key, note=SHOWN_ONCE)
    return json_response(answer, status=201)


@routes.get(
    "/v1/keys", "Every key, revoked ones too (never a key itself)", "keys", a.KeysAnswer, scope="admin"
)
async def list_keys(request: web.Request) -> web.Response:
    """Every key, oldest first, revoked ones with their revocation time."""
    keys = await request.app[MEMORY].keys.api_keys()
    return json_response(a.KeysAnswer(api_keys=[a.KeyOut.of(key) for key in keys]))


@routes.delete(
    "/v1/keys/{key_id}", "Revoke a key for good", "keys", a.KeyRevoked, scope="admin", errors=(404, 422)
)
async def revoke_key(request: web.Request) -> web.Response:
    """Revoke a key: refused from its next request on (other instances: within seconds)."""
    revoked = await request.app[MEMORY].keys.revoke_api_key(path_id(request, "key_id"))
    request.app[GATE].drop(revoked.key_hash)
    return json_response(a.KeyRevoked(revoked=a.KeyOut.of(revoked)))
