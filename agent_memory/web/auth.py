"""Who may call which /v1 route: the admin token, scoped keys, and a limit on wrong guesses.

`AGENT_MEMORY_API_TOKEN` is the admin key; keys made with `POST /v1/keys` (or `agent-memory keys
create`) carry a scope. Every /v1 route declares the scope it needs (web/declare.py): `read`
reads one pair's memory, `write` changes it or starts and stops agents, `admin` reaches across
users (forget, export, mentions, stats, purge, jobs, keys). Write implies read; admin, all.
Without a token the API is open: `serve` refuses that on an address other machines reach
unless told it is meant (`open_api_warning`). Wrong keys are counted per client address
(web/address.py) and limited; a right key is always checked and let in.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NoReturn

from aiohttp import web

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import ApiKey, KeyScope
from agent_memory.core.secrets import grants, hash_key
from agent_memory.errors import Forbidden, NotConfigured, RateLimited, Unauthorized
from agent_memory.memory.service import Memory
from agent_memory.settings import Network, Settings
from agent_memory.web.address import client_address
from agent_memory.web.declare import OWN_BEARER, SCOPES, Needs
from agent_memory.web.http import Handler
from agent_memory.web.keys import AUTH_STATS, MEMORY, AuthStats

log = logging.getLogger(__name__)

# An address that sent this many wrong keys within the window has its wrong keys refused (429) for a
# window; a right key is let in all the same.
FAILURES_ALLOWED = 20
FAILURE_WINDOW_S = 60.0
# Addresses remembered at most (the oldest is dropped first): memory stays bounded whoever knocks.
ADDRESSES_KEPT = 10_000
# A key found is trusted this long before it is read again (a revocation elsewhere takes this long).
KEY_CACHE_S = 5.0
KEYS_CACHED = 1024
# last_used_ms is written at most this often per key and instance.
USED_EVERY_MS = 60_000

MISSING = "missing bearer token: send 'Authorization: Bearer <key>' (AGENT_MEMORY_API_TOKEN, or a key from POST /v1/keys)"
WRONG = "wrong or revoked bearer token: send 'Authorization: Bearer <key>' (AGENT_MEMORY_API_TOKEN, or a key from POST /v1/keys)"


def needs(app: web.Application, method: str, route: str | None) -> Needs:
    """The scope a request needs: its route's declared one (admin if none), read for a path no
    route has (to answer its 404)."""
    if route is None:
        return "read"
    return app.get(SCOPES, {}).get(("GET" if method == "HEAD" else method, route), "admin")


class FailureLimiter:
    """Wrong keys counted per client address in fixed windows; memory bounded by ADDRESSES_KEPT.

    An address that reaches `allowed` wrong keys is limited for a whole window from that moment:
    its further wrong keys are refused (429) until then, and it is reported once per window.
    """

    def __init__(
        self,
        allowed: int = FAILURES_ALLOWED,
        window_s: float = FAILURE_WINDOW_S,
        *,
        kept: int = ADDRESSES_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed = allowed
        self.window_s = window_s
        self.kept = kept
        self.clock = clock
        self._windows: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def wait_s(self, address: str) -> float:
        """How long `address`'s wrong keys are refused still (0: they are heard now)."""
        window = self._windows.get(address)
        if window is None:
            return 0.0
        left = window[0] + self.window_s - self.clock()
        if left <= 0:
            del self._windows[address]
            return 0.0
        return left if window[1] >= self.allowed else 0.0

    def failed(self, address: str) -> bool:
        """Count a wrong key from `address`; True when it is the one that makes the address limited."""
        now = self.clock()
        start, count = self._windows.pop(address, (now, 0))
        if now - start >= self.window_s:
            start, count = now, 0
        count += 1
        if count == self.allowed:
            # Limited from now for a whole window, so the next window (and the next report of
            # this address) is at least one window away.
            start = now
        self._windows[address] = (start, count)  # newest last: the oldest go first
        while len(self._windows) > self.kept:
            self._windows.popitem(last=False)
        return count == self.allowed


