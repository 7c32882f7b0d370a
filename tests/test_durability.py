"""A 200 is a promise: the real server, killed with SIGKILL under load, keeps every answered callback.

The service runs as `python -m agent_memory.cli serve` in a subprocess on a real port with a
real database file; the database is checked with the sqlite3 module, not through the service.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import SECRET, TOKEN, agent_event, encode, turns
from served import Server, servers

from agent_memory.platforms.agora.signatures import agora_headers

# `serve` processes killed and restarted under load: the whole suite runs them.
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
MESSAGES_PER_CALLBACK = 8
CLIENTS = 16
KILL_AFTER = 150
CALLBACKS_PER_CLIENT = 60  # 960 in all: far more than are answered before the kill


def callback(client: int, index: int) -> dict[str, Any]:
    agent_id = f"KILL-{client:02d}-{index:04d}"
    return agent_event(
        103,
        agent_id,
        notice_id=f"kill:{client}:{index}",
        labels={"user_id": f"u-kill-{client:02d}", "character_id": "c"},
        contents=turns(
            MESSAGES_PER_CALLBACK, start_ms=1_763_690_000_000 + index * 60_000, prefix=f"{agent_id} "
        ),
    )


def read_db(db: Path) -> tuple[dict[str, str], dict[str, int]]:
    """(inbox status by noticeId, messages per agent) straight from the file, read-only."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        inbox = dict(conn.execute("SELECT notice_id, status FROM inbox"))
        messages = dict(conn.execute("SELECT agent_id, count(*) FROM messages GROUP BY agent_id"))
    return inbox, messages


async def post(
    session: aiohttp.ClientSession, url: str, envelope: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    body = encode(envelope)
    headers = {"Content-Type": "application/json", **agora_headers(SECRET, body)}
    async with session.post(f"{url}/webhooks/agora", data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def api(session: aiohttp.ClientSession, url: str, path: str) -> tuple[int, dict[str, Any]]:
    async with session.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        return resp.status, await resp.json()


async def test_sigkill_under_load_loses_no_answered_callback(tmp_path):
    db = tmp_path / "memory.db"
    timeout = aiohttp.ClientTimeout(total=10)
    with servers() as started:
        server = Server(db, tmp_path / "server.log")
        started.append(server)
        acked: list[str] = []
        errors: list[BaseException] = []
        enough = asyncio.Event()

        async with aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=CLIENTS)
        ) as session:
            await server.wait_healthy(session)

            async def client(number: int) -> None:
                for index in range(CALLBACKS_PER_CLIENT):
                    envelope = callback(number, index)
                    try:
                        status, answer = await post(session, server.url, envelope)
                    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                        errors.append(exc)
                        return
                    if status == 200:
                        assert answer["status"] == "done" and answer["new_messages"] == MESSAGES_PER_CALLBACK
                        acked.append(envelope["noticeId"])
                        if len(acked) >= KILL_AFTER:
                            enough.set()

            tasks = [asyncio.create_task(client(number)) for number in range(CLIENTS)]
            waiter = asyncio.create_task(enough.wait())
            await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED, timeout=15)
            assert enough.is_set(), f"only {len(acked)} callbacks were answered"
            server.proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)
            waiter.cancel()
        assert server.proc.wait(timeout=10) == -signal.SIGKILL
        # Killed mid-stream: some clients were cut off, and not everything was sent.
        assert errors, "the kill did not interrupt the load"
        assert KILL_AFTER <= len(acked) < CLIENTS * CALLBACKS_PER_CLIENT

        inbox, messages = read_db(db)
        missing = [notice_id for notice_id in acked if notice_id not in inbox]
        assert not missing, f"{len(missing)} answered callbacks are not in the inbox: {missing[:5]}"
        for notice_id in acked:
            _, client_no, index = notice_id.split(":")
            agent_id = f"KILL-{int(client_no):02d}-{int(index):04d}"
            assert inbox[notice_id] == "done"
            assert messages.get(agent_id) == MESSAGES_PER_CALLBACK, agent_id
        # Whatever was committed without an answer is whole too (never half a callback).
        assert set(messages.values()) == {MESSAGES_PER_CALLBACK}
        assert len(messages) == len(inbox)

        # The same file serves again after the crash.
        restarted = Server(db, tmp_path / "server.log")
        started.append(restarted)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            health = await restarted.wait_healthy(session)
            assert health["status"] == "ok" and health["schema"]
            by_user: dict[str, int] = {}
            for agent_id in messages:
                user = f"u-kill-{agent_id.split('-')[1]}"
                by_user[user] = by_user.get(user, 0) + MESSAGES_PER_CALLBACK
            for user, count in sorted(by_user.items())[:4]:
                status, body = await api(
                    session, restarted.url, f"/v1/users/{user}/characters/c/messages?limit=1000"
                )
                assert status == 200 and len(body["messages"]) == count, user
            first = acked[0]
            _, client_no, index = first.split(":")
            status, answer = await post(session, restarted.url, callback(int(client_no), int(index)))
            assert (status, answer["status"]) == (200, "duplicate")
            status, answer = await post(session, restarted.url, callback(99, 0))
            assert (status, answer["status"], answer["new_messages"]) == (200, "done", MESSAGES_PER_CALLBACK)
        inbox_after, messages_after = read_db(db)
        assert len(inbox_after) == len(inbox) + 1
        assert messages_after["KILL-99-0000"] == MESSAGES_PER_CALLBACK


async def test_graceful_restart_keeps_everything(tmp_path):
    db = tmp_path / "memory.db"
    timeout = aiohttp.ClientTimeout(total=10)
    with servers() as started:
        server = Server(db, tmp_path / "server.log")
        started.append(server)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await server.wait_healthy(session)
            for index in range(20):
                status, answer = await post(session, server.url, callback(0, index))
                assert (status, answer["status"]) == (200, "done")
            status, before = await api(
                session, server.url, "/v1/users/u-kill-00/characters/c/messages?limit=1000"
            )
            assert status == 200 and len(before["messages"]) == 20 * MESSAGES_PER_CALLBACK
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=10) == 0
        inbox, messages = read_db(db)
        assert len(inbox) == 20 and set(inbox.values()) == {"done"}
        assert sum(messages.values()) == 20 * MESSAGES_PER_CALLBACK

        restarted = Server(db, tmp_path / "server.log")
        started.append(restarted)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await restarted.wait_healthy(session)
            status, after = await api(
                session, restarted.url, "/v1/users/u-kill-00/characters/c/messages?limit=1000"
            )
            assert status == 200
            assert after == before
            status, answer = await post(session, restarted.url, callback(0, 3))
            assert (status, answer["status"]) == (200, "duplicate")
            status, body = await api(session, restarted.url, "/v1/sessions/KILL-00-0019")
            assert status == 200 and body["session"]["message_count"] == MESSAGES_PER_CALLBACK
