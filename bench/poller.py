"""Poller benchmark: many running agents followed at once against a fake Agora REST server.

    python bench/poller.py [--agents 1000] [--max-history 32] [--rounds 5] [--per-round 4]
                           [--concurrency 32] [--scheduled-s 20] [--agora-latency-ms 0]

The fake Agora (tests/fakes/agora_server.py, plus a small control API) runs in a SEPARATE
process, so its CPU is not counted as ours. The real `Poller` (with the real AgoraClient,
Ingestor and SQLiteStore on a temporary database) runs in this process; nothing else of
the service does, so the CPU measured here is the poller's: HTTP client, JSON and pydantic
parsing, window alignment and the SQLite writer thread.

Phase A (throughput): every agent's call grows by `--per-round` messages, every agent is
made due, and `Poller.run_due_now()` is called until every agent's window was merged once.
Reported: windows merged per second, CPU seconds of this process, wall time per round.

Phase B (as deployed, `--scheduled-s` seconds, 0 to skip): the poller's own scheduler runs
(sweep every 0.5 s, AGENT_MEMORY_POLL_INTERVAL_S 5 s with jitter) while every call grows by
two messages every 5 s. Reported: windows merged per second, CPU share of one core, and the
poll interval each agent actually got.

At the end every agent is polled once more and every transcript is checked against the
fake's whole conversation: same contents, same order, nothing doubled, no gap.
The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    machine_info,
    print_machine,
    print_summary,
    process_cpu_seconds,
    self_cpu_seconds,
    work_directory,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent_memory.core.clock import now_ms  # noqa: E402
from agent_memory.memory.ingest import Ingestor  # noqa: E402
from agent_memory.memory.refresh import Refresher  # noqa: E402
from agent_memory.memory.service import Memory  # noqa: E402
from agent_memory.platforms.agora.client import AgoraClient  # noqa: E402
from agent_memory.platforms.agora.poller import Poller  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store.sqlite import SQLiteStore  # noqa: E402

APP_ID, CUSTOMER_ID, CUSTOMER_SECRET = "benchapp", "bench-cid", "bench-csec"
BASE_MS = 1_795_000_000_000
LINES = (
    "Can you remind me what we talked about last time?",
    "I had a long day at work, my manager moved the deadline again.",
    "What should I cook tonight? I have eggs, spinach and some leftover rice.",
    "My sister is visiting next weekend and I want to take her somewhere nice.",
    "That sounds lovely. Is there a place you both enjoyed as kids?",
    "I started running again, three kilometres this morning.",
    "Three kilometres is a great restart. How did your knees feel?",
    "Okay.",
    "I'm thinking about learning Spanish before the trip to Valencia in June.",
    "Then let's practise ordering food: how would you ask for the bill?",
)


def agent_ids(count: int) -> list[str]:
    return [f"BENCHAGENT{i:015d}" for i in range(count)]


def message(agent_index: int, n: int) -> dict[str, Any]:
    """Message `n` of agent `agent_index`'s call: unique contents, ms timestamps."""
    role = "user" if n % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"[{agent_index}.{n}] {LINES[(agent_index + n) % len(LINES)]}",
        "turn_id": n // 2 + 1,
        "timestamp": BASE_MS + n * 2500,
        "metadata": {"source": "asr", "user": str(1000 + agent_index)}
        if role == "user"
        else {"source": "llm"},
    }


# -- the fake Agora, in its own process -------------------------------------------------------


def serve_fake(port_file: Path, latency_ms: float) -> None:
    """The child process: FakeAgora plus /_bench control routes, until killed."""
    from aiohttp import web

    from tests.fakes.agora_server import FakeAgora

    fake = FakeAgora(APP_ID, CUSTOMER_ID, CUSTOMER_SECRET, latency_s=latency_ms / 1000)
    app = fake.make_app()
    index: dict[str, int] = {}

    async def setup(request: web.Request) -> web.Response:
        body = await request.json()
        for i, agent_id in enumerate(agent_ids(body["agents"])):
            fake.add_agent(agent_id, max_history=body["max_history"])
            index[agent_id] = i
        return web.json_response({"agents": len(fake.agents)})

    async def grow(request: web.Request) -> web.Response:
        body = await request.json()
        for agent_id, agent in fake.agents.items():
            start = len(agent.messages)
            fake.say(agent_id, (message(index[agent_id], n) for n in range(start, start + body["messages"])))
        return web.json_response({"grown": len(fake.agents)})

    async def conversations(request: web.Request) -> web.Response:
        return web.json_response(
            {agent_id: [m["content"] for m in agent.messages] for agent_id, agent in fake.agents.items()}
        )

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"requests": sum(fake.requests.values()),
                                  "history": fake.count("/history")})  # fmt: skip

    app.router.add_post("/_bench/setup", setup)
    app.router.add_post("/_bench/grow", grow)
    app.router.add_get("/_bench/conversations", conversations)
    app.router.add_get("/_bench/stats", stats)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        port_file.write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(main())


