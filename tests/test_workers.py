"""`serve --workers N`: several processes on one port and one PostgreSQL database, kept running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import agent_event, turns, wait_for
from served import ROOT, Server, servers
from test_durability import post

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def children(pid: int) -> set[int]:
    """The processes `pid` started that are still running (Linux's /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def listening(pid: int, port: int) -> bool:
    """Whether process `pid` holds a socket listening on `port` (each worker binds its own once
    its app has started: before that, the supervisor counts its death as a failure to start)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                sockets.add(f"socket:[{fields[9]}]")
    try:
        return any(os.readlink(fd) in sockets for fd in Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:  # it exited meanwhile (or closed a descriptor as it was read)
        return False


def stored(database: str) -> tuple[int, int]:
    """(callbacks in the inbox, messages) of the database."""
    with psycopg.connect(database) as conn:
        inbox = conn.execute("SELECT count(*) FROM inbox").fetchone()
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()
    assert inbox is not None and messages is not None
    return int(inbox[0]), int(messages[0])


async def test_workers_share_the_port_take_each_callback_once_and_one_that_dies_is_started_again(
    pg_cluster: Any, tmp_path: Path
) -> None:
    database = str(pg_cluster.database())
    timeout = aiohttp.ClientTimeout(total=30)
    with servers() as started:
        server = Server(database, tmp_path / "serve.log", {"AGENT_MEMORY_WORKERS": "2"})
        started.append(server)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await server.wait_healthy(session, 60)
            await wait_for(
                lambda: len(children(server.proc.pid)) == 2, 30, failure="two workers did not start"
            )
            workers = children(server.proc.pid)
            await wait_for(
                lambda: all(listening(pid, server.port) for pid in workers),
                30,
                failure="a worker did not serve",
            )

            # Each run's 103 sent twice, at once: one transcript each, whichever worker takes it.
            events = [
                agent_event(
                    103, f"run-{n}", labels={"user_id": f"u-{n}", "character_id": "c"}, contents=turns(4)
                )
                for n in range(12)
            ]
            answers = await asyncio.gather(*(post(session, server.url, event) for event in events + events))
            assert [status for status, _ in answers] == [200] * 24
            assert stored(database) == (12, 48)

            # A worker killed is started again; the port keeps answering meanwhile.
            dead = min(workers)
            os.kill(dead, signal.SIGKILL)
            await wait_for(
                lambda: dead not in children(server.proc.pid) and len(children(server.proc.pid)) == 2,
                30,
                failure="the killed worker was not started again",
            )
            await server.wait_healthy(session, 60)
            later = agent_event(
                103, "run-late", labels={"user_id": "u-late", "character_id": "c"}, contents=turns(2)
            )
            status, _ = await post(session, server.url, later)
            assert status == 200
            assert stored(database) == (13, 50)

            # SIGTERM stops every worker, and the supervisor exits cleanly.
            workers = children(server.proc.pid)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=60) == 0
            assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    log = (tmp_path / "serve.log").read_text()
    assert "exited with -9: starting it again" in log


def test_more_than_one_worker_on_sqlite_is_refused_naming_the_setting(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AGENT_MEMORY_")}
    command = [
        sys.executable,
        "-m",
        "agent_memory.cli",
        "serve",
        "--db",
        str(tmp_path / "m.db"),
        "--workers",
        "2",
    ]
    done = subprocess.run(
        command, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "needs PostgreSQL" in done.stderr and "AGENT_MEMORY_WORKERS" in done.stderr
    assert not (tmp_path / "m.db").exists()


async def test_a_worker_that_dies_before_it_served_stops_the_service_instead_of_being_started_again(
    pg_cluster: Any, tmp_path: Path
) -> None:
    # Its database does not exist, so each worker waits for it, never serving; one dies.
    missing = str(pg_cluster.database()).rsplit("/", 1)[0] + "/no_such_database"
    with servers() as started:
        server = Server(missing, tmp_path / "serve.log", {"AGENT_MEMORY_WORKERS": "2"})
        started.append(server)
        await wait_for(lambda: len(children(server.proc.pid)) == 2, 60, failure="two workers did not start")
        log_path = tmp_path / "serve.log"
        await wait_for(lambda: "waiting for it" in log_path.read_text(), 60, failure="no worker waited")
        os.kill(min(children(server.proc.pid)), signal.SIGKILL)
        assert server.proc.wait(timeout=60) == 1
    log = log_path.read_text()
    assert "before it served: stopping the others" in log
    assert "starting it again" not in log
