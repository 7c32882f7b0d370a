"""`agent-memory backup`: a consistent copy of the SQLite database taken while a real server writes."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import SECRET, agent_event, encode
from served import Server, servers

from agent_memory.cli import main
from agent_memory.platforms.agora.signatures import agora_headers
from agent_memory.settings import Settings
from agent_memory.store.backup import backup_sqlite

TURNS_PER_CALL = 6


def call(index: int) -> dict[str, Any]:
    labels = {"user_id": f"u-{index % 5}", "character_id": "luna"}
    contents = [
        {
            "turn_id": turn // 2 + 1,
            "role": ("user", "assistant")[turn % 2],
            "content": f"call {index} turn {turn}",
        }
        for turn in range(TURNS_PER_CALL)
    ]
    return agent_event(103, f"BACKUP-{index}", labels=labels, contents=contents)


@pytest.mark.slow
async def test_backup_while_a_server_writes_is_consistent(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    copy = tmp_path / "copy.db"
    with servers() as started:
        server = Server(db, tmp_path / "server.log")
        started.append(server)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await server.wait_healthy(session)
            acked: list[int] = []
            stop = asyncio.Event()

            async def write() -> None:
                index = 0
                while not stop.is_set():
                    body = encode(call(index))
                    headers = {"Content-Type": "application/json", **agora_headers(SECRET, body)}
                    async with session.post(
                        f"{server.url}/webhooks/agora", data=body, headers=headers
                    ) as resp:
                        assert resp.status == 200, await resp.text()
                    acked.append(index)
                    index += 1

            writer = asyncio.create_task(write())
            while len(acked) < 20:
                await asyncio.sleep(0.05)
            before = len(acked)
            steps: list[int] = []

            def progress(done: int, total: int) -> None:
                # Between the first steps, wait until the server has answered more callbacks:
                # the copy is surely taken while it writes.
                steps.append(done)
                if len(steps) == 2:
                    waited = len(acked)
                    deadline = time.monotonic() + 60
                    while len(acked) < waited + 5 and time.monotonic() < deadline:
                        time.sleep(0.01)

            # A page a step: the copy takes many steps while the server goes on writing.
            report = await asyncio.to_thread(
                backup_sqlite, Settings(db_path=db), str(copy), pages=1, progress=progress
            )
            after = len(acked)
            stop.set()
            await writer
    assert report.integrity == "ok" and steps[-1] == report.pages > 2
    assert after >= before + 5, "the server wrote nothing while the backup ran: the test proves nothing"
    with closing(sqlite3.connect(copy)) as conn:  # the copy is ours: its FTS checks write
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        sessions = dict(conn.execute("SELECT agent_id, message_count FROM sessions"))
        held = dict(conn.execute("SELECT agent_id, count(*) FROM messages GROUP BY agent_id"))
        # One commit's state: every call whole, as its transaction left it, none in part.
        assert sessions == held and len(sessions) >= before
        assert set(held.values()) == {TURNS_PER_CALL}
        for fts in ("messages_fts", "recall_fts"):
            conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
        found = conn.execute(
            "SELECT content FROM messages WHERE agent_id = 'BACKUP-0' ORDER BY seq"
        ).fetchall()
        assert [row[0] for row in found] == [f"call 0 turn {turn}" for turn in range(TURNS_PER_CALL)]


def test_backup_on_postgresql_says_to_use_pg_dump(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = "postgresql://memory@127.0.0.1:1/memory"
    assert main(["backup", str(tmp_path / "copy.db"), "--db", url]) == 2
    err = capsys.readouterr().err
    assert "pg_dump" in err and "docs/operations.md" in err, err
    assert not (tmp_path / "copy.db").exists()