class FakeProcess:
    def __init__(self, workdir: Path, latency_ms: float) -> None:
        port_file = workdir / "fake.port"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-fake", str(port_file), "--agora-latency-ms", str(latency_ms)],
            cwd=REPO, env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake Agora process did not start")
            time.sleep(0.02)
        self.base_url = f"http://127.0.0.1:{int(port_file.read_text())}"

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


# -- the poller, in this process ----------------------------------------------------------------


class Control:
    """Talks to the fake's /_bench routes (its auth middleware applies to them too)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str) -> None:
        self.session = session
        self.base = f"{base_url}/_bench"
        pair = base64.b64encode(f"{CUSTOMER_ID}:{CUSTOMER_SECRET}".encode()).decode()
        self.headers = {"Authorization": f"Basic {pair}"}

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async with self.session.request(method, self.base + path, json=body, headers=self.headers) as resp:
            resp.raise_for_status()
            return await resp.json()


async def make_all_due(store: SQLiteStore) -> None:
    def due(tx: Any) -> None:
        tx.conn.execute("UPDATE watched_agents SET next_poll_ms = 0 WHERE status = 'watching'")

    await store.write(due)


async def poll_every_agent_once(poller: Poller, agents: int) -> int:
    """run_due_now until `agents` more windows were merged (each sweep takes concurrency×4)."""
    target = poller.windows_merged + agents
    sweeps = 0
    while poller.windows_merged < target:
        await poller.run_due_now()
        sweeps += 1
        if sweeps > agents:
            raise RuntimeError("polls are failing: fewer windows merged than agents polled")
    return sweeps


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    db = workdir / "poller.db"
    fake = FakeProcess(workdir, args.agora_latency_ms)
    print(f"fake Agora pid {fake.proc.pid} on {fake.base_url}; poller in this process (pid {os.getpid()}), "
          f"database {db}")  # fmt: skip
    common = {
        "db_path": db, "agora_app_id": APP_ID, "agora_customer_id": CUSTOMER_ID,
        "agora_customer_secret": CUSTOMER_SECRET, "agora_api_base": fake.base_url,
        "agora_max_retries": 3, "poll_concurrency": args.concurrency, "log_level": "WARNING",
    }  # fmt: skip
    settings = Settings(poll_interval_s=3600, **common)
    store = SQLiteStore(db, group_commit_max=settings.group_commit_max)
    store.open()
    ingestor = Ingestor(settings)
    summary: dict[str, Any] = {"bench": "poller", "agents": args.agents, "max_history": args.max_history,
                               "concurrency": args.concurrency, "machine": info}  # fmt: skip
    ids = agent_ids(args.agents)
    try:
        async with aiohttp.ClientSession() as session:
            control = Control(session, fake.base_url)
            await control.call("POST", "/setup", {"agents": args.agents, "max_history": args.max_history})
            client = AgoraClient(settings, session)
            memory = Memory(settings, store)
            poller = Poller(settings, memory, client, Refresher(settings, store, memory.reading, client))

            def register(tx: Any) -> None:
                for i, agent_id in enumerate(ids):
                    ingestor.bind(tx, agent_id, f"bench-user-{i}", "luna")
                    tx.watches.follow(agent_id, "manual", first_poll_ms=now_ms())

            await store.write(register)

            # Phase A: rounds.
            await control.call("POST", "/grow", {"messages": args.max_history})  # a full first window
            rounds: list[dict[str, float]] = []
            print(f"\nphase A: {args.agents} agents, max_history {args.max_history}, {args.rounds} rounds "
                  f"(+{args.max_history} messages, then +{args.per_round} per round), "
                  f"poll_concurrency {args.concurrency}")  # fmt: skip
            for number in range(args.rounds + 1):
                if number:
                    await control.call("POST", "/grow", {"messages": args.per_round})
                await make_all_due(store)
                fake_cpu0, cpu0, wall0 = fake.cpu_seconds(), self_cpu_seconds(), time.perf_counter()
                sweeps = await poll_every_agent_once(poller, args.agents)
                wall = time.perf_counter() - wall0
                cpu = self_cpu_seconds() - cpu0
                fake_cpu = fake.cpu_seconds() - fake_cpu0
                rounds.append({"round": number, "wall_s": wall, "cpu_s": cpu, "fake_cpu_s": fake_cpu,
                               "windows_per_s": args.agents / wall, "sweeps": sweeps})  # fmt: skip
                label = "first (full windows)" if number == 0 else f"round {number}"
                print(f"  {label:<22} wall {wall:6.2f} s  {args.agents / wall:7,.0f} windows/s  "
                      f"our CPU {cpu:6.2f} s ({cpu / wall * 100:4.0f}% of a core, "
                      f"{cpu / args.agents * 1000:.2f} ms/window)  fake CPU {fake_cpu:5.2f} s  "
                      f"{sweeps} sweeps")  # fmt: skip
            steady = rounds[1:] or rounds
            wall_a = sum(r["wall_s"] for r in steady)
            cpu_a = sum(r["cpu_s"] for r in steady)
            summary["phase_a"] = {
                "rounds": args.rounds, "per_round": args.per_round,
                "windows_per_s": round(args.agents * len(steady) / wall_a, 1),
                "cpu_s": round(cpu_a, 2), "cpu_ms_per_window": round(cpu_a / (args.agents * len(steady)) * 1000, 3),
                "wall_s_per_round": [round(r["wall_s"], 3) for r in rounds],
                "fake_cpu_s": round(sum(r["fake_cpu_s"] for r in steady), 2),
            }  # fmt: skip
            print(f"  rounds 1..{args.rounds}: {summary['phase_a']['windows_per_s']:,.0f} windows merged/s, "
                  f"{summary['phase_a']['cpu_ms_per_window']:.2f} ms of our CPU per window")  # fmt: skip

            # Phase B: the poller's own scheduler, as deployed.
            if args.scheduled_s > 0:
                summary["phase_b"] = await scheduled(args, common, store, ingestor, session, control, fake)

            # Final: one more poll of every agent, then compare every transcript.
            await make_all_due(store)
            await poll_every_agent_once(poller, args.agents)
            expected = await control.call("GET", "/conversations")
        summary["verify"] = verify(store, expected, ids)
    finally:
        store.close()
        fake.stop()
    return summary


async def scheduled(
    args: argparse.Namespace, common: dict[str, Any], store: SQLiteStore, ingestor: Ingestor,
    session: aiohttp.ClientSession, control: Control, fake: FakeProcess,
) -> dict[str, Any]:  # fmt: skip
    interval = 5.0
    settings = Settings(poll_interval_s=interval, **common)
    memory, client = Memory(settings, store), AgoraClient(settings, session)
    poller = Poller(settings, memory, client, Refresher(settings, store, memory.reading, client))
    print(f"\nphase B: the poller's scheduler for {args.scheduled_s:g} s (sweep every {poller.sweep_s} s, "
          f"poll interval {interval:g} s ±20%), every call +2 messages every {interval:g} s")  # fmt: skip

    def spread(tx: Any) -> None:  # as if the agents had been followed for a while
        rng = random.Random(7)
        for agent_id in agent_ids(args.agents):
            tx.conn.execute(
                "UPDATE watched_agents SET next_poll_ms = ? WHERE agent_id = ?",
                (now_ms() + round(rng.uniform(0, interval) * 1000), agent_id),
            )

    await store.write(spread)
    polls0 = await store.read(
        lambda view: view.conn.execute("SELECT sum(polls) FROM watched_agents").fetchone()[0]
    )
    stop = asyncio.Event()

    async def talk() -> None:
        while not stop.is_set():
            await control.call("POST", "/grow", {"messages": 2})
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass

    talker = asyncio.create_task(talk())
    cpu0, fake_cpu0, wall0, merged0 = self_cpu_seconds(), fake.cpu_seconds(), time.perf_counter(), 0
    await poller.start()
    await asyncio.sleep(args.scheduled_s)
    merged = poller.windows_merged - merged0
    wall = time.perf_counter() - wall0
    cpu = self_cpu_seconds() - cpu0
    fake_cpu = fake.cpu_seconds() - fake_cpu0
    stop.set()
    await talker
    # Let a sweep in progress finish first: Poller.stop() shuts the scheduler down with
    # wait=False, which cancels a running sweep and APScheduler logs that as an ERROR.
    assert poller.scheduler is not None
    poller.scheduler.pause()
    await asyncio.sleep(poller.sweep_s + 0.1)
    await poller.stop()
    polls = await store.read(
        lambda view: view.conn.execute("SELECT sum(polls) FROM watched_agents").fetchone()[0]
    )
    per_agent = (polls - polls0) / args.agents
    achieved = wall / per_agent if per_agent else float("inf")
    result = {
        "seconds": round(wall, 1), "windows_per_s": round(merged / wall, 1),
        "cpu_share_of_core": round(cpu / wall, 3), "cpu_ms_per_window": round(cpu / max(merged, 1) * 1000, 3),
        "achieved_poll_interval_s": round(achieved, 2), "fake_cpu_share": round(fake_cpu / wall, 3),
    }  # fmt: skip
    print(f"  {merged} windows in {wall:.1f} s: {merged / wall:,.0f} windows merged/s; our CPU {cpu:.2f} s "
          f"({cpu / wall * 100:.0f}% of a core, {result['cpu_ms_per_window']:.2f} ms/window); "
          f"fake CPU {fake_cpu / wall * 100:.0f}% of a core")  # fmt: skip
    print(f"  each agent polled every {achieved:.2f} s on average (asked for {interval:g} s)")
    return result


def verify(store: SQLiteStore, expected: dict[str, list[str]], ids: list[str]) -> dict[str, Any]:
    """Every stored transcript equals the fake's whole conversation for that agent."""

    def read(view: Any) -> tuple[dict[str, list[str]], dict[str, tuple[int, int]]]:
        stored: dict[str, list[str]] = {}
        for agent_id, content in view.conn.execute(
            "SELECT agent_id, content FROM messages ORDER BY agent_id, seq"
        ):
            stored.setdefault(agent_id, []).append(content)
        sessions = {
            row[0]: (row[1], row[2])
            for row in view.conn.execute("SELECT agent_id, message_count, gap_count FROM sessions")
        }
        return stored, sessions

    stored, sessions = store.read_now(read)
    wrong = [a for a in ids if stored.get(a, []) != expected[a]]
    gaps = [a for a in ids if sessions.get(a, (0, 0))[1]]
    counts = [a for a in ids if sessions.get(a, (None, 0))[0] != len(expected[a])]
    total = sum(len(expected[a]) for a in ids)
    exact = not wrong and not gaps and not counts
    print(f"\nverify: {len(ids) - len(wrong)}/{len(ids)} transcripts exact ({total:,} messages), "
          f"{len(gaps)} sessions with a gap, {len(counts)} with a wrong message_count"
          + ("" if exact else f"; first wrong: {(wrong or gaps or counts)[0]}"))  # fmt: skip
    if wrong:
        agent = wrong[0]
        have, want = stored.get(agent, []), expected[agent]
        print(f"  {agent}: stored {len(have)}, expected {len(want)}; "
              f"first difference at {next((i for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), min(len(have), len(want)))}")  # fmt: skip
    return {"exact": exact, "agents": len(ids), "messages": total, "wrong": len(wrong), "gaps": len(gaps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--max-history", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=4, help="messages each call grows by per round")
    parser.add_argument("--concurrency", type=int, default=32, help="AGENT_MEMORY_POLL_CONCURRENCY")
    parser.add_argument("--scheduled-s", type=float, default=20, help="phase B length; 0 skips it")
    parser.add_argument("--agora-latency-ms", type=float, default=0, help="added by the fake per request")
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    parser.add_argument("--serve-fake", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(Path(args.serve_fake), args.agora_latency_ms)
        return 0
    if not 0 < args.per_round < args.max_history:
        parser.error("--per-round must be between 1 and max-history - 1, or windows stop overlapping")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    with work_directory("bench-poller-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    summary["total_wall_s"] = round(time.perf_counter() - started, 1)
    print(f"total {summary['total_wall_s']} s")
    print_summary(summary)
    return 0 if summary["verify"]["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
