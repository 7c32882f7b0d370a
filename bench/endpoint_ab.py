"""Two builds of the service under bench/endpoint.py's load in one run, rounds alternating A B B A.

    python bench/endpoint_ab.py --a <checkout> --b <checkout> [--rounds 16] [endpoint.py's load flags]

`bench/compare.py` runs whole benchmarks one after the other, so a machine shared with other jobs
moves between them: a 5 % change drowns in it. Here both servers run at once, each with its own
database taken in through its own webhook and left idle, and each timed round of `--calls` calls
goes to one of them (A B B A …): CPU per turn of each server's process tree over its own rounds,
their ratio round by round (B over A), how many rounds B was lower in, and the first-token times
of both; each build's CPU per turn is also split into where it ran: the event loop (the service's
main thread), its other threads (the store's writer and readers) and its other processes (condense
workers), each the median of its rounds. `--a` and `--b` are checkouts (e.g. `git worktree add
/tmp/before <commit>`); the benchmark's own code is this checkout's. The last line printed is a
JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from typing import Any

import _common
import aiohttp
from _common import (
    Server,
    cpu_parts,
    latency_summary,
    machine_info,
    print_machine,
    print_summary,
    work_directory,
)
from endpoint import CHARACTER, LLM_TOKEN, MODEL, add_load_arguments, history_callbacks, one_round
from ingest import SECRET, wait_until_idle
from llm_proxy import fake_upstream

# Where a server's CPU ran (`_common.cpu_parts`).
PARTS = ("event loop", "other threads", "other processes")


def server(repo: str, upstream: str, workdir: Path, name: str) -> Server:
    """The service of checkout `repo`, with its own database."""
    _common.SERVER_REPO = Path(repo).resolve()  # read as the server starts: each its own checkout
    return Server(
        workdir / f"{name}.db",
        env={
            "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN, "AGENT_MEMORY_UPSTREAM_BASE_URL": f"{upstream}/v1",
            "AGENT_MEMORY_UPSTREAM_API_KEY": "sk-fake", "AGENT_MEMORY_UPSTREAM_MODEL": MODEL,
            "AGORA_WEBHOOK_SECRET": SECRET, "AGENT_MEMORY_LOG_LEVEL": "WARNING",
        },
        log_path=workdir / f"{name}.log",
    )  # fmt: skip


async def run(args: argparse.Namespace, upstream: str, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    builds = {"A": args.a, "B": args.b}
    servers = {name: server(repo, upstream, workdir, name) for name, repo in builds.items()}
    cpu: dict[str, list[float]] = {name: [] for name in servers}
    # Per round: the event loop's, the other threads', the other processes' ms per turn.
    parts: dict[str, list[tuple[float, ...]]] = {name: [] for name in servers}
    firsts: dict[str, list[float]] = {name: [] for name in servers}
    reused: dict[str, int] = {}
    try:
        for each in servers.values():
            await each.wait_healthy(timeout=120)
        history = history_callbacks(args.users, args.stored, args.seed)
        async with aiohttp.ClientSession() as session:
            for name, each in servers.items():
                cpu_0 = each.cpu_seconds()
                for body, headers in history:
                    async with session.post(f"{each.url}/webhooks/agora", data=body, headers=headers) as resp:
                        if resp.status != 200:
                            raise RuntimeError(f"{name}: history callback answered {resp.status}")
                await wait_until_idle(workdir / f"{name}.db", each, cpu_0, args.idle_timeout)
        headers = {"Authorization": f"Bearer {LLM_TOKEN}"}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            urls = {name: f"{each.url}/v1/llm/chat/completions" for name, each in servers.items()}
            for name in servers:  # warm-up: connections, caches, the users' pages
                await one_round(session, urls[name], args, f"warm-{name}")
            for number in range(args.rounds):
                for name in ("A", "B") if number % 4 in (0, 3) else ("B", "A"):
                    before = servers[name].cpu_seconds()
                    parts_before = cpu_parts(servers[name].proc.pid)
                    calls, _ = await one_round(session, urls[name], args, f"{name}-{number}")
                    parts_after = cpu_parts(servers[name].proc.pid)
                    errors = [t.error for t in calls if t.error]
                    if errors:
                        raise RuntimeError(f"{name} failed: {errors[0]}\n{servers[name].log_tail()}")
                    cpu[name].append((servers[name].cpu_seconds() - before) / len(calls) * 1e3)
                    parts[name].append(
                        tuple(
                            (b - a) / len(calls) * 1e3 for a, b in zip(parts_before, parts_after, strict=True)
                        )
                    )
                    firsts[name].extend(t.first for t in calls if t.first is not None)
            for name, each in servers.items():
                async with session.get(f"{each.url}/v1/llm/stats") as resp:
                    reused[name] = (await resp.json())["llm_proxy"]["recalls_reused"]
    finally:
        for each in servers.values():
            each.stop()
    ratios = [b / a for a, b in zip(cpu["A"], cpu["B"], strict=True)]
    figures = {
        name: {
            "build": builds[name],
            "cpu_ms_per_turn": round(statistics.median(cpu[name]), 3),
            "rounds_ms": [round(value, 3) for value in cpu[name]],
            "ttft": {k: round(v, 2) for k, v in latency_summary(firsts[name]).items()},
            "recalls_reused": reused[name],
            "cpu_ms_per_turn_by_part": {
                part: round(statistics.median(each[index] for each in parts[name]), 3)
                for index, part in enumerate(PARTS)
            },
        }
        for name in servers
    }
    print(f"\n{args.rounds} rounds each, alternating A B B A: {args.calls} calls x {args.turns} turns, "
          f"{args.concurrency} at a time, {args.window}-message windows ({CHARACTER}, {args.users} users x "
          f"{args.stored} stored)")  # fmt: skip
    for name, f in figures.items():
        print(f"  {name} {f['build']}: CPU {f['cpu_ms_per_turn']:.2f} ms per turn (median of rounds); first token "
              f"p50 {f['ttft']['p50']:.2f} ms, p99 {f['ttft']['p99']:.2f} ms; recalls reused {f['recalls_reused']}")  # fmt: skip
        split = ", ".join(f"{part} {ms:.2f}" for part, ms in f["cpu_ms_per_turn_by_part"].items())
        print(f"    ms per turn by where it ran: {split}")
    lower = sum(r < 1 for r in ratios)
    print(
        f"  B over A, round by round: median {statistics.median(ratios):.3f}; B lower in {lower} of {len(ratios)}"
    )
    return {
        "bench": "endpoint_ab",
        "rounds": args.rounds,
        "builds": figures,
        "ratio_b_to_a": round(statistics.median(ratios), 3),
        "b_lower_rounds": lower,
        "machine": info,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="the checkout whose server is A (the before)")
    parser.add_argument("--b", required=True, help="the checkout whose server is B (the after)")
    parser.add_argument("--rounds", type=int, default=16, help="timed rounds of each, alternating")
    add_load_arguments(parser)
    args = parser.parse_args()
    with fake_upstream(args) as upstream, work_directory("agent-memory-endpoint-ab-", keep=False) as workdir:
        summary = asyncio.run(run(args, upstream, workdir))
    print_summary(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
