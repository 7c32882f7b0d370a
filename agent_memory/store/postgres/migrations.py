"""Numbered schema migrations of the PostgreSQL store; `agent_memory_migrations` records them.

The tables mirror the SQLite store's (same names and columns, so one domain mapping reads
both), with what a shared database needs besides: ids from sequences, foreign keys that
delete a message's index rows and vectors with it, and leases for work claimed by instances.
Instances starting together migrate one at a time (an advisory lock, see `apply`).
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from agent_memory.core.clock import now_ms
from agent_memory.core.terms import CJK

Migration = Callable[[psycopg.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []
# pg_advisory_lock key held while migrating ("agmemmig" as 8 bytes).
MIGRATION_LOCK = 0x61676D656D6D6967


def migration(fn: Migration) -> Migration:
    """Register `fn` as the next numbered migration (named by its function)."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def _run(conn: psycopg.Connection, *statements: str) -> None:
    for statement in statements:
        conn.execute(statement.encode())


@migration
def m001_core(conn: psycopg.Connection) -> None:
    """Inbox, sessions, bindings, messages, facts, summaries, jobs, watches, metrics, routes, versions."""
    _run(
        conn,
        """CREATE TABLE inbox (
            notice_id text PRIMARY KEY, event_type integer NOT NULL, product_id integer,
            notify_ms bigint, received_ms bigint NOT NULL, agent_id text, label_user text,
            label_character text, body text, status text NOT NULL, error text)""",
        "CREATE INDEX inbox_agent ON inbox (agent_id)",
        "CREATE INDEX inbox_labels ON inbox (label_user, label_character)",
        "CREATE INDEX inbox_status ON inbox (status, received_ms)",
        """CREATE TABLE sessions (
            agent_id text PRIMARY KEY, user_id text NOT NULL, character_id text NOT NULL,
            identity_source text NOT NULL, channel text, name text, status text NOT NULL,
            stop_reason text, start_ms bigint, stop_ms bigint, labels text, rtc_uid text,
            message_count integer NOT NULL DEFAULT 0, gap_count integer NOT NULL DEFAULT 0,
            error_count integer NOT NULL DEFAULT 0, first_seen_ms bigint, updated_ms bigint,
            token_warning_ms bigint, turn_count integer, turns_truncated integer NOT NULL DEFAULT 0)""",
        "CREATE INDEX sessions_pair ON sessions (user_id, character_id, start_ms)",
        "CREATE INDEX sessions_channel ON sessions (channel)",
        "CREATE TABLE bindings (agent_id text PRIMARY KEY, user_id text, character_id text, created_ms bigint)",
        """CREATE TABLE channel_bindings (
            channel text PRIMARY KEY, user_id text NOT NULL, character_id text NOT NULL,
            created_ms bigint NOT NULL, updated_ms bigint NOT NULL)""",
        "CREATE INDEX channel_bindings_pair ON channel_bindings (user_id, character_id)",
        # A sequence never hands out an id twice, so a summary's watermark ("every id up to
        # here is condensed") cannot swallow a message stored after the newest were deleted.
        """CREATE TABLE messages (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            agent_id text NOT NULL, user_id text NOT NULL, character_id text NOT NULL,
            seq integer NOT NULL, role text NOT NULL, content text NOT NULL, turn_id bigint,
            ts_ms bigint, at_ms bigint NOT NULL, source text, speaker text,
            interrupted integer DEFAULT 0, interrupt_ms bigint, original text, fp text,
            gap_before integer DEFAULT 0, extra text, created_ms bigint,
            kind text NOT NULL DEFAULT 'turn')""",
        "CREATE UNIQUE INDEX messages_session_seq ON messages (agent_id, seq)",
        "CREATE INDEX messages_pair ON messages (user_id, character_id, at_ms, seq)",
        """CREATE TABLE facts (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id text NOT NULL,
            character_id text NOT NULL, text text NOT NULL, norm text NOT NULL,
            pinned integer NOT NULL DEFAULT 0, origin text, created_ms bigint, updated_ms bigint)""",
        "CREATE UNIQUE INDEX facts_key ON facts (user_id, character_id, norm)",
        """CREATE TABLE summaries (
            user_id text NOT NULL, character_id text NOT NULL, text text NOT NULL,
            watermark_id bigint NOT NULL, covered_until_ms bigint, message_count integer,
            method text, model text, meta text, created_ms bigint, updated_ms bigint,
            PRIMARY KEY (user_id, character_id))""",
        # lease_owner / lease_until_ms: the instance running a job and until when its claim
        # holds; a job whose lease ran out is pending again for any instance.
        """CREATE TABLE jobs (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
            user_id text NOT NULL, character_id text NOT NULL, status text NOT NULL,
            due_ms bigint NOT NULL, first_due_ms bigint, pending_messages integer NOT NULL DEFAULT 0,
            attempts integer NOT NULL DEFAULT 0, last_error text, created_ms bigint, updated_ms bigint,
            lease_owner text, lease_until_ms bigint)""",
        "CREATE UNIQUE INDEX jobs_key ON jobs (kind, user_id, character_id)",
        "CREATE INDEX jobs_due ON jobs (status, due_ms)",
        # lease_owner / lease_until_ms: which instance polls and refreshes a followed agent.
        """CREATE TABLE watched_agents (
            agent_id text PRIMARY KEY, origin text NOT NULL, status text NOT NULL, stop_reason text,
            next_poll_ms bigint NOT NULL, last_poll_ms bigint, polls integer NOT NULL DEFAULT 0,
            failures integer NOT NULL DEFAULT 0, last_error text, base_system_messages text,
            persona text, max_tokens integer, push_due_ms bigint, last_push_ms bigint,
            last_pushed text, created_ms bigint, updated_ms bigint, style text,
            lease_owner text, lease_until_ms bigint)""",
        "CREATE INDEX watched_agents_polls ON watched_agents (status, next_poll_ms)",
        "CREATE INDEX watched_agents_pushes ON watched_agents (status, push_due_ms)",
        """CREATE TABLE agent_metrics (
            agent_id text NOT NULL, turn_id bigint NOT NULL, metric text NOT NULL,
            value_ms double precision NOT NULL, at_ms bigint NOT NULL,
            PRIMARY KEY (agent_id, turn_id, metric))""",
        "CREATE INDEX agent_metrics_metric_value ON agent_metrics (metric, value_ms)",
        "CREATE INDEX agent_metrics_at ON agent_metrics (at_ms)",
        """CREATE TABLE llm_routes (
            key_hash text PRIMARY KEY, agent_id text, user_id text NOT NULL, character_id text NOT NULL,
            upstream_base_url text, upstream_api_key text, upstream_model text,
            upstream_params text NOT NULL DEFAULT '{}', created_ms bigint NOT NULL)""",
        "CREATE INDEX llm_routes_agent ON llm_routes (agent_id)",
        "CREATE INDEX llm_routes_pair ON llm_routes (user_id, character_id)",
        # A change counter per pair (user-wide facts: character ''), from one clock so a pair
        # forgotten and said again never repeats a version. Facts and summaries bump by
        # trigger; message writes bump once per pair and statement (versions.py).
        """CREATE TABLE memory_versions (
            user_id text NOT NULL, character_id text NOT NULL, version bigint NOT NULL,
            PRIMARY KEY (user_id, character_id))""",
        "CREATE SEQUENCE memory_clock",
        # On a conflict the clock is read again once the row is locked: a writer that waited
        # for another's bump of the pair commits a higher version, never a lower one.
        """CREATE FUNCTION memory_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP IN ('UPDATE', 'DELETE') THEN
                INSERT INTO memory_versions (user_id, character_id, version)
                VALUES (OLD.user_id, OLD.character_id, nextval('memory_clock'))
                ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock');
            END IF;
            IF TG_OP IN ('UPDATE', 'INSERT') THEN
                INSERT INTO memory_versions (user_id, character_id, version)
                VALUES (NEW.user_id, NEW.character_id, nextval('memory_clock'))
                ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock');
            END IF;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER facts_version AFTER INSERT OR UPDATE OR DELETE ON facts "
        "FOR EACH ROW EXECUTE FUNCTION memory_version_bump()",
        "CREATE TRIGGER summaries_version AFTER INSERT OR UPDATE OR DELETE ON summaries "
        "FOR EACH ROW EXECUTE FUNCTION memory_version_bump()",
        # Named values (counters, what forget still owes) shared by every instance.
        "CREATE TABLE store_state (name text PRIMARY KEY, value bigint NOT NULL)",
        "INSERT INTO store_state (name, value) VALUES ('dead_rows', 0), ('scrub_owed', 0)",
        # Cluster-wide work (sweeps, retention) runs where the named lease is held.
        "CREATE TABLE leases (name text PRIMARY KEY, owner text NOT NULL, until_ms bigint NOT NULL)",
    )


@migration
def m002_search(conn: psycopg.Connection) -> None:
    """Search: substrings (any script) through pg_trgm indexes, which PostgreSQL keeps itself."""
    # The user leads each index (btree_gin), so a user's search intersects the user's entry
    # with the trigrams' inside the index and reads only that user's matching rows: a word
    # said across the whole database is not fetched row by row to be filtered by user (as
    # SQLite's owner tokens do). Several words are ranked through the recall index (m003).
    _run(
        conn,
        "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        "CREATE EXTENSION IF NOT EXISTS btree_gin",
        "CREATE INDEX messages_trgm ON messages USING gin (user_id, content gin_trgm_ops)",
        "CREATE INDEX facts_trgm ON facts USING gin (user_id, text gin_trgm_ops)",
        "CREATE INDEX summaries_trgm ON summaries USING gin (user_id, text gin_trgm_ops)",
    )


@migration
def m003_recall(conn: psycopg.Connection) -> None:
    """The recall word index: each spoken turn's stemmed words and CJK bigrams, per pair."""
    # Terms are computed in Python (core.terms), so turns are indexed after they commit:
    # a trigger queues every new or changed turn in recall_pending, and whichever instance
    # catches up takes queued ids with SKIP LOCKED. A watermark would skip a message whose
    # id was taken before, but committed after, a neighbour's.
    _run(
        conn,
        """CREATE TABLE recall_pairs (
            pair integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id text NOT NULL,
            character_id text NOT NULL, docs integer NOT NULL DEFAULT 0,
            total_length bigint NOT NULL DEFAULT 0, UNIQUE (user_id, character_id))""",
        # terms: the pair's id prefixed to each distinct term ('12:cat'), so a GIN posting list
        # is one pair's and a question reads only its own pair's postings, however large the
        # table. length counts repeats (BM25's document length). A message given a new id
        # takes its doc along until it is indexed again; a pair's row deleted (forget) takes its
        # docs, and an instance indexing into it meanwhile fails and tries again.
        """CREATE TABLE recall_docs (
            id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE ON UPDATE CASCADE,
            pair integer NOT NULL REFERENCES recall_pairs (pair) ON DELETE CASCADE,
            length integer NOT NULL, terms text[] NOT NULL)""",
        "CREATE INDEX recall_docs_terms ON recall_docs USING gin (terms)",
        "CREATE INDEX recall_docs_pair ON recall_docs (pair)",
        # A queue: every row is deleted soon after it is written, so it is vacuumed after a few
        # thousand dead rows rather than a share of its (tiny) size, and each check stays short.
        "CREATE TABLE recall_pending (id bigint PRIMARY KEY) WITH (autovacuum_vacuum_scale_factor = 0, "
        "autovacuum_vacuum_threshold = 5000, autovacuum_vacuum_insert_scale_factor = 0, "
        "autovacuum_vacuum_insert_threshold = 5000)",
        # Per statement: an ingest stores a window of turns in one INSERT (or COPY).
        """CREATE FUNCTION recall_queue_new() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO recall_pending (id) SELECT id FROM new_messages WHERE kind = 'turn'
            ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER messages_recall_ai AFTER INSERT ON messages REFERENCING NEW TABLE AS new_messages "
        "FOR EACH STATEMENT EXECUTE FUNCTION recall_queue_new()",
        """CREATE FUNCTION recall_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO recall_pending (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER messages_recall_au AFTER UPDATE OF content, kind, user_id, character_id "
        "ON messages FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content "
        "OR OLD.kind IS DISTINCT FROM NEW.kind OR OLD.user_id IS DISTINCT FROM NEW.user_id "
        "OR OLD.character_id IS DISTINCT FROM NEW.character_id) EXECUTE FUNCTION recall_queue_changed()",
        # Deleted docs leave their pairs' statistics; deleted messages leave the queue.
        """CREATE FUNCTION recall_docs_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE recall_pairs p SET docs = p.docs - g.docs, total_length = p.total_length - g.length
            FROM (SELECT pair, count(*) AS docs, sum(length) AS length FROM gone_docs GROUP BY pair) g
            WHERE p.pair = g.pair;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER recall_docs_ad AFTER DELETE ON recall_docs REFERENCING OLD TABLE AS gone_docs "
        "FOR EACH STATEMENT EXECUTE FUNCTION recall_docs_gone()",
        """CREATE FUNCTION recall_unqueue() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM recall_pending p USING gone_messages g WHERE p.id = g.id;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER messages_recall_ad AFTER DELETE ON messages REFERENCING OLD TABLE AS gone_messages "
        "FOR EACH STATEMENT EXECUTE FUNCTION recall_unqueue()",
    )


@migration
def m004_vectors(conn: psycopg.Connection) -> None:
    """Embeddings of spoken turns (float32 bytes), deleted with their messages."""
    # id from a sequence, so (newest id, row count, sum of ids) changes with every insert,
    # replacement and delete and can key a cache of a pair's vectors, as on SQLite; the
    # index holds all three for an index-only read.
    _run(
        conn,
        """CREATE TABLE message_vectors (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            message_id bigint NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE ON UPDATE CASCADE,
            user_id text NOT NULL, character_id text NOT NULL, model text NOT NULL,
            dims integer NOT NULL, vector bytea NOT NULL)""",
        "CREATE INDEX message_vectors_pair ON message_vectors (user_id, character_id, model, dims) INCLUDE (id)",
        # A message whose text or owner changes loses its vector and is embedded again (under
        # either id: the foreign key has already carried the vector to a new one).
        """CREATE FUNCTION message_vector_stale() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM message_vectors WHERE message_id IN (OLD.id, NEW.id);
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER messages_vectors_au AFTER UPDATE OF content, user_id, character_id "
        "ON messages FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content "
        "OR OLD.user_id IS DISTINCT FROM NEW.user_id OR OLD.character_id IS DISTINCT FROM NEW.character_id) "
        "EXECUTE FUNCTION message_vector_stale()",
    )


# Columns holding what people said or what was learned of them when m005 ran (later
# migrations set their own columns' statistics: this is m005's list, run on every new database).
PRIVATE_TEXT = {
    "messages": ("content", "original", "extra"),
    "facts": ("text", "norm"),
    "summaries": ("text", "meta"),
    "inbox": ("body", "error"),
    "sessions": ("name", "labels"),
    "jobs": ("last_error",),
    "watched_agents": ("base_system_messages", "persona", "last_pushed", "last_error"),
    "llm_routes": ("upstream_api_key", "upstream_params"),
    "recall_docs": ("terms",),
    "message_vectors": ("vector",),
}


@migration
def m005_forgetting(conn: psycopg.Connection) -> None:
    """What forget owes the table files (rewrites), and no text sampled into the planner's statistics."""
    # A forget records here each table it deleted from; the scrub after it rewrites them
    # (maintenance.py). since_ms: the oldest forget not yet scrubbed; xid: the newest one's
    # transaction, which every older snapshot must have ended past before a rewrite drops it.
    # ANALYZE would copy sample values of the PRIVATE_TEXT columns (sentences people said) into
    # pg_statistic, a catalog no forget reaches; nothing filters on them by value.
    _run(
        conn,
        "CREATE TABLE scrub_owed (relation text PRIMARY KEY, since_ms bigint NOT NULL, xid bigint NOT NULL)",
        *(
            f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0"
            for table, columns in PRIVATE_TEXT.items()
            for column in columns
        ),
    )


@migration
def m006_api_keys(conn: psycopg.Connection) -> None:
    """Scoped keys of the /v1 API, by hash."""
    _run(
        conn,
        """CREATE TABLE api_keys (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text, scope text NOT NULL,
            key_hash text NOT NULL UNIQUE, created_ms bigint NOT NULL, last_used_ms bigint,
            revoked_ms bigint)""",
    )


@migration
def m007_message_images(conn: psycopg.Connection) -> None:
    """The images shown with a turn (core/images.py), as JSON text; NULL for every older message."""
    # Nullable and without a default: a catalog change only, no row is rewritten. Its values
    # (URLs the user shared) are kept out of the planner's statistics as m005 did for the rest.
    _run(
        conn,
        "ALTER TABLE messages ADD COLUMN images text",
        "ALTER TABLE messages ALTER COLUMN images SET STATISTICS 0",
    )


@migration
def m008_forgets(conn: psycopg.Connection) -> None:
    """When each user (or pair) was forgotten, by hash: every later write drops what was said before."""
    # key: the hash of a user, a pair or an agent run (store/shared/maintenance.py), never an id.
    _run(conn, "CREATE TABLE forgets (key text PRIMARY KEY, forgot_ms bigint NOT NULL)")


@migration
def m009_watch_max_history(conn: psycopg.Connection) -> None:
    """How many messages a followed agent holds itself (Agora's llm.max_history): a refresh leaves them out."""
    _run(conn, "ALTER TABLE watched_agents ADD COLUMN max_history integer")


@migration
def m010_fact_history(conn: psycopg.Connection) -> None:
    """Facts keep their history: since when a fact's text holds, and every text it had before."""
    # A current fact stays in `facts` (what every reader of memory reads, unfiltered); a text
    # it no longer says, or a fact that ended, is a row here with when it held (valid_to set).
    _run(
        conn,
        "ALTER TABLE facts ADD COLUMN valid_from bigint",
        "UPDATE facts SET valid_from = coalesce(updated_ms, created_ms)",
        """CREATE TABLE fact_history (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, fact_id bigint NOT NULL,
            user_id text NOT NULL, character_id text NOT NULL, text text NOT NULL, origin text,
            valid_from bigint NOT NULL, valid_to bigint NOT NULL, change text NOT NULL)""",
        "CREATE INDEX fact_history_fact ON fact_history (fact_id, valid_from)",
        # Forget deletes a user's (or a pair's) history by pair.
        "CREATE INDEX fact_history_pair ON fact_history (user_id, character_id)",
        # What was said is kept out of the planner's statistics, as m005 did for the rest.
        "ALTER TABLE fact_history ALTER COLUMN text SET STATISTICS 0",
    )


@migration
def m011_console_sessions(conn: psycopg.Connection) -> None:
    """Operator console sign-ins: a session token by hash, the hash of the key it was opened with."""
    # No user's data: the key's hash says which key (and so which scope and revocation) it stands
    # for; the session token itself is only ever in the operator's cookie.
    _run(
        conn,
        """CREATE TABLE console_sessions (
            token_hash text PRIMARY KEY, key_hash text NOT NULL, created_ms bigint NOT NULL,
            expires_ms bigint NOT NULL)""",
        # Revoking a key ends its sessions; sign-ins drop the expired ones.
        "CREATE INDEX console_sessions_key ON console_sessions (key_hash)",
        "CREATE INDEX console_sessions_expiry ON console_sessions (expires_ms)",
    )


@migration
def m012_recall_characters(conn: psycopg.Connection) -> None:
    """Turns that say Chinese, Japanese or Korean indexed again (core/terms.py): each Chinese
    character is a recall term now, and a Latin word no longer runs on into the Han or Hangul after it."""
    # Queued: the next catch-up indexes them again with today's terms (their docs replaced).
    conn.execute(
        "INSERT INTO recall_pending (id) SELECT d.id FROM recall_docs d JOIN messages m ON m.id = d.id "
        "WHERE m.content ~ %s ON CONFLICT DO NOTHING",
        (CJK.pattern,),
    )


@migration
def m013_facts_summaries_unindexed(conn: psycopg.Connection) -> None:
    """Facts and summaries leave the trigram indexes, as on SQLite (its m023): every condense job
    rewrote its pair's summary (kilobytes of text) through summaries_trgm; a user's few facts and
    summaries are read through their keys (facts_key, the summaries' primary key, both led by the
    user) and matched by ILIKE, the same query."""
    _run(conn, "DROP INDEX IF EXISTS facts_trgm", "DROP INDEX IF EXISTS summaries_trgm")


@migration
def m014_recall_changes(conn: psycopg.Connection) -> None:
    """Count every change to a pair's recall index, and read a pair's indexed turns by pair and id."""
    # A copy of a pair's index held in an instance's memory (core/postings.py) is current while
    # this count is the one it was read at: an indexed turn adds one, and so does a turn's doc
    # deleted or given a new id (its message's), whichever instance did it. As on SQLite (m016).
    _run(
        conn,
        "ALTER TABLE recall_pairs ADD COLUMN changes bigint NOT NULL DEFAULT 0",
        "UPDATE recall_pairs SET changes = docs",
        """CREATE OR REPLACE FUNCTION recall_docs_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE recall_pairs p SET docs = p.docs - g.docs, total_length = p.total_length - g.length,
                changes = p.changes + g.docs
            FROM (SELECT pair, count(*) AS docs, sum(length) AS length FROM gone_docs GROUP BY pair) g
            WHERE p.pair = g.pair;
            RETURN NULL;
        END $$""",
        # A message given a new id takes its doc along (ON UPDATE CASCADE): a copy names it by
        # its old id, so it is read again.
        """CREATE FUNCTION recall_docs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE recall_pairs p SET changes = p.changes + c.docs
            FROM (SELECT pair, count(*) AS docs FROM (SELECT pair FROM old_docs UNION ALL
                SELECT pair FROM new_docs) d GROUP BY pair) c
            WHERE p.pair = c.pair;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER recall_docs_au AFTER UPDATE ON recall_docs REFERENCING OLD TABLE AS old_docs "
        "NEW TABLE AS new_docs FOR EACH STATEMENT EXECUTE FUNCTION recall_docs_changed()",
        # A pair's turns since the copy's last (and the forget's cascade) through one index.
        "CREATE INDEX recall_docs_pair_id ON recall_docs (pair, id)",
        "DROP INDEX recall_docs_pair",
        # Which database this is, for such copies (with its address): one restored or made in the
        # place of another starts its pair ids and counts again.
        "INSERT INTO store_state (name, value) VALUES ('database_id', (random() * 4e18)::bigint) "
        "ON CONFLICT (name) DO NOTHING",
    )


def apply(conn: psycopg.Connection) -> list[str]:
    """Apply the migrations the database lacks, each in its own transaction; returns their names."""
    conn.autocommit = True
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS agent_memory_migrations (name text PRIMARY KEY, applied_ms bigint NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT name FROM agent_memory_migrations")}
        ran: list[str] = []
        for name, fn in MIGRATIONS:
            if name in done:
                continue
            with conn.transaction():
                fn(conn)
                conn.execute(
                    "INSERT INTO agent_memory_migrations (name, applied_ms) VALUES (%s, %s)", (name, now_ms())
                )
            ran.append(name)
        return ran
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
