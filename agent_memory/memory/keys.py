"""What is known by its hash alone: /v1 API keys, console sign-ins, per-agent custom-LLM routes."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import ApiKey, ConsoleSession, KeyScope, LlmRoute
from agent_memory.core.secrets import hash_key, new_api_key
from agent_memory.errors import NotFound
from agent_memory.store import ReadView, Store, Transaction


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just made: its record, and the key itself, which is never stored nor shown again."""

    record: ApiKey
    key: str


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A live console session and the stored key it was opened with (None: not a stored key)."""

    session: ConsoleSession
    key: ApiKey | None


class Keys:
    """API keys (made, listed, looked up, revoked), console sessions and custom-LLM routes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def create_api_key(self, scope: KeyScope, name: str | None = None) -> IssuedKey:
        """A new /v1 API key of `scope`, stored by its hash only."""
        key = new_api_key()
        record = await self.store.write(lambda tx: tx.api_keys.add(name, scope, hash_key(key), now_ms()))
        return IssuedKey(record, key)

    async def api_keys(self) -> list[ApiKey]:
        """Every /v1 API key, revoked ones too, oldest first."""
        return await self.store.read(lambda view: view.api_keys.all())

    async def api_key(self, key: str) -> ApiKey | None:
        """The /v1 API key `key` is (revoked or not), looked up by its hash."""
        key_hash = hash_key(key)
        return await self.store.read(lambda view: view.api_keys.by_hash(key_hash))

    async def revoke_api_key(self, key_id: int) -> ApiKey:
        """Revoke a key for good (again: no change); NotFound if there is no such key."""

        def revoke(tx: Transaction) -> ApiKey | None:
            key = tx.api_keys.revoke(key_id, now_ms())
            if key is not None:
                tx.console_sessions.end_for_key(key.key_hash)  # its console sign-ins end with it
            return key

        revoked = await self.store.write(revoke)
        if revoked is None:
            raise NotFound(f"no API key {key_id}; GET /v1/keys (agent-memory keys list) lists them")
        return revoked

    async def api_key_used(self, key_id: int, at_ms: int) -> None:
        await self.store.write(lambda tx: tx.api_keys.used(key_id, at_ms))

    async def open_console_session(self, key_hash: str, ttl_ms: int) -> str:
        """Sign in to the console with the key of this hash: a new session token (kept by hash only)."""
        token = new_api_key()
        stamp = now_ms()
        session = ConsoleSession(hash_key(token), key_hash, stamp, stamp + ttl_ms)
        await self.store.write(lambda tx: tx.console_sessions.open(session))
        return token

    async def console_session(self, token: str) -> SignedIn | None:
        """The live console session of `token` and the stored key it was opened with (None: the
        admin token, or a key since deleted); None when there is no such session or it expired."""
        token_hash = hash_key(token)

        def read(view: ReadView) -> SignedIn | None:
            session = view.console_sessions.get(token_hash, now_ms())
            if session is None:
                return None
            return SignedIn(session, view.api_keys.by_hash(session.key_hash))

        return await self.store.read(read)

    async def end_console_session(self, token: str) -> bool:
        """Sign out of the console: the session ends at once, on every instance."""
        token_hash = hash_key(token)
        return await self.store.write(lambda tx: tx.console_sessions.end(token_hash))

    async def llm_route(self, key: str) -> LlmRoute | None:
        """The per-agent custom-LLM route a bearer key was minted for, looked up by its hash."""
        key_hash = hash_key(key)
        return await self.store.read(lambda view: view.llm_routes.by_key_hash(key_hash))

    async def add_llm_route(self, route: LlmRoute) -> None:
        """Keep a per-agent custom-LLM route (its key by hash only) for the endpoint to find."""
        await self.store.write(lambda tx: tx.llm_routes.add(route))

    async def drop_llm_route(self, key_hash: str) -> bool:
        """Forget a route whose agent never started (Agora refused the join)."""
        return await self.store.write(lambda tx: tx.llm_routes.delete(key_hash))

    async def tie_llm_route(self, key_hash: str, agent_id: str) -> bool:
        """Tie a route to the agent run its key was minted for; False if there is no such route."""
        return await self.store.write(lambda tx: tx.llm_routes.set_agent(key_hash, agent_id))
