"""Numbered schema migrations; `_sqlite_migrations` records which ones a database has."""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from agent_memory.core.facts import fact_key
from agent_memory.core.terms import CJK
from agent_memory.store.sqlite.triggers import (
    MESSAGES_INDEXED_UPTO,
    RECALL_INDEXED_UPTO,
    SEARCH_SOURCES,
    SEARCH_TOKEN_SQL,
    search_triggers,
    version_bump,
)

migrations = Migrations("agent_memory")


@migrations()
def m001_initial(db: Database) -> None:
    """Inbox, sessions, bindings, messages, facts, summaries and jobs."""
    db.table("inbox").create(
        {
            "notice_id": str,
            "event_type": int,
            "product_id": int,
            "notify_ms": int,
            "received_ms": int,
            "agent_id": str,
            "label_user": str,
            "label_character": str,
            "body": str,
            "status": str,  # done, failed, ignored, test, forgotten
            "error": str,
        },
        pk="notice_id",
        not_null={"event_type", "received_ms", "status"},
    )
    db.table("inbox").create_index(["agent_id"])
    db.table("inbox").create_index(["label_user", "label_character"])
    db.table("inbox").create_index(["status", "received_ms"])

    db.table("sessions").create(
        {
            "agent_id": str,
            "user_id": str,
            "character_id": str,
            "identity_source": str,  # labels, binding, rtc, channel
            "channel": str,
            "name": str,
            "status": str,  # running, stopped, failed
            "stop_reason": str,
            "start_ms": int,
            "stop_ms": int,
            "labels": str,
            "rtc_uid": str,
            "message_count": int,
            "gap_count": int,
            "error_count": int,
            "first_seen_ms": int,
            "updated_ms": int,
        },
        pk="agent_id",
        not_null={"user_id", "character_id", "identity_source", "status"},
        defaults={"message_count": 0, "gap_count": 0, "error_count": 0},
    )
    db.table("sessions").create_index(["user_id", "character_id", "start_ms"])

    db.table("bindings").create(
        {"agent_id": str, "user_id": str, "character_id": str, "created_ms": int},
        pk="agent_id",
    )

    # AUTOINCREMENT: ids are never reused, so a summary's watermark ("every id up to here is
    # condensed") cannot swallow a new message after the newest ones were deleted.
    db.execute(
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            agent_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            character_id TEXT NOT NULL,
            seq INTEGER NOT NULL,  -- place in the session; negative when an older window came late
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            turn_id INTEGER,
            ts_ms INTEGER,
            at_ms INTEGER NOT NULL,  -- ts_ms, else the session's start: orders a pair's messages
            source TEXT,
            speaker TEXT,
            interrupted INTEGER DEFAULT 0,
            interrupt_ms INTEGER,
            original TEXT,
            fp TEXT,
            gap_before INTEGER DEFAULT 0,
            extra TEXT,
            created_ms INTEGER
        )
        """
    )
    db.table("messages").create_index(["agent_id", "seq"], unique=True)
    db.table("messages").create_index(["user_id", "character_id", "at_ms", "seq"])

    db.table("facts").create(
        {
            "id": int,
            "user_id": str,
            "character_id": str,  # '' for a user-wide fact
            "text": str,
            "norm": str,
            "pinned": int,
            "origin": str,  # manual, llm, offline
            "created_ms": int,
            "updated_ms": int,
        },
        pk="id",
        not_null={"user_id", "character_id", "text", "norm"},
        defaults={"pinned": 0},
    )
    db.table("facts").create_index(["user_id", "character_id", "norm"], unique=True)

    db.table("summaries").create(
        {
            "user_id": str,
            "character_id": str,
            "text": str,
            "watermark_id": int,  # every message with id <= this is covered
            "covered_until_ms": int,
            "message_count": int,
            "method": str,  # llm, offline
            "model": str,
            "meta": str,
            "created_ms": int,
            "updated_ms": int,
        },
        pk=("user_id", "character_id"),
        not_null={"text", "watermark_id"},
    )

    db.table("jobs").create(
        {
            "id": int,
            "kind": str,
            "user_id": str,
            "character_id": str,
            "status": str,  # pending, running, dead
            "due_ms": int,
            "first_due_ms": int,
            "pending_messages": int,
            "attempts": int,
            "last_error": str,
            "created_ms": int,
            "updated_ms": int,
        },
        pk="id",
        not_null={"kind", "user_id", "character_id", "status", "due_ms"},
        defaults={"attempts": 0, "pending_messages": 0},
    )
    db.table("jobs").create_index(["kind", "user_id", "character_id"], unique=True)
    db.table("jobs").create_index(["status", "due_ms"])


@migrations()
def m002_watched_agents(db: Database) -> None:
    """Running agents the poller follows, and what a live refresh must resend."""
    db.table("watched_agents").create(
        {
            "agent_id": str,
            "origin": str,  # callback, join, manual
            "status": str,  # watching, stopped
            "stop_reason": str,
            "next_poll_ms": int,
            "last_poll_ms": int,
            "polls": int,
            "failures": int,
            "last_error": str,
            "base_system_messages": str,  # JSON list the caller gave; None: never push
            "persona": str,
            "max_tokens": int,
            "push_due_ms": int,
            "last_push_ms": int,
            "last_pushed": str,  # JSON of the last list sent, to skip identical pushes
            "created_ms": int,
            "updated_ms": int,
        },
        pk="agent_id",
        not_null={"origin", "status", "next_poll_ms"},
        defaults={"polls": 0, "failures": 0},
    )
    db.table("watched_agents").create_index(["status", "next_poll_ms"])
    db.table("watched_agents").create_index(["status", "push_due_ms"])


@migrations()
def m003_search_index(db: Database) -> None:
    """FTS5 trigram indexes over messages, facts and summaries, kept in sync by triggers."""
    db.execute(
        "CREATE TABLE search_pairs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "user_id TEXT NOT NULL, character_id TEXT NOT NULL, "
        f"token TEXT GENERATED ALWAYS AS ({SEARCH_TOKEN_SQL}) VIRTUAL, "
        "UNIQUE (user_id, character_id))"
    )
    # What the index owes: dead rows since the last full merge, and whether a forget
    # still has text in old index segments.
    db.execute("CREATE TABLE search_state (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    db.execute(
        "INSERT INTO search_state (name, value) VALUES ('dead_rows', 0), ('scrub_owed', 0), "
        "('messages_indexed_upto', (SELECT coalesce(max(id), 0) FROM messages))"
    )
    for table, column, key in SEARCH_SOURCES:
        # columnsize=0: ranking is computed from the text itself, so per-row sizes are not kept.
        db.execute(
            f"CREATE VIRTUAL TABLE {table}_fts USING fts5({column}, owner, content='', "
            "columnsize=0, tokenize='trigram')"
        )
        db.execute(
            "INSERT OR IGNORE INTO search_pairs (user_id, character_id) "
            f"SELECT DISTINCT user_id, character_id FROM {table}"
        )
        db.execute(
            f"INSERT INTO {table}_fts (rowid, {column}, owner) "
            f"SELECT t.{key}, t.{column}, p.token FROM {table} t JOIN search_pairs p "
            "ON p.user_id = t.user_id AND p.character_id = t.character_id"
        )
        for statement in search_triggers(table, column, key):
            db.execute(statement)
        db.execute(f"INSERT INTO {table}_fts ({table}_fts) VALUES ('optimize')")


@migrations()
def m004_agent_metrics(db: Database) -> None:
    """Per-turn latencies from 111 callbacks: one row per (agent, turn, metric)."""
    db.execute(
        "CREATE TABLE agent_metrics (agent_id TEXT NOT NULL, turn_id INTEGER NOT NULL, "
        "metric TEXT NOT NULL, value_ms REAL NOT NULL, at_ms INTEGER NOT NULL, "
        "PRIMARY KEY (agent_id, turn_id, metric)) WITHOUT ROWID"
    )
    db.execute("CREATE INDEX agent_metrics_metric_value ON agent_metrics (metric, value_ms)")
    db.execute("CREATE INDEX agent_metrics_at ON agent_metrics (at_ms)")


# Above this size switching an old database to incremental auto-vacuum (a full VACUUM, which
# needs as much free disk again and blocks everything while it runs) is left to the operator.
AUTO_VACUUM_SWITCH_MAX_BYTES = 256 * 1024 * 1024


@migrations(transactional=False)
def m005_incremental_vacuum(db: Database) -> None:
    """Let retention give space back: switch a database created without auto-vacuum."""
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
        return
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    size = db.execute("PRAGMA page_count").fetchone()[0] * page_size
    if size > AUTO_VACUUM_SWITCH_MAX_BYTES:
        # The retention job warns on every run while the file cannot shrink.
        return
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    db.execute("VACUUM")


@migrations()
def m006_message_kinds(db: Database) -> None:
    """What each stored message is: a spoken `turn`, or the LLM's `tool_call` / `tool_result`."""
    # Every message stored before this was a turn: the default says so for them.
    db.execute("ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT 'turn'")


