"""Answers about a pair's memory: messages, facts, the summary, system messages, recall, forget."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from agent_memory.core.clock import format_datetime
from agent_memory.core.domain import (
    Fact,
    FactChange,
    FactOrigin,
    FactScope,
    FactVersion,
    Message,
    MessageKind,
    Summary,
    SummaryMethod,
)
from agent_memory.core.recall import Recall, RecalledMemory, RecallScope
from agent_memory.web.answers.base import Answer, Object, Omitted, Style


class UrlImage(Answer):
    """An image given by an http(s) URL, kept as sent."""

    kind: Literal["url"]
    url: str


class DataImage(Answer):
    """An image sent inline (a data: URL): only its media type and decoded size are kept."""

    kind: Literal["data"]
    media_type: str | None = Field(description="e.g. image/png; null when the URL named none")
    size_bytes: int


ImageOut = Annotated[UrlImage | DataImage, Field(discriminator="kind")]

# A tool call's or result's data, as sent (MessageOut.tool).
TOOL_FIELDS = ("tool_calls", "tool_call_id", "name", "content")


class MessageOut(Answer):
    """A stored message; a tool call or result (`kind`) also carries `tool`, its data as sent."""

    id: int
    agent_id: str
    role: str
    kind: MessageKind
    content: str
    turn_id: int | None
    ts_ms: int = Field(description="when it was said (epoch ms); the session's start when not known")
    timestamp_known: bool
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None = Field(description="the whole reply when the user interrupted it")
    gap_before: bool
    images: list[ImageOut] = Field(
        description="the images shown with the turn, never part of its text or of memory; "
        "an http(s) URL as sent (up to 4 KiB), of a data: URL only its media type and size"
    )
    tool: Object | Omitted = None

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        """A stored message as the API answers it."""
        out = cls(
            id=message.id,
            agent_id=message.agent_id,
            role=message.role,
            kind=message.kind,
            content=message.content,
            turn_id=message.turn_id,
            ts_ms=message.at_ms if message.ts_ms is None else message.ts_ms,
            timestamp_known=message.ts_ms is not None,
            source=message.source,
            speaker=message.speaker,
            interrupted=message.interrupted,
            interrupt_ms=message.interrupt_ms,
            original=message.original,
            gap_before=message.gap_before,
            images=message.images,
        )
        if not message.spoken:
            extra = message.extra
            out.tool = {name: extra[name] for name in TOOL_FIELDS if name in extra}
        return out


class MessagesAnswer(Answer):
    user_id: str
    character_id: str
    messages: list[MessageOut] = Field(description="oldest first")


class MessagesAdded(Answer):
    """`POST …/messages`: what became of the posted messages (held already: a repost, unchanged)."""

    user_id: str
    character_id: str
    session_id: str
    stored: int = Field(description="messages new to memory, stored now")
    already_held: int = Field(description="messages memory held already (posted before): nothing changed")
    left_out: int = Field(description="said before the pair was last forgotten: never stored again")


class FactOut(Answer):
    id: int
    text: str
    scope: FactScope
    pinned: bool
    origin: FactOrigin
    created_ms: int
    updated_ms: int
    valid_from: int = Field(description="since when its text holds (epoch ms); its earlier texts: …/history")

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        """A remembered fact."""
        return cls(
            id=fact.id,
            text=fact.text,
            scope=fact.scope,
            pinned=fact.pinned,
            origin=fact.origin,
            created_ms=fact.created_ms,
            updated_ms=fact.updated_ms,
            valid_from=fact.valid_from,
        )


class FactsAnswer(Answer):
    user_id: str
    character_id: str
    facts: list[FactOut]


class FactAdded(Answer):
    """A fact said by hand; `created` is false when the same fact was already held."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "fact": {
                        "id": 7,
                        "text": "prefers to be called Ally",
                        "scope": "character",
                        "pinned": True,
                        "origin": "manual",
                        "created_ms": 1793736960000,
                        "updated_ms": 1793736960000,
                        "valid_from": 1793736960000,
                    },
                    "created": True,
                }
            ]
        }
    )
    fact: FactOut
    created: bool


class FactEdited(Answer):
    """A fact changed by hand; its text before is in its history."""

    fact: FactOut


class FactVersionOut(Answer):
    text: str
    origin: FactOrigin
    valid_from: int = Field(description="since when the text held (epoch ms)")
    valid_to: int | None = Field(description="until when it held; null: the text the fact has now")
    change: FactChange | None = Field(
        description="why it stopped holding: edited by hand, updated by the model, superseded by a newer "
        "fact about the same subject, or ended (no longer true); null while it holds"
    )

    @classmethod
    def of(cls, version: FactVersion) -> FactVersionOut:
        """One text a fact had, and when it held."""
        return cls(
            text=version.text,
            origin=version.origin,
            valid_from=version.valid_from,
            valid_to=version.valid_to,
            change=version.change,
        )


class FactHistoryAnswer(Answer):
    """Every text a fact had, oldest first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "fact_id": 7,
                    "current": True,
                    "versions": [
                        {
                            "text": "lives in Paris",
                            "origin": "manual",
                            "valid_from": 1793736960000,
                            "valid_to": 1796415360000,
                            "change": "superseded",
                        },
                        {
                            "text": "moved to Lyon",
                            "origin": "manual",
                            "valid_from": 1796415360000,
                            "valid_to": None,
                            "change": None,
                        },
                    ],
                }
            ]
        }
    )
    fact_id: int
    current: bool = Field(description="false: the fact ended (no longer true) and only its history is kept")
    versions: list[FactVersionOut] = Field(description="oldest first; the current text last")

    @classmethod
    def of(cls, fact_id: int, versions: list[FactVersion]) -> FactHistoryAnswer:
        """A fact's texts, oldest first; current while its last one holds."""
        shaped = [FactVersionOut.of(version) for version in versions]
        return cls(fact_id=fact_id, current=versions[-1].valid_to is None, versions=shaped)


