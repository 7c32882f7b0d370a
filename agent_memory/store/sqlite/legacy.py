"""The view's and transaction's method names from before the repositories, as delegations.

Temporary (issue 9, phase 1): callers not yet moved to `view.<repository>.<method>` keep
working and get the dict rows they got before. Delete this module, and the two bases in
engine.py, once nothing calls these names.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import fields
from typing import TYPE_CHECKING, Any, cast

from agent_memory.core.domain import (
    Binding,
    ChannelBinding,
    Fact,
    FactOrigin,
    FactScope,
    InboxEntry,
    Job,
    Message,
    MessageFingerprint,
    MetricRow,
    Session,
    Summary,
    Watch,
)
from agent_memory.store.sqlite.common import dumps, loads_object
from agent_memory.store.sqlite.facts import USER_WIDE
from agent_memory.store.sqlite.jobs import SQLiteJobs
from agent_memory.store.types import SEARCH_KINDS, PurgeStep

if TYPE_CHECKING:
    from agent_memory.store.sqlite.analytics import SQLiteAnalytics
    from agent_memory.store.sqlite.bindings import SQLiteBindings
    from agent_memory.store.sqlite.export import SQLiteExport
    from agent_memory.store.sqlite.facts import SQLiteFacts, SQLiteSummaries
    from agent_memory.store.sqlite.inbox import SQLiteInbox
    from agent_memory.store.sqlite.maintenance import SQLiteMaintenance
    from agent_memory.store.sqlite.messages import SQLiteMessages
    from agent_memory.store.sqlite.search import SQLiteSearch
    from agent_memory.store.sqlite.sessions import SQLiteSessions
    from agent_memory.store.sqlite.watches import SQLiteWatches

Row = dict[str, Any]


_RENAMED = {"extra_json": "extra", "base_system_messages_json": "base_system_messages",
            "last_pushed_json": "last_pushed", "event_id": "notice_id"}  # fmt: skip
_FLAGS = {"interrupted", "gap_before", "pinned", "turns_truncated"}
_layouts: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[str, ...]]] = {}


def _plain(obj: Any) -> Row:
    """A domain object as the dict row it replaced (old column names, flags as 0/1)."""
    layout = _layouts.get(type(obj))
    if layout is None:
        names = tuple(field.name for field in fields(obj))
        keys = tuple(_RENAMED.get(name, name) for name in names)
        layout = _layouts[type(obj)] = (keys, operator.attrgetter(*names), tuple(_FLAGS & set(keys)))
    keys, values, flags = layout
    row = dict(zip(keys, values(obj), strict=True))
    for flag in flags:
        row[flag] = int(row[flag])
    return row


def session_row(session: Session | None) -> Row | None:
    if session is None:
        return None
    row = _plain(session)
    row["labels"] = dumps(session.labels) if session.labels else None
    return row


def message_row(message: Message) -> Row:
    return _plain(message)


def fingerprint_row(fingerprint: MessageFingerprint) -> Row:
    return _plain(fingerprint)


def fact_row(fact: Fact | None) -> Row | None:
    if fact is None:
        return None
    row = _plain(fact)
    row["character_id"] = USER_WIDE if fact.character_id is None else fact.character_id
    return row


def summary_row(summary: Summary | None) -> Row | None:
    if summary is None:
        return None
    row = _plain(summary)
    row["meta"] = dumps(summary.meta)
    return row


def job_row(job: Job | None) -> Row | None:
    return None if job is None else _plain(job)


def watch_row(watch: Watch | None) -> Row | None:
    return None if watch is None else _plain(watch)


def inbox_row(entry: InboxEntry | None) -> Row | None:
    return None if entry is None else _plain(entry)


def binding_row(binding: Binding | ChannelBinding | None) -> Row | None:
    return None if binding is None else _plain(binding)


class CallableJobs(SQLiteJobs):
    """The jobs repository, also answering the old `view.jobs(status, limit)` call."""

    __slots__ = ()

    def __call__(self, status: str | None = None, limit: int = 100) -> list[Row]:
        return [job_row(job) or {} for job in self.by_status(status, limit)]  # type: ignore[arg-type]


class LegacyReads:
    """Old read names over the repositories."""

    if TYPE_CHECKING:
        sessions: SQLiteSessions
        messages: SQLiteMessages
        facts: SQLiteFacts
        summaries: SQLiteSummaries
        jobs: CallableJobs
        inbox: SQLiteInbox
        watches: SQLiteWatches
        bindings: SQLiteBindings
        search: SQLiteSearch
        analytics: SQLiteAnalytics
        export: SQLiteExport
        maintenance: SQLiteMaintenance

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [dict(row) for row in self.maintenance.conn.execute(sql, params)]

    def schema_migrations(self) -> list[str]:
        return self.maintenance.schema()

    def latest_messages(
        self, user_id: str, character_id: str, limit: int, *, spoken_only: bool = True
    ) -> list[Row]:
        return [
            message_row(m)
            for m in self.messages.latest(user_id, character_id, limit, spoken_only=spoken_only)
        ]

    def messages_after(self, user_id: str, character_id: str, watermark_id: int, limit: int) -> list[Row]:
        return [message_row(m) for m in self.messages.after(user_id, character_id, watermark_id, limit)]

    def count_messages_after(self, user_id: str, character_id: str, watermark_id: int) -> int:
        return self.messages.count_after(user_id, character_id, watermark_id)

    def session_messages(self, agent_id: str) -> list[Row]:
        return [message_row(m) for m in self.messages.of_session(agent_id)]

    def session_fingerprints(self, agent_id: str) -> list[Row]:
        return [fingerprint_row(f) for f in self.messages.fingerprints(agent_id)]

    def session_tail(self, agent_id: str, count: int) -> list[Row]:
        return [fingerprint_row(f) for f in self.messages.tail(agent_id, count)]

    def get_session(self, agent_id: str) -> Row | None:
        return session_row(self.sessions.get(agent_id))

    def get_binding(self, agent_id: str) -> Row | None:
        return binding_row(self.bindings.of_agent(agent_id))

    def get_channel_binding(self, channel: str) -> Row | None:
        return binding_row(self.bindings.of_channel(channel))

    def channel_sessions(self, channel: str, sources: Sequence[str]) -> list[Row]:
        return [session_row(s) or {} for s in self.sessions.in_channel(channel, sources)]  # type: ignore[arg-type]

    def list_facts(self, user_id: str, character_id: str) -> list[Row]:
        return [fact_row(f) or {} for f in self.facts.of_pair(user_id, character_id)]

    def get_fact(self, fact_id: int) -> Row | None:
        return fact_row(self.facts.get(fact_id))

    def get_summary(self, user_id: str, character_id: str) -> Row | None:
        return summary_row(self.summaries.get(user_id, character_id))

    def get_inbox(self, notice_id: str) -> Row | None:
        return inbox_row(self.inbox.get(notice_id))

    def inbox_by_status(self, status: str, limit: int) -> list[Row]:
        return [inbox_row(e) or {} for e in self.inbox.by_status(status, limit)]  # type: ignore[arg-type]

    def get_job(self, kind: str, user_id: str, character_id: str) -> Row | None:
        return job_row(self.jobs.get(kind, user_id, character_id))  # type: ignore[arg-type]

    def get_job_by_id(self, job_id: int) -> Row | None:
        return job_row(self.jobs.by_id(job_id))

    def due_jobs(self, kind: str, now: int, limit: int) -> list[Row]:
        return [job_row(j) or {} for j in self.jobs.due(kind, now, limit)]  # type: ignore[arg-type]

    def get_watch(self, agent_id: str) -> Row | None:
        return watch_row(self.watches.get(agent_id))

    def due_watches(self, now: int, limit: int) -> list[Row]:
        return [watch_row(w) or {} for w in self.watches.due_polls(now, limit)]

    def due_pushes(self, now: int, limit: int) -> list[Row]:
        return [watch_row(w) or {} for w in self.watches.due_pushes(now, limit)]

    def running_agents_of(self, user_id: str, character_id: str) -> list[Row]:
        return [watch_row(w) or {} for w in self.watches.running_for(user_id, character_id)]

    def counts(self) -> dict[str, int]:
        return self.maintenance.counts()

    def search_tokens(self, user_id: str) -> dict[str, str]:
        return self.search.pair_tokens(user_id)

    def search_user(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[str] = SEARCH_KINDS,
        limit: int = 20,
    ) -> dict[str, Any]:
        return dict(self.search.user(user_id, q, character_id=character_id, kinds=kinds, limit=limit))  # type: ignore[arg-type]

    def search_mentions(
        self, q: str, *, role: str = "user", character_id: str | None = None, limit: int = 100
    ) -> dict[str, Any]:
        return dict(self.search.mentions(q, role=role, character_id=character_id, limit=limit))  # type: ignore[arg-type]

    def search_state(self) -> dict[str, Any]:
        return dict(self.maintenance.search_state())

    def storage_stats(self) -> dict[str, Any]:
        return dict(self.maintenance.storage_stats())

    def user_stats(self, user_id: str) -> dict[str, Any] | None:
        return self.analytics.user_stats(user_id)

    def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> dict[str, Any] | None:
        return self.analytics.character_stats(character_id, since_ms=since_ms, until_ms=until_ms)

    def overall_stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> dict[str, Any]:
        return self.analytics.overall_stats(since_ms=since_ms, until_ms=until_ms)

    def export_user(self, user_id: str) -> dict[str, Any] | None:
        return self.export.user(user_id)


class LegacyWrites(LegacyReads):
    """Old write names over the repositories."""

    if TYPE_CHECKING:

        def savepoint(self) -> AbstractContextManager[None]: ...

    def inbox_has(self, notice_id: str) -> bool:
        return self.inbox.has(notice_id)

    def insert_inbox(self, row: Row) -> bool:
        return self.inbox.insert(
            InboxEntry(
                event_id=row["notice_id"], event_type=row["event_type"],
                received_ms=row["received_ms"], body=row["body"], status=row["status"],
                product_id=row.get("product_id"), notify_ms=row.get("notify_ms"),
                agent_id=row.get("agent_id"), label_user=row.get("label_user"),
                label_character=row.get("label_character"), error=row.get("error"),
            )
        )  # fmt: skip

    def set_inbox_status(self, notice_id: str, status: str, error: str | None = None) -> None:
        self.inbox.set_status(notice_id, status, error)  # type: ignore[arg-type]

    def insert_session(self, row: Row) -> None:
        values = dict(row)
        values["labels"] = loads_object(values.get("labels"))
        self.sessions.insert(Session(**values))

    def update_session(self, agent_id: str, changes: Row) -> None:
        values = dict(changes)
        if "labels" in values:
            values["labels"] = loads_object(values["labels"])
        self.sessions.update(agent_id, values)  # type: ignore[arg-type]

    def move_session(self, agent_id: str, user_id: str, character_id: str) -> int:
        return self.sessions.move(agent_id, user_id, character_id)

    def reset_condensed(self, user_id: str, character_id: str) -> dict[str, int]:
        return {
            "summaries": self.summaries.delete(user_id, character_id),
            "facts": self.facts.delete_unpinned(user_id, character_id),
        }

    def set_binding(self, agent_id: str, user_id: str, character_id: str) -> None:
        self.bindings.bind_agent(agent_id, user_id, character_id)

    def set_channel_binding(self, channel: str, user_id: str, character_id: str) -> Row:
        return binding_row(self.bindings.bind_channel(channel, user_id, character_id)) or {}

    def delete_channel_binding(self, channel: str) -> Row | None:
        return binding_row(self.bindings.unbind_channel(channel))

    def insert_messages(self, rows: Iterable[Row]) -> None:
        self.messages.insert(rows)  # type: ignore[arg-type]

    def update_message(self, message_id: int, changes: Row) -> None:
        self.messages.update(message_id, changes)  # type: ignore[arg-type]

    def add_fact(
        self, user_id: str, character_id: str, text: str, norm: str, *, pinned: bool, origin: str
    ) -> tuple[Row, bool]:
        scope: FactScope = "user" if character_id == USER_WIDE else "character"
        fact, created = self.facts.add(
            user_id, character_id, text, scope=scope, pinned=pinned, origin=cast(FactOrigin, origin)
        )
        return fact_row(fact) or {}, created

    def update_fact(self, fact_id: int, text: str, norm: str) -> bool:
        return self.facts.update(fact_id, text)

    def delete_fact(self, fact_id: int) -> bool:
        return self.facts.delete(fact_id)

    def set_summary(self, row: Row) -> None:
        self.summaries.put(
            Summary(
                user_id=row["user_id"], character_id=row["character_id"], text=row["text"],
                watermark_id=row["watermark_id"], covered_until_ms=row.get("covered_until_ms"),
                message_count=row.get("message_count") or 0, method=row.get("method"),  # type: ignore[arg-type]
                model=row.get("model"), created_ms=row.get("created_ms"),  # type: ignore[arg-type]
                updated_ms=row.get("updated_ms"), meta=loads_object(row.get("meta")),  # type: ignore[arg-type]
            )
        )  # fmt: skip

    def schedule_job(self, kind: str, user_id: str, character_id: str, **timing: int) -> None:
        self.jobs.schedule(kind, user_id, character_id, **timing)  # type: ignore[arg-type]

    def make_due(self, kind: str, user_id: str, character_id: str) -> None:
        self.jobs.make_due(kind, user_id, character_id)  # type: ignore[arg-type]

    def claim_job(self, job_id: int) -> Row | None:
        return job_row(self.jobs.claim(job_id))

    def finish_job(self, claimed: Row, *, again_at_ms: int) -> bool:
        return self.jobs.finish(Job(**claimed), again_at_ms=again_at_ms)

    def fail_job(self, job_id: int, error: str, *, retry_at_ms: int | None) -> None:
        self.jobs.fail(job_id, error, retry_at_ms=retry_at_ms)

    def revive_job(self, job_id: int) -> bool:
        return self.jobs.revive(job_id)

    def release_running_jobs(self) -> int:
        return self.jobs.release_running()

    def watch(self, agent_id: str, origin: str, **options: Any) -> str:
        return self.watches.follow(agent_id, origin, **options)  # type: ignore[arg-type]

    def unwatch(self, agent_id: str, reason: str) -> bool:
        return self.watches.unfollow(agent_id, reason)

    def polled(self, agent_id: str, *, next_poll_ms: int, error: str | None) -> None:
        self.watches.polled(agent_id, next_poll_ms=next_poll_ms, error=error)

    def request_push(self, agent_id: str, due_ms: int) -> None:
        self.watches.request_push(agent_id, due_ms)

    def pushed(self, agent_id: str, system_messages: list[dict[str, Any]] | None) -> None:
        self.watches.pushed(agent_id, system_messages)

    def record_agent_metrics(self, agent_id: str, rows: Sequence[MetricRow], at_ms: int) -> int:
        return self.analytics.record_metrics(agent_id, rows, at_ms)

    def index_messages(self, limit: int) -> int:
        return self.search.catch_up(limit)

    def purge_messages(self, **step: Any) -> PurgeStep:
        return self.maintenance.purge_messages(**step)

    def purge_raw_callbacks(self, *, older_than_ms: int, budget: int) -> int:
        return self.maintenance.purge_raw_events(older_than_ms=older_than_ms, budget=budget)

    def purge_metrics(self, *, older_than_ms: int, budget: int) -> int:
        return self.maintenance.purge_metrics(older_than_ms=older_than_ms, budget=budget)

    def search_merge_step(self, kind: str, pages: int) -> bool:
        return self.maintenance.merge_search_index(kind, pages)  # type: ignore[arg-type]

    def search_scrubbed(self, owed: int, dead_rows: int) -> None:
        self.maintenance.search_scrubbed(owed, dead_rows)

    def incremental_vacuum(self, pages: int) -> int:
        return self.maintenance.reclaim_space(pages)

    def forget(self, user_id: str, character_id: str | None) -> dict[str, int]:
        return self.maintenance.forget(user_id, character_id)


__all__ = ["CallableJobs", "LegacyReads", "LegacyWrites"]