@migrations()
def m007_session_notices(db: Database) -> None:
    """What 104 (token about to expire) and 112 (turns finished) say about a session."""
    db.execute("ALTER TABLE sessions ADD COLUMN token_warning_ms INTEGER")
    db.execute("ALTER TABLE sessions ADD COLUMN turn_count INTEGER")
    db.execute("ALTER TABLE sessions ADD COLUMN turns_truncated INTEGER NOT NULL DEFAULT 0")


@migrations()
def m008_channel_bindings(db: Database) -> None:
    """Channels tied to a user and character, for apps that give each user a channel of their own."""
    db.execute(
        "CREATE TABLE channel_bindings (channel TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
        "character_id TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL)"
    )
    # forget deletes a user's bindings; binding a channel finds the sessions already held there.
    db.execute("CREATE INDEX channel_bindings_pair ON channel_bindings (user_id, character_id)")
    db.execute("CREATE INDEX sessions_channel ON sessions (channel)")


@migrations()
def m009_watch_style(db: Database) -> None:
    """The `llm.style` an agent was started with, so live refreshes send memory in its shape."""
    db.execute("ALTER TABLE watched_agents ADD COLUMN style TEXT")


@migrations()
def m010_fact_keys(db: Database) -> None:
    """Re-key facts by `core.facts.fact_key`, merging those it finds equal (pinned, else newest, stays)."""
    rows = db.execute(
        "SELECT id, user_id, character_id, norm, text FROM facts ORDER BY user_id, character_id, "
        "pinned DESC, coalesce(updated_ms, created_ms, 0) DESC, id DESC"
    ).fetchall()
    kept: set[tuple[str, str, str]] = set()
    merged: list[tuple[int]] = []
    rekeyed: list[tuple[str, int]] = []
    for fact_id, user_id, character_id, norm, text in rows:
        # A fact the new key finds empty (punctuation only) keeps its old, unique key.
        key = fact_key(text) or norm
        if (user_id, character_id, key) in kept:
            merged.append((fact_id,))
            continue
        kept.add((user_id, character_id, key))
        if key != norm:
            rekeyed.append((key, fact_id))
    db.conn.executemany("DELETE FROM facts WHERE id = ?", merged)
    # Park the changed keys first: a fact may take the key another one is giving up.
    db.conn.executemany("UPDATE facts SET norm = char(0) || id WHERE id = ?", [(i,) for _, i in rekeyed])
    db.conn.executemany("UPDATE facts SET norm = ? WHERE id = ?", rekeyed)


