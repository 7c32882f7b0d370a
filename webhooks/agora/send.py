#!/usr/bin/env python3
"""Send sample Agora callbacks to a deployment, signed as Agora's notification service signs them.

    python3 webhooks/agora/send.py https://memory.example.com webhooks/agora/*.json

The secret is AGORA_WEBHOOK_SECRET from the environment, or --secret: the same secret the
service was started with. Each file's bytes are sent as they are, with Agora-Signature-V2 (hex
HMAC-SHA256 of those bytes) and Agora-Signature (hex HMAC-SHA1). --curl prints the curl line for
each file instead of sending it. Needs nothing but Python 3's standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import shlex
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

PATH = "/webhooks/agora"


def signatures(secret: str, body: bytes) -> dict[str, str]:
    """The two headers Agora's notification service sends with a callback."""
    return {
        "Agora-Signature-V2": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "Agora-Signature": hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
    }


def endpoint(url: str) -> str:
    """The webhook's address at a deployment given by its base URL (or by the full address)."""
    url = url.rstrip("/")
    return url if url.endswith(PATH) else url + PATH


def send(url: str, secret: str, body: bytes, timeout_s: float = 10.0) -> tuple[int, str]:
    """POST one callback; the status and the answer's text (an error status is an answer too)."""
    headers = {"Content-Type": "application/json", **signatures(secret, body)}
    request = urllib.request.Request(endpoint(url), data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode("utf-8", "replace")


def curl_line(url: str, secret: str, file: Path) -> str:
    """The curl command that sends `file` as this script would."""
    headers = signatures(secret, file.read_bytes())
    parts = ["curl", "-sS", "-X", "POST", endpoint(url), "-H", "Content-Type: application/json"]
    for name, value in headers.items():
        parts += ["-H", f"{name}: {value}"]
    parts += ["--data-binary", f"@{file}"]
    return shlex.join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "url", help="the deployment, e.g. https://memory.example.com or http://127.0.0.1:8080"
    )
    parser.add_argument("files", nargs="+", type=Path, help="callback envelopes (JSON), sent in this order")
    parser.add_argument(
        "--secret", default=os.environ.get("AGORA_WEBHOOK_SECRET"), help="AGORA_WEBHOOK_SECRET"
    )
    parser.add_argument("--curl", action="store_true", help="print a curl line per file instead of sending")
    args = parser.parse_args(argv)
    if not args.secret:
        parser.error("give --secret, or set AGORA_WEBHOOK_SECRET: the secret the service was started with")
    failed = 0
    for file in args.files:
        if args.curl:
            print(curl_line(args.url, args.secret, file))
            continue
        try:
            status, text = send(args.url, args.secret, file.read_bytes())
        except OSError as exc:  # not reachable, refused, timed out, or an unreadable file
            status, text = 0, str(getattr(exc, "reason", exc))
        print(f"{file.name}: {status or 'no answer'} {text.strip()}")
        failed += status != 200
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
