"""Retell's `x-retell-signature`: `v=<ms>,d=<hex HMAC-SHA256(api key, raw body + ms)>`.

As the verify functions of Retell's SDKs compute it (retell-python-sdk
`src/retell/lib/webhook_auth.py`, retell-typescript-sdk `src/lib/webhook_auth.ts`): the digest is
over the raw body with the decimal timestamp appended, keyed with the API key that has the webhook
badge, and the timestamp must be within five minutes of now (either way).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from agent_memory.errors import BadSignature

HEADER = "x-retell-signature"
# Retell's SDKs: a signature more than five minutes from now (either way) is refused.
TOLERANCE_MS = 5 * 60 * 1000
# The SDKs' own pattern (`v=(\d+),d=(.*)`), anchored; whitespace around the parts is forgiven.
_SIGNATURE = re.compile(r"\s*v=(\d{1,19})\s*,\s*d=([0-9A-Fa-f]+)\s*")


def digest(api_key: str, body: bytes, timestamp_ms: int) -> str:
    """Lower-case hex HMAC-SHA256 of the raw body followed by the timestamp."""
    return hmac.new(api_key.encode(), body + str(timestamp_ms).encode(), hashlib.sha256).hexdigest()


def sign(api_key: str, body: bytes, timestamp_ms: int) -> str:
    """The header value Retell sends with `body` at `timestamp_ms`."""
    return f"v={timestamp_ms},d={digest(api_key, body, timestamp_ms)}"


def verify_retell(api_key: str, body: bytes, headers: Mapping[str, str], now_ms: int) -> int:
    """Check the signature over the raw body; returns its timestamp (ms)."""
    given = headers.get(HEADER)
    if given is None:
        raise BadSignature(f"missing signature: Retell sends {HEADER}: v=<ms>,d=<hex HMAC-SHA256>")
    match = _SIGNATURE.fullmatch(given)
    if match is None:
        raise BadSignature(f"{HEADER} is not of the form v=<ms>,d=<hex HMAC-SHA256>")
    timestamp_ms = int(match.group(1))
    if abs(now_ms - timestamp_ms) > TOLERANCE_MS:
        raise BadSignature(
            f"{HEADER} is dated {timestamp_ms} ms, more than 5 minutes from this server's clock "
            f"({now_ms} ms): a replay, or a clock that is off (check NTP on this host)"
        )
    expected = digest(api_key, body, timestamp_ms)
    if not hmac.compare_digest(match.group(2).lower().encode(), expected.encode()):
        raise BadSignature(
            f"{HEADER} does not match the body: check that AGENT_MEMORY_RETELL_API_KEY is the Retell "
            "API key with the webhook badge (Retell's dashboard, API Keys)"
        )
    return timestamp_ms