@migrations()
def m011_recall_index(db: Database) -> None:
    """A word index for recall: stemmed words and CJK bigrams, each prefixed by its pair's id."""
    # recall_docs keeps each message's indexed text: a contentless FTS5 index can only remove
    # an entry when told the exact text it indexed. Prefixing every term with the pair's id
    # gives each pair its own posting lists, so a query reads only that pair's postings.
    db.execute(
        "CREATE TABLE recall_docs (id INTEGER PRIMARY KEY, pair INTEGER NOT NULL, "
        "length INTEGER NOT NULL, terms TEXT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE recall_pairs (pair INTEGER PRIMARY KEY, docs INTEGER NOT NULL, "
        "total_length INTEGER NOT NULL)"
    )
    # Messages whose text or pair changed after indexing: indexed again on the next catch-up.
    db.execute("CREATE TABLE recall_pending (id INTEGER PRIMARY KEY)")
    db.execute(
        "CREATE VIRTUAL TABLE recall_fts USING fts5(terms, content='', columnsize=0, "
        "tokenize=\"unicode61 remove_diacritics 0 tokenchars '_'\")"
    )
    db.execute("CREATE VIRTUAL TABLE recall_terms USING fts5vocab(recall_fts, 'row')")
    db.execute(
        "CREATE TRIGGER recall_docs_ad AFTER DELETE ON recall_docs BEGIN "
        "INSERT INTO recall_fts (recall_fts, rowid, terms) VALUES ('delete', OLD.id, OLD.terms); "
        "UPDATE recall_pairs SET docs = docs - 1, total_length = total_length - OLD.length "
        "WHERE pair = OLD.pair; END"
    )
    db.execute(
        "CREATE TRIGGER messages_recall_ad AFTER DELETE ON messages BEGIN "
        "DELETE FROM recall_docs WHERE id = OLD.id; DELETE FROM recall_pending WHERE id = OLD.id; END"
    )
    db.execute(
        "CREATE TRIGGER messages_recall_au AFTER UPDATE OF content, kind, user_id, character_id "
        f"ON messages WHEN OLD.id <= {RECALL_INDEXED_UPTO} BEGIN "
        "DELETE FROM recall_docs WHERE id = OLD.id; "
        "INSERT OR IGNORE INTO recall_pending (id) VALUES (OLD.id); END"
    )
    # Its own watermark: recall indexes when the writer is idle or a question needs it, never in
    # the middle of a burst of callbacks. Messages already stored are indexed from the start.
    db.execute("INSERT INTO search_state (name, value) VALUES ('recall_indexed_upto', 0)")


