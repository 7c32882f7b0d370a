"""`serve --workers N`: N processes of the service on one port, kept running (PostgreSQL only).

Each worker is `agent-memory serve` itself, started with the same arguments and told by
`WORKER_ENV` that it is worker number k: it listens with SO_REUSEPORT, so the kernel spreads
connections over the workers. They are instances of one deployment on one database, as
separate machines would be (docs/operations.md says what each keeps for itself). The
supervisor only starts them, starts again one that dies once it has served, and stops them
all on SIGTERM; a worker says it serves by closing the pipe named in `READY_ENV`.
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
# Also set: the pipe a worker writes READY to once its app has started (`worker_ready`); the
# pipe also ends, without it, when a worker dies before.
READY_ENV = "AGENT_MEMORY_WORKER_READY_FD"
READY = b"1"
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


def worker_ready() -> None:
    """Tell the supervisor this worker serves (its app started), on the pipe it gave."""
    fd = os.environ.pop(READY_ENV, "")
    if fd.isdigit():
        os.write(int(fd), READY)
        os.close(int(fd))


@dataclass
class Worker:
    """One `serve` process, and the pipe that says whether it has started serving."""

    number: int
    process: subprocess.Popen[bytes]
    ready_pipe: int
    ready: bool = False
    started: float = field(default_factory=time.monotonic)

    def serving(self) -> bool:
        """Whether the worker has said it serves; read once the pipe has something to say."""
        if not self.ready and self.ready_pipe >= 0:
            try:
                said = os.read(self.ready_pipe, 1)
            except BlockingIOError:
                return False
            self.ready = said == READY
            self.close()
        return self.ready

    def close(self) -> None:
        """Close the supervisor's end of the pipe."""
        if self.ready_pipe >= 0:
            os.close(self.ready_pipe)
            self.ready_pipe = -1


def start_worker(number: int) -> Worker:
    """`agent-memory serve` with this process's arguments, as worker `number`."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    env = {**os.environ, WORKER_ENV: str(number), READY_ENV: str(write_end)}
    command = [sys.executable, "-m", "agent_memory.cli", *sys.argv[1:]]
    process = subprocess.Popen(command, env=env, pass_fds=(write_end,))
    os.close(write_end)  # the worker holds the only copy: its closing (or death) ends the pipe
    return Worker(number, process, read_end)


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
            if worker.process.poll() is None or stopping:
                continue
            status = worker.process.returncode
            # A worker that never served (its settings, its database) would fail again: stop.
            if not worker.serving():
                log.error(
                    "worker %d exited with %d %.1f s after it started, before it served: stopping the "
                    "others (its log says why)",
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
        for worker in workers:
            worker.serving()  # read as each says so, not only once it has exited
    stop_all(workers)
    return code


def stop_all(workers: list[Worker]) -> None:
    """SIGTERM to every worker still running; SIGKILL to those not gone after STOP_WAIT_S."""
    for worker in workers:
        worker.close()
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
