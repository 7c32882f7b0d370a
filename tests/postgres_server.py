"""A throwaway PostgreSQL server from the machine's own binaries, in a temporary directory.

Tests and benchmarks start one (no container runtime): `initdb` a fresh cluster, serve it on
a free loopback port, hand out databases, delete it all at the end. PostgreSQL refuses to run
as root, so as root its commands run as the `postgres` user. A test run's processes share one
server (`shared`): the first to need it starts it, the run's controller stops it (`stop_shared`).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
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

    def __init__(
        self, *, durable: bool = False, port: int | None = None, root: Path | None = None, owner: str = ""
    ) -> None:
        binaries = bindir()
        if binaries is None:
            raise RuntimeError("PostgreSQL server binaries not found: install the postgresql package")
        self.bin = binaries
        # Tests trade durability for speed; a benchmark measures what a deployment would run.
        self.durable = durable
        self.port = port or free_port()
        self.root = root or Path(tempfile.mkdtemp(prefix="agent-memory-pg-"))
        self.data = self.root / "data"
        # Which process of a run this handle serves: its databases' names carry it, so that the
        # processes sharing one server never ask for the same name.
        self.owner = owner
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
                # Not waiting for the new cluster's files to reach the disk (seconds on a busy
                # one), as the server itself runs with fsync off (`resume`).
                *([] if self.durable else ["--no-sync"]),
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
        """Create a database named after `name` (a copy of `template`); returns its URL."""
        name = f"{name}_{self.owner}" if self.owner else name
        with psycopg.connect(self.url(), autocommit=True) as conn:
            clause = f" TEMPLATE {template}" if template else ""
            conn.execute(f'CREATE DATABASE "{name}"{clause}'.encode())
        return self.url(name)

    def database(self) -> str:
        """A fresh database with every migration applied (copied from a migrated template)."""
        self.prepare()
        return self.create(f"test_{next(self._names)}", template=TEMPLATE)

    def prepare(self) -> None:
        """Make the migrated template that `database` copies, if no process sharing the server has."""
        if not self._template_ready:
            self._make_template()
            self._template_ready = True

    def _make_template(self) -> None:
        """The migrated template, made once per server by whichever process sharing it asks first."""
        from agent_memory.store.postgres import migrations

        with locked(self.root / "template.lock"), psycopg.connect(self.url(), autocommit=True) as conn:
            query = "SELECT 1 FROM pg_database WHERE datname = %s"
            if conn.execute(query, (TEMPLATE,)).fetchone() is not None:
                return
            conn.execute(f"CREATE DATABASE {TEMPLATE}".encode())
            with psycopg.connect(self.url(TEMPLATE)) as template:
                migrations.apply(template)

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


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file at `path` (made if missing) for the block."""
    with open(path, "a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def shared(folder: Path, owner: str, controller: int) -> PostgresCluster:
    """The test run's one server: started by the first of its processes to ask, under a lock in
    `folder` (the run's own), and found there by the others. A watchdog stops it if process
    `controller` (the run's, which calls `stop_shared` at its end) dies without doing so."""
    state = folder / "postgres.json"
    with locked(folder / "postgres.lock"):
        if state.exists():
            found = json.loads(state.read_text())
            return PostgresCluster(root=Path(found["root"]), port=found["port"], owner=owner)
        cluster = PostgresCluster(owner=owner).start()
        watchdog = subprocess.Popen(
            ["sh", "-c", WATCHDOG, "watchdog", str(controller), sys.executable, __file__, str(state)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        found = {"root": str(cluster.root), "port": cluster.port, "watchdog": watchdog.pid}
        state.write_text(json.dumps(found))
        return cluster


# Waits for the run's controller to end, then stops the server (`python postgres_server.py STATE`).
WATCHDOG = 'pid=$1; shift; while kill -0 "$pid" 2>/dev/null; do sleep 1; done; exec "$@"'


def stop_shared(folder: Path, *, watchdog: bool = True) -> None:
    """Stop the run's shared server, if one was started (and its watchdog, unless it is the caller)."""
    state = folder / "postgres.json"
    with locked(folder / "postgres.lock"):
        if not state.exists():
            return
        found = json.loads(state.read_text())
        state.unlink()
    if watchdog:
        with contextlib.suppress(ProcessLookupError):
            os.kill(found["watchdog"], signal.SIGTERM)
    PostgresCluster(root=Path(found["root"]), port=found["port"]).stop()


if __name__ == "__main__":  # the watchdog's last step: the controller left nothing to clean up
    stop_shared(Path(sys.argv[1]).parent, watchdog=False)
    shutil.rmtree(Path(sys.argv[1]).parent, ignore_errors=True)