@migrations()
def m012_message_vectors(db: Database) -> None:
    """Embeddings of spoken turns (float32 blobs), deleted with their messages by trigger."""
    # id: AUTOINCREMENT, so (newest id, row count) changes with every insert and delete and
    # can key a cache of a pair's vectors. One vector per message: a new model replaces it.
    db.execute(
        "CREATE TABLE message_vectors (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "message_id INTEGER NOT NULL UNIQUE, user_id TEXT NOT NULL, character_id TEXT NOT NULL, "
        "model TEXT NOT NULL, dims INTEGER NOT NULL, vector BLOB NOT NULL)"
    )
    db.execute("CREATE INDEX message_vectors_pair ON message_vectors (user_id, character_id, model, dims)")
    # Forget, retention and moving a session all delete messages: their vectors go with them.
    # A message whose text or owner changes loses its vector and is embedded again.
    db.execute(
        "CREATE TRIGGER message_vectors_ad AFTER DELETE ON messages BEGIN "
        "DELETE FROM message_vectors WHERE message_id = OLD.id; END"
    )
    db.execute(
        "CREATE TRIGGER message_vectors_au AFTER UPDATE OF content, user_id, character_id ON messages "
        "WHEN OLD.content IS NOT NEW.content OR OLD.user_id IS NOT NEW.user_id "
        "OR OLD.character_id IS NOT NEW.character_id "
        "BEGIN DELETE FROM message_vectors WHERE message_id = OLD.id; END"
    )


@migrations()
def m013_memory_versions(db: Database) -> None:
    """A change counter per pair, bumped whenever its messages, facts or summary change."""
    # A pair's start context is rebuilt only when its counter (or the user-wide one) moved,
    # whichever process or instance made the change.
    db.execute(
        "CREATE TABLE memory_versions (user_id TEXT NOT NULL, character_id TEXT NOT NULL, "
        "version INTEGER NOT NULL, PRIMARY KEY (user_id, character_id)) WITHOUT ROWID"
    )
    db.execute("CREATE TABLE memory_clock (tick INTEGER NOT NULL)")
    db.execute("INSERT INTO memory_clock (tick) VALUES (0)")
    # Messages bump their pair's counter once per write statement (store/sqlite/common.py).
    for table in ("facts", "summaries"):
        db.execute(
            f"CREATE TRIGGER {table}_version_ai AFTER INSERT ON {table} BEGIN {version_bump('NEW')} END"
        )
        db.execute(
            f"CREATE TRIGGER {table}_version_ad AFTER DELETE ON {table} BEGIN {version_bump('OLD')} END"
        )
        db.execute(
            f"CREATE TRIGGER {table}_version_au AFTER UPDATE ON {table} "
            f"BEGIN {version_bump('OLD')} {version_bump('NEW')} END"
        )


