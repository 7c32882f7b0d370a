"""The inbox: every raw platform event as received, under its event id (Agora's noticeId).

Ingest asks `has` before it applies an event and records it after, in one transaction: on a
write, `has` holds the event's advisory lock until commit, so one event delivered to two
instances at once is applied by one and is a duplicate for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_memory.core.domain import InboxEntry, InboxStatus
from agent_memory.store.postgres.common import Repository

# In `InboxEntry`'s order; the table's names are Agora's (notice_id, label_user, ...).
INBOX_COLUMNS = (
    "notice_id, event_type, received_ms, body, status, product_id, notify_ms, agent_id, "
    "label_user, label_character, error"
)
_INBOX_MARKS = ", ".join(["%s"] * len(INBOX_COLUMNS.split(", ")))


def entry_of(row: Mapping[str, Any]) -> InboxEntry:
    """An `INBOX_COLUMNS` row (by name) as an inbox entry."""
    return InboxEntry(*row.values())


class PostgresInbox(Repository):
    """The `inbox` table."""

    __slots__ = ()

    def get(self, event_id: str) -> InboxEntry | None:
        row = self._one(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE notice_id = %s", (event_id,))
        return entry_of(row) if row is not None else None

    def has(self, event_id: str) -> bool:
        """Whether the event was recorded; on a write, a redelivery that another instance is
        applying right now is waited for (its lock, until commit), so it is seen as recorded."""
        sql, params = "SELECT 1 AS found FROM inbox WHERE notice_id = %s", (event_id,)
        if self.conn.read_only:
            return self._one(sql, params) is not None
        return self._one_locked(event_id, 1, sql, params) is not None

    def by_status(self, status: InboxStatus, limit: int) -> list[InboxEntry]:
        """Entries of one status, oldest received first."""
        return [
            entry_of(row)
            for row in self._all(
                f"SELECT {INBOX_COLUMNS} FROM inbox WHERE status = %s ORDER BY received_ms, notice_id LIMIT %s",
                (status, limit),
            )
        ]

    def insert(self, entry: InboxEntry) -> bool:
        """Record a raw event; False if its event id was already recorded (by any instance)."""
        cursor = self._execute(
            f"INSERT INTO inbox ({INBOX_COLUMNS}) VALUES ({_INBOX_MARKS}) ON CONFLICT (notice_id) DO NOTHING".encode(),
            (
                entry.event_id, entry.event_type, entry.received_ms, entry.body, entry.status,
                entry.product_id, entry.notify_ms, entry.agent_id, entry.label_user,
                entry.label_character, entry.error,
            ),
        )  # fmt: skip
        return cursor.rowcount == 1

    def set_status(self, event_id: str, status: InboxStatus, error: str | None = None) -> None:
        self._execute(
            b"UPDATE inbox SET status = %s, error = %s WHERE notice_id = %s", (status, error, event_id)
        )

    def blank(self, event_id: str) -> None:
        """Drop a raw event's text (status `forgotten`); its id stays, so a redelivery is recognised."""
        self._execute(
            b"UPDATE inbox SET body = '', status = 'forgotten', error = NULL WHERE notice_id = %s",
            (event_id,),
        )
