"""Counts about users, characters and the service; per-turn latencies from 111 callbacks; export.

Definitions (the HTTP answers and `agent-memory stats` repeat them):
- sessions: agent runs (rows of `sessions`), whatever their status.
- messages: messages ever taken in (the sessions' `message_count`, which retention does not
  lower); `messages_stored`: those still held.
- talk time: the sum over sessions of `stop_ms - start_ms`, where both are known.
- interruption rate: stored assistant messages marked interrupted / stored assistant messages.
- llm_failure rate: stored assistant messages whose source is `llm_failure` (or the older
  spelling `llm failure`) / stored assistant messages.
- latency percentiles: nearest rank (the value at rank ceil(p * n) of the sorted values).
- last active: the latest session stop (or start, while running) or stored message time.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..models import as_number

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
LLM_FAILURE_SOURCES = ("llm_failure", "llm failure")
FAVOURITES = 5
TOP = 10
# Duration of a session when both ends are known and in order.
TALK_MS = (
    "CASE WHEN s.start_ms IS NOT NULL AND s.stop_ms IS NOT NULL AND s.stop_ms > s.start_ms "
    "THEN s.stop_ms - s.start_ms ELSE 0 END"
)
MESSAGE_COUNTS = (
    "count(*) AS messages_stored, "
    "coalesce(sum(m.role = 'user'), 0) AS user_messages, "
    "coalesce(sum(m.role = 'assistant'), 0) AS assistant_messages, "
    "coalesce(sum(m.role = 'assistant' AND m.interrupted), 0) AS interrupted, "
    "coalesce(sum(m.role = 'assistant' AND m.source IN ('llm_failure', 'llm failure')), 0) "
    "AS llm_failures, max(m.at_ms) AS last_message_ms"
)
SESSION_COUNTS = (
    "count(*) AS sessions, coalesce(sum(s.message_count), 0) AS messages, "
    f"coalesce(sum({TALK_MS}), 0) AS talk_ms, min(s.start_ms) AS first_active_ms, "
    "max(coalesce(s.stop_ms, s.start_ms)) AS last_session_ms, "
    "coalesce(sum(s.error_count), 0) AS agent_errors"
)


def metric_rows(turns: Any) -> list[tuple[int, str, float]]:
    """(turn_id, metric, ms) of each numeric per-turn value in a 111 payload's `turns`."""
    rows: list[tuple[int, str, float]] = []
    if not isinstance(turns, list):
        return rows
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        turn_id = _as_float(turn.get("turn_id"))
        if turn_id is None or not float(turn_id).is_integer():
            continue
        for name, value in turn.items():
            ms = _as_float(value)
            if name != "turn_id" and ms is not None and ms >= 0:
                rows.append((int(turn_id), str(name), ms))
    return rows


def _as_float(value: Any) -> float | None:
    number = as_number(value)
    return None if number is None else float(number)


def rate(count: int, of: int) -> dict[str, Any]:
    """A count, what it is out of, and the share (None when there is nothing to divide)."""
    return {"count": count, "of": of, "rate": round(count / of, 4) if of else None}


def minutes(ms: int) -> float:
    """Milliseconds as minutes, two decimals."""
    return round(ms / 60_000, 2)


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


def message_rates(row: dict[str, Any]) -> dict[str, Any]:
    """The stored-message counts and the two rates of one aggregate row."""
    return {
        "messages_stored": row["messages_stored"],
        "user_messages": row["user_messages"],
        "assistant_messages": row["assistant_messages"],
        "interruptions": rate(row["interrupted"], row["assistant_messages"]),
        "llm_failures": rate(row["llm_failures"], row["assistant_messages"]),
    }


def last_active(*stamps: int | None) -> int | None:
    """The latest of the known timestamps."""
    known = [stamp for stamp in stamps if stamp is not None]
    return max(known) if known else None


