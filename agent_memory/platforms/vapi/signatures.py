"""How a request proves it is Vapi's: its shared secret, or the HMAC of its raw body.

Vapi authenticates server messages with a credential attached to the server URL
(docs.vapi.ai/server-url/server-authentication):

- the shared secret (the inline `server.secret`, or a Bearer Token credential with header
  `X-Vapi-Secret` and no prefix): `X-Vapi-Secret: <secret>`; a Bearer Token credential with the
  default header sends `Authorization: Bearer <secret>`. Vapi's docs of 2024-2025 named the
  secret's header `X-Vapi-Signature`: a plain secret there is accepted too.
- an HMAC credential (Vapi's HMACAuthenticationPlan): `x-signature` (the default
  `signatureHeader`) holds HMAC(secret, payload) with the payload `{timestamp}.{body}` (the
  default `payloadFormat`), the timestamp in `x-timestamp` (the default `timestampHeader`), hex
  (the default `signatureEncoding`) or base64, optionally after a prefix such as `sha256=`
  (`signaturePrefix`), SHA-256 by default (SHA-1 and SHA-512 are offered: told apart by the
  digest's length). A signature over the body alone (payload format `{body}`, or
  `includeTimestamp` off) is accepted too, with or without a timestamp header: it dates nothing,
  so a replay of it is bounded only by the duplicate check. Vapi does not say whether the
  timestamp is in seconds or milliseconds: both are read, by magnitude, and a signed one must
  be within MAX_SKEW_MS of this service's clock.

Every comparison is constant-time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from typing import Any

from agent_memory.core.clock import to_ms
from agent_memory.errors import BadSignature

SECRET_HEADER = "X-Vapi-Secret"
# The HMAC's header: Vapi's default, and the name some integrations give it (and Vapi's older
# docs gave the plain secret).
SIGNATURE_HEADER = "x-signature"
VAPI_SIGNATURE_HEADER = "X-Vapi-Signature"
TIMESTAMP_HEADER = "x-timestamp"
# How far a signed timestamp may be from now: a captured request replayed later is refused.
MAX_SKEW_MS = 5 * 60 * 1000
SETTING = "AGENT_MEMORY_VAPI_SECRET"
# A `signaturePrefix` such as `sha256=` or `v1=`: letters and digits, then `=`, then more.
PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*=(?=.)")
DIGESTS: dict[int, Callable[..., Any]] = {20: hashlib.sha1, 32: hashlib.sha256, 64: hashlib.sha512}


def sign(secret: str, body: bytes, timestamp: str | None, algorithm: str = "sha256") -> str:
    """Lower-case hex HMAC of `{timestamp}.{body}` (of the body alone without a timestamp)."""
    payload = body if timestamp is None else timestamp.encode() + b"." + body
    return hmac.new(secret.encode(), payload, getattr(hashlib, algorithm)).hexdigest()


def hmac_headers(secret: str, body: bytes, timestamp_ms: int) -> dict[str, str]:
    """The headers an HMAC credential with Vapi's defaults sends (timestamp in milliseconds)."""
    stamp = str(timestamp_ms)
    return {SIGNATURE_HEADER: sign(secret, body, stamp), TIMESTAMP_HEADER: stamp}


def verify_vapi(secret: str, body: bytes, headers: Mapping[str, str], now_ms: int) -> str:
    """Check the request's secret or signature; returns the header that proved it, else BadSignature."""
    given = headers.get(SECRET_HEADER)
    if given is not None:
        if not _same(given.strip(), secret):
            raise BadSignature(
                f"{SECRET_HEADER} does not match {SETTING}: set it to the secret of the server URL's "
                "credential in Vapi"
            )
        return SECRET_HEADER
    authorization = headers.get("Authorization", "")
    if authorization[:7].lower() == "bearer ":
        if not _same(authorization[7:].strip(), secret):
            raise BadSignature(
                f"the bearer token does not match {SETTING}: set it to the token of the server URL's "
                "Bearer Token credential in Vapi"
            )
        return "Authorization"
    for header in (SIGNATURE_HEADER, VAPI_SIGNATURE_HEADER):
        given = headers.get(header)
        if given is None:
            continue
        given = given.strip()
        if header == VAPI_SIGNATURE_HEADER and _same(given, secret):
            return header  # the plain secret, as Vapi's older docs sent it
        stamp = headers.get(TIMESTAMP_HEADER)
        if stamp is not None and _signed(secret, stamp.strip().encode() + b"." + body, given):
            _fresh(stamp, now_ms)
            return header
        # A payload format of the body alone signs no timestamp, whether or not one is sent.
        if not _signed(secret, body, given):
            raise BadSignature(
                f"{header} does not match the body: check that {SETTING} is the secret key of the HMAC "
                f"credential in Vapi, that its payload format is '{{timestamp}}.{{body}}' (with "
                f"{TIMESTAMP_HEADER}) or the body alone, and that its secret is not marked base64"
            )
        return header
    raise BadSignature(
        f"missing credential: Vapi must send {SECRET_HEADER} (or Authorization: Bearer) with "
        f"{SETTING}, or an HMAC in {SIGNATURE_HEADER} with {TIMESTAMP_HEADER}; attach a credential "
        "to the server URL in Vapi"
    )


def _same(given: str, secret: str) -> bool:
    return hmac.compare_digest(given.encode(), secret.encode())


def _signed(secret: str, payload: bytes, given: str) -> bool:
    """Whether `given` (hex or base64, perhaps after a prefix) is an HMAC of `payload` with `secret`."""
    digest = _digest(PREFIX.sub("", given, count=1))
    algorithm = DIGESTS.get(len(digest)) if digest is not None else None
    if digest is None or algorithm is None:
        return False
    return hmac.compare_digest(digest, hmac.new(secret.encode(), payload, algorithm).digest())


def _digest(text: str) -> bytes | None:
    """The bytes a hex or base64 signature stands for, or None."""
    if len(text) in (40, 64, 128):
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    padded = text + "=" * (-len(text) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return decode(padded.encode("ascii"))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            continue
    return None


def _fresh(stamp: str, now_ms: int) -> None:
    """Refuse a signed timestamp that is no time, or too far from now (a replay, or a clock off)."""
    at_ms = to_ms(stamp.strip())
    if at_ms is None:
        raise BadSignature(f"{TIMESTAMP_HEADER} {stamp[:40]!r} is not a Unix time in seconds or milliseconds")
    skew_s = abs(now_ms - at_ms) / 1000
    if skew_s * 1000 > MAX_SKEW_MS:
        raise BadSignature(
            f"{TIMESTAMP_HEADER} is {skew_s:.0f} s from this service's clock (at most "
            f"{MAX_SKEW_MS // 1000} s are accepted): a replayed request, or a clock that is off"
        )
