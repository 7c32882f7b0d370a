"""Restoring an export: its records written back, each only if it is not held yet (a second import
changes nothing). Rows take the ids of the database they land in; what refers to an id is mapped
by the caller (memory/restore/) from the ids these writes answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_memory.core.facts import fact_key
from agent_memory.core.jsonutil import dumps
from agent_memory.store.shared.export import METRIC_COLUMNS, RAW_COLUMNS, SUMMARY_COLUMNS
from agent_memory.store.shared.sessions import SESSION_COLUMNS
from agent_memory.store.shared.sql import Repository

Record = Mapping[str, Any]
_SESSION_NAMES = tuple(SESSION_COLUMNS.split(", "))
SUMMARY_NAMES = ("user_id", *SUMMARY_COLUMNS.split(", "))
RAW_NAMES = tuple(RAW_COLUMNS.split(", "))
# What tells one past text of a fact from another, as its record names it.
_VERSION = ("character_id", "text", "valid_from", "valid_to", "change")


def _json_text(value: Any) -> str | None:
    """A parsed JSON value back as the text it was stored as (text that was not JSON, as it is)."""
    if value is None:
        return None
    return value if isinstance(value, str) else dumps(value)


class Restore(Repository):
    """Writes an export's records back, leaving what is already held as it is."""

    def session_owners(self, agent_ids: Sequence[str]) -> dict[str, str]:
        """Which user holds each of these agent runs' sessions (those held at all)."""
        return {
            row["agent_id"]: row["user_id"]
            for among, params in self.sql.chunks("agent_id", agent_ids)
            for row in self.sql.all(f"SELECT agent_id, user_id FROM sessions WHERE {among}", params)
        }

    def hold_session(self, agent_id: str) -> None:
        """Hold the agent run's lock until commit, as ingest's merge does (one writer needs none)."""
        self.sql.locked(agent_id, 0, "SELECT 1 AS held")

    def session(self, user_id: str, record: Record) -> int:
        """Insert a session unless its agent run is held (the caller left out another user's)."""
        values = {name: record.get(name) for name in _SESSION_NAMES}
        values["user_id"] = user_id
        values["labels"] = _json_text(values["labels"]) if values["labels"] else None
        for count in ("message_count", "gap_count", "error_count", "turns_truncated"):
            values[count] = int(values[count] or 0)
        return self.sql.insert_new("sessions", "agent_id", values)

    def held_messages(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The ids of the messages held at these (agent id, seq) places."""
        held: dict[tuple[str, int], int] = {}
        wanted = set(keys)
        by_agent: dict[str, list[int]] = {}
        for agent_id, seq in keys:
            by_agent.setdefault(agent_id, []).append(seq)
        for agent_id, seqs in by_agent.items():
            for row in self.sql.all(
                "SELECT seq, id FROM messages WHERE agent_id = ? AND seq >= ? AND seq <= ?",
                (agent_id, min(seqs), max(seqs)),
            ):
                if (agent_id, row["seq"]) in wanted:
                    held[(agent_id, row["seq"])] = row["id"]
        return held

    def summary_held(self, user_id: str, character_id: str) -> bool:
        held = "SELECT 1 AS held FROM summaries WHERE user_id = ? AND character_id = ?"
        return self.sql.one(held, (user_id, character_id)) is not None

    def summary(self, values: Record) -> int:
        """Insert a pair's summary unless the pair has one."""
        row = {name: values.get(name) for name in SUMMARY_NAMES}
        row["meta"] = _json_text(row["meta"])
        return self.sql.insert_new("summaries", "user_id, character_id", row)

    def fact(self, user_id: str, record: Record) -> tuple[int, bool]:
        """The id of the fact saying this for its pair: inserted, or the one held (and False)."""
        character_id, text, created = record["character_id"], record["text"], record["created_ms"]
        key, updated = fact_key(text) or text, record.get("updated_ms") or created
        times = (created, updated, record.get("valid_from") or updated)
        row = self.sql.one(
            "INSERT INTO facts (user_id, character_id, text, norm, pinned, origin, created_ms, updated_ms, "
            "valid_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (user_id, character_id, norm) DO NOTHING RETURNING id",
            (user_id, character_id, text, key, int(bool(record.get("pinned"))), record.get("origin"), *times),
        )
        if row is not None:
            return int(row["id"]), True
        held = self.sql.one(
            "SELECT id FROM facts WHERE user_id = ? AND character_id = ? AND norm = ?",
            (user_id, character_id, key),
        )
        if held is None:  # the unique key matched nothing: cannot be, but say so rather than guess
            raise RuntimeError("a fact's key conflicted with no fact")
        return int(held["id"]), False

    def unused_fact_id(self) -> int:
        """An id no fact and no fact's history holds (for the history of a fact that ended)."""
        return 1 + self.sql.count(
            "SELECT coalesce(max(top), 0) FROM (SELECT max(id) AS top FROM facts "
            "UNION ALL SELECT max(fact_id) AS top FROM fact_history) AS tops"
        )

    def version_held(self, user_id: str, record: Record) -> int | None:
        """The fact id of the same text held over the same time (imported before), if any."""
        row = self.sql.one(
            "SELECT fact_id FROM fact_history WHERE user_id = ? AND character_id = ? AND text = ? "
            "AND valid_from = ? AND valid_to = ? AND change = ?",
            (user_id, *(record[name] for name in _VERSION)),
        )
        return None if row is None else int(row["fact_id"])

    def fact_version(self, user_id: str, fact_id: int, record: Record) -> int:
        """Insert one text a fact had, with when it held."""
        return self.sql.run(
            "INSERT INTO fact_history (fact_id, user_id, origin, character_id, text, valid_from, valid_to, "
            "change) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (fact_id, user_id, record.get("origin"), *(record[name] for name in _VERSION)),
        )

    def binding(self, user_id: str, record: Record) -> int:
        row = {"agent_id": record["agent_id"], "user_id": user_id, "character_id": record["character_id"]}
        return self.sql.insert_new("bindings", "agent_id", {**row, "created_ms": record.get("created_ms")})

    def channel_binding(self, user_id: str, record: Record) -> int:
        created = record.get("created_ms") or 0
        row = {"channel": record["channel"], "user_id": user_id, "character_id": record["character_id"]}
        row |= {"created_ms": created, "updated_ms": record.get("updated_ms") or created}
        return self.sql.insert_new("channel_bindings", "channel", row)

    def metric(self, record: Record) -> int:
        row = {name: record.get(name) for name in METRIC_COLUMNS.split(", ")}
        return self.sql.insert_new("agent_metrics", "agent_id, turn_id, metric", row)

    def raw_callback(self, record: Record) -> int:
        row = {name: record.get(name) for name in RAW_NAMES}
        row["body"] = _json_text(row["body"])
        return self.sql.insert_new("inbox", "notice_id", row)
