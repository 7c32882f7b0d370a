"""Keys handed out to callers: compared and stored by their hash only, never in clear."""

from __future__ import annotations

import hashlib
import secrets

from agent_memory.core.domain import KEY_SCOPES, KeyScope

# Marks a scoped key of the /v1 API, so that one pasted in the wrong place is recognised.
API_KEY_PREFIX = "amk_"


def hash_key(key: str) -> str:
    """The SHA-256 of `key`, hex: what is stored and looked up for it."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_api_key() -> str:
    """A fresh /v1 API key: the prefix and 256 random bits."""
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def grants(scope: KeyScope, needed: KeyScope) -> bool:
    """Whether a key of `scope` may do what needs `needed` (write implies read; admin, all)."""
    return KEY_SCOPES.index(scope) >= KEY_SCOPES.index(needed)
