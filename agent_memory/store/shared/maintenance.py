"""What forget clears and what retention keeps, table by table, whichever backend holds them; each
backend lists the rest of its schema as `NOT_HELD` and makes the deletion real in its own files."""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agent_memory.core.clock import now_ms
from agent_memory.core.search import SearchKind
from agent_memory.store.shared.inbox import BLANK
from agent_memory.store.shared.sql import LockedRead, Repository, Row, pair_scope
from agent_memory.store.types import ForgetCutoff, ForgetReceipt, PurgeStep, SearchState, StorageStats


@dataclass(frozen=True)
class Held:
    """A table holding users' data: what a forget receipt calls it, and how its rows are found."""

    receipt: str
    table: str
    # pair: by user_id (and character_id); agent: by the forgotten sessions' agent ids;
    # raw: raw events, by agent id or by the labels they carried (blanked, not deleted).
    by: Literal["pair", "agent", "raw"]


# Every table that holds what a user said, or what was learned or recorded about them, in the
# order forget clears them (watches and metrics are found through the sessions' agent ids,
# read before the sessions go). A table added to the schema belongs here or in a backend's NOT_HELD.
HELD: tuple[Held, ...] = (
    # Before messages, whose trigger would otherwise take them uncounted.
    Held("embeddings", "message_vectors", "pair"),
    Held("messages", "messages", "pair"),
    Held("fact_history", "fact_history", "pair"),  # the texts facts had, and facts that ended
    Held("facts", "facts", "pair"),  # a pair's forget: user-wide facts are not the pair's
    Held("summaries", "summaries", "pair"),
    Held("jobs", "jobs", "pair"),
    Held("followed_agents", "watched_agents", "agent"),
    Held("sessions", "sessions", "pair"),
    Held("bindings", "bindings", "pair"),
    Held("channel_bindings", "channel_bindings", "pair"),
    Held("llm_routes", "llm_routes", "pair"),
    Held("raw_callbacks", "inbox", "raw"),
    Held("metrics", "agent_metrics", "agent"),
    # Last: the deletes above bumped the pair's change counter.
    Held("memory_versions", "memory_versions", "pair"),
)
# The tables whose text search indexes: a forget receipt counts their rows as index rows too.
SEARCH_INDEXED = ("messages", "facts", "summaries")
KEEP_INBOX_STATUSES = ("received", "failed", "partial")  # not yet applied, or to be reprocessed
# The tables `counts` reports.
COUNTED = ("messages", "sessions", "facts", "summaries", "jobs", "inbox")


# The table of forget cut-offs (hashes only, never forgotten); also when each pair's learned
# memory was last reset (`mark_reset`), under keys of their own kind.
FORGETS = "forgets"
# Tables of the service's own that hold no user's data, on every backend: its keys, operator
# sign-ins (token and key by hash), and when users were forgotten (by hash: what makes a forget
# final). A backend's NOT_HELD lists them with its own bookkeeping; migrate-db copies them.
SERVICE = ("api_keys", "console_sessions", FORGETS)
# PostgreSQL's advisory lock seeds (sessions' are 0, inbox events' 1): a user's, which a forget
# holds exclusively and every merge shared while it checks the cut-off and writes; a pair's reset mark.
USER_LOCK_SEED = 2
RESET_LOCK_SEED = 3
# The forgets row every forget moves on (its own kind of key, no hash of anyone): another process
# sharing the database drops what it holds of remembered text when it sees it move.
LAST_FORGET = "last-forget"
# A pair's covered messages said before a time.
_AGED = "SELECT id FROM messages WHERE user_id = ? AND character_id = ? AND at_ms < ? AND id <= ? LIMIT ?"
_FORGET_CUTOFF = (
    "SELECT max(forgot_ms) AS at, max(CASE WHEN key = ? THEN 1 ELSE 0 END) AS run "
    f"FROM {FORGETS} WHERE key IN (?, ?, ?)"
)


def forgotten_keys(user_id: str, character_id: str | None, agent_ids: Sequence[str] = ()) -> list[str]:
    """The keys a forget of a pair (or of a user) records its cut-off under: its own and each
    forgotten agent run's (a window of one names no user once its session is gone)."""
    owner = _digest("user", user_id) if character_id is None else _digest("pair", user_id, character_id)
    return [owner, *(_digest("agent", agent_id) for agent_id in agent_ids)]


def cutoff_keys(user_id: str, character_id: str, agent_id: str | None = None) -> tuple[str, str, str]:
    """The user's, the pair's and the run's ('' without one) keys: the cut-offs binding a write."""
    run = "" if agent_id is None else _digest("agent", agent_id)
    return _digest("user", user_id), _digest("pair", user_id, character_id), run


