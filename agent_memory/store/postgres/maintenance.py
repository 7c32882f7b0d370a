"""Forgetting, retention and space on PostgreSQL: what makes deletion real in a shared database.

A deleted row's bytes stay in its page even after VACUUM, and an index (the trigram GIN index
above all) keeps the keys of deleted text. So a forget records each table it deleted from
(`scrub_owed`), and `scrub` (the store's checkpoint, after every forget and retention) rewrites
them with VACUUM FULL (new files for the table, its TOAST and indexes; the old ones truncated at
commit, unlinked at the CHECKPOINT after), once no snapshot or transaction that could still see
the deleted rows is open (the rewrite would copy them along). A large table's forgets are batched
within `SCRUB_BATCH_MS`. WAL, its archives and backups are the operator's (README: "Many
instances on PostgreSQL"). Retention's purges are bounded; autovacuum reclaims what they delete.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

import psycopg
from psycopg import errors, sql

from agent_memory.core.clock import now_ms
from agent_memory.store.postgres.common import Connection, Repository
from agent_memory.store.shared.maintenance import HELD, SERVICE, USER_LOCK_SEED, Maintenance
from agent_memory.store.types import SearchState, StorageStats

log = logging.getLogger(__name__)

# Beside HELD's tables, forget deletes the pairs' recall statistics; deleted messages take
# their recall documents with them (foreign key), so that table is rewritten too.
RECALL_PAIRS = "recall_pairs"
RECALL_DOCS = "recall_docs"
# The schema's tables outside HELD: those two, message ids waiting to be indexed (deleted with
# their messages), and the database's own bookkeeping. A new table belongs here or in HELD.
NOT_HELD = (
    RECALL_PAIRS,
    RECALL_DOCS,
    "recall_pending",
    "agent_memory_migrations",
    "store_state",
    "leases",
    "scrub_owed",
    *SERVICE,
)
# A table up to this size (with its TOAST and indexes) is rewritten by the scrub right after
# the forget: a few seconds under its lock. A larger one is rewritten once its oldest owed
# forget is `SCRUB_BATCH_MS` old, so that many forgets cost one rewrite.
INLINE_SCRUB_MAX_BYTES = 64 * 1024 * 1024
SCRUB_BATCH_MS = 5 * 60_000
# How long a scrub waits for snapshots older than the forget (which VACUUM FULL would keep
# the deleted rows for) to end, and for its table lock, before leaving a table for later.
HORIZON_WAIT_S = 5.0
LOCK_TIMEOUT = "5s"
# pg_advisory_lock key held while scrubbing ("agmscrub" as 8 bytes).
SCRUB_LOCK = 0x61676D7363727562
# VACUUM (FULL, VERBOSE)'s count of deleted rows it had to copy along (PostgreSQL 13 and later).
KEPT_DEAD = re.compile(r"(\d+) dead row versions cannot be removed yet")
# Memory for rebuilding the indexes (the trigram GIN indexes build much faster with more).
REWRITE_WORK_MEM = "128MB"


class PostgresMaintenance(Repository, Maintenance):
    """Forget, bounded purges and the figures of the database; `scrub` rewrites what forget owes."""

    # figures

    def schema(self) -> list[str]:
        return self.sql.records(str, "SELECT name FROM agent_memory_migrations ORDER BY name")

    def storage_stats(self) -> StorageStats:
        """The database's size; PostgreSQL reuses freed space itself (autovacuum), so no advice."""
        row = self.sql.one(
            "SELECT pg_database_size(current_database()) AS bytes, current_setting('block_size')::int AS page"
        )
        assert row is not None
        return {
            "bytes": int(row["bytes"]),
            "advice": None,
            "page_size": int(row["page"]),
            "page_count": int(row["bytes"]) // int(row["page"]),
        }

    def search_state(self) -> SearchState:
        """Tables a forget still owes a rewrite, and up to which id every turn is indexed for recall."""
        row = self.sql.one(
            "SELECT (SELECT count(*) FROM scrub_owed) AS owed, "
            "coalesce((SELECT min(id) - 1 FROM recall_pending), (SELECT max(id) FROM messages), 0) AS upto"
        )
        assert row is not None
        # Retention's dead rows are autovacuum's: the trigram indexes have no segments to merge.
        return {"dead_rows": 0, "scrub_owed": int(row["owed"]), "messages_indexed_upto": int(row["upto"])}

    # forgetting

    def _sessions(self, where: str, params: Sequence[str], user_id: str) -> list[str]:
        # The locks a merge takes, in its order (its session's, then the user's): a merge under
        # way finishes first, and none starts until this commits. Without them a merge kept
        # writing into a session deleted here (orphan messages every later window collided with).
        sessions = f"SELECT agent_id FROM sessions WHERE {where} ORDER BY agent_id"
        self.sql.run(
            f"SELECT count(pg_advisory_xact_lock(hashtextextended(agent_id, 0))) FROM ({sessions}) AS s",
            params,
        )
        self.sql.run(f"SELECT pg_advisory_xact_lock(hashtextextended(?, {USER_LOCK_SEED:d}))", (user_id,))
        # Read again under the user's lock: a session first stored meanwhile is deleted too (no
        # merge can be under way in it now: a merge writes only under the user's lock).
        return self.sql.records(str, f"{sessions} FOR UPDATE", params)

    def _forgot(self, where: str, params: Sequence[str], indexed: int) -> bool:
        self.sql.run(f"DELETE FROM {RECALL_PAIRS} WHERE {where}", params)
        # Every table that can hold the user's words owes a rewrite, not only those this forget
        # deleted from: earlier versions of their rows may still lie dead in any of them (the
        # summary of a pair a session was moved out of, a replaced summary, a deleted fact).
        tables = sorted([held.table for held in HELD] + [RECALL_DOCS, RECALL_PAIRS])
        self.sql.run(
            "INSERT INTO scrub_owed (relation, since_ms, xid) "
            "SELECT relation, ?, pg_current_xact_id()::text::bigint FROM unnest(?::text[]) AS t(relation) "
            "ON CONFLICT (relation) DO UPDATE SET xid = greatest(scrub_owed.xid, excluded.xid)",
            (now_ms(), tables),
        )
        # Pending when one is large enough to wait for the batch.
        largest = self.sql.count(
            "SELECT coalesce(max(pg_total_relation_size(relation::regclass)), 0) FROM unnest(?::text[]) AS relation",
            (tables,),
        )
        return largest > INLINE_SCRUB_MAX_BYTES

    @staticmethod
    def scrub(conn: Connection) -> tuple[int, int, int]:
        """Rewrite the tables forgets deleted from (autocommit): (tables still owed, rewritten, pages written)."""
        owed = _one_int(conn, "SELECT count(*) FROM scrub_owed")
        if not owed:
            return (0, 0, 0)
        # One instance rewrites at a time: the same table twice over would only double the wait.
        try:
            conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'".encode())
            conn.execute(b"SELECT pg_advisory_lock(%s)", (SCRUB_LOCK,))
        except errors.LockNotAvailable:
            log.info("scrub: another instance is rewriting; what is still owed waits for the next check")
            return (owed, 0, 0)
        finally:
            conn.execute(b"RESET lock_timeout")
        try:
            return _scrub(conn)
        finally:
            conn.execute(b"SELECT pg_advisory_unlock(%s)", (SCRUB_LOCK,))


