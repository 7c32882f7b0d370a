"""The stored domain: sessions, messages, facts, summaries, jobs, watches, bindings, raw events,
console sign-ins and the console's lists.

These are what a store's repositories return (`agent_memory.store.protocols`), whatever the
backend. They are immutable records (`core.records.record`), built straight from database
rows without validating them again: the ingest and context paths read them by the hundred.
Database encodings (0/1 flags, the empty character of a user-wide fact, JSON labels and
metadata) stay in the store's mapping; the JSON a platform sent along with a message, and a
watch's system messages, travel as text and are parsed only when asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict

from agent_memory.core.events import IdentitySource, MessageKind, MetricRow, OutcomeStatus
from agent_memory.core.records import record

__all__ = [
    "CONDENSE",
    "EMBED",
    "KEY_SCOPES",
    "ApiKey",
    "Binding",
    "ChannelBinding",
    "ConsoleSession",
    "Fact",
    "FactChange",
    "FactOrigin",
    "FactScope",
    "FactVersion",
    "IdentitySource",
    "InboxEntry",
    "InboxStatus",
    "Job",
    "JobKind",
    "JobStatus",
    "KeyScope",
    "LlmRoute",
    "Message",
    "MessageChanges",
    "MessageFingerprint",
    "MessageKind",
    "MetricRow",
    "RunningCall",
    "Session",
    "SessionStatus",
    "Summary",
    "SummaryMethod",
    "UserEntry",
    "UserPage",
    "Watch",
    "WatchOrigin",
    "WatchResult",
    "WatchStatus",
]

SessionStatus = Literal["running", "stopped", "failed"]
JobStatus = Literal["pending", "running", "dead"]
# What a job does; the only kind today condenses a (user, character) memory.
JobKind = Literal["condense", "embed"]
CONDENSE: Final = "condense"
EMBED: Final = "embed"
WatchStatus = Literal["watching", "stopped"]
# What a key of the /v1 API may do, each implying those before it (web/auth.py: per route).
KeyScope = Literal["read", "write", "admin"]
KEY_SCOPES: tuple[KeyScope, ...] = ("read", "write", "admin")
# callback: a platform event said the agent runs; join: started through this service;
# manual: an operator asked to follow it.
WatchOrigin = Literal["callback", "join", "manual"]
# What asking to follow an agent did (stopped: it is not running, so it cannot be followed).
WatchResult = Literal["created", "updated", "unchanged", "stopped"]
# A raw event's status is what became of it (core.events.OutcomeStatus), `received` while it
# is being applied, or `forgotten` once its user was forgotten (its body is blanked).
InboxStatus = OutcomeStatus | Literal["received", "forgotten"]
# user: true of the user with every character; character: of the user with one character.
FactScope = Literal["user", "character"]
# manual: said through the API (pinned); llm, offline: what condensing found.
FactOrigin = Literal["manual", "llm", "offline"]
SummaryMethod = Literal["llm", "offline"]
# Why a fact's text stopped being current: edited by hand, reworded by the model, replaced by
# a newer fact about the same subject, or no longer true (the model said so).
FactChange = Literal["edited", "updated", "superseded", "ended"]


@record
class Session:
    """One agent run, and who it belongs to."""

    agent_id: str
    user_id: str
    character_id: str
    identity_source: IdentitySource
    status: SessionStatus
    channel: str | None = None
    name: str | None = None
    stop_reason: str | None = None
    start_ms: int | None = None
    stop_ms: int | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    rtc_uid: str | None = None
    # Messages ever taken in (retention does not lower it), gaps between windows, module errors.
    message_count: int = 0
    gap_count: int = 0
    error_count: int = 0
    first_seen_ms: int | None = None
    updated_ms: int | None = None
    # When the platform last warned that the run's credentials are about to expire.
    token_warning_ms: int | None = None
    # The run's turns as the platform reported them, and whether that report was cut short.
    turn_count: int | None = None
    turns_truncated: bool = False


@record
class Message:
    """A stored transcript item: a spoken turn, or a tool call or result of the agent's LLM."""

    id: int
    agent_id: str
    user_id: str
    character_id: str
    # Place in its session; negative when an older window came late.
    seq: int
    role: str
    kind: MessageKind
    # What was said; empty for tool items, whose text is in their tool data.
    content: str
    turn_id: int | None
    # When it was said, if the platform said; `at_ms` falls back to the session's start.
    ts_ms: int | None
    at_ms: int
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None
    # A window that overlapped nothing stored begins here.
    gap_before: bool
    # Everything else the platform sent with it, including a tool item's data, as JSON text:
    # most reads never look at it, so it is parsed only when asked for (`extra`).
    extra_json: str | None = None
    # What is kept of the images shown with it (core/images.py), as JSON text: never part of
    # what was said, so no memory text (context, recall, summaries) ever reads it.
    images_json: str | None = None

    @property
    def spoken(self) -> bool:
        """Whether it was said (a turn), not tool traffic."""
        return self.kind == "turn"

    @property
    def extra(self) -> dict[str, Any]:
        """What the platform sent beyond the columns (a tool item's data among it)."""
        return _parsed_object(self.extra_json)

    @property
    def images(self) -> list[dict[str, Any]]:
        """The images kept with it, oldest part first (none: empty)."""
        if not self.images_json:
            return []
        value = json.loads(self.images_json)
        return value if isinstance(value, list) else []


