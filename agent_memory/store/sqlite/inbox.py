"""The inbox: every raw platform event as received, under its event id (Agora's noticeId)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import InboxEntry, InboxStatus
from agent_memory.store.sqlite.common import Repository

# In `InboxEntry`'s order; the table's names are Agora's (notice_id, label_user, ...).
INBOX_COLUMNS = (
    "notice_id, event_type, received_ms, body, status, product_id, notify_ms, agent_id, "
    "label_user, label_character, error"
)


def entry_of(row: Sequence[Any]) -> InboxEntry:
    """An `INBOX_COLUMNS` row as an inbox entry."""
    return InboxEntry(*row)


class SQLiteInbox(Repository):
    """The `inbox` table."""

    __slots__ = ()

    def get(self, event_id: str) -> InboxEntry | None:
        row = self.conn.execute(
            f"SELECT {INBOX_COLUMNS} FROM inbox WHERE notice_id = ?", (event_id,)
        ).fetchone()
        return entry_of(row) if row is not None else None

    def has(self, event_id: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM inbox WHERE notice_id = ?", (event_id,)).fetchone() is not None
        )

    def by_status(self, status: InboxStatus, limit: int) -> list[InboxEntry]:
        """Entries of one status, oldest received first."""
        return [
            entry_of(row)
            for row in self.conn.execute(
                f"SELECT {INBOX_COLUMNS} FROM inbox WHERE status = ? ORDER BY received_ms LIMIT ?",
                (status, limit),
            )
        ]

    def insert(self, entry: InboxEntry) -> bool:
        """Record a raw event; False if its event id was already recorded."""
        cursor = self.conn.execute(
            f"INSERT OR IGNORE INTO inbox ({INBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.event_id, entry.event_type, entry.received_ms, entry.body, entry.status,
                entry.product_id, entry.notify_ms, entry.agent_id, entry.label_user,
                entry.label_character, entry.error,
            ),
        )  # fmt: skip
        return cursor.rowcount == 1

    def set_status(self, event_id: str, status: InboxStatus, error: str | None = None) -> None:
        self.conn.execute(
            "UPDATE inbox SET status = ?, error = ? WHERE notice_id = ?", (status, error, event_id)
        )

    def blank(self, event_id: str) -> None:
        """Drop a raw event's text (status `forgotten`); its id stays, so a redelivery is recognised."""
        self.conn.execute(
            "UPDATE inbox SET body = '', status = 'forgotten', error = NULL WHERE notice_id = ?", (event_id,)
        )
