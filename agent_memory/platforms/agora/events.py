"""Agora's callbacks and history answers as `core.events`: the only reader of its payloads.

An NCS envelope is classified here (console test, product, event type, validation, agent)
and its payload model mapped, in one pass, to a neutral `SessionEvent`; a history answer
becomes a neutral `HistoryWindow`. Pure and free of the database, so the webhook handler
runs it off the store's writer thread.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from agent_memory.core.clock import (
    LAST_MS,
    MICROSECONDS_ABOVE,
    SECONDS_BELOW,
    impossible_time,
    possible_ms,
)
from agent_memory.core.events import (
    INT64_MAX,
    INT64_MIN,
    TURN,
    EventKind,
    HistoryWindow,
    IncomingMessage,
    Outcome,
    RawEvent,
    SessionEvent,
)
from agent_memory.core.jsonutil import read_json
from agent_memory.errors import InvalidJSON
from agent_memory.platforms.agora.metrics import metric_rows, turn_rows
from agent_memory.platforms.agora.payloads import (
    CONVERSATIONAL_AI_PRODUCT,
    DOCS_PORTAL_PRODUCT,
    PAYLOAD_MODELS,
    AgentErrors,
    AgentHistory,
    AgentJoined,
    AgentLeft,
    AgentMetrics,
    AgentPayload,
    AgentTokenExpiring,
    Envelope,
    HistoryResponse,
    MemoryMessage,
    TurnsFinished,
)

log = logging.getLogger(__name__)

# The channel of the console's "test" button: its callbacks never become sessions.
TEST_CHANNEL = "test_webhook"
# A speech time below this is milliseconds since the agent started, not since the epoch
# (10^11 ms after 1970 is 1973; 10^11 ms of one call is three years).
RELATIVE_SPEECH_BELOW = 10**11
SPEECH_FIELDS = ("speech_start_ms", "speech_end_ms", "speech_algorithmic_delay")
# Where a join body takes labels: the fix memory names for a run whose labels name no user.
LABELS_FIELD = "properties.labels"

KINDS: dict[type[AgentPayload], EventKind] = {
    AgentJoined: "joined",
    AgentLeft: "left",
    AgentHistory: "history",
    AgentTokenExpiring: "token_expiring",
    AgentErrors: "errors",
    AgentMetrics: "metrics",
    TurnsFinished: "turns_finished",
}

ParsedEvent = SessionEvent | Outcome

# A message of only these keys, each of the type the engine sends, reads the same without
# MemoryMessage (tests/test_agora_plain.py holds the two readings equal): a 103 carries 32 to
# 1,024 of them, and validating each through pydantic's Python hooks was most of a callback's
# CPU on the request path. Anything else (tools, speech times, parts, strings for numbers,
# unknown keys) takes the model's path.
PLAIN_KEYS = frozenset(("role", "content", "turn_id", "timestamp", "metadata"))
PLAIN_METADATA_KEYS = frozenset(("source", "user", "interrupted", "interrupt_timestamp", "original"))
# A 103's payload of only these keys, each of the type the engine sends, reads the same without
# AgentHistory (`plain_history`): its wrap validator and a Python hook per field were a tenth of
# the request path once its messages were read plain.
PLAIN_PAYLOAD_KEYS = frozenset(("agent_id", "channel", "name", "start_ts", "stop_ts", "labels", "contents"))


def looks_like_callback(item: object) -> bool:
    """Whether a JSON value read from a file is a callback envelope (it carries a noticeId)."""
    return isinstance(item, dict) and "noticeId" in item


def read_envelope(body: bytes | str) -> tuple[Envelope, str]:
    """The envelope and the body as text, or InvalidJSON saying what is wrong."""
    data = read_json(body)  # the raw bytes were valid UTF-8 if this returns
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    if not isinstance(data, dict):
        raise InvalidJSON("the body must be a JSON object (an NCS envelope)")
    try:
        envelope = Envelope.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) for err in exc.errors())
        raise InvalidJSON(f"not an NCS envelope: missing or invalid {fields}") from None
    if impossible_time(data.get("notifyMs")):
        log.warning(
            "callback %s: notifyMs %.6g is not a possible time; ignored (what it would date is "
            "dated by its receipt)",
            envelope.noticeId,
            float(data["notifyMs"]),
        )
    return envelope, text


def parse_callback(body: bytes | str, received_ms: int, *, follow: bool) -> tuple[RawEvent, ParsedEvent]:
    """A callback body as its inbox record and what it means; InvalidJSON if not an envelope.

    `follow`: whether agents that join can be followed (Agora's REST API is configured).
    """
    envelope, text = read_envelope(body)
    return raw_event(envelope, text, received_ms), classify(envelope, follow=follow)


def raw_event(envelope: Envelope, body: str, received_ms: int) -> RawEvent:
    """The inbox record of a callback: its noticeId, type, times, agent and labels."""
    fields = envelope.fields
    agent_id = fields.get("agent_id")
    labels = fields.get("labels")
    return RawEvent(
        event_id=envelope.noticeId,
        event_type=envelope.eventType,
        body=body,
        received_ms=received_ms,
        product_id=envelope.productId,
        notify_ms=envelope.notifyMs,
        agent_id=str(agent_id) if agent_id is not None else None,
        labels=labels if isinstance(labels, dict) else {},
    )


def classify(envelope: Envelope, *, follow: bool) -> ParsedEvent:
    """The neutral event of an agent callback, or the outcome of one that is not used."""
    payload = envelope.fields
    if TEST_CHANNEL in (payload.get("channelName"), payload.get("channel")):
        return Outcome("test", detail="console test callback")
    if not isinstance(envelope.payload, dict):
        return Outcome("failed", detail="payload is not a JSON object; kept raw")
    other_product = product_outcome(envelope)
    if other_product is not None:
        return other_product
    model = PAYLOAD_MODELS.get(envelope.eventType)
    if model is None:
        return Outcome("ignored", detail=f"event type {envelope.eventType} is kept, not used")
    messages = plain_messages(payload.get("contents")) if model is AgentHistory else None
    if messages is not None:
        plain = plain_history(payload, messages)
        if plain is not None:
            return plain if plain.agent_id else Outcome("ignored", detail="payload has no agent_id")
        # Read above: the payload's other fields are validated without them.
        payload = {name: value for name, value in payload.items() if name != "contents"}
    try:
        event = model.model_validate(payload)
    except ValidationError as exc:
        return Outcome("failed", detail=f"payload of event {envelope.eventType}: {exc}")
    if not event.agent_id:
        return Outcome("ignored", detail="payload has no agent_id")
    try:
        return session_event(event, follow=follow, messages=messages)
    except Exception as exc:  # kept raw; `agent-memory reprocess` retries it with a fixed version
        log.exception("callback %s (type %s) failed", envelope.noticeId, envelope.eventType)
        return Outcome("failed", detail=f"{type(exc).__name__}: {exc}")


def product_outcome(envelope: Envelope) -> Outcome | None:
    """None for a ConvoAI envelope; else the outcome of one another product sent.

    productId 17 is the Conversational AI Engine. Payloads copied from Agora's docs portal
    carry productId 1, which is also the RTC product, whose channel events reuse our
    eventType numbers: productId 1 counts as ConvoAI only for one of our event types whose
    payload names an agent.
    """
    product = envelope.productId
    if product in (None, CONVERSATIONAL_AI_PRODUCT):
        return None
    agent_event = envelope.eventType in PAYLOAD_MODELS and bool(envelope.fields.get("agent_id"))
    if product == DOCS_PORTAL_PRODUCT and agent_event:
        log.info(
            "callback %s has productId 1 (as Agora's docs portal shows) but is an agent event "
            "(type %s, agent %s): read as ConvoAI",
            envelope.noticeId,
            envelope.eventType,
            envelope.fields.get("agent_id"),
        )
        return None
    if product == DOCS_PORTAL_PRODUCT:
        log.info(
            "callback %s (productId 1, type %s) names no agent: an RTC channel event, kept, not used",
            envelope.noticeId,
            envelope.eventType,
        )
        return Outcome("ignored", detail="productId 1 without agent_id: an RTC channel event")
    log.warning(
        "callback %s is from productId %s, not the Conversational AI Engine (17): kept, not "
        "used; check which products notify this URL in Agora's console",
        envelope.noticeId,
        product,
    )
    return Outcome("ignored", detail=f"productId {product} is not ConvoAI")


def session_event(
    event: AgentPayload, *, follow: bool = False, messages: list[IncomingMessage] | None = None
) -> SessionEvent:
    """A validated agent payload (101/102/103/104/110/111/112) as a neutral session event;
    `messages`: a 103's, already read (`plain_messages`), instead of its validated contents."""
    agent_id = event.agent_id or ""
    out = SessionEvent(
        kind=KINDS[type(event)],
        agent_id=agent_id,
        channel=event.channel,
        name=event.name,
        start_ms=event.start_ms,
        stop_ms=event.stop_ms,
        labels=event.labels,
        skipped=event.skipped,
        labels_field=LABELS_FIELD,
    )
    if isinstance(event, AgentHistory):
        out.messages = messages if messages is not None else [incoming(m) for m in event.contents]
    elif isinstance(event, AgentJoined):
        out.follow = follow
    elif isinstance(event, AgentLeft):
        out.failed = (event.status or "").upper() == "FAILED"
        out.stop_status = event.status
        out.stop_reason = event.message
    elif isinstance(event, AgentErrors):
        out.error_count = len(event.errors)
    elif isinstance(event, AgentMetrics):
        out.metrics = metric_rows(event.metrics)
    elif isinstance(event, TurnsFinished):
        out.metrics = turn_rows(event.turns)
        out.turn_count = event.total_turn_count
        out.truncated = event.is_truncated
        if event.is_truncated:
            out.advice = (
                f"Agora cut its turn list (112 is_truncated): {len(event.turns)} of "
                f"{event.total_turn_count or 'more'} turns reported; GET …/agents/{agent_id}/turns "
                "pages through all of them for 7 days"
            )
    elif isinstance(event, AgentTokenExpiring):
        out.advice = token_advice(agent_id, event.message)
    return out


def token_advice(agent_id: str, message: str | None) -> str:
    """What to do when Agora says (104) that an agent's RTC token is about to expire."""
    return (
        f"its RTC token is about to expire (104{f': {message}' if message else ''}). Renew it "
        f'now: POST /v2/projects/{{appid}}/agents/{agent_id}/update with {{"properties": '
        '{"token": "<a new RTC token for this channel and the agent\'s uid>"}} (Agora\'s update '
        "endpoint); otherwise the agent loses the channel when the token expires"
    )


def history_window(agent_id: str, answer: HistoryResponse) -> HistoryWindow:
    """A running agent's history answer as a neutral window."""
    return HistoryWindow(
        agent_id=agent_id,
        start_ms=answer.start_ms,
        messages=[incoming(message) for message in answer.contents],
        skipped=answer.skipped,
        labels_field=LABELS_FIELD,
    )


def plain_messages(contents: Any) -> list[IncomingMessage] | None:
    """A 103's contents read without MemoryMessage when every item is plain (`plain_message`), else None."""
    if type(contents) is not list:
        return None
    messages = []
    for item in contents:
        message = plain_message(item)
        if message is None:
            return None
        messages.append(message)
    return messages


def plain_history(payload: dict[str, Any], messages: list[IncomingMessage]) -> SessionEvent | None:
    """A 103 whose messages were read plain and whose other fields are the engine's (text, whole s or
    ms, text labels) as `session_event` makes it through AgentHistory; None for any other payload."""
    if not PLAIN_PAYLOAD_KEYS.issuperset(payload):
        return None
    get = payload.get
    agent_id, channel, name, labels = get("agent_id"), get("channel"), get("name"), get("labels", {})
    start_ms, stop_ms = get("start_ts"), get("stop_ts")
    if not (
        (agent_id is None or type(agent_id) is str)
        and (channel is None or type(channel) is str)
        and (name is None or type(name) is str)
        and type(labels) is dict
        and all(type(value) is str for value in labels.values())
    ):
        return None
    if start_ms is not None and (start_ms := _plain_ms(start_ms)) == -1:
        return None
    if stop_ms is not None and (stop_ms := _plain_ms(stop_ms)) == -1:
        return None
    return SessionEvent(
        kind="history",
        agent_id=agent_id or "",
        channel=channel,
        name=name,
        start_ms=start_ms,
        stop_ms=stop_ms,
        labels=dict(labels),
        skipped=[],
        labels_field=LABELS_FIELD,
        messages=messages,
    )


def _plain_ms(value: Any) -> int:
    """Whole seconds or milliseconds since the epoch as `to_ms` reads them; -1 for any other value."""
    if type(value) is not int or not 0 <= value <= MICROSECONDS_ABOVE:
        return -1
    # Within these bounds `to_ms` is the value in ms (x1000 below SECONDS_BELOW), never past LAST_MS.
    return value * 1000 if value < SECONDS_BELOW else value


def plain_message(item: Any) -> IncomingMessage | None:
    """A message of text, a turn id, a time in s or ms and plain metadata, as `incoming` reads it
    through MemoryMessage; None for any other (which that path reads, or sets aside)."""
    if type(item) is not dict or not PLAIN_KEYS.issuperset(item):
        return None
    get = item.get
    role, content, turn_id, timestamp, meta = (
        get("role"),
        get("content"),
        get("turn_id"),
        get("timestamp"),
        get("metadata"),
    )
    if type(role) is not str or role == "tool" or not role.strip() or type(content) is not str:
        return None
    if turn_id is not None and (type(turn_id) is not int or not INT64_MIN <= turn_id <= INT64_MAX):
        return None
    # 32 to 1,024 of these per 103: times are read here rather than through `to_ms`, which
    # tries every type a time can come in.
    if timestamp is not None and (timestamp := _plain_ms(timestamp)) == -1:
        return None
    if meta is None:
        return IncomingMessage(role, content, TURN, turn_id, timestamp)
    if type(meta) is not dict or not PLAIN_METADATA_KEYS.issuperset(meta):
        return None
    get = meta.get
    source, speaker, original = get("source"), get("user"), get("original")
    interrupted, interrupt_ms = get("interrupted", False), get("interrupt_timestamp")
    if interrupt_ms is not None and (interrupt_ms := _plain_ms(interrupt_ms)) == -1:
        return None
    if not (
        (source is None or type(source) is str)
        and (speaker is None or type(speaker) is str)
        and (original is None or type(original) is str)
        and type(interrupted) is bool
    ):
        return None
    # Positional, in field order, as in `incoming`.
    return IncomingMessage(
        role, content, TURN, turn_id, timestamp, None, source, speaker, interrupted, interrupt_ms, original
    )


def incoming(message: MemoryMessage) -> IncomingMessage:
    """One short-term-memory message as a neutral incoming message."""
    meta = message.metadata
    extra: dict[str, Any] = dict(message.model_extra) if message.model_extra else {}
    speech_start = message.speech_start_ms
    # Most messages carry none of these (only a custom LLM's do): one test for all three.
    if (
        speech_start is not None
        or message.speech_end_ms is not None
        or message.speech_algorithmic_delay is not None
    ):
        for name in SPEECH_FIELDS:
            value = getattr(message, name)
            if value is not None:
                extra[name] = value
    if meta.model_extra:
        extra["metadata"] = meta.model_extra
    kind = message.kind
    timestamp, elapsed = message.timestamp, None
    if timestamp is None and speech_start is not None:
        # With llm.vendor "custom" the speech start is the only time a message has.
        timestamp, elapsed = speech_time(speech_start)
    # Positional, in field order (keywords cost twice as much), once per message of every callback.
    item = IncomingMessage(
        message.role,  # role
        message.content,  # content
        kind,  # kind
        message.turn_id,  # turn_id
        timestamp,  # ts_ms
        elapsed,  # elapsed_ms
        meta.source,  # source
        meta.user,  # speaker
        meta.interrupted,  # interrupted
        meta.interrupt_timestamp,  # interrupt_ms
        meta.original,  # original
        message.tool_data() if kind != TURN else None,  # tool
        message.content_is_text,  # content_is_text
        message.raw_content,  # raw_content
        extra or None,  # extra
    )
    if message.content_images:
        item.images = message.content_images
    return item


def speech_time(value: float | None) -> tuple[int | None, int | None]:
    """A custom-LLM `speech_start_ms` as (epoch ms, ms since the agent started), by magnitude.

    Agora documents it as a Unix timestamp in milliseconds; a small value is read as
    milliseconds since the agent started, and a huge one as microseconds.
    """
    if value is None or isinstance(value, bool) or value < 0:
        return None, None
    if value < RELATIVE_SPEECH_BELOW:
        return None, round(value)
    if value > LAST_MS * 1000:  # no reading makes it a possible time (and dividing could overflow)
        return None, None
    return possible_ms(round(value / 1000) if value > MICROSECONDS_ABOVE else round(value)), None
