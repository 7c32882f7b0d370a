"""The `ElevenLabs-Signature` header: HMAC-SHA256 of `"<t>.<raw body>"`, at most 30 minutes old.

As the official SDKs check it (elevenlabs-python `webhooks_custom.py`, elevenlabs-js
`wrapper/webhooks.ts`): `t=<unix seconds>,v0=<hex digest>`; the digest is over the timestamp, a
dot and the body exactly as sent.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from agent_memory.errors import BadSignature

HEADER = "ElevenLabs-Signature"
# The SDKs refuse a timestamp older than this; one as far in the future is refused too (it
# would make a captured request replayable for as long).
TOLERANCE_S = 30 * 60
SETTING = "AGENT_MEMORY_ELEVENLABS_SECRET"


def digest(secret: str, timestamp: str, body: bytes) -> str:
    """Lower-case hex HMAC-SHA256 of `"<timestamp>.<body>"`."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header value ElevenLabs sends with `body` (now, unless told when)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return f"t={stamp},v0={digest(secret, stamp, body)}"


def verify(secret: str, body: bytes, header: str | None, *, now_s: float | None = None) -> int:
    """Check the header against the raw body; returns its timestamp (unix seconds)."""
    if not header:
        raise BadSignature(f"missing {HEADER}: ElevenLabs signs every post-call webhook with it")
    stamp, given = None, []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            stamp = value.strip()
        elif name == "v0":
            given.append(value.strip().lower())
    if not stamp or not stamp.isdigit() or not given:
        raise BadSignature(f"{HEADER} must be 't=<unix seconds>,v0=<hex HMAC-SHA256>'")
    age = (time.time() if now_s is None else now_s) - int(stamp)
    if abs(age) > TOLERANCE_S:
        raise BadSignature(
            f"{HEADER} timestamp is {abs(age) / 60:.0f} min {'old' if age > 0 else 'ahead'}, "
            f"over the {TOLERANCE_S // 60} min allowed: a replayed request, or this machine's clock is off"
        )
    expected = digest(secret, stamp, body).encode()
    # Every v0 is compared (a sender may list more than one while a secret is rotated).
    if not any(hmac.compare_digest(value.encode(), expected) for value in given):
        raise BadSignature(
            f"{HEADER} does not match the body: check that {SETTING} is the signing secret ElevenLabs "
            "showed when the post-call webhook was created (Agents settings, Webhooks)"
        )
    return int(stamp)