class AnalyticsReads:
    """Statistics and the export; mixed into `SQLiteView`."""

    conn: sqlite3.Connection

    if TYPE_CHECKING:

        def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

        def _one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None: ...

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
        source = "FROM agent_metrics a"
        where, params = window("a.at_ms", since_ms, until_ms)
        if character_id is not None:
            source += " JOIN sessions s ON s.agent_id = a.agent_id"
            where += " AND s.character_id = ?"
            params.append(character_id)
        stats: dict[str, dict[str, Any]] = {}
        for row in self._all(
            f"SELECT a.metric, count(*) AS n, avg(a.value_ms) AS mean, min(a.value_ms) AS min, "
            f"max(a.value_ms) AS max {source} WHERE 1{where} GROUP BY a.metric ORDER BY a.metric",
            params,
        ):
            entry: dict[str, Any] = {
                "count": row["n"],
                "mean": round(row["mean"], 2),
                "min": row["min"],
            }
            for label, fraction in PERCENTILES:
                rank = max(1, math.ceil(fraction * row["n"]))
                value = self.conn.execute(
                    f"SELECT a.value_ms {source} WHERE a.metric = ?{where} "
                    "ORDER BY a.value_ms LIMIT 1 OFFSET ?",
                    (row["metric"], *params, rank - 1),
                ).fetchone()
                entry[label] = value[0]
            entry["max"] = row["max"]
            stats[row["metric"]] = entry
        return stats

    # per user, per character, overall

    def user_stats(self, user_id: str) -> dict[str, Any] | None:
        """Sessions, messages, talk time, favourite characters and rates of one user."""
        sessions = self._row(
            f"SELECT {SESSION_COUNTS} FROM sessions s WHERE s.user_id = ?", (user_id,)
        )
        stored = self._row(
            f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.user_id = ?", (user_id,)
        )
        facts = self._row("SELECT count(*) AS n FROM facts WHERE user_id = ?", (user_id,))["n"]
        summaries = self._row("SELECT count(*) AS n FROM summaries WHERE user_id = ?", (user_id,))[
            "n"
        ]
        if not (sessions["sessions"] or stored["messages_stored"] or facts or summaries):
            return None
        favourites = self._all(
            f"SELECT s.character_id, count(*) AS sessions, coalesce(sum(s.message_count), 0) AS messages, "
            f"coalesce(sum({TALK_MS}), 0) AS talk_ms, max(coalesce(s.stop_ms, s.start_ms)) AS last_active_ms "
            "FROM sessions s WHERE s.user_id = ? GROUP BY s.character_id "
            "ORDER BY sessions DESC, messages DESC, talk_ms DESC, s.character_id LIMIT ?",
            (user_id, FAVOURITES),
        )
        characters = self._row(
            "SELECT count(*) AS n FROM (SELECT character_id FROM sessions WHERE user_id = ? "
            "UNION SELECT character_id FROM messages WHERE user_id = ?)",
            (user_id, user_id),
        )["n"]
        return {
            "user_id": user_id,
            "sessions": sessions["sessions"],
            "messages": sessions["messages"],
            **message_rates(stored),
            "talk_ms": sessions["talk_ms"],
            "minutes_talked": minutes(sessions["talk_ms"]),
            "characters": characters,
            "favourite_characters": [
                {**row, "minutes_talked": minutes(row["talk_ms"])} for row in favourites
            ],
            "first_active_ms": sessions["first_active_ms"],
            "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
            "agent_errors": sessions["agent_errors"],
            "facts": facts,
            "summaries": summaries,
        }

    def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> dict[str, Any] | None:
        """Active users, sessions, talk time, rates and latencies of one character."""
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(
            f"SELECT {SESSION_COUNTS}, count(DISTINCT s.user_id) AS users FROM sessions s "
            f"WHERE s.character_id = ?{s_where}",
            (character_id, *s_params),
        )
        stored = self._row(
            f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE m.character_id = ?{m_where}",
            (character_id, *m_params),
        )
        if not (sessions["sessions"] or stored["messages_stored"]):
            return None
        top_users = self._all(
            f"SELECT s.user_id, count(*) AS sessions, coalesce(sum(s.message_count), 0) AS messages, "
            f"coalesce(sum({TALK_MS}), 0) AS talk_ms FROM sessions s "
            f"WHERE s.character_id = ?{s_where} GROUP BY s.user_id "
            "ORDER BY sessions DESC, messages DESC, s.user_id LIMIT ?",
            (character_id, *s_params, TOP),
        )
        return {
            "character_id": character_id,
            "window": {"since_ms": since_ms, "until_ms": until_ms},
            "active_users": sessions["users"],
            "sessions": sessions["sessions"],
            "messages": sessions["messages"],
            **message_rates(stored),
            "talk_ms": sessions["talk_ms"],
            "minutes_talked": minutes(sessions["talk_ms"]),
            "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
            "agent_errors": sessions["agent_errors"],
            "top_users": [{**row, "minutes_talked": minutes(row["talk_ms"])} for row in top_users],
            "latency_ms": self.latency_percentiles(
                character_id=character_id, since_ms=since_ms, until_ms=until_ms
            ),
        }

    def overall_stats(
        self, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> dict[str, Any]:
        """The whole service: users, characters, sessions, rates, latencies, stop reasons."""
        s_where, s_params = window("s.start_ms", since_ms, until_ms)
        m_where, m_params = window("m.at_ms", since_ms, until_ms)
        sessions = self._row(
            f"SELECT {SESSION_COUNTS}, count(DISTINCT s.user_id) AS users, "
            f"count(DISTINCT s.character_id) AS characters FROM sessions s WHERE 1{s_where}",
            s_params,
        )
        stored = self._row(f"SELECT {MESSAGE_COUNTS} FROM messages m WHERE 1{m_where}", m_params)
        by_status = self._all(
            f"SELECT s.status, count(*) AS n FROM sessions s WHERE 1{s_where} GROUP BY s.status",
            s_params,
        )
        reasons = self._all(
            f"SELECT coalesce(s.stop_reason, '') AS reason, count(*) AS n FROM sessions s "
            f"WHERE s.stop_reason IS NOT NULL{s_where} GROUP BY reason ORDER BY n DESC, reason",
            s_params,
        )
        top_characters = self._all(
            "SELECT s.character_id, count(DISTINCT s.user_id) AS active_users, count(*) AS sessions, "
            "coalesce(sum(s.message_count), 0) AS messages, "
            f"coalesce(sum({TALK_MS}), 0) AS talk_ms FROM sessions s WHERE 1{s_where} "
            "GROUP BY s.character_id ORDER BY active_users DESC, sessions DESC, s.character_id LIMIT ?",
            (*s_params, TOP),
        )
        return {
            "window": {"since_ms": since_ms, "until_ms": until_ms},
            "users": sessions["users"],
            "characters": sessions["characters"],
            "sessions": sessions["sessions"],
            "sessions_by_status": {row["status"]: row["n"] for row in by_status},
            "stop_reasons": {row["reason"]: row["n"] for row in reasons},
            "messages": sessions["messages"],
            **message_rates(stored),
            "talk_ms": sessions["talk_ms"],
            "minutes_talked": minutes(sessions["talk_ms"]),
            "last_active_ms": last_active(sessions["last_session_ms"], stored["last_message_ms"]),
            "agent_errors": sessions["agent_errors"],
            "top_characters": [
                {**row, "minutes_talked": minutes(row["talk_ms"])} for row in top_characters
            ],
            "latency_ms": self.latency_percentiles(since_ms=since_ms, until_ms=until_ms),
        }


def _parsed(value: str | None) -> Any:
    """Stored JSON as a value; text that is not JSON as it is."""
    if not value:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value  # kept as stored


class ExportReads:
    """Everything held about one user, as plain rows; mixed into `SQLiteView`."""

    conn: sqlite3.Connection

    if TYPE_CHECKING:

        def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

    def export_user(self, user_id: str) -> dict[str, Any] | None:
        """One consistent snapshot of a user's sessions, messages, summaries, facts and more."""
        began = not self.conn.in_transaction
        if began:
            # One read transaction: every table is seen at the same commit.
            self.conn.execute("BEGIN")
        try:
            return self._export(user_id)
        finally:
            if began:
                self.conn.execute("COMMIT")

    def _export(self, user_id: str) -> dict[str, Any] | None:
        """The export's reads, inside the caller's read transaction."""
        sessions = self._all(
            "SELECT * FROM sessions WHERE user_id = ? ORDER BY start_ms, agent_id", (user_id,)
        )
        messages = self._all(
            "SELECT id, agent_id, character_id, seq, role, content, turn_id, ts_ms, at_ms, source, "
            "speaker, interrupted, interrupt_ms, original, gap_before, extra, created_ms "
            "FROM messages WHERE user_id = ? ORDER BY character_id, at_ms, seq, id",
            (user_id,),
        )
        facts = self._all(
            "SELECT id, character_id, text, pinned, origin, created_ms, updated_ms FROM facts "
            "WHERE user_id = ? ORDER BY character_id, created_ms, id",
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
        if not (sessions or messages or facts or summaries or bindings):
            return None
        agent_ids = [row["agent_id"] for row in sessions]
        jobs = self._all(
            "SELECT kind, character_id, status, due_ms, pending_messages, attempts, last_error, "
            "created_ms, updated_ms FROM jobs WHERE user_id = ? ORDER BY character_id, kind",
            (user_id,),
        )
        watched = list(
            self._per_agent("SELECT * FROM watched_agents WHERE agent_id IN ({})", agent_ids)
        )
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
        for row in sessions:
            row["labels"] = _parsed(row["labels"])
        for row in messages:
            row["interrupted"] = bool(row["interrupted"])
            row["gap_before"] = bool(row["gap_before"])
            row["extra"] = _parsed(row["extra"])
        for row in facts:
            row["scope"] = "user" if row["character_id"] == "" else "character"
            row["pinned"] = bool(row["pinned"])
        for row in summaries:
            row["meta"] = _parsed(row["meta"])
        for row in watched:
            row["base_system_messages"] = _parsed(row["base_system_messages"])
            row["last_pushed"] = _parsed(row["last_pushed"])
        for row in raw:
            row["body"] = _parsed(row["body"])
        characters = sorted(
            {row["character_id"] for row in (*sessions, *messages, *summaries)}
            | {row["character_id"] for row in facts if row["character_id"]}
        )
        return {
            "user_id": user_id,
            "characters": characters,
            "counts": {
                "sessions": len(sessions), "messages": len(messages), "facts": len(facts),
                "summaries": len(summaries), "bindings": len(bindings), "jobs": len(jobs),
                "followed_agents": len(watched), "metrics": len(metrics), "raw_callbacks": len(raw),
            },
            "sessions": sessions,
            "messages": messages,
            "summaries": summaries,
            "facts": facts,
            "bindings": bindings,
            "jobs": jobs,
            "followed_agents": watched,
            "metrics": metrics,
            "raw_callbacks": raw,
        }  # fmt: skip

    def _per_agent(self, sql: str, agent_ids: Sequence[str]) -> Iterable[dict[str, Any]]:
        """Run `sql` (with an `IN ({})`) over agent ids in chunks below SQLite's variable limit."""
        for start in range(0, len(agent_ids), 500):
            chunk = agent_ids[start : start + 500]
            yield from self._all(sql.format(", ".join("?" for _ in chunk)), chunk)


class AnalyticsWrites:
    """Recording 111 metrics; mixed into `SQLiteTransaction`."""

    conn: sqlite3.Connection

    def record_agent_metrics(self, agent_id: str, turns: Any, at_ms: int) -> int:
        """Keep each turn's latencies of a 111 callback; a resent turn replaces its values."""
        rows = metric_rows(turns)
        self.conn.executemany(
            "INSERT OR REPLACE INTO agent_metrics (agent_id, turn_id, metric, value_ms, at_ms) "
            "VALUES (?, ?, ?, ?, ?)",
            [(agent_id, turn_id, metric, value, at_ms) for turn_id, metric, value in rows],
        )
        return len(rows)
