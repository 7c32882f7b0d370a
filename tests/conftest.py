"""Shared fixtures: real SQLite files in tmp_path, the real app on a real loopback port."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from agent_memory.web.app import create_app
from agent_memory.settings import Settings
from agent_memory.web.keys import STORE
from agent_memory.store import SQLiteStore
from agent_memory.platforms.agora.signatures import agora_headers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SECRET = "test-notification-secret"
# Every file of fixtures/conversations, by name.
CONVERSATIONS = (
    "en_luna_companion",
    "zh_xiaoyu_tutor",
    "ko_minjun_mixed",
    "multiuser_channel",
    "nolabels",
)
TOKEN = "test-api-token"


def load_fixture(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def encode(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, ensure_ascii=False).encode()


class Service:
    """The running service, seen as Agora and an app backend see it."""

    def __init__(self, server: TestServer, session: aiohttp.ClientSession, settings: Settings):
        self.server = server
        self.session = session
        self.settings = settings
        self.url = str(server.make_url("")).rstrip("/")

    @property
    def store(self) -> SQLiteStore:
        return self.server.app[STORE]

    async def callback(
        self,
        envelope: dict[str, Any] | bytes,
        *,
        secret: str | None = SECRET,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """POST a callback signed like NCS signs it; returns (status, JSON body)."""
        body = envelope if isinstance(envelope, bytes) else encode(envelope)
        sent = {"Content-Type": "application/json"}
        if secret is not None:
            sent.update(agora_headers(secret, body))
        sent.update(headers or {})
        async with self.session.post(f"{self.url}/webhooks/agora", data=body, headers=sent) as resp:
            return resp.status, await resp.json()

    async def api(
        self, method: str, path: str, *, token: str | None = TOKEN, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(method, f"{self.url}{path}", headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def make_settings(db_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "db_path": db_path,
            "webhook_secret": SECRET,
            "api_token": TOKEN,
            # Tests that want condensing ask for it; others must not race a job.
            "summary_delay_s": 3600,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
async def start_service(make_settings: Callable[..., Settings]) -> AsyncIterator[Any]:
    """Start the real app on 127.0.0.1 with the given settings; stopped after the test."""
    started: list[tuple[TestServer, aiohttp.ClientSession]] = []

    async def start(**overrides: Any) -> Service:
        settings = make_settings(**overrides)
        server = TestServer(create_app(settings), host="127.0.0.1")
        await server.start_server()
        session = aiohttp.ClientSession()
        started.append((server, session))
        return Service(server, session, settings)

    yield start
    for server, session in reversed(started):
        await session.close()
        await server.close()


@pytest.fixture
async def service(start_service: Any) -> Service:
    return await start_service()


def agent_event(
    event_type: int,
    agent_id: str,
    *,
    notice_id: str | None = None,
    notify_ms: int = 1_763_700_000_000,
    labels: dict[str, str] | None = None,
    **payload: Any,
) -> dict[str, Any]:
    """An NCS envelope for an agent event."""
    body: dict[str, Any] = {
        "agent_id": agent_id,
        "channel": f"room-{agent_id}",
        "start_ts": 1_763_690_000,
        **payload,
    }
    if labels is not None:
        body["labels"] = labels
    return {
        "noticeId": notice_id or f"{agent_id}:{event_type}",
        "productId": 17,
        "eventType": event_type,
        "notifyMs": notify_ms,
        "sid": f"sid-{agent_id}",
        "payload": body,
    }


def turns(count: int, *, start_ms: int = 1_763_690_000_000, prefix: str = "") -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages with turn ids and ms timestamps."""
    messages = []
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        messages.append(
            {
                "role": role,
                "content": f"{prefix}{role} line {index}",
                "turn_id": index // 2 + 1,
                "timestamp": start_ms + index * 1000,
                "metadata": {"source": "asr" if role == "user" else "llm"},
            }
        )
    return messages


async def wait_for(check: Any, timeout: float = 15.0) -> Any:
    """Await `check()` until it is truthy: a deadline for background work, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met before the deadline")
