"""What forget clears and what retention keeps, table by table, whichever backend holds them.

Each backend lists the rest of its schema (its own indexes and bookkeeping) as `NOT_HELD`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


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

# The table of forget cut-offs: kept (never forgotten, copied by migrate-db), holding hashes only.
FORGETS = "forgets"


def forgotten_keys(user_id: str, character_id: str | None, agent_ids: Sequence[str] = ()) -> list[str]:
    """The keys a forget of a pair (or of a user, `character_id` None) records its cut-off
    under: the user's or the pair's, and each forgotten agent run's (a window of one names no
    user once its session is gone: a poll's, an unlabelled callback's)."""
    owner = _digest("user", user_id) if character_id is None else _digest("pair", user_id, character_id)
    return [owner, *(_digest("agent", agent_id) for agent_id in agent_ids)]


def cutoff_keys(user_id: str, character_id: str, agent_id: str | None = None) -> tuple[str, str, str]:
    """The keys whose cut-offs bind a write to a pair and an agent run (the latest counts): the
    user's, the pair's and the run's ('' without a run)."""
    run = "" if agent_id is None else _digest("agent", agent_id)
    return _digest("user", user_id), _digest("pair", user_id, character_id), run


def _digest(*parts: str) -> str:
    """Hashes, not ids: a cut-off outlives the forget, and keeps no one's id in the clear."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
