"""Per-agent custom-LLM routes: a key's hash, the pair it serves, and the caller's own upstream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_memory.core.domain import LlmRoute
from agent_memory.store.postgres.common import Repository, dumps, loads_object

COLUMNS = (
    "key_hash, agent_id, user_id, character_id, upstream_base_url, upstream_api_key, "
    "upstream_model, upstream_params, created_ms"
)
_MARKS = ", ".join(["%s"] * len(COLUMNS.split(", ")))
# A key minted again takes every column of its new route.
_REPLACE = ", ".join(f"{column} = excluded.{column}" for column in COLUMNS.split(", ")[1:])


def route_of(row: Mapping[str, Any]) -> LlmRoute:
    """A `llm_routes` row (by name) as its record (params parsed from JSON)."""
    return LlmRoute(
        row["key_hash"], row["agent_id"], row["user_id"], row["character_id"], row["upstream_base_url"],
        row["upstream_api_key"], row["upstream_model"], loads_object(row["upstream_params"]),
        row["created_ms"],
    )  # fmt: skip


class PostgresLlmRoutes(Repository):
    """The `llm_routes` table."""

    __slots__ = ()

    def by_key_hash(self, key_hash: str) -> LlmRoute | None:
        row = self._one(f"SELECT {COLUMNS} FROM llm_routes WHERE key_hash = %s", (key_hash,))
        return route_of(row) if row is not None else None

    def of_agent(self, agent_id: str) -> list[LlmRoute]:
        rows = self._all(
            f'SELECT {COLUMNS} FROM llm_routes WHERE agent_id = %s ORDER BY created_ms, key_hash COLLATE "C"',
            (agent_id,),
        )
        return [route_of(row) for row in rows]

    def add(self, route: LlmRoute) -> None:
        """Store a route (a key minted again replaces its route)."""
        self.conn.execute(
            f"INSERT INTO llm_routes ({COLUMNS}) VALUES ({_MARKS}) ON CONFLICT (key_hash) DO UPDATE SET {_REPLACE}".encode(),
            (
                route.key_hash, route.agent_id, route.user_id, route.character_id,
                route.upstream_base_url, route.upstream_api_key, route.upstream_model,
                dumps(route.upstream_params or {}), route.created_ms,
            ),
        )  # fmt: skip

    def set_agent(self, key_hash: str, agent_id: str) -> bool:
        """Tie a route to the agent run its key was minted for; False if no such route."""
        cursor = self.conn.execute(
            b"UPDATE llm_routes SET agent_id = %s WHERE key_hash = %s", (agent_id, key_hash)
        )
        return cursor.rowcount > 0

    def delete(self, key_hash: str) -> bool:
        """Forget a route (its agent never started); False if there was none."""
        return self.conn.execute(b"DELETE FROM llm_routes WHERE key_hash = %s", (key_hash,)).rowcount > 0
