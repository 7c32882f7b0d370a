"""Search on SQLite: a contentless FTS5 trigram index of messages (the rest is store/shared/search.py).

Each row is tagged with its pair's owner token, so a search reads only the user's postings;
messages are indexed after they commit (`catch_up`). A user's few facts and summaries are read
and matched here instead (m023: indexing them cost every condense job more than a scan costs)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from agent_memory.store.shared.facts import USER_WIDE
from agent_memory.store.shared.search import MAX_CANDIDATES, Kind, SearchReads, sources
from agent_memory.store.sqlite.common import Repository, ensure_pairs, fts_phrase
from agent_memory.store.sqlite.recall import SQLiteRecall

SOURCES = sources("rowid")
# The kinds without an index: read whole (a user's facts and summaries) and matched as the
# trigram tokenizer matches, a substring with case folded.
SCANNED = frozenset({"fact", "summary"})


def folded(text: str) -> str:
    """Text with case folded, as the trigram tokenizer (case_sensitive 0) reads it."""
    return text.lower()


def folded_holds(text: str | None, term: str) -> bool:
    """SQL `folded_holds`: whether `text` holds `term` (folded), confirming what the index says may be."""
    return text is not None and term in text.lower()


def _trigrams(terms: Sequence[str]) -> str:
    """An FTS5 query for the rows holding every trigram of every term (each 3+ characters); the
    index (detail=none) cannot match a phrase, so `_holding` confirms the rows it reads."""
    pieces = dict.fromkeys(term[i : i + 3] for term in terms for i in range(len(term) - 2))
    return " AND ".join(map(fts_phrase, pieces))


def _holding(terms: Sequence[str], alias: str = "t") -> tuple[str, list[str]]:
    """The SQL keeping the rows that hold each term longer than one trigram, and its parameters."""
    longer = [folded(term) for term in terms if len(term) > 3]
    return "".join(f" AND folded_holds({alias}.content, ?)" for _ in longer), longer


class SQLiteSearch(Repository, SearchReads):
    """Search over the FTS5 indexes (and bounded substring scans for short words)."""

    recall: SQLiteRecall
    sources = SOURCES
    characters = "json_group_array(DISTINCT m.character_id)"

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self.recall = SQLiteRecall(conn)

    def _listed(self, characters: Any) -> list[str]:
        return list(json.loads(characters or "[]"))

    def pair_tokens(self, user_id: str) -> dict[str, str]:
        """The owner token of each of the user's pairs, by character."""
        return {
            row["character_id"]: row["token"]
            for row in self.sql.all(
                "SELECT character_id, token FROM search_pairs WHERE user_id = ?", (user_id,)
            )
        }

    def _owner(self, kind: Kind, user_id: str, character_id: str | None) -> str | None:
        """Any of the user's pair tokens in scope, as an FTS5 query, or None if it has none."""
        tokens = self.pair_tokens(user_id)
        if character_id is None:
            chosen = list(tokens.values())
        else:
            wanted = (character_id, USER_WIDE) if kind.name == "fact" else (character_id,)
            chosen = [tokens[c] for c in wanted if c in tokens]
        if not chosen:
            return None
        # No column filter (detail=none has none): a token's private-use characters are in no
        # text a user says, and the rows read are the user's alone (t.user_id) anyway.
        return "(" + " OR ".join(fts_phrase(token) for token in chosen) + ")"

    def _scanned(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> list[dict[str, Any]]:
        """The user's rows of an unindexed kind in scope that hold every term, newest first."""
        where, params = self._scope(kind, character_id)
        wanted = [folded(term) for term in terms]
        rows = self.sql.all(
            f"SELECT {kind.columns} FROM {kind.table} t WHERE t.user_id = ?{where} ORDER BY t.{kind.key} DESC",
            (user_id, *params),
        )
        return [dict(row) for row in rows if all(term in folded(row["text"]) for term in wanted)]

    def _indexed(
        self, kind: Kind, user_id: str, character_id: str | None, terms: Sequence[str]
    ) -> tuple[list[dict[str, Any]], bool] | None:
        if kind.name in SCANNED:
            scanned = self._scanned(kind, user_id, character_id, terms)
            return scanned[:MAX_CANDIDATES], len(scanned) >= MAX_CANDIDATES
        owner = self._owner(kind, user_id, character_id)
        if owner is None:
            return None
        holds, held = _holding(terms)
        rows = self.sql.all(
            # CROSS JOIN and the outer ORDER BY: the index read newest first and stopped at the
            # limit; as a plain join the planner may read all the user's messages and ask the
            # index once per message instead.
            f"SELECT {kind.columns} FROM (SELECT rowid AS r FROM messages_fts WHERE messages_fts MATCH ? "
            f"ORDER BY rowid DESC) f CROSS JOIN messages t ON t.id = f.r WHERE t.user_id = ?{holds} "
            "ORDER BY f.r DESC LIMIT ?",
            (f"{owner} AND {_trigrams(terms)}", user_id, *held, MAX_CANDIDATES),
        )
        capped = len(rows) >= MAX_CANDIDATES
        wanted = (character_id, USER_WIDE)
        return [dict(row) for row in rows if character_id is None or row["character_id"] in wanted], capped

    def _frequency(self, kind: Kind, user_id: str, character_id: str | None, term: str) -> int:
        if kind.name in SCANNED:
            return len(self._scanned(kind, user_id, character_id, [term]))
        owner = self._owner(kind, user_id, character_id)
        holds, held = _holding([term])
        if not held:  # one trigram: the index alone is exact
            match = f"{owner} AND {_trigrams([term])}"
            return self.sql.count("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (match,))
        return self.sql.count(
            "SELECT count(*) FROM messages_fts f CROSS JOIN messages t ON t.id = f.rowid "
            f"WHERE messages_fts MATCH ? AND t.user_id = ?{holds}",
            (f"{owner} AND {_trigrams([term])}", user_id, *held),
        )

    def _phrase(self, phrase: str) -> tuple[str, list[Any]]:
        holds, held = _holding([phrase], "m")
        source = f"FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ?{holds}"
        return source, [_trigrams([phrase]), *held]

    def catch_up(self, limit: int) -> int:
        """Index up to `limit` messages stored since the last call for search; returns how many."""
        upto = self.sql.count("SELECT value FROM search_state WHERE name = 'messages_indexed_upto'")
        last = self.conn.execute(
            "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            (upto, limit),
        ).fetchone()[0]
        if last is None:
            return 0
        ensure_pairs(self.conn, upto, last)
        indexed = self.conn.execute(
            "INSERT INTO messages_fts (rowid, content, owner) "
            "SELECT m.id, m.content, p.token FROM messages m JOIN search_pairs p "
            "ON p.user_id = m.user_id AND p.character_id = m.character_id "
            "WHERE m.id > ? AND m.id <= ? ORDER BY m.id",
            (upto, last),
        ).rowcount
        self.conn.execute("UPDATE search_state SET value = ? WHERE name = 'messages_indexed_upto'", (last,))
        return int(indexed)
