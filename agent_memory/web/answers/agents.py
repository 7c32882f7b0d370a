"""Answers of the Agora routes: agents started, followed and stopped, rendering, the webhook."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent_memory.web.answers.base import Answer, Object, Omitted
from agent_memory.web.answers.records import SessionOut

# Agora: agents, following, rendering, the webhook


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
