#!/usr/bin/env python3
"""Send sample Retell webhooks to a deployment, signed as Retell signs them.

    python3 webhooks/retell/send.py https://memory.example.com webhooks/retell/*.json

The key is AGENT_MEMORY_RETELL_API_KEY from the environment, or --key: the Retell API key the
service was started with. Each file's bytes are sent as they are, with
`x-retell-signature: v=<ms>,d=<hex HMAC-SHA256 of the bytes followed by <ms>>` (<ms>: now).
--curl prints the curl line for each file instead of sending it (a signature lasts five
minutes). Needs nothing but Python 3's standard library.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import shlex
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

PATH = "/webhooks/retell"


def signature(key: str, body: bytes, timestamp_ms: int | None = None) -> str:
    """The x-retell-signature header Retell sends with `body`."""
    stamp = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
    digest = hmac.new(key.encode(), body + str(stamp).encode(), hashlib.sha256).hexdigest()
    return f"v={stamp},d={digest}"


def endpoint(url: str) -> str:
    """The webhook's address at a deployment given by its base URL (or by the full address)."""
    url = url.rstrip("/")
    return url if url.endswith(PATH) else url + PATH


def send(url: str, key: str, body: bytes, timeout_s: float = 10.0) -> tuple[int, str]:
    """POST one webhook; the status and the answer's text (an error status is an answer too)."""
    headers = {"Content-Type": "application/json", "x-retell-signature": signature(key, body)}
    request = urllib.request.Request(endpoint(url), data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode("utf-8", "replace")


def curl_line(url: str, key: str, file: Path) -> str:
    """The curl command that sends `file` as this script would (valid for five minutes)."""
    parts = ["curl", "-sS", "-X", "POST", endpoint(url), "-H", "Content-Type: application/json"]
    parts += ["-H", f"x-retell-signature: {signature(key, file.read_bytes())}", "--data-binary", f"@{file}"]
    return shlex.join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "url", help="the deployment, e.g. https://memory.example.com or http://127.0.0.1:8080"
    )
    parser.add_argument("files", nargs="+", type=Path, help="webhook bodies (JSON), sent in this order")
    parser.add_argument(
        "--key", default=os.environ.get("AGENT_MEMORY_RETELL_API_KEY"), help="AGENT_MEMORY_RETELL_API_KEY"
    )
    parser.add_argument("--curl", action="store_true", help="print a curl line per file instead of sending")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("give --key, or set AGENT_MEMORY_RETELL_API_KEY: the key the service was started with")
    failed = 0
    for file in args.files:
        if args.curl:
            print(curl_line(args.url, args.key, file))
            continue
        try:
            status, text = send(args.url, args.key, file.read_bytes())
        except OSError as exc:  # not reachable, refused, timed out, or an unreadable file
            status, text = 0, str(getattr(exc, "reason", exc))
        print(f"{file.name}: {status or 'no answer'} {text.strip()}")
        failed += status != 200
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
