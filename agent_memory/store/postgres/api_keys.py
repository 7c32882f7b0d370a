"""Scoped keys of the /v1 API: a name, a scope and the key's hash; revoked keys stay listed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_memory.core.domain import ApiKey, KeyScope
from agent_memory.store.postgres.common import Repository

COLUMNS = "id, name, scope, key_hash, created_ms, last_used_ms, revoked_ms"


def key_of(row: Mapping[str, Any]) -> ApiKey:
    """An `api_keys` row (by name) as its record."""
    return ApiKey(
        row["id"], row["name"], row["scope"], row["key_hash"], row["created_ms"], row["last_used_ms"],
        row["revoked_ms"],
    )  # fmt: skip


class PostgresApiKeys(Repository):
    """The `api_keys` table."""

    __slots__ = ()

    def by_hash(self, key_hash: str) -> ApiKey | None:
        row = self._one(f"SELECT {COLUMNS} FROM api_keys WHERE key_hash = %s", (key_hash,))
        return key_of(row) if row is not None else None

    def all(self) -> list[ApiKey]:
        return [key_of(row) for row in self._all(f"SELECT {COLUMNS} FROM api_keys ORDER BY id")]

    def add(self, name: str | None, scope: KeyScope, key_hash: str, created_ms: int) -> ApiKey:
        row = self._one(
            f"INSERT INTO api_keys (name, scope, key_hash, created_ms) VALUES (%s, %s, %s, %s) RETURNING {COLUMNS}",
            (name, scope, key_hash, created_ms),
        )
        assert row is not None  # an INSERT … RETURNING answers its row
        return key_of(row)

    def revoke(self, key_id: int, at_ms: int) -> ApiKey | None:
        """Revoke a key (a revoked one keeps its first revocation time); None if there is none."""
        row = self._one(
            f"UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, %s) WHERE id = %s RETURNING {COLUMNS}",
            (at_ms, key_id),
        )
        return key_of(row) if row is not None else None

    def used(self, key_id: int, at_ms: int) -> None:
        self.conn.execute(b"UPDATE api_keys SET last_used_ms = %s WHERE id = %s", (at_ms, key_id))
