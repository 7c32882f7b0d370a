"""The framework's own floor: null aiohttp servers doing only what the service cannot skip.

    python bench/null_servers.py webhook --port P --secret S
    python bench/null_servers.py proxy --port P --upstream http://127.0.0.1:Q

`webhook` answers `POST /webhooks/agora` as the service does, minus storing: read the body,
verify Agora's signature (HMAC-SHA256 of the raw bytes, constant-time compare), parse the JSON,
answer a small JSON object. `proxy` answers `POST /v1/llm/chat/completions` by forwarding the
body unchanged to `<upstream>/v1/chat/completions` and relaying the streamed bytes as they
arrive (no parsing, no recall, no recording). Both serve `GET /healthz`, so bench/_common.py's
`Server.wait_healthy` works for them; the benches start them with `NullServer` below, count their
CPU exactly as the service's, and run the same load against them in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

HERE = Path(__file__).resolve()


def webhook_app(secret: str) -> web.Application:
    """Verify the signature, parse the JSON, answer: the least a webhook receiver does."""
    key = secret.encode()

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        given = request.headers.get("Agora-Signature-V2", "")
        expected = hmac.new(key, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given.strip().lower().encode(), expected.encode()):
            return web.json_response({"message": "bad signature"}, status=401)
        try:
            envelope = json.loads(body)
        except ValueError:
            return web.json_response({"message": "not JSON"}, status=400)
        return web.json_response(
            {"code": 0, "message": "ok", "noticeId": envelope.get("noticeId"), "status": "done"}
        )

    app = web.Application(client_max_size=16 * 2**20)
    app.router.add_post("/webhooks/agora", receive)
    app.router.add_get("/healthz", healthz)
    return app


def proxy_app(upstream: str) -> web.Application:
    """Forward the body, relay the stream's bytes as they come: the least a streaming proxy does."""
    target = f"{upstream.rstrip('/')}/v1/chat/completions"

    async def start(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0)
        app["client"] = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))

    async def stop(app: web.Application) -> None:
        await app["client"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        client: aiohttp.ClientSession = request.app["client"]
        async with client.post(
            target, data=body, headers={"Content-Type": "application/json"}
        ) as upstream_resp:
            response = web.StreamResponse(
                status=upstream_resp.status, headers={"Content-Type": "text/event-stream"}
            )
            await response.prepare(request)
            async for data in upstream_resp.content.iter_any():
                await response.write(data)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=16 * 2**20)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/llm/chat/completions", relay)
    app.router.add_get("/healthz", healthz)
    return app


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


class NullServer:
    """One of the null servers as a subprocess on a free loopback port (the shape of `Server`)."""

    def __init__(self, mode: str, *, log_path: Path, secret: str = "", upstream: str = "") -> None:
        from _common import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [sys.executable, str(HERE), mode, "--port", str(self.port)]
        command += ["--secret", secret] if mode == "webhook" else ["--upstream", upstream]
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ)
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        from _common import tree_cpu_seconds

        return tree_cpu_seconds(self.proc.pid)

    async def wait_healthy(self, timeout: float = 30.0) -> None:
        from _common import Server

        await Server.wait_healthy(self, timeout)  # type: ignore[arg-type]

    def stop(self, timeout: float = 10.0) -> int:
        from _common import Server

        return Server.stop(self, timeout)  # type: ignore[arg-type]

    def log_tail(self, lines: int = 30) -> str:
        from _common import Server

        return Server.log_tail(self, lines)  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("webhook", "proxy"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", default="")
    parser.add_argument("--upstream", default="")
    args = parser.parse_args()
    app = webhook_app(args.secret) if args.mode == "webhook" else proxy_app(args.upstream)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None, backlog=1024)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
