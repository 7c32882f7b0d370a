"""The export's shape: the rows a backend read, with JSON parsed and flags as booleans."""

from __future__ import annotations

import json
from typing import Any

from agent_memory.store.shared.facts import USER_WIDE, fact_scope
from agent_memory.store.types import Report

Rows = list[dict[str, Any]]


def _parsed(value: str | None) -> Any:
    """Stored JSON as a value; text that is not JSON as it is."""
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value  # kept as stored


def export_report(
    user_id: str,
    *,
    sessions: Rows,
    messages: Rows,
    facts: Rows,
    fact_history: Rows,
    summaries: Rows,
    bindings: Rows,
    channel_bindings: Rows,
    jobs: Rows,
    watched: Rows,
    metrics: Rows,
    raw: Rows,
) -> Report:
    """A user's export from the rows read in one snapshot (shaped in place)."""
    for row in sessions:
        row["labels"] = _parsed(row["labels"])
    for row in messages:
        row["interrupted"] = bool(row["interrupted"])
        row["gap_before"] = bool(row["gap_before"])
        row["extra"] = _parsed(row["extra"])
        row["images"] = _parsed(row["images"]) or []
    for row in facts:
        row["scope"] = fact_scope(row["character_id"])
        row["pinned"] = bool(row["pinned"])
    for row in fact_history:
        row["scope"] = fact_scope(row["character_id"])
    for row in summaries:
        row["meta"] = _parsed(row["meta"])
    for row in watched:
        row["base_system_messages"] = _parsed(row["base_system_messages"])
        row["last_pushed"] = _parsed(row["last_pushed"])
    for row in raw:
        row["body"] = _parsed(row["body"])
    characters = sorted(
        {row["character_id"] for row in (*sessions, *messages, *summaries)}
        | {row["character_id"] for row in (*facts, *fact_history) if row["character_id"] != USER_WIDE}
    )
    return {
        "user_id": user_id,
        "characters": characters,
        "counts": {
            "sessions": len(sessions), "messages": len(messages), "facts": len(facts),
            "fact_history": len(fact_history),
            "summaries": len(summaries), "bindings": len(bindings),
            "channel_bindings": len(channel_bindings), "jobs": len(jobs),
            "followed_agents": len(watched), "metrics": len(metrics), "raw_callbacks": len(raw),
        },
        "sessions": sessions,
        "messages": messages,
        "summaries": summaries,
        "facts": facts,
        "fact_history": fact_history,
        "bindings": bindings,
        "channel_bindings": channel_bindings,
        "jobs": jobs,
        "followed_agents": watched,
        "metrics": metrics,
        "raw_callbacks": raw,
    }  # fmt: skip
