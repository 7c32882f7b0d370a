"""What the HTTP API accepts: request bodies and query parameters, with their limits.

Each parser answers a 422 (`InvalidField`) that says what is wrong; the CLI reuses the
channel check so that both accept the same names.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from agent_memory.core.domain import JobStatus, KeyScope
from agent_memory.core.facts import MAX_FACT_CHARS
from agent_memory.core.limits import MAX_CHANNEL_BYTES, MAX_MS, MAX_PERSONA_CHARS, MAX_QUERY_CHARS
from agent_memory.core.search import MENTION_ROLES, SEARCH_KINDS, MentionRole, SearchKind
from agent_memory.errors import BadRequest, InvalidField
from agent_memory.memory.condensing import JOB_STATUSES
from agent_memory.web.http import int_query

ChoiceT = TypeVar("ChoiceT", bound=str)


def _whole(value: Any) -> Any:
    """A JSON number without a fraction (100.0) is the integer JSON Schema takes it for."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Put last in an integer field's Annotated (after its bounds, which then stay in its schema), a
# strict body model reads the field as JSON Schema does: 100 or 100.0, not "100" or true.
WHOLE = BeforeValidator(_whole)


class FactBody(BaseModel):
    """`POST …/facts`: a fact said by hand."""

    model_config = ConfigDict(
        strict=True, json_schema_extra={"examples": [{"text": "prefers to be called Ally"}]}
    )
    text: str = Field(min_length=1, max_length=MAX_FACT_CHARS)
    scope: Literal["character", "user"] = "character"


class FactPatch(BaseModel):
    """`PATCH /v1/facts/{fact_id}`: a fact changed by hand (its text, whether it is pinned, or both)."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"examples": [{"text": "moved to Lyon"}, {"pinned": False}], "minProperties": 1},
    )
    # Each may be left out, never null: the document says so (SkipJsonSchema) and the body is
    # held to it, so a client learns "omit it" rather than sending a null that changes nothing.
    text: str | SkipJsonSchema[None] = Field(default=None, min_length=1, max_length=MAX_FACT_CHARS)
    pinned: bool | SkipJsonSchema[None] = None

    @field_validator("text", "pinned", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("must not be null: leave the field out to keep what the fact has")
        return value


class BindBody(BaseModel):
    """`POST …/bind`: the pair an agent run or a channel belongs to."""

    model_config = ConfigDict(
        strict=True, json_schema_extra={"examples": [{"user_id": "u-alice", "character_id": "luna"}]}
    )
    user_id: str = Field(min_length=1, max_length=256)
    character_id: str = Field(min_length=1, max_length=256)


class KeyBody(BaseModel):
    """`POST /v1/keys`: the new key's scope, and a name to tell it by."""

    model_config = ConfigDict(
        strict=True, json_schema_extra={"examples": [{"scope": "read", "name": "dashboard"}]}
    )
    scope: KeyScope
    name: str | None = Field(None, min_length=1, max_length=200)


def pair(request: web.Request) -> tuple[str, str]:
    """The (user_id, character_id) of the path."""
    return request.match_info["user_id"], request.match_info["character_id"]


def persona_query(request: web.Request) -> str | None:
    """The optional `persona` parameter, at most MAX_PERSONA_CHARS long."""
    persona = request.query.get("persona") or None
    if persona and len(persona) > MAX_PERSONA_CHARS:
        raise InvalidField(f"persona is at most {MAX_PERSONA_CHARS} characters")
    return persona


def check_channel(channel: str) -> str:
    """A channel name that can be bound, or a 422 that says what is wrong with it."""
    if not channel:
        raise InvalidField("channel must not be empty")
    if len(channel.encode()) > MAX_CHANNEL_BYTES:
        raise InvalidField(
            f"channel must be at most {MAX_CHANNEL_BYTES} bytes (Agora's limit for channel names), "
            f"got {len(channel.encode())}"
        )
    return channel


def channel_of(request: web.Request) -> str:
    """The checked channel name of the path."""
    return check_channel(request.match_info["channel"])


def job_status_query(request: web.Request) -> JobStatus | None:
    """The optional `status` filter of the job list."""
    status = request.query.get("status")
    if status is None:
        return None
    return one_of(JOB_STATUSES, status, f"status must be one of {', '.join(JOB_STATUSES)}, got {status!r}")


def one_of(allowed: tuple[ChoiceT, ...], value: str, message: str) -> ChoiceT:
    """`value` as the allowed choice it equals, or a 422 with `message`."""
    for choice in allowed:
        if value == choice:
            return choice
    raise InvalidField(message)


def query_text(request: web.Request) -> str:
    """The `q` parameter: required, not blank, not too long."""
    q = request.query.get("q", "")
    if not q.strip():
        raise InvalidField("q is required: give the words to search for, e.g. ?q=wedding")
    if len(q) > MAX_QUERY_CHARS:
        raise InvalidField(f"q is at most {MAX_QUERY_CHARS} characters, got {len(q)}")
    return q


def optional_query(request: web.Request) -> str | None:
    """The optional `query` of system-messages: what the call is about, to recall memories for."""
    query = request.query.get("query", "")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidField(f"query is at most {MAX_QUERY_CHARS} characters, got {len(query)}")
    return query if query.strip() else None


def optional_text(request: web.Request, name: str) -> str | None:
    """A query parameter, or None when absent or empty."""
    value = request.query.get(name, "")
    return value if value != "" else None


def bool_query(request: web.Request, name: str) -> bool:
    """A yes-or-no query parameter: `true` or `false` (also 1 or 0); absent, false."""
    raw = request.query.get(name)
    if raw is None:
        return False
    value = {"true": True, "1": True, "false": False, "0": False}.get(raw.strip().lower())
    if value is None:
        raise BadRequest(f"{name} must be true or false, not {raw[:40]!r}")
    return value


def optional_ms(request: web.Request, name: str) -> int | None:
    """An optional epoch-milliseconds query parameter."""
    if name not in request.query:
        return None
    return int_query(request, name, 0, low=0, high=MAX_MS)


def kinds_query(request: web.Request) -> tuple[SearchKind, ...]:
    """The `kinds` parameter: which of message, fact, summary to search."""
    raw = request.query.get("kinds", "")
    if not raw:
        return SEARCH_KINDS
    wrong = f"kinds is a comma-separated list of {', '.join(SEARCH_KINDS)}; got {raw!r}"
    names = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    if not names:
        raise InvalidField(wrong)
    return tuple(one_of(SEARCH_KINDS, name, wrong) for name in names)


def role_query(request: web.Request) -> MentionRole:
    """The `role` parameter of the mentions search."""
    role = request.query.get("role", "user")
    return one_of(MENTION_ROLES, role, f"role must be one of {', '.join(MENTION_ROLES)}, got {role!r}")


def window(request: web.Request) -> tuple[int | None, int | None]:
    """The optional `since_ms`/`until_ms` window of the stats endpoints."""
    since_ms, until_ms = optional_ms(request, "since_ms"), optional_ms(request, "until_ms")
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise InvalidField(f"since_ms ({since_ms}) must be before until_ms ({until_ms})")
    return since_ms, until_ms