@record
class MessageFingerprint:
    """What merging a window needs of a stored message: identity, place and enrichable fields."""

    id: int
    seq: int
    role: str
    fp: str
    gap_before: bool
    turn_id: int | None
    ts_ms: int | None
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None
    images_json: str | None = None
    # turn, tool_call or tool_result (core.events.MessageKind): tool traffic is matched
    # between the spoken turns it came between (core.alignment.map_window).
    kind: str = "turn"


class MessageChanges(TypedDict, total=False):
    """Fields a later copy of a stored message adds or corrects (`core.alignment.enrichment`)."""

    # The platform's copy of a reply replaces the text this service relayed (`correction`).
    content: str
    # Its place, moved on to make room for items another copy lacked (`Placement.moves`).
    seq: int
    fp: str
    turn_id: int | None
    ts_ms: int | None
    at_ms: int
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None
    gap_before: bool
    # JSON text of the images kept with it (a later copy adds them when the first had none).
    images: str | None


@record
class Fact:
    """Something remembered about a user: with one character (scope character) or all (user)."""

    id: int
    user_id: str
    # The character the fact belongs to; None for a user-wide fact.
    character_id: str | None
    text: str
    pinned: bool
    origin: FactOrigin
    created_ms: int
    updated_ms: int
    # Since when its text holds (it had others before: `FactVersion`s).
    valid_from: int = 0

    @property
    def scope(self) -> FactScope:
        """user for a user-wide fact, character for one about a single character."""
        return "user" if self.character_id is None else "character"


@record
class FactVersion:
    """One text a fact had and when it held; `valid_to` None: the text it has now."""

    fact_id: int
    text: str
    origin: FactOrigin
    valid_from: int
    valid_to: int | None
    # Why it stopped holding; None while it holds.
    change: FactChange | None


@record
class Summary:
    """The rolling summary of a (user, character) memory and what it covers."""

    user_id: str
    character_id: str
    text: str
    # Every message of the pair with an id up to this one is covered.
    watermark_id: int
    covered_until_ms: int | None
    message_count: int
    method: SummaryMethod
    model: str | None
    created_ms: int
    updated_ms: int
    # How it was made (tokens sent, why a fallback was used).
    meta: dict[str, Any] = field(default_factory=dict)


@record
class Job:
    """A queued piece of background work for one (user, character)."""

    id: int
    kind: JobKind
    user_id: str
    character_id: str
    status: JobStatus
    due_ms: int
    first_due_ms: int | None
    # Messages that arrived since the job was last run.
    pending_messages: int
    attempts: int
    last_error: str | None
    created_ms: int | None
    updated_ms: int | None


