"""The records an export holds, as models: each one checked against its kind's, naming its line."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_memory.core.domain import FactChange, FactOrigin, SessionStatus, SummaryMethod
from agent_memory.core.events import IdentitySource
from agent_memory.memory.restore.reader import Piece, invalid

NUL = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")


# The records restored, as the export writes them (columns it may lack in older exports: optional).


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class SessionRecord(_Record):
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)
    identity_source: IdentitySource
    status: SessionStatus


class MessageRecord(_Record):
    id: int
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)
    seq: int
    role: str
    kind: Literal["turn", "tool_call", "tool_result"] = "turn"
    content: str
    turn_id: int | None = None
    ts_ms: int | None = None
    at_ms: int
    source: str | None = None
    speaker: str | None = None
    interrupted: bool = False
    interrupt_ms: int | None = None
    original: str | None = None
    gap_before: bool = False
    extra: Any = None
    images: Any = None
    created_ms: int | None = None
    # Exported since issue 27; recomputed for older exports.
    fp: str | None = None


class SummaryRecord(_Record):
    character_id: str = Field(min_length=1)
    text: str
    watermark_id: int
    covered_until_ms: int | None = None
    message_count: int = 0
    method: SummaryMethod = "offline"
    model: str | None = None
    created_ms: int = 0
    updated_ms: int = 0


class FactRecord(_Record):
    id: int
    character_id: str
    text: str = Field(min_length=1)
    pinned: bool = False
    origin: FactOrigin = "manual"
    created_ms: int = 0
    updated_ms: int | None = None
    valid_from: int | None = None


class FactVersionRecord(_Record):
    fact_id: int
    character_id: str
    text: str
    origin: FactOrigin | None = None
    valid_from: int
    valid_to: int
    change: FactChange


class BindingRecord(_Record):
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)


class ChannelBindingRecord(_Record):
    channel: str = Field(min_length=1)
    character_id: str = Field(min_length=1)


class MetricRecord(_Record):
    agent_id: str = Field(min_length=1)
    turn_id: int
    metric: str
    value_ms: float
    at_ms: int


class RawRecord(_Record):
    notice_id: str = Field(min_length=1)
    event_type: int
    received_ms: int
    status: str
    agent_id: str | None = None


RECORDS: dict[str, type[_Record]] = {
    "sessions": SessionRecord,
    "messages": MessageRecord,
    "summaries": SummaryRecord,
    "facts": FactRecord,
    "fact_history": FactVersionRecord,
    "bindings": BindingRecord,
    "channel_bindings": ChannelBindingRecord,
    "metrics": MetricRecord,
    "raw_callbacks": RawRecord,
}
NOT_RESTORED = ("jobs", "followed_agents")


def _holds_nul(value: Any) -> bool:
    """Whether a string of the value holds what no database text can: NUL, a lone surrogate."""
    if isinstance(value, str):
        return NUL in value or _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def checked(piece: Piece, index: int) -> dict[str, Any]:
    """A record as its model reads it (a dict), or a 400 naming its line and what is wrong."""
    if not isinstance(piece.value, dict):
        raise invalid(piece.line, f"{piece.key}[{index}] must be an object")
    if piece.suspect and _holds_nul(piece.value):
        raise invalid(
            piece.line,
            f"{piece.key}[{index}] holds a NUL character or a lone surrogate, which cannot be stored",
        )
    try:
        return RECORDS[piece.key].model_validate(piece.value).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise invalid(piece.line, f"{piece.key}[{index}].{where}: {first['msg']}") from None
