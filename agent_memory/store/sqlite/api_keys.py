"""Scoped keys of the /v1 API: a name, a scope and the key's hash; revoked keys stay listed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import ApiKey, KeyScope
from agent_memory.store.sqlite.common import Repository

COLUMNS = "id, name, scope, key_hash, created_ms, last_used_ms, revoked_ms"


def key_of(row: Sequence[Any]) -> ApiKey:
    """An `api_keys` row as its record."""
    return ApiKey(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


class SQLiteApiKeys(Repository):
    """The `api_keys` table."""

    __slots__ = ()

    def by_hash(self, key_hash: str) -> ApiKey | None:
        row = self.conn.execute(f"SELECT {COLUMNS} FROM api_keys WHERE key_hash = ?", (key_hash,)).fetchone()
        return key_of(row) if row is not None else None

    def all(self) -> list[ApiKey]:
        return [key_of(row) for row in self.conn.execute(f"SELECT {COLUMNS} FROM api_keys ORDER BY id")]

    def add(self, name: str | None, scope: KeyScope, key_hash: str, created_ms: int) -> ApiKey:
        row = self.conn.execute(
            f"INSERT INTO api_keys (name, scope, key_hash, created_ms) VALUES (?, ?, ?, ?) RETURNING {COLUMNS}",
            (name, scope, key_hash, created_ms),
        ).fetchone()
        return key_of(row)

    def revoke(self, key_id: int, at_ms: int) -> ApiKey | None:
        """Revoke a key (a revoked one keeps its first revocation time); None if there is none."""
        row = self.conn.execute(
            f"UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, ?) WHERE id = ? RETURNING {COLUMNS}",
            (at_ms, key_id),
        ).fetchone()
        return key_of(row) if row is not None else None

    def used(self, key_id: int, at_ms: int) -> None:
        self.conn.execute("UPDATE api_keys SET last_used_ms = ? WHERE id = ?", (at_ms, key_id))
