"""The inbox: every raw platform event as received, under its event id (Agora's noticeId).

Ingest asks `has` before it applies an event and records it after, in one transaction; a write's
`has` holds the event's lock until commit, so an event delivered to two instances is applied once."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.core.domain import InboxEntry, InboxStatus
from agent_memory.store.shared.sql import LockedRead, Repository, Row, values_of

# In `InboxEntry`'s order; the table's names are Agora's (notice_id, label_user, ...).
INBOX_COLUMNS = (
    "notice_id, event_type, received_ms, body, status, product_id, notify_ms, agent_id, "
    "label_user, label_character, error"
)
_INSERT = (
    f"INSERT INTO inbox ({INBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (notice_id) DO NOTHING"
)
_HAS = "SELECT 1 AS found FROM inbox WHERE notice_id = ?"
# What takes a raw event's text (a forget's).
BLANK = "UPDATE inbox SET body = '', status = 'forgotten', error = NULL"


class Inbox(Repository):
    """The `inbox` table."""

    def get(self, event_id: str) -> InboxEntry | None:
        return self.sql.record(
            InboxEntry, f"SELECT {INBOX_COLUMNS} FROM inbox WHERE notice_id = ?", (event_id,)
        )

    def has(self, event_id: str) -> bool:
        """Whether the event was recorded; on a write, another instance applying it is waited for."""
        found = self.sql.locked(event_id, 1, _HAS, (event_id,))
        return found is not None

    def has_then(self, event_id: str, reads: Sequence[LockedRead]) -> tuple[bool, list[Row | None]]:
        """`has`, then `reads` (each under its lock, taken after the event's), read together: what
        applying the event reads first, whenever it was not recorded."""
        found, *rows = self.sql.locked_each([(event_id, 1, _HAS, (event_id,), False), *reads])
        return found is not None, rows

    def by_status(self, status: InboxStatus, limit: int) -> list[InboxEntry]:
        """Entries of one status, oldest received first."""
        return self.sql.records(
            InboxEntry,
            f"SELECT {INBOX_COLUMNS} FROM inbox WHERE status = ? ORDER BY received_ms, notice_id{self.sql.binary} LIMIT ?",
            (status, limit),
        )

    def insert(self, entry: InboxEntry) -> bool:
        """Record a raw event; False if its event id was already recorded (by any instance)."""
        return self.sql.run(_INSERT, values_of(entry)) == 1  # the columns are in `InboxEntry`'s order

    def keep(self, entry: InboxEntry) -> None:
        """Record a raw event no one else records meanwhile (its lock held since `has`), with the commit."""
        self.sql.send(_INSERT, values_of(entry))

    def set_status(self, event_id: str, status: InboxStatus, error: str | None = None) -> None:
        self.sql.run("UPDATE inbox SET status = ?, error = ? WHERE notice_id = ?", (status, error, event_id))

    def blank_run(self, agent_id: str) -> int:
        """Drop the text of every raw event of an agent run (as `blank`); how many."""
        return self.sql.run(f"{BLANK} WHERE agent_id = ? AND status <> 'forgotten'", (agent_id,))

    def blank(self, event_id: str) -> None:
        """Drop a raw event's text (status `forgotten`); its id stays, so a redelivery is recognised."""
        self.sql.run(f"{BLANK} WHERE notice_id = ?", (event_id,))
