"""Answers about sessions, channel bindings, jobs and API keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent_memory.core.domain import (
    ApiKey,
    ChannelBinding,
    IdentitySource,
    Job,
    JobKind,
    JobStatus,
    KeyScope,
    Session,
    SessionStatus,
)
from agent_memory.web.answers.base import Answer, Object

# What a session bound before any event of it came does not know yet (SessionOut.unseen).
UNKNOWN_UNTIL_SEEN = (
    "channel",
    "name",
    "stop_reason",
    "start_ms",
    "stop_ms",
    "rtc_uid",
    "message_count",
    "gap_count",
    "error_count",
    "token_warning_ms",
    "turn_count",
)


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

    @classmethod
    def of(cls, session: Session) -> SessionOut:
        """An agent run's session."""
        return cls(
            agent_id=session.agent_id,
            user_id=session.user_id,
            character_id=session.character_id,
            identity_source=session.identity_source,
            channel=session.channel,
            name=session.name,
            status=session.status,
            stop_reason=session.stop_reason,
            start_ms=session.start_ms,
            stop_ms=session.stop_ms,
            rtc_uid=session.rtc_uid,
            message_count=session.message_count,
            gap_count=session.gap_count,
            error_count=session.error_count,
            token_warning_ms=session.token_warning_ms,
            turn_count=session.turn_count,
            # 104: when Agora last warned that the agent's RTC token is about to expire.
            token_expiring=session.token_warning_ms is not None,
            # 112: Agora reported only part of the session's turns.
            turns_truncated=session.turns_truncated,
            labels=session.labels,
        )

    @classmethod
    def unseen(cls, agent_id: str, user_id: str, character_id: str) -> SessionOut:
        """A run bound before any event of it came: the session it will start with, as far as known."""
        unknown = dict.fromkeys(UNKNOWN_UNTIL_SEEN)
        return cls(
            agent_id=agent_id,
            user_id=user_id,
            character_id=character_id,
            identity_source="binding",
            status="unknown",
            token_expiring=False,
            turns_truncated=False,
            labels={},
            **unknown,
        )


class SessionAnswer(Answer):
    session: SessionOut


class ChannelBindingOut(Answer):
    channel: str
    user_id: str
    character_id: str
    created_ms: int
    updated_ms: int

    @classmethod
    def of(cls, binding: ChannelBinding) -> ChannelBindingOut:
        """A channel binding."""
        return cls(
            channel=binding.channel,
            user_id=binding.user_id,
            character_id=binding.character_id,
            created_ms=binding.created_ms,
            updated_ms=binding.updated_ms,
        )


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

    @classmethod
    def of(cls, job: Job) -> JobOut:
        """A background job."""
        return cls(
            id=job.id,
            kind=job.kind,
            user_id=job.user_id,
            character_id=job.character_id,
            status=job.status,
            due_ms=job.due_ms,
            attempts=job.attempts,
            last_error=job.last_error,
            pending_messages=job.pending_messages,
            updated_ms=job.updated_ms,
        )


class JobsAnswer(Answer):
    jobs: list[JobOut]


class JobAnswer(Answer):
    job: JobOut


class CondenseAnswer(Answer):
    job: JobOut | None


# keys


class KeyOut(Answer):
    """A /v1 API key as listed: never its hash, nor the key itself."""

    id: int
    name: str | None
    scope: KeyScope
    created_ms: int
    last_used_ms: int | None
    revoked_ms: int | None

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        """A key as listed: never its hash, nor the key (shown once, when made)."""
        return cls(
            id=key.id,
            name=key.name,
            scope=key.scope,
            created_ms=key.created_ms,
            last_used_ms=key.last_used_ms,
            revoked_ms=key.revoked_ms,
        )


class KeyCreated(Answer):
    api_key: KeyOut
    key: str = Field(description="the bearer key: shown in this answer only")
    note: str


class KeysAnswer(Answer):
    api_keys: list[KeyOut]


class KeyRevoked(Answer):
    revoked: KeyOut
