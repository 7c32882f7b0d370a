"""The SQL that SQLite's migrations write into the schema: the search index's triggers and the
pairs' version bumps (kept apart from the numbered migrations that use them)."""

from __future__ import annotations

# -- full-text search (issue 5) --------------------------------------------------------------
#
# Three contentless FTS5 tables (trigram tokenizer, so CJK is found by substring) are kept in
# step with messages, facts and summaries by triggers: every insert, update and delete of a
# row, including forget and retention, reaches the index in the same transaction.
# Each indexed row also carries an `owner` token: three private-use characters that encode
# the row's (user, character) pair id in `search_pairs`. Under the trigram tokenizer such a
# token is one term that no text contains, so `owner : "<token>" AND content : (...)` reads
# only that pair's postings instead of every match in the database.

# U+F0000.. (Supplementary Private Use Area-A): 65534 values per character, 2.8e14 ids.
SEARCH_TOKEN_SQL = (
    "char(983040 + (id / 4294705156) % 65534, 983040 + (id / 65534) % 65534, 983040 + id % 65534)"
)
# What each indexed table is called and which of its columns holds the text.
SEARCH_SOURCES = (("messages", "content", "id"), ("facts", "text", "id"), ("summaries", "text", "rowid"))


MESSAGES_INDEXED_UPTO = "(SELECT value FROM search_state WHERE name = 'messages_indexed_upto')"
RECALL_INDEXED_UPTO = "(SELECT value FROM search_state WHERE name = 'recall_indexed_upto')"


def _owner(prefix: str) -> str:
    """The token of the pair of the NEW or OLD row."""
    return (
        f"(SELECT token FROM search_pairs WHERE user_id = {prefix}.user_id "
        f"AND character_id = {prefix}.character_id)"
    )


def search_triggers(table: str, column: str, key: str) -> list[str]:
    """Triggers that mirror `table` into `{table}_fts` (contentless: deletes name the old values)."""
    fts = f"{table}_fts"
    # Not INSERT OR IGNORE: a trigger's statements take the conflict clause of the statement
    # that fired it, so set_summary's INSERT OR REPLACE would replace the pair (and its token).
    ensure_pair = (
        "INSERT INTO search_pairs (user_id, character_id) SELECT NEW.user_id, NEW.character_id "
        "WHERE NOT EXISTS (SELECT 1 FROM search_pairs WHERE user_id = NEW.user_id "
        "AND character_id = NEW.character_id);"
    )
    add = f"INSERT INTO {fts} (rowid, {column}, owner) VALUES (NEW.{key}, NEW.{column}, {_owner('NEW')});"
    remove = (
        f"INSERT INTO {fts} ({fts}, rowid, {column}, owner) "
        f"VALUES ('delete', OLD.{key}, OLD.{column}, {_owner('OLD')});"
    )
    if table == "messages":
        # Messages are indexed after they commit, in batches (see index_messages): a callback
        # must not wait for trigram indexing. Only rows already indexed may be removed from a
        # contentless index, so deletes and updates look at the watermark.
        indexed = f"OLD.id <= {MESSAGES_INDEXED_UPTO}"
        return [
            f"CREATE TRIGGER messages_search_ad AFTER DELETE ON messages WHEN {indexed} BEGIN {remove} END",
            f"CREATE TRIGGER messages_search_au AFTER UPDATE OF content, user_id, character_id "
            f"ON messages WHEN {indexed} BEGIN {remove} {ensure_pair} {add} END",
        ]
    statements = [
        f"CREATE TRIGGER {table}_search_ai AFTER INSERT ON {table} BEGIN {ensure_pair} {add} END",
        f"CREATE TRIGGER {table}_search_ad AFTER DELETE ON {table} BEGIN {remove} END",
        f"CREATE TRIGGER {table}_search_au AFTER UPDATE OF {column}, user_id, character_id "
        f"ON {table} BEGIN {remove} {ensure_pair} {add} END",
    ]
    if table == "summaries":
        # set_summary is INSERT OR REPLACE, and REPLACE deletes the old row without firing
        # delete triggers (unless recursive_triggers is on). Deleting it first, here, fires
        # them either way, so the index never keeps an old summary.
        statements.append(
            "CREATE TRIGGER summaries_search_bi BEFORE INSERT ON summaries BEGIN "
            "DELETE FROM summaries WHERE user_id = NEW.user_id AND character_id = NEW.character_id; "
            "END"
        )
    return statements


def version_bump(prefix: str) -> str:
    """Count one change of the pair of the NEW or OLD row (user-wide facts: character '')."""
    # Versions come from one clock, so a pair forgotten and said again never repeats one.
    return (
        "UPDATE memory_clock SET tick = tick + 1; "
        "INSERT INTO memory_versions (user_id, character_id, version) "
        f"VALUES ({prefix}.user_id, {prefix}.character_id, (SELECT tick FROM memory_clock)) "
        "ON CONFLICT (user_id, character_id) DO UPDATE SET version = excluded.version;"
    )