@migrations()
def m014_llm_routes(db: Database) -> None:
    """Per-agent keys of the custom-LLM endpoint (by hash), the pair they serve and their upstream."""
    db.execute(
        "CREATE TABLE llm_routes (key_hash TEXT PRIMARY KEY, agent_id TEXT, user_id TEXT NOT NULL, "
        "character_id TEXT NOT NULL, upstream_base_url TEXT, upstream_api_key TEXT, "
        "upstream_model TEXT, upstream_params TEXT NOT NULL DEFAULT '{}', created_ms INTEGER NOT NULL)"
    )
    db.execute("CREATE INDEX llm_routes_agent ON llm_routes (agent_id)")
    # Forget deletes a user's routes by pair.
    db.execute("CREATE INDEX llm_routes_pair ON llm_routes (user_id, character_id)")


@migrations()
def m015_api_keys(db: Database) -> None:
    """Scoped keys of the /v1 API, by hash (AUTOINCREMENT: a revoked key's id is never handed out again)."""
    db.execute(
        "CREATE TABLE api_keys (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, scope TEXT NOT NULL, "
        "key_hash TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL, last_used_ms INTEGER, revoked_ms INTEGER)"
    )


@migrations()
def m016_recall_changes(db: Database) -> None:
    """Count every change to a pair's recall index, and read a pair's indexed turns by pair."""
    # A copy of a pair's index held in memory (store/shared/postings.py) is current while this
    # count is the one it was read at: an insert adds one, and so does a delete.
    db.execute("ALTER TABLE recall_pairs ADD COLUMN changes INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE recall_pairs SET changes = docs")
    db.execute("CREATE INDEX recall_docs_pair ON recall_docs (pair, id)")
    # Which database this is, for such copies: another file in its place (a backup put back)
    # starts its pair ids and counts again and must not be answered from this one's copies.
    db.execute("INSERT INTO search_state (name, value) VALUES ('database_id', abs(random()))")
    db.execute("DROP TRIGGER recall_docs_ad")
    db.execute(
        "CREATE TRIGGER recall_docs_ad AFTER DELETE ON recall_docs BEGIN "
        "INSERT INTO recall_fts (recall_fts, rowid, terms) VALUES ('delete', OLD.id, OLD.terms); "
        "UPDATE recall_pairs SET docs = docs - 1, total_length = total_length - OLD.length, "
        "changes = changes + 1 WHERE pair = OLD.pair; END"
    )


@migrations()
def m017_message_images(db: Database) -> None:
    """The images shown with a turn (core/images.py), as JSON text; NULL for every older message."""
    # Adding a nullable column without a default rewrites no row: instant at any size.
    db.execute("ALTER TABLE messages ADD COLUMN images TEXT")


@migrations()
def m018_forgets(db: Database) -> None:
    """When each user (or pair) was forgotten, by hash: every later write drops what was said before."""
    # key: the hash of a user, a pair or an agent run (store/shared/maintenance.py), never an id.
    db.execute("CREATE TABLE forgets (key TEXT PRIMARY KEY, forgot_ms INTEGER NOT NULL) WITHOUT ROWID")


@migrations()
def m019_watch_max_history(db: Database) -> None:
    """How many messages a followed agent holds itself (Agora's llm.max_history): a refresh leaves them out."""
    db.execute("ALTER TABLE watched_agents ADD COLUMN max_history INTEGER")


@migrations()
def m020_fact_history(db: Database) -> None:
    """Facts keep their history: since when a fact's text holds, and every text it had before."""
    # A current fact stays in `facts` (what every reader of memory reads, unfiltered); a text
    # it no longer says, or a fact that ended, is a row here with when it held (valid_to set).
    db.execute("ALTER TABLE facts ADD COLUMN valid_from INTEGER")
    db.execute("UPDATE facts SET valid_from = coalesce(updated_ms, created_ms)")
    db.execute(
        "CREATE TABLE fact_history (id INTEGER PRIMARY KEY, fact_id INTEGER NOT NULL, user_id TEXT NOT NULL, "
        "character_id TEXT NOT NULL, text TEXT NOT NULL, origin TEXT, valid_from INTEGER NOT NULL, "
        "valid_to INTEGER NOT NULL, change TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX fact_history_fact ON fact_history (fact_id, valid_from)")
    # Forget deletes a user's (or a pair's) history by pair.
    db.execute("CREATE INDEX fact_history_pair ON fact_history (user_id, character_id)")


