"""Helpers shared by the benchmarks: the real server as a subprocess, percentiles, machine facts."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
# The checkout whose server is started: this one, or another (bench/compare.py sets it to
# a worktree of an earlier commit, to measure before and after side by side).
SERVER_REPO = Path(os.environ.get("BENCH_SERVER_REPO") or REPO)
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
        return {
            "p50": float("nan"),
            "p90": float("nan"),
            "p99": float("nan"),
            "max": float("nan"),
            "mean": float("nan"),
        }
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


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on: the name before it may hold spaces."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    return text[text.rfind(")") + 2 :].split()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def main_thread_cpu_seconds(pid: int) -> float:
    """utime + stime of a process's main thread (an aiohttp server's event loop), from /proc."""
    with open(f"/proc/{pid}/task/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    fields = text[text.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU-seconds of a process and every process under it (a service's worker processes)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(_stat_fields(int(entry))[1])
            except OSError:  # ended meanwhile
                continue
    tree, grew = {pid}, True
    while grew:
        below = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    total = 0.0
    for member in tree:
        try:
            total += process_cpu_seconds(member)
        except OSError:  # ended meanwhile
            pass
    return total


def cpu_parts(pid: int) -> tuple[float, float, float]:
    """CPU-seconds of a server's main thread (its event loop), of its other threads (a store's
    writer and readers), and of the processes under it (condense workers)."""
    whole = process_cpu_seconds(pid)
    main = main_thread_cpu_seconds(pid)
    return main, whole - main, tree_cpu_seconds(pid) - whole


def self_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def machine_busy_seconds() -> float:
    """CPU-seconds all processes have used since boot (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


class Noise:
    """How much CPU other processes took while a measurement ran (the machine is shared)."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.start = time.monotonic()
        self.busy = machine_busy_seconds()
        self.own = self._own()

    def _own(self) -> float:
        total = self_cpu_seconds()
        for pid in self.pids:
            try:
                total += tree_cpu_seconds(pid)
            except OSError:
                pass
        return total

    def other_cores(self) -> float:
        """Average number of cores used by processes other than ours and `pids`."""
        wall = max(time.monotonic() - self.start, 1e-9)
        other = (machine_busy_seconds() - self.busy) - (self._own() - self.own)
        return max(other, 0.0) / wall


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
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def print_machine(info: Mapping[str, Any]) -> None:
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, "
        f"SQLite {info['sqlite']}, aiohttp {info['aiohttp']}, {info['platform']}; "
        f"load average {info['loadavg_1m']:.2f} at start"
    )


def db_size_bytes(path: Path) -> int:
    return sum(
        os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if os.path.exists(p)
    )


class Server:
    """`python -m agent_memory.cli serve` on a free loopback port, stopped with SIGTERM."""

    def __init__(self, db: Path | str, *, env: Mapping[str, str], log_path: Path) -> None:
        self.db = db
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        environ = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_PREFIXES)}
        environ.update(env)
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SERVER_REPO), environ.get("PYTHONPATH")]))
        self.command = [
            sys.executable, "-m", "agent_memory.cli", "serve",
            "--db", str(db), "--port", str(self.port), "--log-level", "WARNING",
        ]  # fmt: skip
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command,
            cwd=SERVER_REPO,
            env=environ,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """The server's CPU time, its worker processes' included."""
        return tree_cpu_seconds(self.proc.pid)

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
    """The one-line JSON the table of docs/benchmarks.md is made from; always the last line printed."""
    print(json.dumps(summary, ensure_ascii=False, separators=(",", ":"), default=str))


# Conversation lines for generated short-term memory (English, with a little Chinese).
USER_LINES = [
    "Hi, it's me again.",
    "Can you remind me what we talked about last time?",
    "I had a really long day at work today, my manager moved the deadline again.",
    "What should I cook tonight? I have eggs, spinach and some leftover rice.",
    "My sister is visiting next weekend and I want to take her somewhere nice.",
    "I started running again, three kilometres this morning.",
    "Tell me a short story about a lighthouse keeper.",
    "Do you remember the name of my dog?",
    "I'm thinking about learning Spanish before the trip to Valencia in June.",
    "Ugh, the train was late again.",
    "Okay.",
    "Yes, exactly.",
    "No, I meant the other one, the blue notebook.",
    "Can you help me write a message to my landlord about the heating?",
    "我今天有点累，想早点睡。",
    "What's a good book for a long flight?",
    "Haha, that's funny.",
    "I've been feeling a bit anxious about the interview on Thursday.",
]
ASSISTANT_LINES = [
    "Hello again! It's good to hear from you.",
    "Last time you told me about your new job and the project with the tight deadline.",
    "That sounds exhausting. Do you want to talk about it, or would you rather unwind?",
    "You could make a spinach and egg fried rice: quick, warm, and it uses everything you have.",
    "How about the old town and the botanical garden? If the weather is good, a picnic by the river.",
    "Three kilometres is a great restart. How did your knee feel afterwards?",
    "Once upon a time, on a rocky island far to the north, an old keeper lit the lamp every evening.",
    "Of course, his name is Biscuit. How is he doing?",
    "That's a lovely plan. Fifteen minutes a day with a podcast and flashcards goes a long way.",
    "I'm sorry, that's frustrating. Did you get there in time?",
    "Sure, here's a draft: Dear Mr. Olsen, the heating in my flat has not worked since Monday.",
    "A long novel works well on a plane; maybe something like a family saga you can sink into.",
    "别担心，早点休息吧，明天再聊。",
    "Interviews are stressful. Shall we practise a few questions together tonight?",
    "Mm-hm.",
    "Got it.",
]


def make_contents(rng: random.Random, count: int, start_ms: int, uid: str) -> list[dict[str, Any]]:
    """`count` short-term-memory messages as the engine keeps them: turn_id, ms times, metadata."""
    contents: list[dict[str, Any]] = []
    at = start_ms
    for index in range(count):
        turn = index // 2 + 1
        at += rng.randint(800, 9000)
        if index % 2 == 0:
            message = {
                "role": "user",
                "content": rng.choice(USER_LINES),
                "turn_id": turn,
                "timestamp": at,
                "metadata": {"source": "asr", "user": uid},
            }
        else:
            text = rng.choice(ASSISTANT_LINES)
            metadata: dict[str, Any] = {"source": "greeting" if index == 1 else "llm"}
            content = text
            if rng.random() < 0.1 and len(text) > 20:
                content = text[: len(text) // 2]
                metadata.update(
                    {
                        "interrupted": True,
                        "interrupt_timestamp": at + 1500,
                        "original": text,
                    }
                )
            message = {"role": "assistant", "content": content, "turn_id": turn, "timestamp": at,
                       "metadata": metadata}  # fmt: skip
        contents.append(message)
    return contents


@contextmanager
def work_directory(prefix: str, *, keep: bool) -> Iterator[Path]:
    """A temporary directory for a run; kept (and named) when `keep` is set."""
    if keep:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        yield path
        print(f"kept {path}")
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
