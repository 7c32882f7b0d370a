"""The one place exceptions become HTTP responses, plus JSON and parameter helpers (auth: web/auth.py).

Every error answer has the shape `{"error": {"code": "...", "message": "..."}}`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from agent_memory.core.jsonutil import dumps, read_json
from agent_memory.errors import (
    AgentMemoryError,
    BadRequest,
    BadSignature,
    InvalidField,
    InvalidJSON,
    NotConfigured,
    PayloadTooLarge,
    RequestTimeout,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ModelT = TypeVar("ModelT", bound=BaseModel)

# What the API documents as an integer: int() alone also takes " 5", "+5", "5_0" and "٥".
INTEGER = re.compile(r"-?[0-9]+")
# No store keeps a NUL character (PostgreSQL text cannot hold one; SQLite's full-text queries
# stop at it): refused in paths, queries and bodies alike.
NUL = "\x00"
NO_NUL = "NUL characters (U+0000) are not accepted"

# How long a request body may take to arrive (settings.body_timeout_s, put here by the app).
BODY_TIMEOUT_S = web.AppKey("body_timeout_s", float)
DEFAULT_BODY_TIMEOUT_S = 15.0

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def json_response(data: Any, *, status: int = 200) -> web.Response:
    """`data` as JSON; an answer model as the API documents it (keys it leaves out stay out)."""
    if isinstance(data, BaseModel):
        body = data.__pydantic_serializer__.to_json(data, by_alias=True, exclude_unset=True)
        return web.Response(body=body, status=status, content_type="application/json", charset="utf-8")
    return web.json_response(data, status=status, dumps=dumps)


def error_response(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def route_of(request: web.Request) -> str:
    """The request's route as a template (`/v1/users/{user_id}/…`): a path would log user ids."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "(no route)"


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map our exceptions, aiohttp's and unexpected ones to the JSON error shape."""
    try:
        return await handler(request)
    except AgentMemoryError as exc:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, route_of(request), exc.message)
        response = error_response(exc.status, exc.code, exc.message)
        if exc.status == 408:
            response.force_close()  # the rest of a stalled body is not waited for on this connection
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None and exc.status in (429, 503):
            response.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        return response
    except web.HTTPRequestEntityTooLarge:
        return error_response(
            413,
            "payload_too_large",
            f"the body is larger than the {request.app._client_max_size} bytes allowed "
            "(AGENT_MEMORY_MAX_BODY_BYTES)",
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = HTTP_CODES.get(exc.status, "http_error")
        message = exc.text if exc.text and not exc.text.startswith(str(exc.status)) else exc.reason
        if exc.status == 404:
            message = f"no route for {request.method} {request.path}"
        elif exc.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        response = error_response(exc.status, code, message)
        if "Allow" in exc.headers:  # RFC 9110: a 405 says which methods the path has
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("unexpected error in %s %s", request.method, route_of(request))
        return error_response(500, "internal_error", "internal error; the service log has details")


@web.middleware
async def nul_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a NUL character in the path or the query with a 400 that says so."""
    if NUL in request.path or any(NUL in key or NUL in value for key, value in request.query.items()):
        raise BadRequest(f"{NO_NUL} in a path or query")
    return await handler(request)


def holds_nul(value: Any) -> bool:
    """Whether a parsed JSON value has a NUL character in any of its strings or keys."""
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(holds_nul(key) or holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(holds_nul(item) for item in value)
    return False


async def read_body(request: web.Request) -> bytes:
    """The whole request body, within the size and the time allowed: every route reads it here."""
    limit = request.app._client_max_size
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"the body is {request.content_length} bytes, over the {limit} allowed "
            "(AGENT_MEMORY_MAX_BODY_BYTES)"
        )
    if request.content.is_eof():
        # All of it came with the headers (a webhook's few kilobytes, mostly): nothing can stall,
        # so no timer is armed and cancelled for it (~4.5 us a request).
        return await request.read()
    timeout_s = request.app.get(BODY_TIMEOUT_S, DEFAULT_BODY_TIMEOUT_S)
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(
            f"the body did not arrive within {timeout_s:g} s (AGENT_MEMORY_BODY_TIMEOUT_S): "
            "send it whole, with a Content-Length that matches it"
        ) from None


async def read_json_body(request: web.Request, *, empty: Any = None) -> Any:
    """The body parsed as JSON (`empty` for no body), or InvalidJSON saying what is wrong."""
    raw = await read_body(request)
    return read_json(raw) if raw else empty


async def read_model(request: web.Request, model: type[ModelT]) -> ModelT:
    """Parse the JSON body into `model`, with messages that say what is wrong."""
    data = await read_json_body(request, empty={})
    if not isinstance(data, dict):
        raise InvalidJSON("the body must be a JSON object")
    if holds_nul(data):
        raise InvalidField(f"{NO_NUL} in the body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidField(validation_message(exc)) from None


def validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
    )


def path_id(request: web.Request, name: str) -> int:
    """A numeric id from the path, or a 422 that says what was wrong."""
    raw = request.match_info[name]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise InvalidField(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def int_query(request: web.Request, name: str, default: int, *, low: int, high: int) -> int:
    """An integer query parameter within [low, high], or a 422 that says so."""
    raw = request.query.get(name)
    if raw is None:
        return default
    if not INTEGER.fullmatch(raw):
        raise InvalidField(f"{name} must be an integer, got {raw!r}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidField(f"{name} must be between {low} and {high}, got {value}")
    return value


def rejection(exc: Exception) -> str:
    """The outcome a refused webhook is counted under."""
    if isinstance(exc, BadSignature):
        return "rejected_signature"
    if isinstance(exc, NotConfigured):
        return "refused_unconfigured"
    if isinstance(exc, PayloadTooLarge | BadRequest | RequestTimeout | web.HTTPRequestEntityTooLarge):
        return "rejected_body"
    return "error"