def _scrub(conn: Connection) -> tuple[int, int, int]:
    """`PostgresMaintenance.scrub` under its lock (what is owed read again: another may have paid it)."""
    now = now_ms()
    due: list[tuple[str, int]] = []
    for row in conn.execute(b"SELECT relation, since_ms, xid FROM scrub_owed ORDER BY relation").fetchall():
        size = _one_int(conn, "SELECT pg_total_relation_size(%s::regclass)", (row["relation"],))
        if size <= INLINE_SCRUB_MAX_BYTES or now - row["since_ms"] >= SCRUB_BATCH_MS:
            due.append((row["relation"], row["xid"]))
    if due and not _horizon_passed(conn, max(xid for _, xid in due)):
        due = []
    rewritten = pages = 0
    for relation, xid in due:
        written = _rewrite(conn, relation)
        if written is None:
            continue
        rewritten += 1
        pages += written
        # A forget that committed meanwhile (a newer xid) keeps the table owed.
        conn.execute(b"DELETE FROM scrub_owed WHERE relation = %s AND xid <= %s", (relation, xid))
    if rewritten:
        try:
            # The old files were truncated when each rewrite committed; this unlinks them.
            conn.execute(b"CHECKPOINT")
        except errors.InsufficientPrivilege:
            log.debug("scrub: no CHECKPOINT privilege; the emptied files go at the next checkpoint")
    left = _one_int(conn, "SELECT count(*) FROM scrub_owed")
    log.info("scrub: rewrote %d tables (%d pages); %d still owed", rewritten, pages, left)
    return (left, rewritten, pages)


