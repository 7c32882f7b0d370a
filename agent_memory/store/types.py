"""What a store takes and answers besides the domain objects: new rows, changes, reports.

Shared by every backend (`agent_memory.store.protocols`); the reports are the JSON shapes the
HTTP API and the CLI hand on as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from agent_memory.core.domain import IdentitySource, MessageKind, SessionStatus

# Statistics and exports are reports: nested JSON objects the API returns as they are.
Report = dict[str, Any]
# What forgetting deleted, by what the HTTP receipt calls each kind of record.
ForgetReceipt = dict[str, int]


class NewMessage(TypedDict, total=False):
    """A message to insert: the columns an insert writes, in order; a missing one is NULL (`kind` turn)."""

    agent_id: str
    user_id: str
    character_id: str
    seq: int
    role: str
    kind: MessageKind
    content: str
    turn_id: int | None
    ts_ms: int | None
    at_ms: int
    source: str | None
    speaker: str | None
    interrupted: bool
    interrupt_ms: int | None
    original: str | None
    fp: str
    gap_before: bool
    # JSON text of what the platform sent beyond the columns.
    extra: str | None
    created_ms: int
    # JSON text of the images kept with it (core/images.py), None when it had none.
    images: str | None


class SessionChanges(TypedDict, total=False):
    """Fields of a session to change."""

    identity_source: IdentitySource
    status: SessionStatus
    channel: str | None
    name: str | None
    stop_reason: str | None
    start_ms: int | None
    stop_ms: int | None
    labels: Mapping[str, Any]
    rtc_uid: str | None
    message_count: int
    gap_count: int
    error_count: int
    updated_ms: int
    token_warning_ms: int | None
    turn_count: int | None
    turns_truncated: bool


@dataclass(frozen=True, slots=True)
class ForgetCutoff:
    """When a pair (or its user, or an agent run) was last forgotten: what was said before is
    never stored again. `run`: the agent run itself was found by a forget (it was under way)."""

    at_ms: int
    run: bool


@dataclass(frozen=True, slots=True)
class PurgeStep:
    """What one bounded message purge did, and where the next one resumes."""

    deleted: int
    resume_after: tuple[str, str] | None
    done: bool


class StorageStats(TypedDict):
    """How big the database is, and whether freed space goes back to the file system."""

    bytes: int
    # How to make the database give freed space back, when it cannot as it is.
    advice: str | None
    # SQLite's own figures (auto_vacuum 2: incremental).
    page_size: NotRequired[int]
    page_count: NotRequired[int]
    freelist_count: NotRequired[int]
    auto_vacuum: NotRequired[int]


class SearchState(TypedDict):
    """What the search index owes: entries deleted since its last full merge, forgets to scrub."""

    dead_rows: int
    scrub_owed: int
    messages_indexed_upto: int
