"""`serve --workers N`: N processes of the service on one port, kept running (PostgreSQL only).

Each worker is `agent-memory serve` itself, started with the same arguments and told by
`WORKER_ENV` that it is worker number k: it listens with SO_REUSEPORT, so the kernel spreads
connections over the workers. They are instances of one deployment on one database, as
separate machines would be (docs/operations.md says what each keeps for itself). The
supervisor only starts them, starts again one that dies, and stops them all on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType

from agent_memory.cli.common import log
from agent_memory.settings import Settings

# Set in a worker's environment (its number, from 1): listen beside the others, supervise nothing.
WORKER_ENV = "AGENT_MEMORY_WORKER_OF_SERVE"
# A worker that exits sooner than this after its start failed to start: stop rather than loop.
START_GRACE_S = 10.0
# How long the supervisor waits between looking at its workers.
POLL_S = 0.2
# After SIGTERM, how long the workers have to finish what is in flight before they are killed.
STOP_WAIT_S = 30.0


def worker_number() -> int | None:
    """This process's number among `serve`'s workers, or None when it is not one."""
    value = os.environ.get(WORKER_ENV, "")
    return int(value) if value.isdigit() else None


def workers_problem(settings: Settings) -> str | None:
    """Why `settings.workers` processes cannot serve this database, or None."""
    if settings.workers > 1 and settings.backend != "postgres":
        return (
            f"--workers {settings.workers} (AGENT_MEMORY_WORKERS) needs PostgreSQL: a SQLite database "
            "is written by one process; set AGENT_MEMORY_DB=postgresql://… or serve with --workers 1"
        )
    return None


@dataclass
class Worker:
    """One `serve` process and when it was started."""

    number: int
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)


def start_worker(number: int) -> Worker:
    """`agent-memory serve` with this process's arguments, as worker `number`."""
    env = {**os.environ, WORKER_ENV: str(number)}
    command = [sys.executable, "-m", "agent_memory.cli", *sys.argv[1:]]
    return Worker(number, subprocess.Popen(command, env=env))


def supervise(settings: Settings) -> int:
    """Run `settings.workers` workers until SIGTERM or SIGINT; 1 if one cannot start."""
    stopping: list[int] = []

    def stop(signum: int, _: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "agent-memory on http://%s:%d: %d workers on %s",
        settings.host,
        settings.port,
        settings.workers,
        settings.database,
    )
    workers = [start_worker(number) for number in range(1, settings.workers + 1)]
    code = 0
    while not stopping:
        time.sleep(POLL_S)
        for index, worker in enumerate(workers):
            status = worker.process.poll()
            if status is None or stopping:
                continue
            if time.monotonic() - worker.started < START_GRACE_S:
                log.error(
                    "worker %d exited with %d %.1f s after it started: stopping the others (its log says why)",
                    worker.number,
                    status,
                    time.monotonic() - worker.started,
                )
                stopping.append(0)
                code = 1
                break
            log.warning(
                "worker %d (pid %d) exited with %d: starting it again",
                worker.number,
                worker.process.pid,
                status,
            )
            workers[index] = start_worker(worker.number)
    stop_all(workers)
    return code


def stop_all(workers: list[Worker]) -> None:
    """SIGTERM to every worker still running; SIGKILL to those not gone after STOP_WAIT_S."""
    running = [worker.process for worker in workers if worker.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("worker pid %d did not stop within %.0f s: killed", process.pid, STOP_WAIT_S)
            process.kill()
            process.wait()