class FactDeleted(Answer):
    deleted: int = Field(description="the id of the deleted fact")


class SummaryOut(Answer):
    text: str
    method: SummaryMethod
    model: str | None
    covered_until_ms: int | None
    messages_covered: int
    watermark_id: int
    updated_ms: int

    @classmethod
    def of(cls, summary: Summary) -> SummaryOut:
        """A pair's rolling summary."""
        return cls(
            text=summary.text,
            method=summary.method,
            model=summary.model,
            covered_until_ms=summary.covered_until_ms,
            messages_covered=summary.message_count,
            watermark_id=summary.watermark_id,
            updated_ms=summary.updated_ms,
        )


class SummaryAnswer(Answer):
    user_id: str
    character_id: str
    summary: SummaryOut | None
    messages_not_yet_covered: int


class SystemMessage(Answer):
    role: Literal["system"]
    content: str


class SystemMessagesAnswer(Answer):
    """The pair's memory as system_messages in the asked style, within max_tokens."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "u-alice",
                    "character_id": "luna",
                    "system_messages": [
                        {
                            "role": "system",
                            "content": "What you remember about this user (long-term memory):\n- The user has a cat named Miso",
                        }
                    ],
                    "style": "openai",
                    "tokens": 24,
                    "max_tokens": 1500,
                    "included": {"persona": False, "facts": 1, "summary": False, "messages": 0},
                }
            ]
        }
    )
    user_id: str
    character_id: str
    system_messages: list[Object] = Field(description="in the style's shape: openai {role, content}, …")
    style: Style
    tokens: int
    max_tokens: int
    included: Object = Field(description="what went in: persona, facts, summary, messages, recalled…")


class ContextTurnOut(Answer):
    position: Literal["before", "after"]
    role: str
    text: str
    at_ms: int


class RecalledBase(Answer):
    text: str
    at_ms: int
    at: str = Field(description="at_ms as a UTC date and time, for people")
    score: float
    character_id: str | None
    session: str | None = Field(description="the agent run a turn was said in")


class RecalledTurn(RecalledBase):
    kind: Literal["turn"]
    role: str | None
    message_id: int | None
    context: list[ContextTurnOut] = Field(description="the turns said around it")


class RecalledFact(RecalledBase):
    kind: Literal["fact"]
    fact_id: int | None
    always: bool = Field(description="a user-wide fact, included whatever was asked")


class RecalledSummary(RecalledBase):
    kind: Literal["summary"]


RecalledMemoryOut = Annotated[RecalledTurn | RecalledFact | RecalledSummary, Field(discriminator="kind")]


def recalled_of(memory: RecalledMemory) -> dict[str, Any]:
    """One recalled memory, as RecalledMemoryOut reads it; `at` is its absolute time, `context`
    the turns said around a turn."""
    item: dict[str, Any] = {
        "kind": memory.kind,
        "text": memory.text,
        "at_ms": memory.at_ms,
        "at": format_datetime(memory.at_ms),
        "score": memory.score,
        "character_id": memory.character_id,
        "session": memory.session,
    }
    if memory.kind == "turn":
        item["role"] = memory.role
        item["message_id"] = memory.id
        item["context"] = [
            {"position": turn.position, "role": turn.role, "text": turn.text, "at_ms": turn.at_ms}
            for turn in memory.context
        ]
    elif memory.kind == "fact":
        item["fact_id"] = memory.id
        item["always"] = memory.always
    return item


class RecallAnswer(Answer):
    """The memories recalled for `q`, best first, and the system message that carries them."""

    user_id: str
    character_id: str
    scope: Literal["pair", "user"]
    q: str
    terms: list[str]
    memories: list[RecalledMemoryOut]
    tokens: int
    max_tokens: int
    system_message: SystemMessage
    index_lag: int = Field(
        ge=0,
        description="turns in scope stored but not yet in the recall index, left out of this answer: "
        "recall waits a bounded time for the index to catch up, then answers from what it holds (0: none)",
    )

    @staticmethod
    def shape(user_id: str, character_id: str, scope: RecallScope, recall: Recall) -> dict[str, Any]:
        """A recall as this model's JSON, unvalidated: recall answers every turn, and the route sends
        this as it is (validating ~40 nested models would add to every answer)."""
        return {
            "user_id": user_id,
            "character_id": character_id,
            "scope": scope,
            "q": recall.q,
            "terms": recall.terms,
            "memories": [recalled_of(memory) for memory in recall.memories],
            "tokens": recall.tokens,
            "max_tokens": recall.max_tokens,
            "system_message": {"role": "system", "content": recall.system_message},
            "index_lag": recall.index_lag,
        }

    @classmethod
    def of(cls, user_id: str, character_id: str, scope: RecallScope, recall: Recall) -> RecallAnswer:
        """A recall: the memories, their tokens, and the system message that carries them."""
        return cls.model_validate(cls.shape(user_id, character_id, scope, recall))


class ForgetAnswer(Answer):
    user_id: str
    character_id: str | None = Field(description="null when the whole user was forgotten")
    deleted: dict[str, int] = Field(description="what was deleted, by kind of record")


# sessions, bindings and jobs
