"""`agent-memory serve` as a user runs it: a subprocess on a real port, stopped at the test's end."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from conftest import SECRET, TOKEN, wait_for
from postgres_server import free_port

ROOT = Path(__file__).resolve().parent.parent


class Server:
    """`agent-memory serve` in a subprocess (`db`: a file, or a PostgreSQL URL; `more`: more settings)."""

    def __init__(self, db: Path | str, log: Path, more: dict[str, str] | None = None) -> None:
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AGENT_MEMORY_", "AGORA_", "OPENAI_"))
        }
        env.update(
            {
                "AGORA_WEBHOOK_SECRET": SECRET,
                "AGENT_MEMORY_API_TOKEN": TOKEN,
                "AGENT_MEMORY_SUMMARY_DELAY_S": "3600",
                "AGENT_MEMORY_SUMMARY_MAX_WAIT_S": "3600",
                "AGENT_MEMORY_SUMMARY_MAX_MESSAGES": "100000",
                "AGENT_MEMORY_LOG_LEVEL": "WARNING",
                "PYTHONPATH": str(ROOT),
                **(more or {}),
            }
        )
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent_memory.cli", "serve", "--db", str(db), "--port", str(self.port)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    async def wait_healthy(self, session: aiohttp.ClientSession, timeout_s: float = 15.0) -> dict[str, Any]:
        """The /healthz answer once the server gives one; fails at once if the process exits."""

        async def health() -> dict[str, Any] | None:
            assert self.proc.poll() is None, f"the server exited with {self.proc.returncode}"
            try:
                async with session.get(f"{self.url}/healthz") as resp:
                    return await resp.json() if resp.status == 200 else None
            except (aiohttp.ClientError, OSError):
                return None

        answer: dict[str, Any] = await wait_for(health, timeout_s, failure="the server did not come up")
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.close()


@contextmanager
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in started:
            server.stop()
