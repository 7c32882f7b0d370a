"""Keys: scoped keys of the /v1 API (revoked keys stay listed) and per-agent custom-LLM routes."""

from __future__ import annotations

from typing import Any

from agent_memory.core.domain import ApiKey, KeyScope, LlmRoute
from agent_memory.core.jsonutil import dumps, loads_object
from agent_memory.store.shared.sql import Repository, values_of

KEY_COLUMNS = "id, name, scope, key_hash, created_ms, last_used_ms, revoked_ms"
ROUTE_COLUMNS = (
    "key_hash, agent_id, user_id, character_id, upstream_base_url, upstream_api_key, "
    "upstream_model, upstream_params, created_ms"
)
# A key minted again takes every column of its new route.
_REPLACE = ", ".join(f"{column} = excluded.{column}" for column in ROUTE_COLUMNS.split(", ")[1:])


class ApiKeys(Repository):
    """The `api_keys` table."""

    def by_hash(self, key_hash: str) -> ApiKey | None:
        return self.sql.record(ApiKey, f"SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?", (key_hash,))

    def all(self) -> list[ApiKey]:
        """Every key, revoked ones too, oldest first."""
        return self.sql.records(ApiKey, f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY id")

    def add(self, name: str | None, scope: KeyScope, key_hash: str, created_ms: int) -> ApiKey:
        key = self.sql.record(
            ApiKey,
            f"INSERT INTO api_keys (name, scope, key_hash, created_ms) VALUES (?, ?, ?, ?) RETURNING {KEY_COLUMNS}",
            (name, scope, key_hash, created_ms),
        )
        assert key is not None  # an INSERT … RETURNING answers its row
        return key

    def revoke(self, key_id: int, at_ms: int) -> ApiKey | None:
        """Revoke a key (a revoked one keeps its first revocation time); None if there is none."""
        return self.sql.record(
            ApiKey,
            f"UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, ?) WHERE id = ? RETURNING {KEY_COLUMNS}",
            (at_ms, key_id),
        )

    def used(self, key_id: int, at_ms: int) -> None:
        self.sql.run("UPDATE api_keys SET last_used_ms = ? WHERE id = ?", (at_ms, key_id))


def _route(*row: Any) -> LlmRoute:
    """A `ROUTE_COLUMNS` row as its record (params parsed from JSON)."""
    values = list(row)
    values[7] = loads_object(values[7])  # upstream_params
    return LlmRoute(*values)


class LlmRoutes(Repository):
    """The `llm_routes` table."""

    def by_key_hash(self, key_hash: str) -> LlmRoute | None:
        return self.sql.record(
            _route, f"SELECT {ROUTE_COLUMNS} FROM llm_routes WHERE key_hash = ?", (key_hash,)
        )

    def of_agent(self, agent_id: str) -> list[LlmRoute]:
        """The routes minted for an agent run, oldest first."""
        return self.sql.records(
            _route,
            f"SELECT {ROUTE_COLUMNS} FROM llm_routes WHERE agent_id = ? ORDER BY created_ms, key_hash{self.sql.binary}",
            (agent_id,),
        )

    def add(self, route: LlmRoute) -> None:
        """Store a route (a key minted again replaces its route)."""
        self.sql.run(
            f"INSERT INTO llm_routes ({ROUTE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (key_hash) DO UPDATE SET {_REPLACE}",
            (*values_of(route)[:7], dumps(route.upstream_params or {}), route.created_ms),
        )

    def set_agent(self, key_hash: str, agent_id: str) -> bool:
        """Tie a route to the agent run its key was minted for; False if no such route."""
        return self.sql.run("UPDATE llm_routes SET agent_id = ? WHERE key_hash = ?", (agent_id, key_hash)) > 0

    def delete(self, key_hash: str) -> bool:
        """Forget a route (its agent never started); False if there was none."""
        return self.sql.run("DELETE FROM llm_routes WHERE key_hash = ?", (key_hash,)) > 0
