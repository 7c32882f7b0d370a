"""A throwaway PostgreSQL server from the machine's own binaries, in a temporary directory.

Tests and benchmarks start one (no container runtime): `initdb` a fresh cluster, serve it on
a free loopback port, hand out databases, delete it all at the end. PostgreSQL refuses to run
as root, so as root its commands run as the `postgres` user.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psycopg

TEMPLATE = "agent_memory_template"


def bindir() -> Path | None:
    """Where the PostgreSQL server binaries are (`pg_config --bindir`), or None."""
    try:
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        candidates = [Path(found.stdout.strip())]
    except (OSError, subprocess.CalledProcessError):
        candidates = []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((path for path in candidates if (path / "initdb").exists()), None)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """One server: `start()`, `database()` for a fresh migrated database, `stop()`."""

    def __init__(self, *, durable: bool = False, port: int | None = None) -> None:
        binaries = bindir()
        if binaries is None:
            raise RuntimeError("PostgreSQL server binaries not found: install the postgresql package")
        self.bin = binaries
        # Tests trade durability for speed; a benchmark measures what a deployment would run.
        self.durable = durable
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="agent-memory-pg-"))
        self.data = self.root / "data"
        self._names = itertools.count(1)
        self._template_ready = False

    def _run(self, args: Sequence[str]) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.root)

    def start(self) -> PostgresCluster:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            [
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]
        )
        self.resume()
        return self

    def resume(self) -> None:
        """Serve the cluster (again, after `halt`), on its port."""
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            "-c max_connections=400",
            "-c shared_buffers=128MB",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-w",
                "-o",
                " ".join(options),
                "start",
            ]
        )

    def halt(self) -> None:
        """Stop the server at once, as a kill -9 would (`pg_ctl stop -m immediate`); its data stays."""
        self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def pid(self) -> int:
        """The postmaster's process id."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create(self, name: str, *, template: str | None = None) -> str:
        """Create database `name` (a copy of `template`); returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            clause = f" TEMPLATE {template}" if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{clause}'.encode())
        return self.url(name)

    def database(self) -> str:
        """A fresh database with every migration applied (copied from a migrated template)."""
        if not self._template_ready:
            from agent_memory.store.postgres import migrations

            with psycopg.connect(self.create(TEMPLATE)) as conn:
                migrations.apply(conn)
            self._template_ready = True
        return self.create(f"test_{next(self._names)}", template=TEMPLATE)

    def stop(self) -> None:
        try:
            self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        except subprocess.CalledProcessError:
            pass
        # A run leaves hundreds of databases (GBs, 100k+ files) that take 15 s or more to delete:
        # removed by a process of its own, so that the test run does not wait for it.
        subprocess.Popen(
            ["rm", "-rf", str(self.root)], start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
