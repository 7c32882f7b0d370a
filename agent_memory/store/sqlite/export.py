"""The export: one consistent snapshot of everything held about a user, as plain rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agent_memory.store.shared.export import export_report
from agent_memory.store.sqlite.common import CHUNK, Repository
from agent_memory.store.types import Report


class SQLiteExport(Repository):
    """Everything held about one user, as plain rows (the export's JSON shape)."""

    __slots__ = ()

    def user(self, user_id: str) -> Report | None:
        """One consistent snapshot of a user's sessions, messages, summaries, facts, bindings and more."""
        began = not self.conn.in_transaction
        if began:
            # One read transaction: every table is seen at the same commit.
            self.conn.execute("BEGIN")
        try:
            return self._export(user_id)
        finally:
            if began:
                self.conn.execute("COMMIT")

    def _export(self, user_id: str) -> Report | None:
        """The export's reads, inside the caller's read transaction."""
        sessions = self._all(
            "SELECT * FROM sessions WHERE user_id = ? ORDER BY start_ms, agent_id", (user_id,)
        )
        messages = self._all(
            "SELECT id, agent_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
            "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images, created_ms "
            "FROM messages WHERE user_id = ? ORDER BY character_id, at_ms, seq, id",
            (user_id,),
        )
        facts = self._all(
            "SELECT id, character_id, text, pinned, origin, created_ms, updated_ms, valid_from FROM facts "
            "WHERE user_id = ? ORDER BY character_id, created_ms, id",
            (user_id,),
        )
        fact_history = self._all(
            "SELECT fact_id, character_id, text, origin, valid_from, valid_to, change FROM fact_history "
            "WHERE user_id = ? ORDER BY fact_id, valid_from, id",
            (user_id,),
        )
        summaries = self._all(
            "SELECT character_id, text, watermark_id, covered_until_ms, message_count, method, "
            "model, meta, created_ms, updated_ms FROM summaries WHERE user_id = ? ORDER BY character_id",
            (user_id,),
        )
        bindings = self._all(
            "SELECT agent_id, character_id, created_ms FROM bindings WHERE user_id = ? ORDER BY agent_id",
            (user_id,),
        )
        channel_bindings = self._all(
            "SELECT channel, character_id, created_ms, updated_ms FROM channel_bindings "
            "WHERE user_id = ? ORDER BY channel",
            (user_id,),
        )
        if not (sessions or messages or facts or fact_history or summaries or bindings or channel_bindings):
            return None
        agent_ids = [row["agent_id"] for row in sessions]
        jobs = self._all(
            "SELECT kind, character_id, status, due_ms, pending_messages, attempts, last_error, "
            "created_ms, updated_ms FROM jobs WHERE user_id = ? ORDER BY character_id, kind",
            (user_id,),
        )
        watched = list(self._per_agent("SELECT * FROM watched_agents WHERE agent_id IN ({})", agent_ids))
        metrics = list(
            self._per_agent(
                "SELECT agent_id, turn_id, metric, value_ms, at_ms FROM agent_metrics "
                "WHERE agent_id IN ({}) ORDER BY agent_id, turn_id, metric",
                agent_ids,
            )
        )
        raw = list(
            self._per_agent(
                "SELECT notice_id, event_type, product_id, notify_ms, received_ms, agent_id, status, "
                "error, body FROM inbox WHERE agent_id IN ({}) AND status != 'forgotten' "
                "ORDER BY received_ms, notice_id",
                agent_ids,
            )
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

    def _per_agent(self, sql: str, agent_ids: Sequence[str]) -> Iterable[dict[str, Any]]:
        """Run `sql` (with an `IN ({})`) over agent ids in chunks below SQLite's variable limit."""
        for start in range(0, len(agent_ids), CHUNK):
            chunk = agent_ids[start : start + CHUNK]
            yield from self._all(sql.format(", ".join("?" for _ in chunk)), chunk)
