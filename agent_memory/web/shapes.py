"""The JSON shapes of the HTTP answers: the API's contract, in one place."""

from __future__ import annotations

import json
from typing import Any

TOOL_FIELDS = ("tool_calls", "tool_call_id", "name", "content")


def message_json(row: dict[str, Any]) -> dict[str, Any]:
    """A stored message; a tool call or result (`kind`) also carries its tool data as sent."""
    kind = row.get("kind") or "turn"
    body = {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "role": row["role"],
        "kind": kind,
        "content": row["content"],
        "turn_id": row["turn_id"],
        "ts_ms": row["at_ms"] if row["ts_ms"] is None else row["ts_ms"],
        "timestamp_known": row["ts_ms"] is not None,
        "source": row["source"],
        "speaker": row["speaker"],
        "interrupted": bool(row["interrupted"]),
        "interrupt_ms": row["interrupt_ms"],
        "original": row["original"],
        "gap_before": bool(row["gap_before"]),
    }
    if kind != "turn":
        extra = json.loads(row["extra"]) if row.get("extra") else {}
        body["tool"] = {name: extra[name] for name in TOOL_FIELDS if name in extra}
    return body


def fact_json(row: dict[str, Any]) -> dict[str, Any]:
    """A remembered fact."""
    return {
        "id": row["id"],
        "text": row["text"],
        "scope": "user" if row["character_id"] == "" else "character",
        "pinned": bool(row["pinned"]),
        "origin": row["origin"],
        "created_ms": row["created_ms"],
        "updated_ms": row["updated_ms"],
    }


def summary_json(row: dict[str, Any]) -> dict[str, Any]:
    """A pair's rolling summary."""
    return {
        "text": row["text"],
        "method": row["method"],
        "model": row["model"],
        "covered_until_ms": row["covered_until_ms"],
        "messages_covered": row["message_count"],
        "watermark_id": row["watermark_id"],
        "updated_ms": row["updated_ms"],
    }


def session_json(row: dict[str, Any]) -> dict[str, Any]:
    """An agent run's session."""
    return {
        **{k: row.get(k) for k in (
            "agent_id", "user_id", "character_id", "identity_source", "channel", "name",
            "status", "stop_reason", "start_ms", "stop_ms", "rtc_uid", "message_count",
            "gap_count", "error_count", "token_warning_ms", "turn_count",
        )},
        # 104: when Agora last warned that the agent's RTC token is about to expire.
        "token_expiring": row.get("token_warning_ms") is not None,
        # 112: Agora reported only part of the session's turns.
        "turns_truncated": bool(row.get("turns_truncated")),
        "labels": json.loads(row["labels"]) if row.get("labels") else {},
    }  # fmt: skip


def channel_binding_json(row: dict[str, Any]) -> dict[str, Any]:
    """A channel binding as the API answers it."""
    return {k: row[k] for k in ("channel", "user_id", "character_id", "created_ms", "updated_ms")}


def job_json(row: dict[str, Any]) -> dict[str, Any]:
    """A condense job."""
    return {k: row[k] for k in (
        "id", "kind", "user_id", "character_id", "status", "due_ms", "attempts", "last_error",
        "pending_messages", "updated_ms",
    )}  # fmt: skip
