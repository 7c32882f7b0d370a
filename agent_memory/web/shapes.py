"""The JSON shapes of the HTTP answers: the API's contract, in one place.

Each turns a domain object (`core.domain`) into the JSON the API has always answered.
"""

from __future__ import annotations

from typing import Any

from agent_memory.core.clock import format_datetime
from agent_memory.core.domain import ApiKey, ChannelBinding, Fact, FactVersion, Job, Message, Session, Summary
from agent_memory.core.recall import Recall, RecalledMemory

TOOL_FIELDS = ("tool_calls", "tool_call_id", "name", "content")


def message_json(message: Message) -> dict[str, Any]:
    """A stored message; a tool call or result (`kind`) also carries its tool data as sent."""
    body: dict[str, Any] = {
        "id": message.id,
        "agent_id": message.agent_id,
        "role": message.role,
        "kind": message.kind,
        "content": message.content,
        "turn_id": message.turn_id,
        "ts_ms": message.at_ms if message.ts_ms is None else message.ts_ms,
        "timestamp_known": message.ts_ms is not None,
        "source": message.source,
        "speaker": message.speaker,
        "interrupted": message.interrupted,
        "interrupt_ms": message.interrupt_ms,
        "original": message.original,
        "gap_before": message.gap_before,
        "images": message.images,
    }
    if not message.spoken:
        extra = message.extra
        body["tool"] = {name: extra[name] for name in TOOL_FIELDS if name in extra}
    return body


def fact_json(fact: Fact) -> dict[str, Any]:
    """A remembered fact."""
    return {
        "id": fact.id,
        "text": fact.text,
        "scope": fact.scope,
        "pinned": fact.pinned,
        "origin": fact.origin,
        "created_ms": fact.created_ms,
        "updated_ms": fact.updated_ms,
        "valid_from": fact.valid_from,
    }


def fact_version_json(version: FactVersion) -> dict[str, Any]:
    """One text a fact had, and when it held."""
    return {
        "text": version.text,
        "origin": version.origin,
        "valid_from": version.valid_from,
        "valid_to": version.valid_to,
        "change": version.change,
    }


def summary_json(summary: Summary) -> dict[str, Any]:
    """A pair's rolling summary."""
    return {
        "text": summary.text,
        "method": summary.method,
        "model": summary.model,
        "covered_until_ms": summary.covered_until_ms,
        "messages_covered": summary.message_count,
        "watermark_id": summary.watermark_id,
        "updated_ms": summary.updated_ms,
    }


def session_json(session: Session) -> dict[str, Any]:
    """An agent run's session."""
    return {
        "agent_id": session.agent_id,
        "user_id": session.user_id,
        "character_id": session.character_id,
        "identity_source": session.identity_source,
        "channel": session.channel,
        "name": session.name,
        "status": session.status,
        "stop_reason": session.stop_reason,
        "start_ms": session.start_ms,
        "stop_ms": session.stop_ms,
        "rtc_uid": session.rtc_uid,
        "message_count": session.message_count,
        "gap_count": session.gap_count,
        "error_count": session.error_count,
        "token_warning_ms": session.token_warning_ms,
        "turn_count": session.turn_count,
        # 104: when Agora last warned that the agent's RTC token is about to expire.
        "token_expiring": session.token_warning_ms is not None,
        # 112: Agora reported only part of the session's turns.
        "turns_truncated": session.turns_truncated,
        "labels": session.labels,
    }


def unseen_session_json(agent_id: str, user_id: str, character_id: str) -> dict[str, Any]:
    """A run bound before any event of it came: the session it will start with, as far as known."""
    return {
        "agent_id": agent_id,
        "user_id": user_id,
        "character_id": character_id,
        "identity_source": "binding",
        "channel": None,
        "name": None,
        "status": "unknown",
        "stop_reason": None,
        "start_ms": None,
        "stop_ms": None,
        "rtc_uid": None,
        "message_count": None,
        "gap_count": None,
        "error_count": None,
        "token_warning_ms": None,
        "turn_count": None,
        "token_expiring": False,
        "turns_truncated": False,
        "labels": {},
    }


def channel_binding_json(binding: ChannelBinding) -> dict[str, Any]:
    """A channel binding as the API answers it."""
    return {
        "channel": binding.channel,
        "user_id": binding.user_id,
        "character_id": binding.character_id,
        "created_ms": binding.created_ms,
        "updated_ms": binding.updated_ms,
    }


def job_json(job: Job) -> dict[str, Any]:
    """A condense job."""
    return {
        "id": job.id,
        "kind": job.kind,
        "user_id": job.user_id,
        "character_id": job.character_id,
        "status": job.status,
        "due_ms": job.due_ms,
        "attempts": job.attempts,
        "last_error": job.last_error,
        "pending_messages": job.pending_messages,
        "updated_ms": job.updated_ms,
    }


def memory_json(memory: RecalledMemory) -> dict[str, Any]:
    """One recalled memory; `at` is its absolute time, `context` the turns said around a turn."""
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


def recall_json(recall: Recall) -> dict[str, Any]:
    """A recall: the memories, their tokens, and the system message that carries them."""
    return {
        "q": recall.q,
        "terms": recall.terms,
        "memories": [memory_json(memory) for memory in recall.memories],
        "tokens": recall.tokens,
        "max_tokens": recall.max_tokens,
        "system_message": {"role": "system", "content": recall.system_message},
        "index_lag": recall.index_lag,
    }


def api_key_json(key: ApiKey) -> dict[str, Any]:
    """A /v1 API key as listed: never its hash, nor the key (shown once, when made)."""
    return {
        "id": key.id,
        "name": key.name,
        "scope": key.scope,
        "created_ms": key.created_ms,
        "last_used_ms": key.last_used_ms,
        "revoked_ms": key.revoked_ms,
    }
