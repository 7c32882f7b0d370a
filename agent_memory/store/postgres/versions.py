"""Change counters of pairs' memory: facts and summaries bump by trigger, message writes by `bump`."""

from __future__ import annotations

from collections.abc import Iterable

from agent_memory.store.postgres.common import Connection, Repository
from agent_memory.store.shared.facts import USER_WIDE


class PostgresVersions(Repository):
    """When a pair's memory last changed, as a number that only grows."""

    __slots__ = ()

    def of_pair(self, user_id: str, character_id: str) -> tuple[int, int]:
        """The pair's version and the user's user-wide facts' version (0: never changed)."""
        rows = {
            row["character_id"]: row["version"]
            for row in self._all(
                "SELECT character_id, version FROM memory_versions WHERE user_id = %s AND character_id = ANY(%s)",
                (user_id, [character_id, USER_WIDE]),
            )
        }
        return rows.get(character_id, 0), rows.get(USER_WIDE, 0)


_BUMP = (
    b"INSERT INTO memory_versions (user_id, character_id, version) "
    b"SELECT u, c, nextval('memory_clock') FROM unnest(%s::text[], %s::text[]) AS p(u, c) "
    b"ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock')"
)
_BUMP_ONE = (
    b"INSERT INTO memory_versions (user_id, character_id, version) VALUES (%s, %s, nextval('memory_clock')) "
    b"ON CONFLICT (user_id, character_id) DO UPDATE SET version = nextval('memory_clock')"
)


def bump(conn: Connection, pairs: Iterable[tuple[str, str]]) -> None:
    """Count a change of each (user, character) pair's messages, in one statement."""
    # Sorted: concurrent bumps lock the pairs' rows in one order, so they queue, not deadlock.
    ordered = sorted(set(pairs))
    if not ordered:
        return
    # The clock is read again once the row is locked (DO UPDATE runs after the lock is
    # taken): a transaction that waited for another's bump commits a higher version, so a
    # version never goes back and never stays put over a change.
    if len(ordered) == 1:  # the usual case: no arrays to adapt
        conn.shared_cursor().execute(_BUMP_ONE, ordered[0])
        return
    conn.shared_cursor().execute(
        _BUMP, ([user for user, _ in ordered], [character for _, character in ordered])
    )
