"""Answers of search, statistics and export."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from agent_memory.core.domain import (
    FactScope,
    UserPage,
)
from agent_memory.core.search import MentionRole, SearchMethod
from agent_memory.web.answers.base import Answer, Object, Omitted

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
    """A user's matches, best first (core/search.py UserSearch)."""

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
    """Which users' messages contain a phrase (core/search.py Mentions)."""

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


# A small export, as GET …/export answers and POST /v1/import reads it.
EXPORT_EXAMPLE: Final[JsonDict] = {
    "format": "agent-memory-export/1",
    "exported_ms": 1_793_736_960_000,
    "user_id": "u-alice",
    "characters": ["luna"],
    "counts": {"sessions": 1, "messages": 1, "facts": 1, "summaries": 0},
    "sessions": [
        {
            "agent_id": "366YCNGT3TP2WA6A62BUEAWSB",
            "user_id": "u-alice",
            "character_id": "luna",
            "identity_source": "labels",
            "status": "stopped",
            "start_ms": 1_793_736_900_000,
            "labels": {"user_id": "u-alice", "character_id": "luna"},
            "message_count": 1,
        }
    ],
    "messages": [
        {
            "id": 1,
            "agent_id": "366YCNGT3TP2WA6A62BUEAWSB",
            "character_id": "luna",
            "seq": 0,
            "role": "user",
            "kind": "turn",
            "content": "My cat Miso knocked over the plant again.",
            "at_ms": 1_793_736_960_000,
        }
    ],
    "facts": [{"id": 1, "character_id": "luna", "scope": "character", "text": "Has a cat named Miso"}],
    "summaries": [],
}


class Export(BaseModel):
    """Everything held about a user; `counts` says how many of each kind of record follow."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [EXPORT_EXAMPLE]})
    format: str
    exported_ms: int
    user_id: str
    characters: list[str]
    counts: dict[str, int]
    sessions: list[Object]
    messages: list[Object]
    facts: list[Object]
    summaries: list[Object]


class ImportAnswer(Answer):
    """What an import restored, what the database held already, and what it left out."""

    user_id: str
    characters: list[str]
    restored: dict[str, int] = Field(description="records written, by kind (sessions, messages, facts…)")
    already_held: dict[str, int] = Field(description="records the database held already: left as they were")
    not_restored: dict[str, int] = Field(
        description="records left out: jobs (scheduled anew), followed agents (calls no longer "
        "running), and those of agent runs another user holds"
    )
    forgotten_ms: int | None = Field(description="when the user (or a pair or call) was last forgotten here")
    forced: bool = Field(description="imported over a forget made after the export was taken")


class LlmStats(Answer):
    llm_proxy: dict[str, int] = Field(description="the custom-LLM endpoint's counters since start")
    warming: dict[str, int] = Field(
        description="pairs' recall indexes read into memory as their calls started (this process)"
    )


class UserOut(Answer):
    """A user as the list shows it."""

    user_id: str
    characters: list[str] = Field(description="the characters it has calls or facts with")
    calls: int
    last_seen_ms: int | None = Field(description="its newest call's or fact's last change")


class UsersAnswer(Answer):
    """A page of users in id order; `next_cursor` (None on the last page) asks for the next."""

    q: str | None
    users: list[UserOut]
    next_cursor: str | None

    @classmethod
    def of(cls, q: str | None, page: UserPage) -> UsersAnswer:
        users = [
            UserOut(user_id=u.user_id, characters=u.characters, calls=u.calls, last_seen_ms=u.last_seen_ms)
            for u in page.users
        ]
        return cls(q=q, users=users, next_cursor=page.next_cursor)