@migrations()
def m021_console_sessions(db: Database) -> None:
    """Operator console sign-ins: a session token by hash, the hash of the key it was opened with."""
    # No user's data: the key's hash says which key (and so which scope and revocation) it stands
    # for; the session token itself is only ever in the operator's cookie.
    db.execute(
        "CREATE TABLE console_sessions (token_hash TEXT PRIMARY KEY, key_hash TEXT NOT NULL, "
        "created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL) WITHOUT ROWID"
    )
    # Revoking a key ends its sessions; sign-ins drop the expired ones.
    db.execute("CREATE INDEX console_sessions_key ON console_sessions (key_hash)")
    db.execute("CREATE INDEX console_sessions_expiry ON console_sessions (expires_ms)")


@migrations()
def m022_recall_characters(db: Database) -> None:
    """Turns that say Chinese, Japanese or Korean indexed again (core/terms.py): each Chinese
    character is a recall term now, and a Latin word no longer runs on into the Han or Hangul after it."""
    # Their docs go (the trigger takes their terms out of the index and counts the change, so
    # copies held in memory are read again) and they are queued: the next catch-up indexes
    # them with today's terms. Other turns' terms are unchanged.
    said = db.conn.execute("SELECT d.id, m.content FROM recall_docs d JOIN messages m ON m.id = d.id")
    ids = [(message_id,) for message_id, content in said if CJK.search(content or "")]
    db.conn.executemany("DELETE FROM recall_docs WHERE id = ?", ids)
    db.conn.executemany("INSERT OR IGNORE INTO recall_pending (id) VALUES (?)", ids)


@migrations()
def m023_facts_summaries_unindexed(db: Database) -> None:
    """Facts and summaries leave the trigram index: search reads a user's few rows of them instead."""
    # Every job rewrote its pair's summary (kilobytes of text) and added facts, and the triggers
    # tokenized the old summary out and the new one in on the writer: ~0.4 ms per callback of
    # ingest's whole cost, for rows a user has a handful of (store/sqlite/search.py scans them).
    # Dropping the tables frees their pages, zeroed by secure_delete like any deleted row, so a
    # forget's text still owed to an old segment goes with them. summaries_search_bi stays: it
    # makes set_summary's REPLACE fire the summaries' delete triggers (versions, history).
    for table in ("facts", "summaries"):
        for action in ("ai", "ad", "au"):
            db.execute(f"DROP TRIGGER IF EXISTS {table}_search_{action}")
        db.execute(f"DROP TABLE IF EXISTS {table}_fts")


@migrations()
def m024_messages_trigram_rows(db: Database) -> None:
    """The messages' trigram index keeps which rows hold each trigram, not where (detail=none)."""
    # Half the index and about half its work per message stored (the whole cost of a callback
    # counts it); a longer word's trigrams are confirmed in the rows read (search.py
    # `folded_holds`). Rebuilt here from what the old index held (ids up to its watermark);
    # the old one's pages are freed and zeroed (secure_delete), deleted entries included.
    for action in ("ad", "au"):
        db.execute(f"DROP TRIGGER IF EXISTS messages_search_{action}")
    db.execute("DROP TABLE messages_fts")
    db.execute(
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, owner, content='', columnsize=0, "
        "detail=none, tokenize='trigram')"
    )
    db.execute(
        "INSERT INTO messages_fts (rowid, content, owner) SELECT m.id, m.content, p.token FROM messages m "
        "JOIN search_pairs p ON p.user_id = m.user_id AND p.character_id = m.character_id "
        f"WHERE m.id <= {MESSAGES_INDEXED_UPTO} ORDER BY m.id"
    )
    for statement in search_triggers("messages", "content", "id"):
        db.execute(statement)
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
