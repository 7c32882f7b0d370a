"""`POST /v1/users/{user_id}/characters/{character_id}/messages`: what an app sends of its own sessions.

A text chat beside a voice agent, or a framework integration (agent_memory/integrations), sends
its turns here. They are kept under `api:<session_id>` (platforms/calls.py `session_key`: no
platform's call id meets it) and merged like every platform's transcript (memory/ingest/), as
messages that each name themselves: by `id` when given, else by role, words and time, so posting
the same messages again stores nothing new while the same words said at another time are new.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_memory.core.clock import now_ms, to_ms
from agent_memory.core.events import HistoryWindow, IncomingMessage
from agent_memory.core.limits import (
    MAX_FUTURE_SKEW_MS,
    MAX_MESSAGE_CHARS,
    MAX_POSTED_MESSAGES,
    MAX_SOURCE_ID_CHARS,
)
from agent_memory.memory.service import Memory
from agent_memory.platforms.calls import CallIdentity, identity_labels, session_key
from agent_memory.settings import Settings
from agent_memory.web.answers import MessagesAdded

PLATFORM = "api"
# Not blank: a character that is not white space.
NOT_BLANK = r"\S"
TIMESTAMP_RULE = (
    "epoch milliseconds or seconds (a number below 10^11 is seconds, as 10^11 ms is 1973), "
    "or ISO 8601 with an offset (2026-11-21T18:30:00Z, …+01:00)"
)


def epoch_ms(value: object, *, now: int | None = None) -> int:
    """A message's timestamp in epoch ms (TIMESTAMP_RULE); ValueError saying what is wrong."""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"not a date: give {TIMESTAMP_RULE}") from None
        if when.tzinfo is None:
            raise ValueError("an ISO 8601 date needs its offset (Z or +hh:mm): a local time is ambiguous")
        ms = math.floor(when.timestamp() * 1000)
        if ms < 0:
            raise ValueError("a date before 1970 is not a time a message was said")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        converted = to_ms(value)
        if converted is None:
            raise ValueError(f"{value!r} is no time: give {TIMESTAMP_RULE}")
        ms = converted
    else:
        raise ValueError(f"give {TIMESTAMP_RULE}")
    ahead = ms - (now_ms() if now is None else now)
    if ahead > MAX_FUTURE_SKEW_MS:
        raise ValueError(
            f"is {ahead // 60_000} minutes ahead of this service's clock (at most "
            f"{MAX_FUTURE_SKEW_MS // 60_000} allowed): a message is posted after it was said"
        )
    return ms


class PostedMessage(BaseModel):
    """One message of a post: who said it, its words, when, and the app's id of it if it has one."""

    model_config = ConfigDict(strict=True)
    role: Literal["user", "assistant"] = Field(description="user: the person; assistant: the character")
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, pattern=NOT_BLANK)
    timestamp: int | float | str = Field(description=f"when it was said: {TIMESTAMP_RULE}")
    id: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_SOURCE_ID_CHARS,
        description="the app's id of the message: a message posted again with its id is the same "
        "message whatever its words; without one it is its role, words and time",
    )

    @field_validator("timestamp")
    @classmethod
    def _epoch_ms(cls, value: int | float | str) -> int:
        return epoch_ms(value)

    @property
    def ts_ms(self) -> int:
        """The timestamp in epoch ms (validated into it)."""
        return int(self.timestamp)


class MessagesBody(BaseModel):
    """`POST …/messages`: messages of one of the app's sessions."""

    model_config = ConfigDict(
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "session_id": "chat-2026-11-21-alice",
                    "messages": [
                        {
                            "role": "user",
                            "content": "My sister Maya is visiting next weekend",
                            "timestamp": "2026-11-21T18:30:00Z",
                            "id": "msg-1",
                        },
                        {
                            "role": "assistant",
                            "content": "How lovely! What are you planning to do together?",
                            "timestamp": 1763749805000,
                        },
                    ],
                }
            ]
        },
    )
    session_id: str = Field(
        min_length=1,
        max_length=MAX_SOURCE_ID_CHARS,
        pattern=NOT_BLANK,
        description="the app's id of the conversation; it belongs to the pair it is first posted for",
    )
    messages: list[PostedMessage] = Field(min_length=1, max_length=MAX_POSTED_MESSAGES)

    @model_validator(mode="after")
    def _ids_once(self) -> MessagesBody:
        first: dict[str, int] = {}
        for index, message in enumerate(self.messages):
            if message.id is None:
                continue
            if message.id in first:
                raise ValueError(
                    f"messages.{index}.id repeats messages.{first[message.id]}.id: an id names one message"
                )
            first[message.id] = index
        return self


def incoming(messages: Sequence[PostedMessage]) -> list[IncomingMessage]:
    """The posted messages as a platform's, in the order they were said (a post need not be)."""
    ordered = sorted(messages, key=lambda message: message.ts_ms)
    return [
        IncomingMessage(role=message.role, content=message.content, ts_ms=message.ts_ms, item_id=message.id)
        for message in ordered
    ]


async def add_messages(
    memory: Memory, settings: Settings, user_id: str, character_id: str, body: MessagesBody
) -> MessagesAdded:
    """Store a post's messages under the pair, in its session; what was held already is not again."""
    key = session_key(PLATFORM, body.session_id)
    labels = identity_labels(settings, CallIdentity(user_id, character_id, "ids"))
    window = HistoryWindow(
        agent_id=key, messages=incoming(body.messages), labels=labels, name=PLATFORM, discrete=True
    )
    outcome = await memory.add_messages(window, user_id, character_id, now_ms())
    posted = len(body.messages)
    return MessagesAdded(
        user_id=user_id,
        character_id=character_id,
        session_id=body.session_id,
        stored=outcome.new_messages,
        already_held=posted - outcome.new_messages - outcome.forgotten,
        left_out=outcome.forgotten,
    )
