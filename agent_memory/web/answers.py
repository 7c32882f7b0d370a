"""What the HTTP API answers, as pydantic models: the documented side of web/shapes.py.

The shaping functions (web/shapes.py, the routes) build the JSON; these models describe it for
the OpenAPI document (web/openapi.py) and for clients that want typed answers. Each forbids
fields it does not list, so a shape that grows a field the document lacks fails the contract
tests (tests/test_openapi.py, tests/contract.py) instead of drifting silently. A model's own
`examples` is its answers' example in the document; the others' are built from their fields
(web/openapi.py Examples).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from agent_memory.core.domain import (
    FactChange,
    FactOrigin,
    FactScope,
    IdentitySource,
    JobKind,
    JobStatus,
    KeyScope,
    MessageKind,
    SessionStatus,
    SummaryMethod,
)
from agent_memory.store.types import MentionRole, SearchMethod

# A key that some answers leave out (rather than send as null): described by its value alone,
# not required and with no default in the document (web/openapi.py DocumentSchema).
Omitted = SkipJsonSchema[None]
Style = Literal["openai", "gemini", "anthropic"]
Object = dict[str, Any]


class Answer(BaseModel):
    """A documented answer: the fields it lists, nothing else."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """What went wrong: a stable code for programs, a sentence for people."""

    model_config = ConfigDict(extra="allow")
    code: str = Field(description="stable and machine-readable, e.g. invalid_field, not_found")
    message: str = Field(description="says what was wrong and, where it can, what to do")


class ErrorAnswer(Answer):
    """Every error of the API (web/http.py error_response)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"error": {"code": "invalid_field", "message": "limit must be between 1 and 1000"}}]
        }
    )
    error: ErrorDetail


class OpenAIErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorAnswer(Answer):
    """The custom-LLM endpoint's errors, in OpenAI's shape (what Agora and the SDKs read)."""

    error: OpenAIErrorDetail


class Health(Answer):
    """`GET /healthz`: the database answered; the migrations it holds."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "status": "ok",
                    "version": "0.1.0",
                    "database": "/data/memory.db",
                    "schema": ["m001_initial"],
                }
            ]
        }
    )
    status: Literal["ok"]
    version: str
    database: str = Field(description="where the store is (a file path, or a URL without its password)")
    migrations: list[str] = Field(alias="schema", description="the migrations applied, oldest first")


# the pair's memory


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


class MessagesAnswer(Answer):
    user_id: str
    character_id: str
    messages: list[MessageOut] = Field(description="oldest first")


class FactOut(Answer):
    id: int
    text: str
    scope: FactScope
    pinned: bool
    origin: FactOrigin
    created_ms: int
    updated_ms: int
    valid_from: int = Field(description="since when its text holds (epoch ms); its earlier texts: …/history")


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


class ForgetAnswer(Answer):
    user_id: str
    character_id: str | None = Field(description="null when the whole user was forgotten")
    deleted: dict[str, int] = Field(description="what was deleted, by kind of record")


# sessions, bindings and jobs


class SessionOut(Answer):
    """An agent run's session (`status` unknown: bound before any event of it came)."""

    agent_id: str
    user_id: str
    character_id: str
    identity_source: IdentitySource
    channel: str | None
    name: str | None
    status: SessionStatus | Literal["unknown"]
    stop_reason: str | None
    start_ms: int | None
    stop_ms: int | None
    rtc_uid: str | None
    message_count: int | None
    gap_count: int | None
    error_count: int | None
    token_warning_ms: int | None
    turn_count: int | None
    token_expiring: bool
    turns_truncated: bool
    labels: Object


class SessionAnswer(Answer):
    session: SessionOut


class ChannelBindingOut(Answer):
    channel: str
    user_id: str
    character_id: str
    created_ms: int
    updated_ms: int


class ChannelBound(Answer):
    binding: ChannelBindingOut
    moved_sessions: list[str] = Field(description="the channel's unidentified sessions moved to the pair")


class ChannelBindingAnswer(Answer):
    binding: ChannelBindingOut


class ChannelUnbound(Answer):
    deleted: ChannelBindingOut


class JobOut(Answer):
    id: int
    kind: JobKind
    user_id: str
    character_id: str
    status: JobStatus
    due_ms: int
    attempts: int
    last_error: str | None
    pending_messages: int
    updated_ms: int | None


class JobsAnswer(Answer):
    jobs: list[JobOut]


class JobAnswer(Answer):
    job: JobOut


class CondenseAnswer(Answer):
    job: JobOut | None


# insights: search, statistics, export, purge


class SearchHitOut(Answer):
    """A message, fact or summary that matched (the fields after `score` by kind)."""

    kind: Literal["message", "fact", "summary"]
    id: int
    character_id: str = Field(description="empty for a user-wide fact")
    snippet: str = Field(description="the text around the match, the match in [brackets]")
    text: str
    at_ms: int | None
    rank: int
    score: float
    agent_id: str | Omitted = None
    role: str | Omitted = None
    scope: FactScope | Omitted = None
    pinned: bool | Omitted = None


