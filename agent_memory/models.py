"""Pydantic models of what Agora sends and what the service answers.

Inbound models are permissive: only `role` and `content` are required of a message,
unknown fields and unknown event types are kept, and every timestamp is normalised
to integer milliseconds by magnitude (Agora documents milliseconds and shows seconds).
"""

from __future__ import annotations

import math

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

# Below 10^11 a timestamp is seconds (10^11 ms is 1973, 10^11 s is the year 5138);
# above 10^14 it is microseconds.
SECONDS_BELOW = 10**11
MICROSECONDS_ABOVE = 10**14


def as_number(value: Any) -> float | int | None:
    """A finite number from an int, float or numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return None


def to_ms(value: Any) -> int | None:
    """Normalise an epoch timestamp in s, ms or µs (int, float or digit string) to ms."""
    value = as_number(value)
    if value is None or value < 0:
        return None
    if value < SECONDS_BELOW:
        return round(value * 1000)
    if value > MICROSECONDS_ABOVE:
        return round(value / 1000)
    return round(value)


def _to_str(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    return value


def _to_int(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Millis = Annotated[int | None, BeforeValidator(to_ms)]
LooseStr = Annotated[str | None, BeforeValidator(_to_str)]
LooseInt = Annotated[int | None, BeforeValidator(_to_int)]


def _loose_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes"}
    return bool(value)


def _text(value: Any) -> str:
    # The engine sends text only, but an OpenAI-style parts list or a null must not be lost.
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in value)
    return str(value)


# Messages come 32 (up to 1024) to a callback: each model normalises its raw dict in one
# Python call and leaves the rest to pydantic's native (compiled) validation.


class MessageMetadata(BaseModel):
    """`metadata` of a short-term-memory message; unknown keys are kept."""

    model_config = ConfigDict(extra="allow")

    source: str | None = None
    user: str | None = None
    interrupted: bool = False
    interrupt_timestamp: int | None = None
    original: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return {}
        data = dict(data)
        for name in ("source", "user", "original"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                data[name] = _to_str(value)
        if "interrupted" in data:
            data["interrupted"] = _loose_bool(data["interrupted"])
        if "interrupt_timestamp" in data:
            data["interrupt_timestamp"] = to_ms(data["interrupt_timestamp"])
        return data


class MemoryMessage(BaseModel):
    """One message of an agent's short-term memory, as the engine keeps it."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str
    turn_id: int | None = None
    timestamp: int | None = None
    metadata: MessageMetadata = Field(default_factory=MessageMetadata)
    speech_start_ms: int | float | None = None
    speech_end_ms: int | float | None = None
    speech_algorithmic_delay: int | float | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "content" in data:
            data["content"] = _text(data["content"])
        if "timestamp" in data:
            data["timestamp"] = to_ms(data["timestamp"])
        if "turn_id" in data:
            data["turn_id"] = _to_int(data["turn_id"])
        if data.get("metadata") is None:
            data["metadata"] = {}
        return data


class Envelope(BaseModel):
    """The NCS envelope around every callback."""

    model_config = ConfigDict(extra="allow")

    noticeId: str
    productId: LooseInt = None
    eventType: int
    notifyMs: Millis = None
    sid: LooseStr = None
    # Anything is kept: a payload that is not an object is stored raw and reported failed.
    payload: Any = Field(default_factory=dict)

    @field_validator("noticeId", mode="before")
    @classmethod
    def _notice_id_text(cls, value: Any) -> Any:
        return _to_str(value)

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_or_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def fields(self) -> dict[str, Any]:
        """The payload if it is an object, else empty."""
        return self.payload if isinstance(self.payload, dict) else {}


class AgentPayload(BaseModel):
    """Fields every agent event (101/102/103/110/111/112) may carry; times in ms."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    agent_id: LooseStr = None
    channel: LooseStr = None
    name: LooseStr = None
    start_ms: Millis = Field(None, alias="start_ts")
    stop_ms: Millis = Field(None, alias="stop_ts")
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_as_text(cls, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            return {}
        return {str(k): str(v) for k, v in value.items() if v is not None}


class AgentJoined(AgentPayload):
    """101: the agent joined its channel."""


class AgentLeft(AgentPayload):
    """102: the agent left; `status` STOPPED or FAILED, `message` the reason."""

    status: LooseStr = None
    message: LooseStr = None


class AgentHistory(AgentPayload):
    """103: the agent's short-term memory, sent after it stops."""

    contents: list[MemoryMessage] = Field(default_factory=list)

    @field_validator("contents", mode="before")
    @classmethod
    def _list_or_empty(cls, value: Any) -> Any:
        return [] if value is None else value


class AgentErrors(AgentPayload):
    """110: errors of the agent's modules."""

    errors: list[dict[str, Any]] = Field(default_factory=list)


class AgentMetrics(AgentPayload):
    """111: per-turn latency metrics; kept as sent."""


class TurnsFinished(AgentPayload):
    """112: per-turn timing of a finished agent."""

    turns: list[dict[str, Any]] = Field(default_factory=list)


PAYLOAD_MODELS: dict[int, type[AgentPayload]] = {
    101: AgentJoined,
    102: AgentLeft,
    103: AgentHistory,
    110: AgentErrors,
    111: AgentMetrics,
    112: TurnsFinished,
}

CONVERSATIONAL_AI_PRODUCT = 17


class HistoryWindow(BaseModel):
    """`GET …/agents/{agent_id}/history`: the running agent's short-term memory."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    agent_id: LooseStr = None
    start_ms: Millis = Field(None, alias="start_ts")
    status: LooseStr = None
    contents: list[MemoryMessage] = Field(default_factory=list)


class Identity(BaseModel):
    """Who a session belongs to, and which rule said so."""

    user_id: str
    character_id: str
    source: str  # labels, binding, rtc, channel
