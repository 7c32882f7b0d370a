"""Retention and physical deletion: bounded purges, search-index scrubbing, space reclaiming.

Every method here does a bounded amount of work so that `agent_memory.memory.retention` can run
each in its own short write transaction and the writer is never held for long.

The rule that protects memory: a message is removed only when its id is at or below its
pair's summary watermark, i.e. a committed summary covers it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_memory.store.sqlite.search import SOURCES

KEEP_INBOX_STATUSES = ("received", "failed", "partial")  # not yet applied, or to be reprocessed
DELETE_CHUNK = 500  # ids per DELETE ... IN (...), below SQLite's variable limit
# A forget optimizes the search index on the spot while the index is this small (rows of
# its segment tables, about a page each: ~16 MB, ~80k messages, a few hundred ms); above
# it the retention job scrubs the index in short merge steps shortly afterwards.
INLINE_SCRUB_MAX_ROWS = 4000
STRUCTURE_ROWID = 10  # FTS5 keeps its segment structure in this row of %_data


@dataclass(frozen=True)
class PurgeStep:
    """What one bounded message purge did, and where the next one resumes."""

    deleted: int
    resume_after: tuple[str, str] | None
    done: bool


class RetentionReads:
    """Storage figures; mixed into `SQLiteView`."""

    conn: sqlite3.Connection

    def storage_stats(self) -> dict[str, int]:
        """Page size and counts of the database file, and its auto-vacuum mode (2: incremental)."""
        pragma = {
            name: int(self.conn.execute(f"PRAGMA {name}").fetchone()[0])
            for name in ("page_size", "page_count", "freelist_count", "auto_vacuum")
        }
        pragma["bytes"] = pragma["page_size"] * pragma["page_count"]
        return pragma


class RetentionWrites:
    """Purges, scrubbing and vacuuming; mixed into `SQLiteTransaction`."""

    conn: sqlite3.Connection

    if TYPE_CHECKING:

        def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...

        def search_index_size(self) -> dict[str, int]: ...

    # messages

    def purge_messages(
        self,
        *,
        after: tuple[str, str] | None,
        now_ms: int,
        keep_latest: int,
        max_age_ms: int,
        budget: int,
        pairs_per_call: int = 500,
    ) -> PurgeStep:
        """Delete up to `budget` covered messages beyond the pairs' limits, pair by pair in key
        order after `after`; only pairs with a summary can have covered messages."""
        if not keep_latest and not max_age_ms:
            return PurgeStep(0, None, True)
        where, params = (
            ("", ()) if after is None else (" WHERE (user_id, character_id) > (?, ?)", after)
        )
        pairs = self._all(
            f"SELECT user_id, character_id, watermark_id FROM summaries{where} "
            "ORDER BY user_id, character_id LIMIT ?",
            (*params, pairs_per_call),
        )
        deleted, resume, done = 0, after, len(pairs) < pairs_per_call
        for pair in pairs:
            key = (pair["user_id"], pair["character_id"])
            room = budget - deleted
            limit_id = pair["watermark_id"] or 0  # ids are never reused (AUTOINCREMENT)
            ids: set[int] = set()
            if max_age_ms:
                ids.update(
                    row[0]
                    for row in self.conn.execute(
                        "SELECT id FROM messages WHERE user_id = ? AND character_id = ? "
                        "AND at_ms < ? AND id <= ? LIMIT ?",
                        (*key, now_ms - max_age_ms, limit_id, room + 1),
                    )
                )
            if keep_latest:
                # "Latest" as the context builder reads them: by time, then position.
                ids.update(
                    row[0]
                    for row in self.conn.execute(
                        "SELECT id FROM (SELECT id FROM messages WHERE user_id = ? "
                        "AND character_id = ? ORDER BY at_ms DESC, seq DESC LIMIT -1 OFFSET ?) "
                        "WHERE id <= ? LIMIT ?",
                        (*key, keep_latest, limit_id, room + 1),
                    )
                )
            chosen = sorted(ids)[:room]
            self._delete_ids("messages", "id", chosen)
            deleted += len(chosen)
            if len(ids) > room:
                done = False  # this pair has more: the next call starts with it again
                break
            resume = key
            if deleted >= budget:
                done = False
                break
        self.note_dead_search_rows(deleted)
        return PurgeStep(deleted, resume, done)

    def _delete_ids(self, table: str, key: str, ids: Sequence[int]) -> None:
        """Delete rows by key in chunks below SQLite's variable limit."""
        for start in range(0, len(ids), DELETE_CHUNK):
            chunk = ids[start : start + DELETE_CHUNK]
            self.conn.execute(
                f"DELETE FROM {table} WHERE {key} IN ({', '.join('?' for _ in chunk)})", chunk
            )

    # raw callbacks and metrics

    def purge_raw_callbacks(self, *, older_than_ms: int, budget: int) -> int:
        """Delete up to `budget` processed raw callbacks received before `older_than_ms`."""
        deleted = 0
        for status in self._inbox_statuses():
            if status in KEEP_INBOX_STATUSES or deleted >= budget:
                continue
            deleted += self.conn.execute(
                "DELETE FROM inbox WHERE rowid IN (SELECT rowid FROM inbox "
                "WHERE status = ? AND received_ms < ? LIMIT ?)",
                (status, older_than_ms, budget - deleted),
            ).rowcount
        return deleted

    def _inbox_statuses(self) -> list[str]:
        """The distinct statuses, one index probe each (no full scan)."""
        statuses: list[str] = []
        while True:
            row = self.conn.execute(
                "SELECT min(status) FROM inbox WHERE status > ?",
                (statuses[-1] if statuses else "",),
            ).fetchone()
            if row[0] is None:
                return statuses
            statuses.append(row[0])

    def purge_metrics(self, *, older_than_ms: int, budget: int) -> int:
        """Delete up to `budget` per-turn metrics recorded before `older_than_ms`."""
        return self.conn.execute(
            "DELETE FROM agent_metrics WHERE (agent_id, turn_id, metric) IN "
            "(SELECT agent_id, turn_id, metric FROM agent_metrics WHERE at_ms < ? LIMIT ?)",
            (older_than_ms, budget),
        ).rowcount

    # the search index

    def note_dead_search_rows(self, count: int) -> None:
        """Count index entries deleted since the last full merge."""
        if count:
            self.conn.execute(
                "UPDATE search_state SET value = value + ? WHERE name = 'dead_rows'", (count,)
            )

    def search_merge_step(self, kind: str, pages: int) -> bool:
        """Merge about `pages` pages of one index towards a single segment; False when it
        already is one (then no deleted entry is left in it)."""
        fts = f"{SOURCES[kind].table}_fts"
        before = self._structure(fts)
        self.conn.execute(f"INSERT INTO {fts} ({fts}, rank) VALUES ('merge', ?)", (-pages,))
        return self._structure(fts) != before

    def _structure(self, fts: str) -> bytes | None:
        """The index's segment structure record, to tell whether a merge changed anything."""
        row = self.conn.execute(
            f"SELECT block FROM {fts}_data WHERE id = ?", (STRUCTURE_ROWID,)
        ).fetchone()
        return bytes(row[0]) if row else None

    def search_optimize(self) -> None:
        """Rewrite every index as one segment: deleted entries leave the file now."""
        for kind in SOURCES.values():
            fts = f"{kind.table}_fts"
            self.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
        self.conn.execute("UPDATE search_state SET value = 0")

    def search_scrubbed(self, owed: int, dead_rows: int) -> None:
        """A full merge finished: what was owed when it began is paid."""
        self.conn.execute(
            "UPDATE search_state SET value = max(0, value - CASE name WHEN 'scrub_owed' THEN ? "
            "WHEN 'dead_rows' THEN ? ELSE 0 END)",
            (owed, dead_rows),
        )

    # forgetting

    def forget_extras(
        self,
        user_id: str,
        character_id: str | None,
        agent_ids: Sequence[str],
        receipt: dict[str, int],
    ) -> dict[str, int]:
        """What forgetting must do beyond the tables' own deletes (run after them): the
        metrics of the forgotten agents, the pair tokens, and the deleted index entries."""
        metrics = 0
        for start in range(0, len(agent_ids), DELETE_CHUNK):
            chunk = agent_ids[start : start + DELETE_CHUNK]
            metrics += self.conn.execute(
                f"DELETE FROM agent_metrics WHERE agent_id IN ({', '.join('?' for _ in chunk)})",
                chunk,
            ).rowcount
        # The triggers removed one index entry per deleted message, fact and summary.
        indexed = receipt.get("messages", 0) + receipt.get("facts", 0) + receipt.get("summaries", 0)
        if character_id is None:
            self.conn.execute("DELETE FROM search_pairs WHERE user_id = ?", (user_id,))
        else:
            self.conn.execute(
                "DELETE FROM search_pairs WHERE user_id = ? AND character_id = ?",
                (user_id, character_id),
            )
        pending = 0
        if indexed:
            # A deleted entry stays in its old index segment until that segment is merged.
            if sum(self.search_index_size().values()) <= INLINE_SCRUB_MAX_ROWS:
                self.search_optimize()
            else:
                self.note_dead_search_rows(indexed)
                self.conn.execute(
                    "UPDATE search_state SET value = value + 1 WHERE name = 'scrub_owed'"
                )
                pending = 1
        return {
            "metrics": metrics,
            "search_index_rows": indexed,
            "search_index_scrub_pending": pending,
        }

    # space

    def incremental_vacuum(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; returns how many."""
        free = int(self.conn.execute("PRAGMA freelist_count").fetchone()[0])
        steps = min(free, pages)
        for _ in range(steps):
            # Python's sqlite3 steps a PRAGMA once, and each step frees one page.
            self.conn.execute("PRAGMA incremental_vacuum(1)")
        return free - int(self.conn.execute("PRAGMA freelist_count").fetchone()[0])
