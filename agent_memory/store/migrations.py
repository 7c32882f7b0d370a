"""Numbered schema migrations; `_sqlite_migrations` records which ones a database has."""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("agent_memory")


@migrations()
def m001_initial(db: Database) -> None:
    """Inbox, sessions, bindings, messages, facts, summaries and jobs."""
    db["inbox"].create(
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
    db["inbox"].create_index(["agent_id"])
    db["inbox"].create_index(["label_user", "label_character"])
    db["inbox"].create_index(["status", "received_ms"])

    db["sessions"].create(
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
    db["sessions"].create_index(["user_id", "character_id", "start_ms"])

    db["bindings"].create(
        {"agent_id": str, "user_id": str, "character_id": str, "created_ms": int},
        pk="agent_id",
    )

    db["messages"].create(
        {
            "id": int,
            "agent_id": str,
            "user_id": str,
            "character_id": str,
            "seq": int,  # position within the session; negative when an older window came late
            "role": str,
            "content": str,
            "turn_id": int,
            "ts_ms": int,
            "at_ms": int,  # ts_ms, else the session's start: orders a pair's messages
            "source": str,
            "speaker": str,
            "interrupted": int,
            "interrupt_ms": int,
            "original": str,
            "fp": str,
            "gap_before": int,
            "extra": str,
            "created_ms": int,
        },
        pk="id",
        not_null={"agent_id", "user_id", "character_id", "seq", "role", "content", "at_ms"},
        defaults={"interrupted": 0, "gap_before": 0},
    )
    db["messages"].create_index(["agent_id", "seq"], unique=True)
    db["messages"].create_index(["user_id", "character_id", "at_ms", "seq"])

    db["facts"].create(
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
    db["facts"].create_index(["user_id", "character_id", "norm"], unique=True)

    db["summaries"].create(
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

    db["jobs"].create(
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
    db["jobs"].create_index(["kind", "user_id", "character_id"], unique=True)
    db["jobs"].create_index(["status", "due_ms"])


@migrations()
def m002_watched_agents(db: Database) -> None:
    """Running agents the poller follows, and what a live refresh must resend."""
    db["watched_agents"].create(
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
    db["watched_agents"].create_index(["status", "next_poll_ms"])
    db["watched_agents"].create_index(["status", "push_due_ms"])
