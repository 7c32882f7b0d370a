"""Statistics counted in SQL, whichever backend; what they mean, and a report's shape, is core.stats's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.core.domain import MetricRow
from agent_memory.core.events import FALLBACK_SOURCES
from agent_memory.core.stats import (
    MAX_SESSION_MS,
    PERCENTILES,
    STAGE_METRICS,
    STAGES,
    Latencies,
    Row,
    last_active,
    nearest_rank,
    rate,
    stage_stats,
    talked,
    with_minutes,
)
from agent_memory.store.shared.sql import Repository, Sql
from agent_memory.store.types import Report

# Identity sources that are only a fallback (see ingest.resolve_identity), as an SQL list.
UNIDENTIFIED_SOURCES = ", ".join(f"'{source}'" for source in FALLBACK_SOURCES)
# A speaker's own session of a shared call (`<agent_id>~<uid>`) holds copies of its call's turns:
# the service's and a character's figures leave it (and its messages) out while its call's
# session is there, to count each call and turn once (docs/memory.md); users, active users and
# unidentified sessions count every speaker, and a user's own figures keep it.
SPEAKER_COPY = (
    "s.rtc_uid IS NOT NULL AND EXISTS (SELECT 1 FROM sessions p WHERE "
    "p.agent_id = substr(s.agent_id, 1, length(s.agent_id) - length(s.rtc_uid) - 1) "
    "AND s.agent_id = p.agent_id || '~' || s.rtc_uid)"
)
NOT_A_COPY = f" AND NOT ({SPEAKER_COPY})"
NOT_COPIED = f" AND m.agent_id NOT IN (SELECT s.agent_id FROM sessions s WHERE {SPEAKER_COPY})"
FAVOURITES = 5
TOP = 10
# One session's talk time, in SQL both backends speak (over sessions `s`).
TALK_MS = (
    "CASE WHEN s.start_ms IS NOT NULL AND s.stop_ms IS NOT NULL AND s.stop_ms > s.start_ms "
    f"AND s.stop_ms - s.start_ms <= {MAX_SESSION_MS} THEN s.stop_ms - s.start_ms ELSE 0 END"
)

# Each stage's value of one turn, as columns of a query grouped by (agent, turn), over metrics `a`.
_PICK = {name: f"max(a.value_ms) FILTER (WHERE a.metric = '{name}')" for name in STAGE_METRICS}
STAGE_COLUMNS = ", ".join(
    (f"coalesce({', '.join(_PICK[name] for name in names)})" if len(names) > 1 else _PICK[names[0]])
    + f" AS {stage}"
    for stage, names in STAGES.items()
)


def window(column: str, since_ms: int | None, until_ms: int | None) -> tuple[str, list[Any]]:
    """` AND column >= since AND column < until` for the bounds given."""
    sql, params = "", list[Any]()
    if since_ms is not None:
        sql += f" AND {column} >= ?"
        params.append(since_ms)
    if until_ms is not None:
        sql += f" AND {column} < ?"
        params.append(until_ms)
    return sql, params


def metrics_source(
    character_id: str | None, since_ms: int | None, until_ms: int | None
) -> tuple[str, str, list[Any]]:
    """FROM, WHERE and parameters of the metrics a latency query reads (of a character, in a window)."""
    source = "FROM agent_metrics a"
    where, params = window("a.at_ms", since_ms, until_ms)
    if character_id is not None:
        source += " JOIN sessions s ON s.agent_id = a.agent_id"
        where += " AND s.character_id = ?"
        params.append(character_id)
    return source, where, params


_ASSISTANT = "m.kind = 'turn' AND m.role = 'assistant'"
# Counts of stored messages (over messages `m`).
MESSAGE_COUNTS = (
    "count(*) AS messages_stored, "
    "count(*) FILTER (WHERE m.kind = 'turn' AND m.role = 'user') AS user_messages, "
    f"count(*) FILTER (WHERE {_ASSISTANT}) AS assistant_messages, "
    f"count(*) FILTER (WHERE {_ASSISTANT} AND m.interrupted <> 0) AS interrupted, "
    f"count(*) FILTER (WHERE {_ASSISTANT} AND m.source IN ('llm_failure', 'llm failure')) AS llm_failures, "
    "count(*) FILTER (WHERE m.kind <> 'turn') AS tool_items, max(m.at_ms) AS last_message_ms"
)


def _sums(sql: Sql) -> tuple[str, str, str]:
    """Sessions' messages and talk time, and the SELECT of a group of sessions' counts (over `s`)."""
    messages, talk = sql.total("s.message_count"), sql.total(TALK_MS)
    counts = (
        f"count(*) AS sessions, {messages} AS messages, {talk} AS talk_ms, min(s.start_ms) AS first_active_ms, "
        f"max(coalesce(s.stop_ms, s.start_ms)) AS last_session_ms, {sql.total('s.error_count')} AS agent_errors"
    )
    return messages, talk, counts


class Analytics(Repository):
    """Statistics over sessions, messages and per-turn metrics; recording the metrics."""

    def _row(self, sql: str, params: Sequence[Any] = ()) -> Row:
        """The one row an aggregate query answers."""
        row = self.sql.one(sql, params)
        assert row is not None  # aggregates always answer one row
        return dict(row)

    # latencies

    # What a backend that computes a metric's percentiles in its one query adds to it, and the
    # parameters that go before the query's own (then `_ranks` reads them from its row).
    ranks_column = ""
    ranks_params: tuple[Any, ...] = ()

    def latency_percentiles(
        self, *, character_id: str | None = None, since_ms: int | None = None, until_ms: int | None = None
    ) -> Latencies:
        """count, mean, min, p50, p90, p99 (nearest rank) and max of each metric, in ms."""
        source, where, params = metrics_source(character_id, since_ms, until_ms)
        stats: Latencies = {}
        for row in self.sql.all(
            "SELECT a.metric, count(*) AS n, avg(a.value_ms) AS mean, min(a.value_ms) AS min, "
            f"max(a.value_ms) AS max{self.ranks_column} {source} WHERE true{where} "
            f"GROUP BY a.metric ORDER BY a.metric{self.sql.binary}",
            (*self.ranks_params, *params),
        ):
            entry: dict[str, Any] = {"count": row["n"], "mean": round(row["mean"], 2), "min": row["min"]}
            entry.update(self._ranks(row, source, where, params))
            entry["max"] = row["max"]
            stats[row["metric"]] = entry
        return stats

    def _ranks(self, row: Mapping[str, Any], source: str, where: str, params: list[Any]) -> dict[str, Any]:
        """The metric's value at each percentile's nearest rank, one query each."""
        ranks: dict[str, Any] = {}
        for label, fraction in PERCENTILES:
            found = self.sql.one(
                f"SELECT a.value_ms AS v {source} WHERE a.metric = ?{where} ORDER BY a.value_ms LIMIT 1 OFFSET ?",
                (row["metric"], *params, nearest_rank(fraction, row["n"])),
            )
            ranks[label] = found["v"] if found is not None else None
        return ranks

    def stage_percentiles(
        self, *, character_id: str | None = None, since_ms: int | None = None, until_ms: int | None = None
    ) -> Latencies:
        """count, mean, min, p50, p90, p99 and max of each stage (asr, llm, tts, end_to_end)."""
        source, where, params = metrics_source(character_id, since_ms, until_ms)
        among, metrics = self.sql.among(self.sql.unindexed("a.metric"), STAGE_METRICS)
        return stage_stats(
            self.sql.records(
                lambda *turn: turn,
                f"SELECT {STAGE_COLUMNS} {source} WHERE {among}{where} GROUP BY a.agent_id, a.turn_id",
                (*metrics, *params),
            )
        )

    def callback_problems(
        self, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> dict[str, int]:
        """Raw callbacks received in the window that failed or were applied only in part."""
        where, params = window("received_ms", since_ms, until_ms)
        rows = self.sql.all(
            f"SELECT status, count(*) AS n FROM inbox WHERE status IN ('failed', 'partial'){where} GROUP BY status",
            params,
        )
        counts = {"failed": 0, "partial": 0}
        counts.update({row["status"]: row["n"] for row in rows})
        return counts

    # per user, per character, overall

    def user_stats(self, user_id: str) -> Report | None:
        """Sessions, messages, talk time, favourite characters and rates of one user."""
        messages, talk, counts = _sums(self.sql)
        sessions = self._row(f"SELECT {counts} FROM sessions s WHERE s.user_id = ?", (user_id,))
        stored = self._row(f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.user_id = ?", (user_id,))
        facts = self._row("SELECT count(*) AS n FROM facts WHERE user_id = ?", (user_id,))["n"]
        summaries = self._row("SELECT count(*) AS n FROM summaries WHERE user_id = ?", (user_id,))["n"]
        if not (sessions["sessions"] or stored["messages_stored"] or facts or summaries):
            return None
        favourites = self.sql.all(
            f"SELECT s.character_id, count(*) AS sessions, {messages} AS messages, {talk} AS talk_ms, "
            "max(coalesce(s.stop_ms, s.start_ms)) AS last_active_ms FROM sessions s WHERE s.user_id = ? "
            "GROUP BY s.character_id "
            f"ORDER BY sessions DESC, messages DESC, talk_ms DESC, s.character_id{self.sql.binary} LIMIT ?",
            (user_id, FAVOURITES),
        )
        characters = self._row(
            "SELECT count(*) AS n FROM (SELECT character_id FROM sessions WHERE user_id = ? "
            "UNION SELECT character_id FROM messages WHERE user_id = ?) AS c",
            (user_id, user_id),
        )["n"]
        return {
            "user_id": user_id,
            "sessions": sessions["sessions"],
            **talked(sessions, stored),
            "characters": characters,
            "favourite_characters": with_minutes(favourites),
            "first_active_ms": sessions["first_active_ms"],
            "last_active_ms": last_active(sessions, stored),
            "agent_errors": sessions["agent_errors"],
            "facts": facts,
            "summaries": summaries,
        }

    def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> Report | None:
        """Active users, sessions, talk time, rates and latencies of one character."""
        messages, talk, counts = _sums(self.sql)
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(
            f"SELECT {counts} FROM sessions s WHERE s.character_id = ?{s_where}{NOT_A_COPY}",
            (character_id, *s_params),
        )
        sessions.update(
            self._row(
                f"SELECT count(DISTINCT s.user_id) AS users, count(*) AS all_sessions FROM sessions s "
                f"WHERE s.character_id = ?{s_where}",
                (character_id, *s_params),
            )
        )
        stored = self._row(
            f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.character_id = ?{m_where}{NOT_COPIED}",
            (character_id, *m_params),
        )
        if not (sessions["all_sessions"] or stored["messages_stored"]):
            return None
        top_users = self.sql.all(
            f"SELECT s.user_id, count(*) AS sessions, {messages} AS messages, {talk} AS talk_ms FROM sessions s "
            f"WHERE s.character_id = ?{s_where} GROUP BY s.user_id "
            f"ORDER BY sessions DESC, messages DESC, s.user_id{self.sql.binary} LIMIT ?",
            (character_id, *s_params, TOP),
        )
        return {
            "character_id": character_id,
            "window": {"since_ms": since_ms, "until_ms": until_ms},
            "active_users": sessions["users"],
            "sessions": sessions["sessions"],
            **talked(sessions, stored),
            "last_active_ms": last_active(sessions, stored),
            "agent_errors": sessions["agent_errors"],
            "top_users": with_minutes(top_users),
            "latency_ms": self.latency_percentiles(
                character_id=character_id, since_ms=since_ms, until_ms=until_ms
            ),
            "latency_stages_ms": self.stage_percentiles(
                character_id=character_id, since_ms=since_ms, until_ms=until_ms
            ),
        }

    def overall_stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> Report:
        """The whole service: users, characters, sessions, rates, latencies, stop reasons."""
        counts = _sums(self.sql)[2]
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(f"SELECT {counts} FROM sessions s WHERE true{s_where}{NOT_A_COPY}", s_params)
        sessions.update(
            self._row(
                "SELECT count(DISTINCT s.user_id) AS users, count(DISTINCT s.character_id) AS characters, "
                f"count(*) AS all_sessions FROM sessions s WHERE true{s_where}",
                s_params,
            )
        )
        stored = self._row(
            f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE true{m_where}{NOT_COPIED}", m_params
        )
        by_status = self.sql.all(
            f"SELECT s.status, count(*) AS n FROM sessions s WHERE true{s_where}{NOT_A_COPY} GROUP BY s.status",
            s_params,
        )
        unidentified = self._row(
            f"SELECT count(*) AS n FROM sessions s WHERE s.identity_source IN ({UNIDENTIFIED_SOURCES}){s_where}",
            s_params,
        )["n"]
        reasons = self.sql.all(
            f"SELECT coalesce(s.stop_reason, ''){self.sql.binary} AS reason, count(*) AS n FROM sessions s "
            f"WHERE s.stop_reason IS NOT NULL{s_where}{NOT_A_COPY} GROUP BY reason ORDER BY n DESC, reason",
            s_params,
        )
        # Every speaker is an active user of the character; their own sessions are no more calls.
        top_characters = self.sql.all(
            "SELECT s.character_id, count(DISTINCT s.user_id) AS active_users, "
            f"count(*) FILTER (WHERE NOT ({SPEAKER_COPY})) AS sessions, "
            f"{self.sql.total(f'CASE WHEN {SPEAKER_COPY} THEN 0 ELSE s.message_count END')} AS messages, "
            f"{self.sql.total(f'CASE WHEN {SPEAKER_COPY} THEN 0 ELSE {TALK_MS} END')} AS talk_ms "
            f"FROM sessions s WHERE true{s_where} GROUP BY s.character_id "
            f"ORDER BY active_users DESC, sessions DESC, s.character_id{self.sql.binary} LIMIT ?",
            (*s_params, TOP),
        )
        return {
            "window": {"since_ms": since_ms, "until_ms": until_ms},
            "users": sessions["users"],
            "characters": sessions["characters"],
            "sessions": sessions["sessions"],
            "sessions_by_status": {row["status"]: row["n"] for row in by_status},
            # Whose words a session holds: a speaker's own session is counted too (out of all).
            "unidentified_sessions": rate(unidentified, sessions["all_sessions"]),
            "stop_reasons": {row["reason"]: row["n"] for row in reasons},
            **talked(sessions, stored),
            "last_active_ms": last_active(sessions, stored),
            "agent_errors": sessions["agent_errors"],
            "top_characters": with_minutes(top_characters),
            "latency_ms": self.latency_percentiles(since_ms=since_ms, until_ms=until_ms),
            "latency_stages_ms": self.stage_percentiles(since_ms=since_ms, until_ms=until_ms),
            "callbacks": self.callback_problems(since_ms=since_ms, until_ms=until_ms),
        }

    def record_metrics(self, agent_id: str, rows: Sequence[MetricRow], at_ms: int) -> int:
        """Keep per-turn values, dated by their turn or `at_ms`; a resent turn replaces its values."""
        self.sql.many(
            "INSERT INTO agent_metrics (agent_id, turn_id, metric, value_ms, at_ms) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (agent_id, turn_id, metric) DO UPDATE SET value_ms = excluded.value_ms, at_ms = excluded.at_ms",
            [(agent_id, turn_id, metric, value, when or at_ms) for turn_id, metric, value, when in rows],
        )
        return len(rows)