def _digest(*parts: str) -> str:
    """Hashes, not ids: a cut-off outlives the forget, and keeps no one's id in the clear."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class Maintenance(Repository):
    """The database's figures, when a user, pair or agent run was last forgotten, and what both
    backends forget and purge alike (purges in bounded steps); a purge removes a message only when
    its pair's committed summary covers it (its id at or below the watermark)."""

    def counts(self) -> dict[str, int]:
        """Rows held of each main kind (messages, sessions, facts, summaries, jobs, inbox)."""
        return {table: self.sql.count(f"SELECT count(*) FROM {table}") for table in COUNTED}

    @abstractmethod
    def schema(self) -> list[str]:
        """The migrations the database has, in order."""

    @abstractmethod
    def storage_stats(self) -> StorageStats:
        """The database's size, and how much of it could be given back."""

    @abstractmethod
    def search_state(self) -> SearchState:
        """What the search index still owes a forget, and how far recall has indexed."""

    def last_forget(self) -> int:
        """A number that moves on with every forget, by any process (0: none yet)."""
        row = self.sql.one(f"SELECT forgot_ms FROM {FORGETS} WHERE key = ?", (LAST_FORGET,))
        return 0 if row is None else int(row["forgot_ms"])

    def forget_cutoff(
        self, user_id: str, character_id: str, agent_id: str | None = None
    ) -> ForgetCutoff | None:
        """When the pair, its user or the agent run was last forgotten (None: never); on a shared
        database under the user's lock shared, so a forget under way is waited for."""
        key, seed, sql, params, shared = self.cutoff_read(user_id, character_id, agent_id)
        return self.cutoff_from(self.sql.locked(key, seed, sql, params, shared=shared))

    @staticmethod
    def cutoff_read(user_id: str, character_id: str, agent_id: str | None = None) -> LockedRead:
        """`forget_cutoff`'s read, under the user's lock shared, to send with others (`Sql.locked_each`)."""
        user, pair, run = cutoff_keys(user_id, character_id, agent_id)
        return user_id, USER_LOCK_SEED, _FORGET_CUTOFF, (run, user, pair, run), True

    @staticmethod
    def cutoff_from(row: Row | None) -> ForgetCutoff | None:
        """The cut-off a `cutoff_read` row holds."""
        return None if row is None or row["at"] is None else ForgetCutoff(int(row["at"]), bool(row["run"]))

    def forget(self, user_id: str, character_id: str | None) -> ForgetReceipt:
        """Delete everything held for a pair (its user's user-wide facts stay), or a user (None),
        and record the forget's cut-off; `Store.checkpoint` then makes it reach the file."""
        where, params = pair_scope(user_id, character_id)
        agent_ids = self._sessions(where, params, user_id)
        # The cut-off every later write checks (ingest's merge, condensing): what was said before
        # it never comes back, from a held reply, a poll, a late callback or a reprocess.
        forgot_ms = now_ms()
        self._stamp(forgotten_keys(user_id, character_id, agent_ids), forgot_ms)
        receipt: ForgetReceipt = {}
        for held in HELD:
            if held.by == "pair":
                deleted = self.sql.run(f"DELETE FROM {held.table} WHERE {where}", params)
            elif held.by == "agent":
                deleted = self._by_agent(f"DELETE FROM {held.table}", agent_ids)
            else:
                # Blanked: the event id stays, so a redelivery is still recognised, but its text
                # goes; those of the forgotten sessions, and those labelled with the user (or pair).
                labelled = (
                    "label_user = ?" if character_id is None else "label_user = ? AND label_character = ?"
                )
                deleted = self._by_agent(BLANK, agent_ids, " AND status <> 'forgotten'") + self.sql.run(
                    f"{BLANK} WHERE {labelled} AND status <> 'forgotten'", params
                )
            receipt[held.receipt] = deleted
        receipt["search_index_rows"] = indexed = sum(receipt[table] for table in SEARCH_INDEXED)
        receipt["search_index_scrub_pending"] = int(self._forgot(where, params, indexed))
        # Last: the row is every forget's, and held from here until the commit.
        self._stamp([LAST_FORGET], forgot_ms, " + 1")
        return receipt

    def _stamp(self, keys: Sequence[str], at_ms: int, later: str = "") -> None:
        """Move each key's time on to `at_ms` (`later`: past its own, too)."""
        self.sql.many(
            f"INSERT INTO {FORGETS} AS f (key, forgot_ms) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
            f"forgot_ms = {self.sql.greatest}(f.forgot_ms{later}, excluded.forgot_ms)",
            [(key, at_ms) for key in keys],
        )

    def _by_agent(self, statement: str, agent_ids: Sequence[str], also: str = "") -> int:
        """`statement` on the rows of these agent runs (`also` holding); how many it changed."""
        return sum(
            self.sql.run(f"{statement} WHERE {among}{also}", values)
            for among, values in self.sql.chunks("agent_id", agent_ids)
        )

    @abstractmethod
    def _sessions(self, where: str, params: Sequence[str], user_id: str) -> list[str]:
        """The agent ids of the sessions a forget deletes, read once no merge can write to them."""

    @abstractmethod
    def _forgot(self, where: str, params: Sequence[str], indexed: int) -> bool:
        """Drop the pairs' index upkeep; make the `indexed` rows' text leave the files (or owe it: True)."""

    def mark_reset(self, user_id: str, character_id: str) -> None:
        """Record that the pair's learned memory is rebuilt from now (a session's words left it): a
        condense that read the pair before drops its result (`reset_at`)."""
        key = _digest("reset", user_id, character_id)
        # Under the lock a condense's commit reads the mark under: it waits for this commit.
        self.sql.locked(key, RESET_LOCK_SEED, "SELECT 1 AS held")
        self._stamp([key], now_ms())

    def reset_at(self, user_id: str, character_id: str) -> int | None:
        """When the pair's learned memory was last reset (None: never); a reset under way is waited for."""
        key = _digest("reset", user_id, character_id)
        row = self.sql.locked(key, RESET_LOCK_SEED, f"SELECT forgot_ms FROM {FORGETS} WHERE key = ?", (key,))
        return None if row is None else int(row["forgot_ms"])

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
        """Delete up to `budget` covered messages beyond the pairs' limits, pair by pair after `after`."""
        if not keep_latest and not max_age_ms:
            return PurgeStep(0, None, True)
        where, params = ("", ()) if after is None else (" WHERE (user_id, character_id) > (?, ?)", after)
        pairs = self.sql.records(
            lambda *pair: pair,
            f"SELECT user_id, character_id, watermark_id FROM summaries{where} ORDER BY user_id, character_id LIMIT ?",
            (*params, pairs_per_call),
        )
        # "Latest" as the context builder reads them: by time, then position.
        older = (
            "SELECT id FROM (SELECT id FROM messages WHERE user_id = ? AND character_id = ? "
            f"ORDER BY at_ms DESC, seq DESC {self.sql.no_limit} OFFSET ?) AS older WHERE id <= ? LIMIT ?"
        )
        deleted, resume, done = 0, after, len(pairs) < pairs_per_call
        for user, character, watermark_id in pairs:
            key = (user, character)
            room = budget - deleted
            limit_id = watermark_id or 0
            ids: set[int] = set()
            if max_age_ms:
                ids.update(self.sql.records(int, _AGED, (*key, now_ms - max_age_ms, limit_id, room + 1)))
            if keep_latest:
                ids.update(self.sql.records(int, older, (*key, keep_latest, limit_id, room + 1)))
            chosen = sorted(ids)[:room]
            if chosen:
                for among, values in self.sql.chunks("id", chosen):
                    self.sql.run(f"DELETE FROM messages WHERE {among}", values)
                self.sql.bump([key])
            deleted += len(chosen)
            if len(ids) > room:
                done = False  # this pair has more: the next call starts with it again
                break
            resume = key
            if deleted >= budget:
                done = False
                break
        self._purged(deleted)
        return PurgeStep(deleted, resume, done)

    def _purged(self, messages: int) -> None:
        """Note messages a purge deleted (a backend whose search index keeps them until a merge)."""

    def purge_raw_events(self, *, older_than_ms: int, budget: int) -> int:
        """Delete up to `budget` processed raw events received before `older_than_ms`."""
        deleted = 0
        for status in self._inbox_statuses():
            if status in KEEP_INBOX_STATUSES or deleted >= budget:
                continue
            deleted += self.sql.run(
                "DELETE FROM inbox WHERE notice_id IN (SELECT notice_id FROM inbox "
                "WHERE status = ? AND received_ms < ? LIMIT ?)",
                (status, older_than_ms, budget - deleted),
            )
        return deleted

    def _inbox_statuses(self) -> list[str]:
        """The distinct statuses, one index probe each (no full scan)."""
        return self.sql.records(
            str,
            "WITH RECURSIVE s AS (SELECT min(status) AS status FROM inbox UNION ALL "
            "SELECT (SELECT min(status) FROM inbox WHERE status > s.status) FROM s WHERE s.status IS NOT NULL) "
            "SELECT status FROM s WHERE status IS NOT NULL",
        )

    def purge_metrics(self, *, older_than_ms: int, budget: int) -> int:
        """Delete up to `budget` per-turn metrics recorded before `older_than_ms`."""
        return self.sql.run(
            "DELETE FROM agent_metrics WHERE (agent_id, turn_id, metric) IN "
            "(SELECT agent_id, turn_id, metric FROM agent_metrics WHERE at_ms < ? LIMIT ?)",
            (older_than_ms, budget),
        )

    def merge_search_index(self, kind: SearchKind, pages: int) -> bool:
        """One bounded step of rewriting an index without its deleted entries; False when nothing is
        left to merge (PostgreSQL's indexes have no segments: its `scrub` rewrites)."""
        return False

    def search_scrubbed(self, owed: int, dead_rows: int) -> None:
        """A full merge finished: what was owed when it began is paid."""

    def reclaim_space(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; how many (PostgreSQL: none)."""
        return 0
