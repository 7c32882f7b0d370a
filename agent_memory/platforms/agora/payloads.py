"""Pydantic models of what Agora sends: NCS callbacks and REST answers (Agora's wire format).

Only `platforms/agora` reads these; `events.py` maps them to `core.events`. They are
permissive: only `role` and `content` are required of a message,
unknown fields and unknown event types are kept, and every timestamp is normalised
to integer milliseconds by magnitude (Agora documents milliseconds and shows seconds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from agent_memory.core.clock import (  # noqa: F401  # MICROSECONDS_ABOVE, SECONDS_BELOW re-exported
    MICROSECONDS_ABOVE,
    SECONDS_BELOW,
    as_number,
    impossible_time,
    to_ms,
)
from agent_memory.core.events import INT64_MAX, INT64_MIN, TOOL_CALL, TOOL_RESULT, TURN, MessageKind
from agent_memory.core.images import Image, images_of

log = logging.getLogger(__name__)


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


# The speech times a custom LLM's messages carry, and where a 112 turn carries its times.
SPEECH_TIMES = ("speech_start_ms", "speech_end_ms")
SPEECH_FIELDS = (*SPEECH_TIMES, "speech_algorithmic_delay")
TURN_TIMES = (("start", "start_at"), ("end", "end_at"), ("", "start_ts"), ("", "stop_ts"))

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


def _images(parts: list[Any]) -> list[Image] | None:
    """The images kept of a turn's content parts (None: none); dropped ones are logged by reason."""
    kept, dropped = images_of(parts)
    if dropped:
        # Reasons only: a URL (or a data: URL's payload) is the user's data, never logged.
        log.info("%d image(s) of a turn not kept: %s", len(dropped), "; ".join(sorted(set(dropped))))
    return kept or None


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
                if not isinstance(data[name], str):  # an object or a list: kept as sent, never read
                    data[f"{name}_as_sent"], data[name] = value, None
        if "interrupted" in data:
            data["interrupted"] = _loose_bool(data["interrupted"])
        if "interrupt_timestamp" in data:
            data["interrupt_timestamp"] = to_ms(data["interrupt_timestamp"])
        return data


# Each step reads a message's fields as sent and leaves them as MemoryMessage takes them.


def _content(data: dict[str, Any]) -> None:
    """Content that is not text (absent, null, a list of parts): its text, kept as sent."""
    if not isinstance(data.get("content"), str):
        data["content_is_text"] = False
        data["raw_content"] = content = data.get("content")
        data["content"] = _text(content)
        if isinstance(content, list):
            data["content_images"] = _images(content)


def _times(data: dict[str, Any]) -> None:
    """The timestamp in ms; times that are no possible time noted as ignored."""
    if "timestamp" in data:
        value = data["timestamp"]
        data["timestamp"] = to_ms(value)
        if data["timestamp"] is None and value is not None and impossible_time(value):
            data["ignored_times"] = ["timestamp"]
    meta = data.get("metadata")
    if (
        isinstance(meta, dict)
        and "interrupt_timestamp" in meta
        and impossible_time(meta["interrupt_timestamp"])
    ):
        data.setdefault("ignored_times", []).append("metadata.interrupt_timestamp")


def _speech(data: dict[str, Any]) -> None:
    """A custom LLM's speech timings: no possible time is dropped, a non-number kept as sent."""
    if data.keys().isdisjoint(SPEECH_FIELDS):  # only a custom LLM's messages carry them
        return
    for name in SPEECH_TIMES:
        if name in data and impossible_time(data[name]):
            data.setdefault("ignored_times", []).append(name)
            data[name] = None  # kept out of the message's extras too: it is no time
    for name in SPEECH_FIELDS:
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or as_number(value) is None):
            data[f"{name}_as_sent"], data[name] = value, None  # not a number: kept as sent


def _turn(data: dict[str, Any]) -> None:
    """The turn id as a 64-bit integer; an unreadable one kept as sent (it must not cost the message)."""
    turn_id = data.get("turn_id")
    if turn_id is not None and (type(turn_id) is not int or not INT64_MIN <= turn_id <= INT64_MAX):
        data["turn_id"] = _turn_number(turn_id)
        if data["turn_id"] is None:
            data["turn_id_as_sent"] = turn_id
    if data.get("metadata") is None:
        data["metadata"] = {}


def _role(data: dict[str, Any]) -> None:
    """The role as text; an empty one is an error."""
    role = data.get("role")
    if role is not None and not isinstance(role, str):
        data["role"] = role = _to_str(role)
    if isinstance(role, str) and not role.strip():
        raise ValueError("role is empty")


def _tools(data: dict[str, Any]) -> None:
    """Tool fields as OpenAI has them; an id or name that is an object or list kept as sent."""
    if "tool_calls" not in data and "tool_call_id" not in data and "name" not in data:
        return
    for name in ("tool_call_id", "name"):
        if data.get(name) is not None and not isinstance(data[name], str):
            data[name] = _to_str(data[name])
            if not isinstance(data[name], str):
                data[f"{name}_as_sent"], data[name] = data[name], None
    if data.get("tool_calls") is not None and not isinstance(data["tool_calls"], list):
        data["tool_calls"] = [data["tool_calls"]]