class UserSearchAnswer(Answer):
    """A user's matches, best first (store/types.py UserSearch)."""

    user_id: str
    character_id: str | None
    q: str
    terms: list[str]
    method: SearchMethod
    truncated: bool = Field(description="more matched than were ranked: the oldest were left out")
    results: list[SearchHitOut]


class MentionUserOut(Answer):
    user_id: str
    messages: int
    first_ms: int | None
    last_ms: int | None
    characters: list[str]


class MentionsAnswer(Answer):
    """Which users' messages contain a phrase (store/types.py Mentions)."""

    q: str
    role: MentionRole
    character_id: str | None
    method: SearchMethod
    total_users: int
    total_messages: int
    users: list[MentionUserOut]
    scanned_messages: int | Omitted = Field(None, description="substring method: how far it read")
    complete: bool | Omitted = None


class Rate(Answer):
    count: int
    of: int
    rate: float | None


class Window(Answer):
    since_ms: int | None
    until_ms: int | None


class Counts(BaseModel):
    """Fields every statistics report has (the reports may add more)."""

    model_config = ConfigDict(extra="allow")
    sessions: int
    messages: int
    messages_stored: int
    user_messages: int
    assistant_messages: int
    tool_items: int
    interruptions: Rate
    llm_failures: Rate
    talk_ms: int
    minutes_talked: float
    last_active_ms: int | None
    agent_errors: int


class UserStats(Counts):
    user_id: str
    characters: int
    favourite_characters: list[Object]
    first_active_ms: int | None
    facts: int
    summaries: int


class CharacterStats(Counts):
    character_id: str
    window: Window
    active_users: int
    top_users: list[Object]
    latency_ms: Object = Field(description="percentiles per metric (111 callbacks)")
    latency_stages_ms: Object = Field(description="percentiles per stage (112 callbacks)")


class OverallStats(Counts):
    window: Window
    users: int
    characters: int
    sessions_by_status: dict[str, int]
    unidentified_sessions: Rate
    stop_reasons: dict[str, int]
    top_characters: list[Object]
    latency_ms: Object
    latency_stages_ms: Object
    callbacks: dict[str, int] = Field(description="failed and partial callbacks")


class Export(BaseModel):
    """Everything held about a user; `counts` says how many of each kind of record follow."""

    model_config = ConfigDict(extra="allow")
    format: str
    exported_ms: int
    user_id: str
    characters: list[str]
    counts: dict[str, int]
    sessions: list[Object]
    messages: list[Object]
    facts: list[Object]
    summaries: list[Object]


class LlmStats(Answer):
    llm_proxy: dict[str, int] = Field(description="the custom-LLM endpoint's counters since start")
    warming: dict[str, int] = Field(
        description="pairs' recall indexes read into memory as their calls started (this process)"
    )


# keys


class KeyOut(Answer):
    """A /v1 API key as listed: never its hash, nor the key itself."""

    id: int
    name: str | None
    scope: KeyScope
    created_ms: int
    last_used_ms: int | None
    revoked_ms: int | None


class KeyCreated(Answer):
    api_key: KeyOut
    key: str = Field(description="the bearer key: shown in this answer only")
    note: str


class KeysAnswer(Answer):
    api_keys: list[KeyOut]


class KeyRevoked(Answer):
    revoked: KeyOut


# Agora: agents, following, rendering (the webhook's answer is platforms/agora/webhook.py's)


class MemoryPlanOut(Answer):
    injected: bool
    style: str
    reason: str | None = Field(description="why memory was not injected")
    llm: Object | Omitted = None


class AgentStarted(Answer):
    agent_id: str
    agora: Object = Field(description="Agora's answer to the join")
    session: SessionOut
    system_messages: list[Object] | None
    memory: MemoryPlanOut
    memory_tokens: int
    included: Object


class AgentRefreshed(Answer):
    agent_id: str
    system_messages: list[Object] = Field(description="the list pushed to the agent")


class AgentLeft(Answer):
    agent_id: str
    agora: Object


class Watching(Answer):
    agent_id: str
    following: bool
    created: bool
    refresh_enabled: bool


class Unwatched(Answer):
    agent_id: str
    stopped: bool


class Rendered(Answer):
    messages: list[Object] = Field(description="plain OpenAI chat messages")


class ChatCompletion(BaseModel):
    """The upstream LLM's answer, passed on (with `stream`: server-sent events instead)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": "chatcmpl-9x2",
                    "object": "chat.completion",
                    "created": 1793736960,
                    "model": "gpt-4o-mini",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {
                                "role": "assistant",
                                "content": "Miso again? What did the plant do this time?",
                            },
                        }
                    ],
                }
            ]
        },
    )
