"""Forgetting, retention and space: what makes deletion real and keeps the database bounded.

Every retention step does a bounded amount of work so that `agent_memory.memory.retention`
can run each in its own short write transaction and the writer is never held for long.
The rule that protects memory: a message is removed only when its id is at or below its
pair's summary watermark, i.e. a committed summary covers it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agent_memory.core.clock import now_ms
from agent_memory.store.shared.maintenance import (
    FORGETS,
    HELD,
    SEARCH_INDEXED,
    Purges,
    cutoff_keys,
    forgotten_keys,
)
from agent_memory.store.sqlite.common import CHUNK, Repository, marks
from agent_memory.store.sqlite.search import SearchIndex
from agent_memory.store.types import (
    ForgetCutoff,
    ForgetReceipt,
    SearchKind,
    SearchState,
    StorageStats,
)

# The schema's tables outside HELD: they hold no user's data of their own. The search indexes
# mirror messages, facts and summaries by trigger; forget drops the user's pair tokens and
# scrubs the indexes.
NOT_HELD = (
    "_sqlite_migrations",
    "sqlite_sequence",
    "search_state",
    "search_pairs",
    # The recall index's documents follow messages by trigger, like the FTS indexes; the
    # rest are per-pair counts, message ids waiting to be indexed, and views of the index.
    "recall_docs",
    "recall_pairs",
    "recall_pending",
    "recall_terms",
    "memory_clock",
    "api_keys",  # the service's own keys
    "console_sessions",  # operator sign-ins: token and key by hash, no user's data
    FORGETS,  # when users were forgotten, by hash: what makes a forget final
)
# A forget optimizes the search index on the spot while the index is this small (rows of
# its segment tables, about a page each: ~16 MB, ~80k messages, a few hundred ms); above
# it the retention job scrubs the index in short merge steps shortly afterwards.
INLINE_SCRUB_MAX_ROWS = 4000
NO_SHRINK_ADVICE = (
    "the database was created without auto_vacuum: freed pages are reused but the file does "
    "not shrink; run `PRAGMA auto_vacuum=INCREMENTAL; VACUUM;` once while the service is stopped"
)


class SQLiteMaintenance(Purges, Repository):
    """Forget, bounded purges, the search index's upkeep and giving space back."""

    __slots__ = ("index",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.index = SearchIndex(conn)

    # figures

    def schema(self) -> list[str]:
        """The migrations the database has, in order."""
        return [row[0] for row in self.conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")]

    def storage_stats(self) -> StorageStats:
        """Size of the database file, SQLite's page counts and its auto-vacuum mode (2: incremental)."""
        pragma = {
            name: self._count(f"PRAGMA {name}")
            for name in ("page_size", "page_count", "freelist_count", "auto_vacuum")
        }
        return {
            "bytes": pragma["page_size"] * pragma["page_count"],
            "advice": None if pragma["auto_vacuum"] == 2 else NO_SHRINK_ADVICE,
            "page_size": pragma["page_size"],
            "page_count": pragma["page_count"],
            "freelist_count": pragma["freelist_count"],
            "auto_vacuum": pragma["auto_vacuum"],
        }

    def search_state(self) -> SearchState:
        return self.index.state()

    def forget_cutoff(
        self, user_id: str, character_id: str, agent_id: str | None = None
    ) -> ForgetCutoff | None:
        """When the pair, its whole user or the agent run was last forgotten, None if never."""
        user, pair, run = cutoff_keys(user_id, character_id, agent_id)
        row = self.conn.execute(
            f"SELECT max(forgot_ms), max(key = ?) FROM {FORGETS} WHERE key IN (?, ?, ?)",
            (run, user, pair, run),
        ).fetchone()
        return None if row is None or row[0] is None else ForgetCutoff(int(row[0]), bool(row[1]))

    # forgetting

    def forget(self, user_id: str, character_id: str | None) -> ForgetReceipt:
        """Delete everything held for a pair, or for a user when `character_id` is None."""
        where = "user_id = ?" if character_id is None else "user_id = ? AND character_id = ?"
        params: tuple[str, ...] = (user_id,) if character_id is None else (user_id, character_id)
        agent_ids = [
            row[0] for row in self.conn.execute(f"SELECT agent_id FROM sessions WHERE {where}", params)
        ]
        # The cut-off every later write checks (ingest's merge, condensing): what was said before
        # it never comes back, from a held reply, a poll, a late callback or a reprocess.
        forgot_ms = now_ms()
        self.conn.executemany(
            f"INSERT INTO {FORGETS} (key, forgot_ms) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET forgot_ms = max(forgot_ms, excluded.forgot_ms)",
            [(key, forgot_ms) for key in forgotten_keys(user_id, character_id, agent_ids)],
        )
        receipt: ForgetReceipt = {}
        for held in HELD:
            if held.by == "pair":
                deleted = self.conn.execute(f"DELETE FROM {held.table} WHERE {where}", params).rowcount
            elif held.by == "agent":
                deleted = self._delete_by_agent(held.table, agent_ids)
            else:
                deleted = self._blank_raw(user_id, character_id, agent_ids)
            receipt[held.receipt] = deleted
        self.index.drop_pairs(user_id, character_id)
        # The triggers removed one index entry per deleted message, fact and summary; each
        # stays in its old index segment until that segment is merged.
        indexed = sum(receipt[table] for table in SEARCH_INDEXED)
        pending = 0
        if indexed:
            if sum(self.index.size().values()) <= INLINE_SCRUB_MAX_ROWS:
                self.index.optimize()
            else:
                self.index.note_dead_rows(indexed)
                self.index.owe_scrub()
                pending = 1
        receipt["search_index_rows"] = indexed
        receipt["search_index_scrub_pending"] = pending
        return receipt

    def _delete_by_agent(self, table: str, agent_ids: Sequence[str]) -> int:
        deleted = 0
        for start in range(0, len(agent_ids), CHUNK):
            chunk = agent_ids[start : start + CHUNK]
            deleted += self.conn.execute(
                f"DELETE FROM {table} WHERE agent_id IN ({marks(len(chunk))})", chunk
            ).rowcount
        return deleted

    def _blank_raw(self, user_id: str, character_id: str | None, agent_ids: Sequence[str]) -> int:
        """Blank the raw events of the forgotten sessions and those labelled with the user (or
        pair): the event id stays, so a redelivery is still recognised, but its text goes."""
        blank = "UPDATE inbox SET body = '', status = 'forgotten', error = NULL WHERE "
        blanked = 0
        for start in range(0, len(agent_ids), CHUNK):
            chunk = agent_ids[start : start + CHUNK]
            blanked += self.conn.execute(
                blank + f"agent_id IN ({marks(len(chunk))}) AND status != 'forgotten'", chunk
            ).rowcount
        labelled, params = (
            ("label_user = ?", (user_id,))
            if character_id is None
            else ("label_user = ? AND label_character = ?", (user_id, character_id))
        )
        blanked += self.conn.execute(blank + labelled + " AND status != 'forgotten'", params).rowcount
        return blanked

    # retention

    def _purged(self, messages: int) -> None:
        self.index.note_dead_rows(messages)

    # the search index

    def merge_search_index(self, kind: SearchKind, pages: int) -> bool:
        """Merge about `pages` pages of one index; False when it already is one segment."""
        return self.index.merge_step(kind, pages)

    def search_scrubbed(self, owed: int, dead_rows: int) -> None:
        """A full merge finished: what was owed when it began is paid."""
        self.index.scrubbed(owed, dead_rows)

    # space

    def reclaim_space(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; returns how many."""
        free = self._count("PRAGMA freelist_count")
        for _ in range(min(free, pages)):
            # Python's sqlite3 steps a PRAGMA once, and each step frees one page.
            self.conn.execute("PRAGMA incremental_vacuum(1)")
        return free - self._count("PRAGMA freelist_count")