@record
class Watch:
    """A running agent this service follows, and what a live refresh sends it."""

    agent_id: str
    origin: WatchOrigin
    status: WatchStatus
    next_poll_ms: int
    stop_reason: str | None = None
    last_poll_ms: int | None = None
    polls: int = 0
    failures: int = 0
    last_error: str | None = None
    # The caller's own system messages as JSON text (None: never refresh this agent's memory);
    # parsed only when a refresh is built (`base_system_messages`).
    base_system_messages_json: str | None = None
    persona: str | None = None
    max_tokens: int | None = None
    # The agent's LLM message style (None: the default).
    style: str | None = None
    push_due_ms: int | None = None
    last_push_ms: int | None = None
    # The system messages last sent, as JSON text, to skip an identical refresh.
    last_pushed_json: str | None = None
    created_ms: int | None = None
    updated_ms: int | None = None
    # How many messages the agent keeps in its own window (Agora: `llm.max_history`; None: the
    # platform's default). A refresh never pushes back what the agent still holds.
    max_history: int | None = None

    @property
    def refreshes(self) -> bool:
        """Whether a live refresh may push memory to this agent."""
        return self.base_system_messages_json is not None

    @property
    def base_system_messages(self) -> list[dict[str, Any]] | None:
        """The caller's own system messages, which every refresh starts with."""
        return _parsed_list(self.base_system_messages_json)

    @property
    def last_pushed(self) -> list[dict[str, Any]] | None:
        """The system messages the last refresh sent."""
        return _parsed_list(self.last_pushed_json)


@record
class Binding:
    """An agent run tied to a user and character through the API."""

    agent_id: str
    user_id: str
    character_id: str
    created_ms: int | None


@record
class ChannelBinding:
    """A channel tied to a user and character (apps that give each user a channel of their own)."""

    channel: str
    user_id: str
    character_id: str
    created_ms: int
    updated_ms: int


@record
class LlmRoute:
    """A per-agent key for the custom-LLM endpoint: whose memory it serves and where it forwards."""

    # SHA-256 of the key (`core.secrets.hash_key`); the key itself is never stored.
    key_hash: str
    # The agent run the key was minted for; None until its join answered with an agent id.
    agent_id: str | None
    user_id: str
    character_id: str
    # The caller's own LLM (None: the service's upstream settings).
    upstream_base_url: str | None
    upstream_api_key: str | None
    upstream_model: str | None
    # The caller's original `llm.params`, forwarded with every request.
    upstream_params: dict[str, Any]
    created_ms: int


@record
class ApiKey:
    """A scoped key of the /v1 API, kept by its hash: the key itself is shown once, when made."""

    id: int
    name: str | None
    scope: KeyScope
    # SHA-256 of the key (`core.secrets.hash_key`).
    key_hash: str
    created_ms: int
    # Updated at most once a minute per instance (web/auth.py), not on every request.
    last_used_ms: int | None
    revoked_ms: int | None


@record
class InboxEntry:
    """A raw platform event as recorded, with what became of it."""

    # The platform's id of the event (Agora: noticeId): a redelivery has the same one.
    event_id: str
    event_type: int
    received_ms: int
    body: str
    status: InboxStatus
    product_id: int | None = None
    notify_ms: int | None = None
    agent_id: str | None = None
    # Whose words these are, from the event's labels, even if no session came of it.
    label_user: str | None = None
    label_character: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """A console sign-in: its token and the key it was opened with, both by hash."""

    token_hash: str
    key_hash: str
    created_ms: int
    expires_ms: int


@dataclass(frozen=True, slots=True)
class UserEntry:
    """A user as the list shows it: its characters, calls and when last seen."""

    user_id: str
    characters: list[str]
    calls: int
    last_seen_ms: int | None


@dataclass(frozen=True, slots=True)
class UserPage:
    """A page of users in id order, and where the next page starts (None: this is the last)."""

    users: list[UserEntry]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RunningCall:
    """A followed agent still running and its session (None until its first event is stored)."""

    watch: Watch
    session: Session | None


def _parsed_object(text: str | None) -> dict[str, Any]:
    """A stored JSON object; {} for none."""
    value = json.loads(text) if text else None
    return value if isinstance(value, dict) else {}


def _parsed_list(text: str | None) -> list[dict[str, Any]] | None:
    """A stored JSON list; None for none."""
    value = json.loads(text) if text else None
    return value if isinstance(value, list) else None
