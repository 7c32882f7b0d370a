"""The export: one consistent snapshot of everything held about a user, as plain rows
(JSON parsed, flags as booleans)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent_memory.store.shared.facts import USER_WIDE, fact_scope
from agent_memory.store.shared.sql import Repository
from agent_memory.store.types import Report

Rows = list[dict[str, Any]]
# The columns of the kinds an import writes back as they were exported (with the user's id).
SUMMARY_COLUMNS = (
    "character_id, text, watermark_id, covered_until_ms, message_count, method, model, meta, created_ms, "
    "updated_ms"
)
METRIC_COLUMNS = "agent_id, turn_id, metric, value_ms, at_ms"
RAW_COLUMNS = "notice_id, event_type, product_id, notify_ms, received_ms, agent_id, status, error, body"

# Everything that forgetting the user deletes, each kind under its key in the export, in the
# export's order, read by one statement (`{c}` orders text by its bytes). A user with none of
# these but jobs has nothing to export.
_OF_USER = {
    "sessions": "SELECT * FROM sessions WHERE user_id = ? ORDER BY start_ms, agent_id{c}",
    "messages": "SELECT id, agent_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
    "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images, created_ms, fp "
    "FROM messages WHERE user_id = ? ORDER BY character_id{c}, at_ms, seq, id",
    "summaries": f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE user_id = ? ORDER BY character_id{{c}}",
    "facts": "SELECT id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from FROM facts "
    "WHERE user_id = ? ORDER BY created_ms, id",  # as a pair's are read: an import's new ids keep that order
    "fact_history": "SELECT fact_id, character_id, text, origin, valid_from, valid_to, change "
    "FROM fact_history WHERE user_id = ? ORDER BY fact_id, valid_from, id",
    "bindings": "SELECT agent_id, character_id, created_ms FROM bindings WHERE user_id = ? "
    "ORDER BY agent_id{c}",
    "channel_bindings": "SELECT channel, character_id, created_ms, updated_ms FROM channel_bindings "
    "WHERE user_id = ? ORDER BY channel{c}",
    "jobs": "SELECT kind, character_id, status, due_ms, pending_messages, attempts, last_error, "
    "created_ms, updated_ms FROM jobs WHERE user_id = ? ORDER BY character_id{c}, kind{c}",
}
# The followed agent as the export shows it (leases are PostgreSQL's business); sessions have
# the same columns, in the same order, on both backends.
WATCH_COLUMNS = (
    "agent_id, origin, status, stop_reason, next_poll_ms, last_poll_ms, polls, failures, last_error, "
    "base_system_messages, persona, max_tokens, push_due_ms, last_push_ms, last_pushed, created_ms, "
    "updated_ms, style"
)
# What is kept per agent run of the user's sessions (`{among}`: the agent id condition).
_OF_RUNS = {
    "followed_agents": f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE {{among}}",
    "metrics": f"SELECT {METRIC_COLUMNS} FROM agent_metrics WHERE {{among}} ORDER BY agent_id{{c}}, turn_id, "
    "metric{c}",
    "raw_callbacks": f"SELECT {RAW_COLUMNS} FROM inbox WHERE {{among}} AND status <> 'forgotten' "
    "ORDER BY received_ms, notice_id{c}",
}
# Every kind of record an export lists, under its key.
EXPORT_KINDS: frozenset[str] = frozenset((*_OF_USER, *_OF_RUNS))
# Columns stored as JSON text, and flags stored as integers, by kind.
_JSON = {
    "sessions": ("labels",),
    "messages": ("extra",),
    "summaries": ("meta",),
    "followed_agents": ("base_system_messages", "last_pushed"),
    "raw_callbacks": ("body",),
}
_FLAGS = {"messages": ("interrupted", "gap_before"), "facts": ("pinned",)}


def _parsed(value: str | None) -> Any:
    """Stored JSON as a value; text that is not JSON as it is."""
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value  # kept as stored


def export_report(user_id: str, kinds: dict[str, Rows]) -> Report:
    """A user's export from the rows of each kind read in one snapshot (shaped in place)."""
    for kind, rows in kinds.items():
        for row in rows:
            for column in _JSON.get(kind, ()):
                row[column] = _parsed(row[column])
            for column in _FLAGS.get(kind, ()):
                row[column] = bool(row[column])
            if kind == "messages":
                row["images"] = _parsed(row["images"]) or []
            elif kind in ("facts", "fact_history"):
                row["scope"] = fact_scope(row["character_id"])
    characters = {
        row["character_id"] for kind in ("sessions", "messages", "summaries") for row in kinds[kind]
    }
    for row in (*kinds["facts"], *kinds["fact_history"]):
        if row["character_id"] != USER_WIDE:  # a user-wide fact names no character
            characters.add(row["character_id"])
    counts = {kind: len(rows) for kind, rows in kinds.items()}
    return {"user_id": user_id, "characters": sorted(characters), "counts": counts, **kinds}


class Export(Repository):
    """Everything held about one user, as plain rows (the export's JSON shape)."""

    def user(self, user_id: str) -> Report | None:
        """One consistent snapshot of everything a forget of the user deletes; None if nothing is held."""
        c = self.sql.binary
        with self.sql.snapshot():
            kinds = {kind: self._rows(sql.format(c=c), (user_id,)) for kind, sql in _OF_USER.items()}
            if not any(rows for kind, rows in kinds.items() if kind != "jobs"):
                return None
            agent_ids = [row["agent_id"] for row in kinds["sessions"]]
            for kind, sql in _OF_RUNS.items():
                kinds[kind] = self._per_agent(sql.replace("{c}", c), agent_ids)
        return export_report(user_id, kinds)

    def _rows(self, sql: str, params: Sequence[Any]) -> Rows:
        return [dict(row) for row in self.sql.all(sql, params)]

    def _per_agent(self, sql: str, agent_ids: Sequence[str]) -> Rows:
        """Run `sql` (its `{among}` the agent id condition) over agent ids, chunk by chunk."""
        chunks = self.sql.chunks("agent_id", agent_ids)
        return [row for among, params in chunks for row in self._rows(sql.replace("{among}", among), params)]