class Gate:
    """Checks each /v1 request's bearer against the admin token and the stored keys."""

    def __init__(
        self,
        token: str | None,
        memory: Memory,
        stats: AuthStats,
        limiter: FailureLimiter,
        proxies: tuple[Network, ...] = (),
    ) -> None:
        self.token_hash = hash_key(token) if token else None
        self.memory = memory
        self.stats = stats
        self.limiter = limiter
        self.proxies = proxies  # AGENT_MEMORY_TRUSTED_PROXIES: whose X-Forwarded-For is believed
        # key hash -> (the key as read, monotonic time read)
        self._keys: OrderedDict[str, tuple[ApiKey, float]] = OrderedDict()

    @property
    def open(self) -> bool:
        """No admin token: every /v1 route answers anyone (serve warns or refuses)."""
        return self.token_hash is None

    async def admit(self, request: web.Request) -> None:
        """Return if the request may reach its route; raise 401, 403 or 429 otherwise."""
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else None
        needed = needs(request.app, request.method, route)
        if needed == OWN_BEARER or self.open:
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            self.stats.refuse("missing")
            raise Unauthorized(MISSING)
        # A right key is always checked and let in, however many wrong ones came from its address
        # (behind a proxy that address is everyone's): only the wrong ones are limited.
        scope = await self.scope_of(given)
        if scope is None:
            self.refuse_wrong(client_address(request, self.proxies))
        if not grants(scope, needed):
            self.stats.refuse("scope")
            raise Forbidden(
                f"{request.method} {route} needs a key of scope {needed} or above; this key's scope is {scope}"
            )

    def refuse_wrong(self, address: str) -> NoReturn:
        """Count a wrong key from `address` and refuse it: 401, or 429 while the address is limited."""
        wait = self.limiter.wait_s(address)
        if wait > 0:
            self.stats.refuse("limited")
            raise RateLimited(
                f"too many wrong keys from {address}: send the right key, or wait {math.ceil(wait)} s",
                retry_after=wait,
            )
        if self.limiter.failed(address):
            # Once per address and window (FailureLimiter); the address, never what was sent.
            log.warning(
                "%d wrong API keys from %s within %.0f s: its wrong keys are refused (429) for %.0f s; "
                "right keys from it are still let in",
                self.limiter.allowed,
                address,
                self.limiter.window_s,
                self.limiter.window_s,
            )
        self.stats.refuse("wrong")
        raise Unauthorized(WRONG)

    async def scope_of(self, given: str) -> KeyScope | None:
        """The scope the bearer holds: admin for the token, a live key's own, None for anything else."""
        given_hash = hash_key(given)
        # Hashes compared, so the time taken says nothing of how much of the token was right.
        if self.token_hash is not None and hmac.compare_digest(given_hash, self.token_hash):
            return "admin"
        key = await self._key(given, given_hash)
        if key is None or key.revoked_ms is not None or not hmac.compare_digest(key.key_hash, given_hash):
            return None
        return key.scope

    def drop(self, key_hash: str) -> None:
        """Forget a cached key (it was just revoked here)."""
        self._keys.pop(key_hash, None)

    async def _key(self, given: str, given_hash: str) -> ApiKey | None:
        cached = self._keys.get(given_hash)
        if cached is not None and time.monotonic() - cached[1] < KEY_CACHE_S:
            return cached[0]
        key = await self.memory.keys.api_key(given)
        if key is None:
            self._keys.pop(given_hash, None)
            return None
        stamp = now_ms()
        if key.revoked_ms is None and (key.last_used_ms is None or stamp - key.last_used_ms >= USED_EVERY_MS):
            await self.memory.keys.api_key_used(key.id, stamp)
        self._keys[given_hash] = (key, time.monotonic())
        self._keys.move_to_end(given_hash)
        while len(self._keys) > KEYS_CACHED:
            self._keys.popitem(last=False)
        return key


GATE = web.AppKey("gate", Gate)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admit /v1 requests through the app's gate; everything else checks its own way or is public."""
    if request.path.startswith("/v1/"):
        await request.app[GATE].admit(request)
    return await handler(request)


def install_gate(app: web.Application, settings: Settings) -> Gate:
    """Put a gate for `settings.api_token` in the app (the middleware finds it there), with its stats."""
    stats = app[AUTH_STATS] = AuthStats()
    gate = app[GATE] = Gate(
        settings.api_token, app[MEMORY], stats, FailureLimiter(), settings.trusted_proxies
    )
    return gate


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine's loopback addresses (a name is resolved)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in found)


def open_api_warning(settings: Settings) -> str | None:
    """What to warn of before serving, or NotConfigured when /v1 would be open to other machines."""
    if settings.api_token:
        return None
    where = f"{settings.host}:{settings.port}"
    if is_loopback(settings.host):
        return (
            f"AGENT_MEMORY_API_TOKEN is not set: every /v1 route (export, forget, search across users) "
            f"answers any program on this machine at {where}; set it before serving on another address"
        )
    if settings.allow_open_api:
        return (
            f"AGENT_MEMORY_API_TOKEN is not set and --allow-open-api is given: every /v1 route (export, "
            f"forget, search across users) answers anyone who can reach {where}; only on a network you trust"
        )
    raise NotConfigured(
        f"refusing to serve the /v1 API on {where} without a key: anyone who can reach it could read, "
        "export and forget every user's memory. Set AGENT_MEMORY_API_TOKEN to a long random secret "
        "(e.g. the output of `python -c 'import secrets; print(secrets.token_urlsafe(32))'`), or listen on "
        "127.0.0.1 (--host), or pass --allow-open-api (AGENT_MEMORY_ALLOW_OPEN_API=1) on a network you trust"
    )