def _one_int(conn: Connection, query: str, params: Sequence[object] = ()) -> int:
    row = conn.execute(query.encode(), params).fetchone()
    return int(next(iter(row.values()))) if row else 0


def _horizon_passed(conn: Connection, xid: int) -> bool:
    """Whether every snapshot that could still see rows deleted by transaction `xid` has ended
    (VACUUM FULL copies such rows along); waits up to `HORIZON_WAIT_S` for them."""
    # What VACUUM's horizon counts: this database's backends' snapshots and transactions (every
    # role's are shown; walsenders, of no database, hold it for standbys with hot_standby_feedback),
    # replication slots, prepared transactions, and the transactions still running in every other
    # database of the server: VACUUM FULL's own snapshot takes them as running, and so keeps what
    # a later transaction deleted. On a shared server those last seconds (a CREATE DATABASE
    # copying its template; another database's rewrite waiting for its table lock). The oldest
    # of them, whoever runs it, is the current snapshot's xmin.
    holders = (
        b"SELECT array(SELECT holder FROM ("
        b"  SELECT unnest(CASE WHEN datname = current_database() OR datname IS NULL"
        b"   THEN ARRAY[backend_xmin, backend_xid] ELSE ARRAY[backend_xid] END) AS xmin,"
        b"   format('backend %%s (%%s, %%s for %%s)%%s', pid, coalesce(nullif(application_name, ''), backend_type),"
        b"    state, date_trunc('second', now() - xact_start), ' of database ' || nullif(datname, current_database()))"
        b"   AS holder FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        b"  UNION ALL SELECT xmin, format('replication slot %%s', slot_name) FROM pg_replication_slots"
        b"  UNION ALL SELECT transaction, format('prepared transaction %%s', gid) FROM pg_prepared_xacts"
        b" ) AS held WHERE xmin IS NOT NULL AND age(xmin) >= age(xid(%s::text::xid8))) AS held,"
        b" pg_snapshot_xmin(pg_current_snapshot()) > %s::text::xid8 AS passed"
    )
    deadline = time.monotonic() + HORIZON_WAIT_S
    while True:
        row = conn.execute(holders, (str(xid), str(xid))).fetchone()
        assert row is not None
        unseen = [] if row["passed"] else ["a transaction pg_stat_activity does not show"]
        held = list(row["held"]) or unseen
        if not held:
            return True
        if time.monotonic() >= deadline:
            # Warned: until a later scrub, the forgotten words are still in the table files.
            log.warning(
                "scrub: snapshots older than a forget are still open after %.0f s (%s); the rewrite waits",
                HORIZON_WAIT_S,
                "; ".join(held),
            )
            return False
        time.sleep(0.05)


def _rewrite(conn: Connection, relation: str) -> int | None:
    """VACUUM FULL one table: its new size in pages, or None (not rewritten, or deleted rows kept)."""
    filenode = b"SELECT pg_relation_filenode(%s::regclass) AS node"
    before = conn.execute(filenode, (relation,)).fetchone()
    kept: list[int] = []

    def count_kept(notice: psycopg.errors.Diagnostic) -> None:
        found = KEPT_DEAD.search(notice.message_detail or "")
        if found:
            kept.append(int(found[1]))

    conn.add_notice_handler(count_kept)
    try:
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'".encode())
        conn.execute(f"SET maintenance_work_mem = '{REWRITE_WORK_MEM}'".encode())
        conn.execute(sql.SQL("VACUUM (FULL, VERBOSE) {}").format(sql.Identifier(relation)))
    except (errors.LockNotAvailable, errors.QueryCanceled) as exc:
        log.warning("scrub: %s was busy (%s); its rewrite is tried again later", relation, exc)
        return None
    finally:
        conn.remove_notice_handler(count_kept)
        conn.execute(b"RESET lock_timeout")
        conn.execute(b"RESET maintenance_work_mem")
    after = conn.execute(filenode, (relation,)).fetchone()
    if before == after:
        # VACUUM only warns when it may not rewrite a table (not its owner).
        log.error("scrub: %s was not rewritten (is the service's role its owner?)", relation)
        return None
    if sum(kept):
        # PostgreSQL's horizon counted a snapshot `_horizon_passed` could not see (a backend
        # still starting up is not shown yet): the copy kept deleted rows; the table stays owed.
        log.warning(
            "scrub: %s kept %d deleted rows an older snapshot can still see; rewritten again at the next scrub",
            relation,
            sum(kept),
        )
        return None
    return _one_int(
        conn, "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int", (relation,)
    )
