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
            "sessions": len(sessions),
            "messages": len(messages),
            "facts": len(facts),
            "fact_history": len(fact_history),
            "summaries": len(summaries),
            "bindings": len(bindings),
            "channel_bindings": len(channel_bindings),
            "jobs": len(jobs),
            "followed_agents": len(watched),
            "metrics": len(metrics),
            "raw_callbacks": len(raw),
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
    }


# The followed agent as the export shows it (leases are PostgreSQL's business); sessions have
# the same columns, in the same order, on both backends.
WATCH_COLUMNS = (
    "agent_id, origin, status, stop_reason, next_poll_ms, last_poll_ms, polls, failures, last_error, "
    "base_system_messages, persona, max_tokens, push_due_ms, last_push_ms, last_pushed, created_ms, "
    "updated_ms, style"
)


class Export(Repository):
    """Everything held about one user, as plain rows (the export's JSON shape)."""

    __slots__ = ()

    def user(self, user_id: str) -> Report | None:
        """One consistent snapshot of everything held about a user; None if nothing is.

        Everything that forgetting the user deletes: sessions, messages, summaries, facts, agent
        and channel bindings, jobs, followed agents, metrics and raw callbacks, with their counts.
        """
        with self.sql.snapshot():
            return self._export(user_id)

    def _rows(self, sql: str, params: Sequence[Any]) -> Rows:
        return [dict(row) for row in self.sql.all(sql, params)]

    def _export(self, user_id: str) -> Report | None:
        c = self.sql.binary
        sessions = self._rows(
            f"SELECT * FROM sessions WHERE user_id = ? ORDER BY start_ms, agent_id{c}", (user_id,)
        )
        messages = self._rows(
            "SELECT id, agent_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
            "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images, created_ms, fp "
            f"FROM messages WHERE user_id = ? ORDER BY character_id{c}, at_ms, seq, id",
            (user_id,),
        )
        facts = self._rows(
            "SELECT id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from FROM facts "
            f"WHERE user_id = ? ORDER BY character_id{c}, created_ms, id",
            (user_id,),
        )
        fact_history = self._rows(
            "SELECT fact_id, character_id, text, origin, valid_from, valid_to, change FROM fact_history "
            "WHERE user_id = ? ORDER BY fact_id, valid_from, id",
            (user_id,),
        )
        summaries = self._rows(
            "SELECT character_id, text, watermark_id, covered_until_ms, message_count, method, "
            f"model, meta, created_ms, updated_ms FROM summaries WHERE user_id = ? ORDER BY character_id{c}",
            (user_id,),
        )
        bindings = self._rows(
            f"SELECT agent_id, character_id, created_ms FROM bindings WHERE user_id = ? ORDER BY agent_id{c}",
            (user_id,),
        )
        channel_bindings = self._rows(
            "SELECT channel, character_id, created_ms, updated_ms FROM channel_bindings "
            f"WHERE user_id = ? ORDER BY channel{c}",
            (user_id,),
        )
        if not (sessions or messages or facts or fact_history or summaries or bindings or channel_bindings):
            return None
        agent_ids = [row["agent_id"] for row in sessions]
        jobs = self._rows(
            "SELECT kind, character_id, status, due_ms, pending_messages, attempts, last_error, "
            f"created_ms, updated_ms FROM jobs WHERE user_id = ? ORDER BY character_id{c}, kind{c}",
            (user_id,),
        )
        watched = self._per_agent(f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE {{}}", agent_ids)
        metrics = self._per_agent(
            "SELECT agent_id, turn_id, metric, value_ms, at_ms FROM agent_metrics "
            f"WHERE {{}} ORDER BY agent_id{c}, turn_id, metric{c}",
            agent_ids,
        )
        raw = self._per_agent(
            "SELECT notice_id, event_type, product_id, notify_ms, received_ms, agent_id, status, "
            f"error, body FROM inbox WHERE {{}} AND status <> 'forgotten' ORDER BY received_ms, notice_id{c}",
            agent_ids,
        )
        return export_report(
            user_id,
            sessions=sessions,
            messages=messages,
            facts=facts,
            fact_history=fact_history,
            summaries=summaries,
            bindings=bindings,
            channel_bindings=channel_bindings,
            jobs=jobs,
            watched=watched,
            metrics=metrics,
            raw=raw,
        )

    def _per_agent(self, sql: str, agent_ids: Sequence[str]) -> Rows:
        """Run `sql` (its `{}` the agent id condition) over agent ids, in chunks the backend can bind."""
        rows: Rows = []
        for start in range(0, len(agent_ids), self.sql.list_max):
            among, params = self.sql.among("agent_id", agent_ids[start : start + self.sql.list_max])
            rows += self._rows(sql.format(among), params)
        return rows
