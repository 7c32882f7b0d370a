"""Forgetting, retention and space on SQLite: what makes deletion real in the file (the rest, and
the rules forget and retention keep, are store/shared/maintenance.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.search import SearchKind
from agent_memory.store.shared.maintenance import HELD, SERVICE, Maintenance
from agent_memory.store.sqlite.common import Repository
from agent_memory.store.types import SearchState, StorageStats

__all__ = ["HELD", "NOT_HELD", "SQLiteMaintenance"]

# The schema's tables outside HELD, holding no user's data of their own: the search and recall
# indexes follow messages by trigger (forget drops the pair tokens and scrubs the indexes), the
# rest are counts, message ids waiting to be indexed and views of the index.
NOT_HELD = (
    "_sqlite_migrations",
    "sqlite_sequence",
    "search_state",
    "search_pairs",
    "recall_docs",
    "recall_pairs",
    "recall_pending",
    "recall_terms",
    "memory_clock",
    *SERVICE,
)
# A forget optimizes the search index on the spot while it is this small (segment rows, a page
# each: ~16 MB, ~80k messages, a few hundred ms); above it retention scrubs it in merge steps.
INLINE_SCRUB_MAX_ROWS = 4000
# The FTS5 tables that hold each kind's text: messages have the trigram index for search
# and the word index for recall; facts and summaries are searched without one (m023).
INDEXES: dict[SearchKind, tuple[str, ...]] = {
    "message": ("messages_fts", "recall_fts"),
    "fact": (),
    "summary": (),
}
# FTS5 keeps its segment structure in this row of %_data.
STRUCTURE_ROWID = 10
NO_SHRINK_ADVICE = (
    "the database was created without auto_vacuum: freed pages are reused but the file does "
    "not shrink; run `PRAGMA auto_vacuum=INCREMENTAL; VACUUM;` once while the service is stopped"
)


class SQLiteMaintenance(Repository, Maintenance):
    """Forget, bounded purges, the search index's upkeep and giving space back."""

    # figures

    def schema(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")]

    def storage_stats(self) -> StorageStats:
        """Size of the database file, SQLite's page counts and its auto-vacuum mode (2: incremental)."""
        names = ("page_size", "page_count", "freelist_count", "auto_vacuum")
        pragma: Any = {name: self.sql.count(f"PRAGMA {name}") for name in names}
        advice = None if pragma["auto_vacuum"] == 2 else NO_SHRINK_ADVICE
        return {"bytes": pragma["page_size"] * pragma["page_count"], "advice": advice, **pragma}

    def search_state(self) -> SearchState:
        """What the search index owes: dead rows since the last merge, forgets to scrub."""
        values = dict(self.conn.execute("SELECT name, value FROM search_state").fetchall())
        state: Any = {name: values.get(name, 0) for name in SearchState.__annotations__}
        return state

    # forgetting

    def _sessions(self, where: str, params: Sequence[str], user_id: str) -> list[str]:
        # One writer: no merge runs beside the forget.
        return [row[0] for row in self.conn.execute(f"SELECT agent_id FROM sessions WHERE {where}", params)]

    def _forgot(self, where: str, params: Sequence[str], indexed: int) -> bool:
        # The pairs' owner tokens go; each index entry the triggers deleted stays in its old
        # segment until that segment is merged.
        self.conn.execute(f"DELETE FROM search_pairs WHERE {where}", params)
        if not indexed:
            return False
        if sum(self.index_size().values()) <= INLINE_SCRUB_MAX_ROWS:
            self.optimize()
            return False
        self._purged(indexed)
        self.conn.execute("UPDATE search_state SET value = value + 1 WHERE name = 'scrub_owed'")
        return True

    def _purged(self, messages: int) -> None:
        """Count index entries deleted since the last full merge."""
        if messages:
            self.conn.execute(
                "UPDATE search_state SET value = value + ? WHERE name = 'dead_rows'", (messages,)
            )

    # the search index

    def index_size(self) -> dict[str, int]:
        """Rows of each index's segment table (each about one page): what a full merge rewrites."""
        return {
            name: sum(self.sql.count(f"SELECT count(*) FROM {fts}_data") for fts in tables)
            for name, tables in INDEXES.items()
        }

    def merge_search_index(self, kind: SearchKind, pages: int) -> bool:
        """Merge about `pages` pages of a kind's indexes towards one segment each; False when each is."""
        changed = False
        for fts in INDEXES[kind]:
            before = self._structure(fts)
            self.conn.execute(f"INSERT INTO {fts} ({fts}, rank) VALUES ('merge', ?)", (-pages,))
            changed = changed or self._structure(fts) != before
        return changed

    def _structure(self, fts: str) -> bytes | None:
        """The index's segment structure record, to tell whether a merge changed anything."""
        row = self.conn.execute(f"SELECT block FROM {fts}_data WHERE id = ?", (STRUCTURE_ROWID,)).fetchone()
        return bytes(row[0]) if row else None

    def optimize(self) -> None:
        """Rewrite every index as one segment: deleted entries leave the file now."""
        for fts in (fts for tables in INDEXES.values() for fts in tables):
            self.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('optimize')")
        self.conn.execute("UPDATE search_state SET value = 0 WHERE name IN ('dead_rows', 'scrub_owed')")

    def search_scrubbed(self, owed: int, dead_rows: int) -> None:
        self.conn.execute(
            "UPDATE search_state SET value = max(0, value - CASE name WHEN 'scrub_owed' THEN ? "
            "WHEN 'dead_rows' THEN ? ELSE 0 END)",
            (owed, dead_rows),
        )

    # space

    def reclaim_space(self, pages: int) -> int:
        free = self.sql.count("PRAGMA freelist_count")
        for _ in range(min(free, pages)):
            # Python's sqlite3 steps a PRAGMA once, and each step frees one page.
            self.conn.execute("PRAGMA incremental_vacuum(1)")
        return free - self.sql.count("PRAGMA freelist_count")
