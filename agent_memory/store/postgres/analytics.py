"""Counts about users, characters and the service; per-turn latencies from 111 callbacks.

The definitions (and the helpers that shape a report) are in `store.shared.analytics`; this
module says them in PostgreSQL's SQL. Percentiles are nearest rank, which is what
`percentile_disc` computes (the value at rank ceil(p * n)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import MetricRow
from agent_memory.store.postgres.common import Repository
from agent_memory.store.shared.analytics import (
    FAVOURITES,
    PERCENTILES,
    STAGE_COLUMNS,
    STAGE_METRICS,
    TALK_MS,
    TOP,
    UNIDENTIFIED_SOURCES,
    character_report,
    metrics_source,
    overall_report,
    stage_stats,
    user_report,
)
from agent_memory.store.shared.analytics import window as shared_window
from agent_memory.store.types import Report

# Sums of bigints are numeric in PostgreSQL: cast back, so reports hold integers.
TALK_SUM = f"coalesce(sum({TALK_MS}), 0)::bigint"
MESSAGES_SUM = "coalesce(sum(s.message_count), 0)::bigint"
MESSAGE_COUNTS = (
    "count(*) AS messages_stored, "
    "count(*) FILTER (WHERE m.kind = 'turn' AND m.role = 'user') AS user_messages, "
    "count(*) FILTER (WHERE m.kind = 'turn' AND m.role = 'assistant') AS assistant_messages, "
    "count(*) FILTER (WHERE m.kind = 'turn' AND m.role = 'assistant' AND m.interrupted <> 0) AS interrupted, "
    "count(*) FILTER (WHERE m.kind = 'turn' AND m.role = 'assistant' "
    "AND m.source IN ('llm_failure', 'llm failure')) AS llm_failures, "
    "count(*) FILTER (WHERE m.kind <> 'turn') AS tool_items, max(m.at_ms) AS last_message_ms"
)
SESSION_COUNTS = (
    f"count(*) AS sessions, {MESSAGES_SUM} AS messages, {TALK_SUM} AS talk_ms, "
    "min(s.start_ms) AS first_active_ms, max(coalesce(s.stop_ms, s.start_ms)) AS last_session_ms, "
    "coalesce(sum(s.error_count), 0)::bigint AS agent_errors"
)
# Text is ordered by its bytes, as SQLite orders it, whatever the database's collation.
C = 'COLLATE "C"'
_FRACTIONS = [fraction for _, fraction in PERCENTILES]


def window(column: str, since_ms: int | None, until_ms: int | None) -> tuple[str, list[Any]]:
    """` AND column >= since AND column < until` for the bounds given."""
    return shared_window(column, since_ms, until_ms, "%s")


class PostgresAnalytics(Repository):
    """Statistics over sessions, messages and per-turn metrics; recording the metrics."""

    __slots__ = ()

    def _row(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any]:
        """The one row an aggregate query answers."""
        row = self._one(sql, params)
        assert row is not None  # aggregates always answer one row
        return row

    # latencies

    def latency_percentiles(
        self,
        *,
        character_id: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> dict[str, dict[str, Any]]:
        """count, mean, min, p50, p90, p99 and max of each metric, in ms."""
        source, where, params = metrics_source(character_id, since_ms, until_ms, "%s")
        stats: dict[str, dict[str, Any]] = {}
        for row in self._all(
            "SELECT a.metric, count(*) AS n, avg(a.value_ms) AS mean, min(a.value_ms) AS min, "
            "max(a.value_ms) AS max, percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY a.value_ms) AS ranks "
            f"{source} WHERE true{where} GROUP BY a.metric ORDER BY a.metric {C}",
            (_FRACTIONS, *params),
        ):
            entry: dict[str, Any] = {"count": row["n"], "mean": round(row["mean"], 2), "min": row["min"]}
            entry.update((label, value) for (label, _), value in zip(PERCENTILES, row["ranks"], strict=True))
            entry["max"] = row["max"]
            stats[row["metric"]] = entry
        return stats

    def stage_percentiles(
        self,
        *,
        character_id: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> dict[str, dict[str, Any]]:
        """count, mean, min, p50, p90, p99 and max of each stage (asr, llm, tts, end_to_end)."""
        source, where, params = metrics_source(character_id, since_ms, until_ms, "%s")
        rows = self._all(
            f"SELECT {STAGE_COLUMNS} {source} WHERE a.metric = ANY(%s){where} GROUP BY a.agent_id, a.turn_id",
            (list(STAGE_METRICS), *params),
        )
        return stage_stats((row["asr"], row["llm"], row["tts"], row["end_to_end"]) for row in rows)

    def callback_problems(
        self, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> dict[str, int]:
        """Raw callbacks received in the window that failed or were applied only in part."""
        where, params = window("received_ms", since_ms, until_ms)
        rows = self._all(
            f"SELECT status, count(*) AS n FROM inbox WHERE status IN ('failed', 'partial'){where} GROUP BY status",
            params,
        )
        counts = {"failed": 0, "partial": 0}
        counts.update({row["status"]: row["n"] for row in rows})
        return counts

    # per user, per character, overall

    def user_stats(self, user_id: str) -> Report | None:
        """Sessions, messages, talk time, favourite characters and rates of one user."""
        sessions = self._row(f"SELECT {SESSION_COUNTS} FROM sessions s WHERE s.user_id = %s", (user_id,))
        stored = self._row(f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.user_id = %s", (user_id,))
        facts = self._row("SELECT count(*) AS n FROM facts WHERE user_id = %s", (user_id,))["n"]
        summaries = self._row("SELECT count(*) AS n FROM summaries WHERE user_id = %s", (user_id,))["n"]
        if not (sessions["sessions"] or stored["messages_stored"] or facts or summaries):
            return None
        favourites = self._all(
            f"SELECT s.character_id, count(*) AS sessions, {MESSAGES_SUM} AS messages, "
            f"{TALK_SUM} AS talk_ms, max(coalesce(s.stop_ms, s.start_ms)) AS last_active_ms "
            "FROM sessions s WHERE s.user_id = %s GROUP BY s.character_id "
            f"ORDER BY sessions DESC, messages DESC, talk_ms DESC, s.character_id {C} LIMIT %s",
            (user_id, FAVOURITES),
        )
        characters = self._row(
            "SELECT count(*) AS n FROM (SELECT character_id FROM sessions WHERE user_id = %s "
            "UNION SELECT character_id FROM messages WHERE user_id = %s) AS c",
            (user_id, user_id),
        )["n"]
        return user_report(
            user_id,
            sessions,
            stored,
            characters=characters,
            favourites=favourites,
            facts=facts,
            summaries=summaries,
        )

    def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> Report | None:
        """Active users, sessions, talk time, rates and latencies of one character."""
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(
            f"SELECT {SESSION_COUNTS}, count(DISTINCT s.user_id) AS users FROM sessions s "
            f"WHERE s.character_id = %s{s_where}",
            (character_id, *s_params),
        )
        stored = self._row(
            f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.character_id = %s{m_where}",
            (character_id, *m_params),
        )
        if not (sessions["sessions"] or stored["messages_stored"]):
            return None
        top_users = self._all(
            f"SELECT s.user_id, count(*) AS sessions, {MESSAGES_SUM} AS messages, {TALK_SUM} AS talk_ms "
            f"FROM sessions s WHERE s.character_id = %s{s_where} GROUP BY s.user_id "
            f"ORDER BY sessions DESC, messages DESC, s.user_id {C} LIMIT %s",
            (character_id, *s_params, TOP),
        )
        return character_report(
            character_id,
            (since_ms, until_ms),
            sessions,
            stored,
            top_users=top_users,
            latency=self.latency_percentiles(character_id=character_id, since_ms=since_ms, until_ms=until_ms),
            stages=self.stage_percentiles(character_id=character_id, since_ms=since_ms, until_ms=until_ms),
        )

    def overall_stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> Report:
        """The whole service: users, characters, sessions, rates, latencies, stop reasons."""
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(
            f"SELECT {SESSION_COUNTS}, count(DISTINCT s.user_id) AS users, "
            f"count(DISTINCT s.character_id) AS characters FROM sessions s WHERE true{s_where}",
            s_params,
        )
        stored = self._row(f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE true{m_where}", m_params)
        by_status = self._all(
            f"SELECT s.status, count(*) AS n FROM sessions s WHERE true{s_where} GROUP BY s.status", s_params
        )
        unidentified = self._row(
            f"SELECT count(*) AS n FROM sessions s WHERE s.identity_source IN ({UNIDENTIFIED_SOURCES}){s_where}",
            s_params,
        )["n"]
        reasons = self._all(
            f"SELECT coalesce(s.stop_reason, '') {C} AS reason, count(*) AS n FROM sessions s "
            f"WHERE s.stop_reason IS NOT NULL{s_where} GROUP BY reason ORDER BY n DESC, reason",
            s_params,
        )
        top_characters = self._all(
            "SELECT s.character_id, count(DISTINCT s.user_id) AS active_users, count(*) AS sessions, "
            f"{MESSAGES_SUM} AS messages, {TALK_SUM} AS talk_ms FROM sessions s WHERE true{s_where} "
            f"GROUP BY s.character_id ORDER BY active_users DESC, sessions DESC, s.character_id {C} LIMIT %s",
            (*s_params, TOP),
        )
        return overall_report(
            (since_ms, until_ms),
            sessions,
            stored,
            by_status=by_status,
            unidentified=unidentified,
            reasons=reasons,
            top_characters=top_characters,
            latency=self.latency_percentiles(since_ms=since_ms, until_ms=until_ms),
            stages=self.stage_percentiles(since_ms=since_ms, until_ms=until_ms),
            callbacks=self.callback_problems(since_ms=since_ms, until_ms=until_ms),
        )

    def record_metrics(self, agent_id: str, rows: Sequence[MetricRow], at_ms: int) -> int:
        """Keep per-turn values, dated by their turn or `at_ms`; a resent turn replaces its values,
        so a 111 and a 112 naming one metric count once."""
        with self.conn.cursor() as cursor:
            cursor.executemany(
                b"INSERT INTO agent_metrics (agent_id, turn_id, metric, value_ms, at_ms) VALUES (%s, %s, %s, %s, %s) "
                b"ON CONFLICT (agent_id, turn_id, metric) DO UPDATE SET value_ms = excluded.value_ms, "
                b"at_ms = excluded.at_ms",
                [(agent_id, turn_id, metric, value, when or at_ms) for turn_id, metric, value, when in rows],
            )
        return len(rows)
