"""HMAC signatures of webhook bodies, compared in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from agent_memory.errors import BadSignature

V2_HEADER = "Agora-Signature-V2"  # hex HMAC-SHA256
V1_HEADER = "Agora-Signature"  # hex HMAC-SHA1


def sign(secret: str, body: bytes, algorithm: str = "sha256") -> str:
    """Lower-case hex HMAC of the raw body."""
    # One-shot (OpenSSL's HMAC in one call): no HMAC object and its two hash copies per callback.
    return hmac.digest(secret.encode(), body, algorithm).hex()


def agora_headers(secret: str, body: bytes) -> dict[str, str]:
    """Both headers NCS sends with a callback."""
    return {V2_HEADER: sign(secret, body, "sha256"), V1_HEADER: sign(secret, body, "sha1")}


def verify_agora(secret: str, body: bytes, headers: Mapping[str, str]) -> str:
    """Check the V2 signature, or V1 when only that is sent; returns the header used."""
    for header, algorithm in ((V2_HEADER, "sha256"), (V1_HEADER, "sha1")):
        given = headers.get(header)
        if given is None:
            continue
        expected = sign(secret, body, algorithm)
        if not hmac.compare_digest(given.strip().lower().encode(), expected.encode()):
            raise BadSignature(
                f"{header} does not match the body: check that AGORA_WEBHOOK_SECRET is the "
                "notification secret from Agora's console (not the REST customer secret)"
            )
        return header
    raise BadSignature(f"missing signature: send {V2_HEADER} (HMAC-SHA256) or {V1_HEADER} (HMAC-SHA1)")
