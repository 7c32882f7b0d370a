"""Who is using the console: a signed-in session (cookie) or a bearer key, and what it may do.

A session is a random token in an HttpOnly, SameSite=Strict cookie (Secure when the public URL
is https); the database keeps only its hash and the hash of the key it was opened with, so any
instance serves it, revoking the key ends it, and it lasts at most `SESSION_TTL_MS`. Each form
POST carries a CSRF token derived from the session token (an HMAC: nothing more to store); a
request that brings a bearer key instead of the cookie needs none, since no other site can make
a browser send that header. Scopes are the API's (web/auth.py): read, write, admin.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from agent_memory.core.domain import KeyScope
from agent_memory.core.secrets import grants, hash_key
from agent_memory.errors import Forbidden
from agent_memory.web.address import client_address
from agent_memory.web.auth import GATE, Gate
from agent_memory.web.keys import MEMORY, SETTINGS

COOKIE: Final = "agent_memory_console"
# A session lasts this long from sign-in, at most (the bound).
SESSION_TTL_MS: Final = 12 * 3600 * 1000
CSRF_FIELD: Final = "csrf"
# What stands for "no key" while the API is open (no AGENT_MEMORY_API_TOKEN): not a key's hash.
OPEN_KEY_HASH: Final = "open"


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who sent a console request: the scope their key holds, and the session token if by cookie."""

    scope: KeyScope
    token: str | None = None

    @property
    def csrf(self) -> str:
        """The CSRF token of the session's forms ('' without a session: bearer requests need none)."""
        return csrf_of(self.token) if self.token else ""

    def may(self, needed: KeyScope) -> bool:
        return grants(self.scope, needed)


def csrf_of(token: str) -> str:
    """The session's CSRF token: an HMAC of a fixed label under the session token."""
    return hmac.new(token.encode(), b"agent-memory console csrf", hashlib.sha256).hexdigest()


def key_hash_of(gate: Gate, key: str) -> str:
    """What a session remembers of the key it was opened with."""
    return OPEN_KEY_HASH if gate.open else hash_key(key)


async def viewer_of(request: web.Request) -> Viewer | None:
    """The request's viewer from its bearer key or its session cookie; None when it has neither
    (or its session expired, was ended, or its key was revoked)."""
    gate = request.app[GATE]
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        if gate.open:
            return Viewer("admin")
        scope = await gate.scope_of(given.strip())
        if scope is None:
            gate.refuse_wrong(client_of(request, gate))
        return Viewer(scope)
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    signed = await request.app[MEMORY].keys.console_session(token)
    if signed is None:
        return None
    key_hash = signed.session.key_hash
    if gate.open:
        return Viewer("admin", token)
    if gate.token_hash is not None and hmac.compare_digest(key_hash, gate.token_hash):
        return Viewer("admin", token)
    if signed.key is None or signed.key.revoked_ms is not None:
        # Revoked (or deleted) since sign-in: the session ends here too, on whichever instance.
        await request.app[MEMORY].keys.end_console_session(token)
        return None
    return Viewer(signed.key.scope, token)


def client_of(request: web.Request, gate: Gate) -> str:
    """The address wrong keys are counted against (through trusted proxies)."""
    return client_address(request, gate.proxies)


def check_post(request: web.Request, viewer: Viewer, form: dict[str, str]) -> None:
    """Refuse a form POST another site made: a foreign Origin, or a session without its CSRF token."""
    origin = request.headers.get("Origin")
    if origin is not None and not same_origin(request, origin):
        raise Forbidden(f"a form posted from {origin} is refused: the console only takes its own forms")
    if request.headers.get("Sec-Fetch-Site") == "cross-site":
        raise Forbidden("a form posted from another site is refused: the console only takes its own forms")
    if viewer.token is None:
        return  # a bearer key: no other site can make a browser send it
    if not hmac.compare_digest(form.get(CSRF_FIELD, ""), viewer.csrf):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and send it again")


def same_origin(request: web.Request, origin: str) -> bool:
    """Whether `origin` is this service, as the request reached it or as its public URL says."""
    host = urlsplit(origin).netloc.lower()
    if not host:
        return False
    public = request.app[SETTINGS].public_url
    return host == request.host.lower() or (public is not None and host == urlsplit(public).netloc.lower())


def secure_cookie(request: web.Request) -> bool:
    """Mark the cookie Secure when the service is reached over https (its public URL says so)."""
    public = request.app[SETTINGS].public_url
    return public is not None and public.lower().startswith("https://")


def set_session_cookie(request: web.Request, response: web.StreamResponse, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=SESSION_TTL_MS // 1000,
        path="/console",
        httponly=True,
        samesite="Strict",
        secure=secure_cookie(request),
    )


def clear_session_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/console")