NORMALISE_STEPS: tuple[Callable[[dict[str, Any]], None], ...] = (
    _content,
    _times,
    _speech,
    _turn,
    _role,
    _tools,
)


class MemoryMessage(BaseModel):
    """One message of an agent's short-term memory, as the engine keeps it.

    `content` is optional (Agora's SDK marks it so): an assistant turn that only calls
    tools carries `tool_calls` instead, and a `tool` result answers a `tool_call_id`.
    """

    model_config = ConfigDict(extra="allow")

    role: str
    content: str = ""
    turn_id: int | None = None
    timestamp: int | None = None
    metadata: MessageMetadata = Field(default_factory=MessageMetadata)
    speech_start_ms: int | float | None = None
    speech_end_ms: int | float | None = None
    speech_algorithmic_delay: int | float | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # The content as sent when it was not text: absent or null (None), or a list of parts.
    content_is_text: bool = Field(True, exclude=True)
    raw_content: Any = Field(None, exclude=True)
    # What is kept of the images among the parts (core/images.py), None when there are none.
    content_images: list[Image] | None = Field(None, exclude=True)
    # Time fields sent as numbers that are no possible time: ignored, and reported.
    ignored_times: list[str] | None = Field(None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for step in NORMALISE_STEPS:
            step(data)
        return data

    @property
    def kind(self) -> MessageKind:
        """turn, tool_call (the LLM asked for tools and said nothing) or tool_result."""
        if self.role == "tool" or self.tool_call_id is not None:
            return TOOL_RESULT
        if self.tool_calls and not self.content.strip():
            return TOOL_CALL
        return TURN

    def tool_data(self) -> dict[str, Any]:
        """The OpenAI tool fields this message carries, as sent."""
        data: dict[str, Any] = {}
        if self.tool_calls is not None:
            data["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data


def _problem(exc: ValidationError) -> str:
    """The first thing wrong with an item, in a few words."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]


def valid_messages(raw: Any, field: str = "contents") -> tuple[list[Any], list[str]]:
    """The items of a message list that can be applied, and what is wrong with the others."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{field} is not a list (got {type(raw).__name__}); no message could be read"]
    kept: list[Any] = []
    skipped: list[str] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            skipped.append(f"{field}[{index}]: not an object (got {type(item).__name__})")
            continue
        try:
            kept.append(MemoryMessage.model_validate(item))
        except ValidationError as exc:
            skipped.append(f"{field}[{index}]: {_problem(exc)}")
    return kept, skipped


def _turn_number(value: Any) -> int | None:
    """A turn id as an integer (Agora sends numbers, sometimes as strings); None if not one."""
    number = as_number(value)
    if number is None or not float(number).is_integer() or not -(2**63) <= number < 2**63:
        return None
    return int(number)


def valid_objects(raw: Any, field: str, *, need_turn: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects of a list (naming a turn, if `need_turn`), and a note for each other item."""
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{field} is not a list (got {type(raw).__name__})"]
    kept: list[dict[str, Any]] = []
    skipped: list[str] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            skipped.append(f"{field}[{index}]: not an object (got {type(item).__name__})")
        elif need_turn and _turn_number(item.get("turn_id")) is None:
            skipped.append(f"{field}[{index}]: no usable turn_id ({item.get('turn_id')!r})")
        else:
            kept.append(item)
    return kept, skipped


# Top-level fields of the wrong type a payload may lose before it is refused whole.
MAX_UNREADABLE_FIELDS = 8


class Lenient(BaseModel):
    """A payload whose unusable parts are set aside (and listed) instead of failing it whole."""

    # False: validate as a whole first (the common, fast case) and look at the parts only
    # when that fails; True: always (when set_aside also reshapes what is valid).
    set_aside_first: ClassVar[bool] = True
    # Top-level time fields (by their names on the wire): one that is no possible time is ignored.
    time_fields: ClassVar[tuple[str, ...]] = ()
    _skipped: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _set_aside_what_cannot_be_applied(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        notes = [
            f"{name}: {float(data[name]):.6g} is not a possible time; ignored"
            for name in cls.time_fields
            if impossible_time(data.get(name))
        ]
        model = None
        if not cls.set_aside_first:
            try:
                model = handler(data)
            except ValidationError:
                pass  # one bad part must not cost the others: look at them one by one
        if model is None:
            data, skipped = cls.set_aside(dict(data))
            notes.extend(skipped)
            model = cls._without_unreadable_fields(data, handler, notes)
        if isinstance(model, Lenient):
            notes.extend(model.ignored_times())
            if notes:
                model._skipped = notes
        return model

    @classmethod
    def _without_unreadable_fields(
        cls, data: dict[str, Any], handler: ValidatorFunctionWrapHandler, notes: list[str]
    ) -> Any:
        """The model of `data`, leaving out (and noting) each top-level field of the wrong type."""
        for _ in range(MAX_UNREADABLE_FIELDS):
            try:
                return handler(data)
            except ValidationError as exc:
                errors = [err for err in exc.errors() if err["loc"] and err["loc"][0] in data]
                if not errors:
                    raise
                for err in errors:
                    notes.append(f"{err['loc'][0]}: {err['msg']}; ignored")
                unreadable = {err["loc"][0] for err in errors}
                data = {name: value for name, value in data.items() if name not in unreadable}
        return handler(data)

    def ignored_times(self) -> list[str]:
        """A note for each time inside the payload's parts that is no possible time."""
        return []

    @classmethod
    def set_aside(cls, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The payload without its unusable parts, and a note for each part left out."""
        return data, []

    @property
    def skipped(self) -> list[str]:
        """What of the payload could not be applied."""
        return self._skipped


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


class AgentPayload(Lenient):
    """Fields every agent event (101/102/103/104/110/111/112) may carry; times in ms."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    time_fields: ClassVar[tuple[str, ...]] = ("start_ts", "stop_ts")

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


class Transcript(Lenient):
    """A short-term memory as Agora sends it: `contents`, whose unusable items are set aside."""

    set_aside_first: ClassVar[bool] = False
    contents: list[MemoryMessage] = Field(default_factory=list)

    @field_validator("contents", mode="before")
    @classmethod
    def _list_or_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @classmethod
    def set_aside(cls, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        data["contents"], skipped = valid_messages(data.get("contents"))
        return data, skipped

    def ignored_times(self) -> list[str]:
        """`contents[i].<field>` for each message time that is no possible time (the message is kept)."""
        return [
            f"contents[{index}].{name}: not a possible time; ignored (the message is kept)"
            for index, message in enumerate(self.contents)
            if message.ignored_times
            for name in message.ignored_times
        ]


class AgentHistory(AgentPayload, Transcript):
    """103: the agent's short-term memory, sent after it stops."""


class AgentTokenExpiring(AgentPayload):
    """104: the agent's RTC token is about to expire; renew it with Agora's update endpoint."""

    message: LooseStr = None


class AgentErrors(AgentPayload):
    """110: errors of the agent's modules."""

    errors: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def set_aside(cls, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        data["errors"], skipped = valid_objects(data.get("errors"), "errors")
        return data, skipped


class AgentMetrics(AgentPayload):
    """111: per-turn latencies (`metrics[]` of `turn_id`, `asr_ttlw`, `llm_ttfb`, …), in ms.

    Agora documents `payload.metrics`; a `payload.turns` list of the same items is read
    too (tolerance: the shape an early fixture of ours had).
    """

    metrics: list[dict[str, Any]] = Field(default_factory=list)

    @classmethod
    def set_aside(cls, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        source = "metrics" if data.get("metrics") is not None else "turns"
        data["metrics"], skipped = valid_objects(data.get(source), source, need_turn=True)
        return data, skipped


class TurnsFinished(AgentPayload):
    """112: the finished session's turns (`start`, `end`, `metrics` each), in a batch.

    Agora cuts the list when a session had too many turns (`is_truncated`).
    """

    turns: list[dict[str, Any]] = Field(default_factory=list)
    total_turn_count: LooseInt = None
    is_truncated: bool = False

    @field_validator("is_truncated", mode="before")
    @classmethod
    def _truncated(cls, value: Any) -> bool:
        return False if value is None else _loose_bool(value)

    @field_validator("total_turn_count", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return value if _turn_number(value) is not None else None

    @classmethod
    def set_aside(cls, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        data["turns"], skipped = valid_objects(data.get("turns"), "turns", need_turn=True)
        return data, skipped

    def ignored_times(self) -> list[str]:
        """`turns[i].<field>` for each turn time that is no possible time (the turn is kept)."""
        notes: list[str] = []
        for index, turn in enumerate(self.turns):
            for part, name in TURN_TIMES:
                holder = turn.get(part) if part else turn
                if isinstance(holder, dict) and impossible_time(holder.get(name)):
                    where = f"{part}.{name}" if part else name
                    notes.append(f"turns[{index}].{where}: not a possible time; ignored (the turn is kept)")
        return notes


PAYLOAD_MODELS: dict[int, type[AgentPayload]] = {
    101: AgentJoined,
    102: AgentLeft,
    103: AgentHistory,
    104: AgentTokenExpiring,
    110: AgentErrors,
    111: AgentMetrics,
    112: TurnsFinished,
}

CONVERSATIONAL_AI_PRODUCT = 17
# Agora's docs portal shows event payloads under productId 1 (the RTC product id), and
# RTC channel events reuse the same eventType numbers: such an envelope is read as an
# agent event only when its payload names an agent.
DOCS_PORTAL_PRODUCT = 1


class HistoryResponse(Transcript):
    """`GET …/agents/{agent_id}/history`: the running agent's short-term memory."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    time_fields: ClassVar[tuple[str, ...]] = ("start_ts",)

    agent_id: LooseStr = None
    start_ms: Millis = Field(None, alias="start_ts")
    status: LooseStr = None
