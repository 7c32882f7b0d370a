"""Helpers shared by the benchmarks: the real server as a subprocess, percentiles, machine facts."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Variables that would change what the service does; the bench sets its own.
SCRUBBED_PREFIXES = ("AGENT_MEMORY_", "AGORA_", "OPENAI_")


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(fraction * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max (and mean) in milliseconds."""
    values = sorted(s * 1000 for s in seconds)
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "max": float("nan"), "mean": float("nan")}
    return {
        "p50": percentile(values, 0.50),
        "p90": percentile(values, 0.90),
        "p99": percentile(values, 0.99),
        "max": values[-1],
        "mean": sum(values) / len(values),
    }


def fmt_ms(summary: Mapping[str, float]) -> str:
    return "  ".join(f"{k} {summary[k]:.2f} ms" for k in ("p50", "p90", "p99", "max") if k in summary)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    fields = text[text.rfind(")") + 2 :].split()  # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def self_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "aiohttp": aiohttp.__version__,
        "platform": platform.platform(),
    }


def print_machine(info: Mapping[str, Any]) -> None:
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, "
        f"SQLite {info['sqlite']}, aiohttp {info['aiohttp']}, {info['platform']}"
    )


def db_size_bytes(path: Path) -> int:
    return sum(
        os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if os.path.exists(p)
    )


class Server:
    """`python -m agent_memory.cli serve` on a free loopback port, stopped with SIGTERM."""

    def __init__(self, db: Path, *, env: Mapping[str, str], log_path: Path) -> None:
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        environ = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_PREFIXES)}
        environ.update(env)
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
        self.command = [
            sys.executable, "-m", "agent_memory.cli", "serve",
            "--db", str(db), "--port", str(self.port), "--log-level", "WARNING",
        ]  # fmt: skip
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command, cwd=REPO, env=environ, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    async def wait_healthy(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    async with session.get(f"{self.url}/healthz") as resp:
                        if resp.status == 200:
                            return dict(await resp.json())
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"/healthz did not answer within {timeout:.0f} s:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (aiohttp's graceful exit: the store closes), then SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_tail(self, lines: int = 30) -> str:
        if not self._log.closed:
            self._log.flush()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def print_summary(summary: Mapping[str, Any]) -> None:
    """The one-line JSON the README table is made from; always the last line printed."""
    print(json.dumps(summary, ensure_ascii=False, separators=(",", ":"), default=str))
