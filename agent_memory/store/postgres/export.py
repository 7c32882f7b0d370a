"""The export: one consistent snapshot of everything held about a user, as plain rows.

A read runs in one REPEATABLE READ transaction, so every table is seen at the same commit.
"""

from __future__ import annotations

from agent_memory.store.postgres.common import Repository
from agent_memory.store.shared.export import export_report
from agent_memory.store.types import Report

# The followed agent as the SQLite store exports it (leases are this backend's business);
# sessions have the same columns, in the same order, on both.
WATCH_COLUMNS = (
    "agent_id, origin, status, stop_reason, next_poll_ms, last_poll_ms, polls, failures, last_error, "
    "base_system_messages, persona, max_tokens, push_due_ms, last_push_ms, last_pushed, created_ms, "
    "updated_ms, style"
)
C = 'COLLATE "C"'


class PostgresExport(Repository):
    """Everything held about one user, as plain rows (the export's JSON shape)."""

    __slots__ = ()

    def user(self, user_id: str) -> Report | None:
        """One consistent snapshot of a user's sessions, messages, summaries, facts, bindings and more."""
        sessions = self._all(
            f"SELECT * FROM sessions WHERE user_id = %s ORDER BY start_ms, agent_id {C}",
            (user_id,),
        )
        messages = self._all(
            "SELECT id, agent_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
            "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images, created_ms "
            f"FROM messages WHERE user_id = %s ORDER BY character_id {C}, at_ms, seq, id",
            (user_id,),
        )
        facts = self._all(
            "SELECT id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from FROM facts "
            f"WHERE user_id = %s ORDER BY character_id {C}, created_ms, id",
            (user_id,),
        )
        fact_history = self._all(
            "SELECT fact_id, character_id, text, origin, valid_from, valid_to, change FROM fact_history "
            "WHERE user_id = %s ORDER BY fact_id, valid_from, id",
            (user_id,),
        )
        summaries = self._all(
            "SELECT character_id, text, watermark_id, covered_until_ms, message_count, method, "
            f"model, meta, created_ms, updated_ms FROM summaries WHERE user_id = %s ORDER BY character_id {C}",
            (user_id,),
        )
        bindings = self._all(
            f"SELECT agent_id, character_id, created_ms FROM bindings WHERE user_id = %s ORDER BY agent_id {C}",
            (user_id,),
        )
        channel_bindings = self._all(
            "SELECT channel, character_id, created_ms, updated_ms FROM channel_bindings "
            f"WHERE user_id = %s ORDER BY channel {C}",
            (user_id,),
        )
        if not (sessions or messages or facts or fact_history or summaries or bindings or channel_bindings):
            return None
        agent_ids = [row["agent_id"] for row in sessions]
        jobs = self._all(
            "SELECT kind, character_id, status, due_ms, pending_messages, attempts, last_error, "
            f"created_ms, updated_ms FROM jobs WHERE user_id = %s ORDER BY character_id {C}, kind {C}",
            (user_id,),
        )
        watched = self._all(
            f"SELECT {WATCH_COLUMNS} FROM watched_agents WHERE agent_id = ANY(%s)", (agent_ids,)
        )
        metrics = self._all(
            "SELECT agent_id, turn_id, metric, value_ms, at_ms FROM agent_metrics "
            f"WHERE agent_id = ANY(%s) ORDER BY agent_id {C}, turn_id, metric {C}",
            (agent_ids,),
        )
        raw = self._all(
            "SELECT notice_id, event_type, product_id, notify_ms, received_ms, agent_id, status, "
            "error, body FROM inbox WHERE agent_id = ANY(%s) AND status <> 'forgotten' "
            f"ORDER BY received_ms, notice_id {C}",
            (agent_ids,),
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
