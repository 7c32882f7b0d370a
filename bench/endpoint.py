"""The custom-LLM endpoint's CPU per turn, recording on, beside a null aiohttp streaming proxy.

    python bench/endpoint.py [--calls 8] [--turns 30] [--concurrency 4] [--window 32]
                             [--users 4] [--stored 2048] [--rounds 2]
                             [--first-token-ms 20] [--chunks 3] [--chunk-ms 10]

The load of issue 28: `--calls` voice calls of `--turns` turns each, `--concurrency` at a time,
each turn a streaming `POST /v1/llm/chat/completions` carrying the call's last `--window`
messages (Agora's short-term memory: a system message, then the turns so far, ending with the
user's new question; the replies as the model said them), `agent_id` set so the endpoint records
the call as it goes; the calls spread over `--users` users (character luna) who each have
`--stored` stored messages, taken in through the service's own webhook (signed 103s of 32
messages) before timing, then indexed and condensed with the service's defaults until idle.

The fake upstream (bench/llm_proxy.py's, its own process) sends its first token after
`--first-token-ms`, then `--chunks` chunks in all. The same calls go, in the same run and
alternating round by round, through the service and through bench/null_servers.py's proxy (a
null aiohttp streaming proxy: forward the body, relay the bytes) to the same upstream. CPU is
read from /proc for each server's whole process tree (the service's condense workers included)
over each of its rounds (whatever its background work does meanwhile is counted), divided by the turns sent: ms per turn, and
their ratio. First-token times are measured at the client, and the service's added first token is
against the null proxy's. The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    Noise,
    Server,
    fmt_ms,
    latency_summary,
    machine_info,
    make_contents,
    print_machine,
    print_summary,
    self_cpu_seconds,
    work_directory,
)
from ingest import SECRET, wait_until_idle
from llm_proxy import QUESTIONS, Timed, fake_reply, fake_upstream, stream_call
from null_servers import NullServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent_memory.platforms.agora.signatures import agora_headers

LLM_TOKEN = "bench-llm-token"
MODEL = "fake-model"
CHARACTER = "luna"
PERSONA = "You are Luna, a warm companion. Answer in two sentences."
BASE_MS = 1_763_000_000_000
# The endpoint's counters printed (GET /v1/llm/stats, warm-up included): what recall and recording did.
ENDPOINT_COUNTS = (
    "requests", "recalls", "recalls_reused", "recalls_brief", "recall_misses", "recorded",
    "unchanged_windows", "messages_read", "record_errors",
)  # fmt: skip


def user_of(index: int) -> str:
    return f"u-load-{index}"


def history_callbacks(users: int, stored: int, seed: int) -> list[tuple[bytes, dict[str, str]]]:
    """Signed 103s of 32 messages that give each user `stored` messages with luna."""
    rng = random.Random(seed)
    out = []
    per_call = 32
    for user in range(users):
        for call in range(-(-stored // per_call)):
            start_ms = BASE_MS + call * 86_400_000 + user * 1000
            contents = make_contents(rng, min(per_call, stored - call * per_call), start_ms, str(1000 + user))
            envelope = {
                "noticeId": f"hist-{user}-{call}:103",
                "productId": 17,
                "eventType": 103,
                "notifyMs": contents[-1]["timestamp"] + 1000,
                "payload": {
                    "agent_id": f"hist-{user}-{call:05d}",
                    "channel": f"room-{user}",
                    "start_ts": start_ms // 1000,
                    "stop_ts": contents[-1]["timestamp"] // 1000 + 1,
                    "contents": contents,
                    "labels": {"user_id": user_of(user), "character_id": CHARACTER},
                },
            }
            body = json.dumps(envelope, ensure_ascii=False).encode()
            out.append((body, {"Content-Type": "application/json", **agora_headers(SECRET, body)}))
    return out


def turn_request(call: str, user: str, turn: int, window: int, reply: str, start_ms: int) -> dict[str, Any]:
    """Turn `turn` (0-based) of a call as Agora sends it: the system message, then the call's last
    `window` - 1 messages, the last one the user's new question; `agent_id` records the call."""
    lines = ["Hi Luna, it's me again.", "Hello again! It's good to hear from you."]
    for k in range(turn):
        lines += [QUESTIONS[k % len(QUESTIONS)], reply]
    lines.append(QUESTIONS[turn % len(QUESTIONS)])
    messages: list[dict[str, Any]] = []
    first = max(0, len(lines) - (window - 1))
    for index in range(first, len(lines)):
        role = "user" if index % 2 == 0 else "assistant"
        messages.append({
            "role": role, "content": lines[index], "turn_id": index // 2 + 1,
            "timestamp": start_ms + index * 3000,
            "metadata": {"source": "asr", "user": "1001"} if role == "user" else {"source": "llm"},
        })  # fmt: skip
    return {
        "model": MODEL, "stream": True, "messages": [{"role": "system", "content": PERSONA}, *messages],
        "turn_id": len(lines) // 2 + 1, "timestamp": start_ms + len(lines) * 3000, "interruptable": True,
        "user_id": user, "character_id": CHARACTER, "agent_id": call,
    }  # fmt: skip


async def one_round(
    session: aiohttp.ClientSession, url: str, args: argparse.Namespace, label: str
) -> tuple[list[Timed], float]:
    """`--calls` calls of `--turns` turns, `--concurrency` at a time; (each turn's times, wall s)."""
    reply = fake_reply(args.chunks)
    queue = list(range(args.calls))
    timed: list[Timed] = []

    async def caller() -> None:
        while queue:
            number = queue.pop(0)
            call = f"load-{label}-{number}"
            user = user_of(number % args.users)
            start_ms = int(time.time() * 1000) - args.turns * 6000
            for turn in range(args.turns):
                body = turn_request(call, user, turn, args.window, reply, start_ms)
                timed.append(await stream_call(session, url, body, None))
                if args.turn_gap_ms:
                    await asyncio.sleep(args.turn_gap_ms / 1000)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(args.concurrency)))
    return timed, time.perf_counter() - started


async def run(args: argparse.Namespace, upstream: str, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    service = Server(
        workdir / "memory.db",
        env={
            "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN, "AGENT_MEMORY_UPSTREAM_BASE_URL": f"{upstream}/v1",
            "AGENT_MEMORY_UPSTREAM_API_KEY": "sk-fake", "AGENT_MEMORY_UPSTREAM_MODEL": MODEL,
            "AGORA_WEBHOOK_SECRET": SECRET, "AGENT_MEMORY_LOG_LEVEL": "WARNING",
        },
        log_path=workdir / "server.log",
    )  # fmt: skip
    null = NullServer("proxy", upstream=upstream, log_path=workdir / "null.log")
    servers: dict[str, Any] = {"service": service, "null": null}
    result: dict[str, Any] = {}
    try:
        await service.wait_healthy(timeout=120)
        await null.wait_healthy()
        history = history_callbacks(args.users, args.stored, args.seed)
        cpu_0 = service.cpu_seconds()
        async with aiohttp.ClientSession() as session:
            for body, headers in history:
                async with session.post(f"{service.url}/webhooks/agora", data=body, headers=headers) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"history callback answered {resp.status}: {await resp.text()}")
        idle = await wait_until_idle(workdir / "memory.db", service, cpu_0, args.idle_timeout)
        print(f"stored {args.users} users x {args.stored} messages through the webhook ({len(history)} 103s); "
              f"idle {idle['seconds']:.1f} s later, {idle['jobs_done']} pairs condensed")  # fmt: skip
        urls = {
            "service": f"{service.url}/v1/llm/chat/completions",
            "null": f"{null.url}/v1/llm/chat/completions",
        }
        timed: dict[str, list[Timed]] = {"service": [], "null": []}
        cpu = {"service": 0.0, "null": 0.0}
        wall = {"service": 0.0, "null": 0.0}
        headers = {"Authorization": f"Bearer {LLM_TOKEN}"}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            for kind in ("service", "null"):  # warm-up: connections, caches, the users' pages
                warm, _ = await one_round(session, urls[kind], args, f"warm-{kind}")
                errors = [t.error for t in warm if t.error]
                if errors:
                    raise RuntimeError(f"{kind} warm-up failed: {errors[0]}\n{servers[kind].log_tail()}")
            noise = Noise(service.pid, null.pid)
            client_0 = self_cpu_seconds()
            for number in range(args.rounds):
                order = ("service", "null") if number % 4 in (0, 3) else ("null", "service")  # ABBA
                for kind in order:
                    before = servers[kind].cpu_seconds()
                    calls, took = await one_round(session, urls[kind], args, f"{kind}-{number}")
                    cpu[kind] += servers[kind].cpu_seconds() - before
                    wall[kind] += took
                    timed[kind].extend(calls)
            result["other_cores"] = noise.other_cores()
            result["client_cpu_s"] = self_cpu_seconds() - client_0
            async with session.get(f"{service.url}/v1/llm/stats") as resp:
                counted = (await resp.json())["llm_proxy"] if resp.status == 200 else {}
            result["endpoint_stats"] = {k: v for k, v in counted.items() if k in ENDPOINT_COUNTS}
    finally:
        result["server_exit"] = service.stop()
        null.stop()
        if result["server_exit"] not in (0, -15):
            print(service.log_tail())
    figures: dict[str, Any] = {}
    for kind in ("service", "null"):
        calls = timed[kind]
        good = [t for t in calls if t.error is None and t.first is not None]
        errors = [t.error for t in calls if t.error]
        figures[kind] = {
            "turns": len(calls),
            "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "cpu_ms_per_turn": cpu[kind] / max(len(calls), 1) * 1e3,
            "turns_per_s": len(calls) / max(wall[kind], 1e-9),
            "ttft": latency_summary([t.first for t in good if t.first is not None]),
        }
    ratio = figures["service"]["cpu_ms_per_turn"] / max(figures["null"]["cpu_ms_per_turn"], 1e-9)
    added = {k: figures["service"]["ttft"][k] - figures["null"]["ttft"][k] for k in ("p50", "p99")}
    print(f"\n{args.rounds} rounds each, alternating: {args.calls} calls x {args.turns} turns, {args.concurrency} at a "
          f"time, {args.window}-message windows, recording on; {args.users} users x {args.stored} stored messages; "
          f"the model's first token after {args.first_token_ms:g} ms, {args.chunks} chunks")  # fmt: skip
    for kind, label in (("service", "the service"), ("null", "null proxy")):
        f = figures[kind]
        failed = f" ({f['first_error']})" if f["errors"] else ""
        print(f"  {label:<12} {f['turns']} turns, {f['errors']} errors{failed}; "
              f"CPU {f['cpu_ms_per_turn']:.2f} ms per turn; first token {fmt_ms(f['ttft'])}")  # fmt: skip
    print(
        f"  ratio: the service uses {ratio:.2f}x the null proxy's CPU per turn; "
        f"added first token p50 {added['p50']:.2f} ms, p99 {added['p99']:.2f} ms"
    )
    print(f"  other processes: {result['other_cores']:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if result['other_cores'] > 0.1 else ''}")  # fmt: skip
    print(f"  the endpoint's counters (warm-up included): {result['endpoint_stats']}")
    return {
        "bench": "endpoint",
        "calls": args.calls,
        "turns": args.turns,
        "concurrency": args.concurrency,
        "window": args.window,
        "users": args.users,
        "stored": args.stored,
        "rounds": args.rounds,
        "upstream": {"first_token_ms": args.first_token_ms, "chunks": args.chunks, "chunk_ms": args.chunk_ms},
        "cpu_ms_per_turn": round(figures["service"]["cpu_ms_per_turn"], 3),
        "null_cpu_ms_per_turn": round(figures["null"]["cpu_ms_per_turn"], 3),
        "ratio_to_null": round(ratio, 2),
        "ttft_ms": {k: {p: round(v, 2) for p, v in figures[k]["ttft"].items()} for k in ("service", "null")},
        "added_ttft_ms": {k: round(v, 2) for k, v in added.items()},
        "errors": figures["service"]["errors"] + figures["null"]["errors"],
        "other_cores": round(result["other_cores"], 2),
        "endpoint_stats": result["endpoint_stats"],
        "machine": info,
    }


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load's flags (issue 28's by default), shared with bench/endpoint_ab.py."""
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--turns", type=int, default=30, help="turns per call")
    parser.add_argument("--concurrency", type=int, default=4, help="calls at a time")
    parser.add_argument(
        "--window", type=int, default=32, help="messages per request, the system one included"
    )
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--stored", type=int, default=2048, help="stored messages per user")
    parser.add_argument(
        "--turn-gap-ms", type=float, default=0, help="between a call's turns (0: back to back)"
    )
    parser.add_argument("--first-token-ms", type=float, default=20)
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--chunk-ms", type=float, default=10)
    parser.add_argument("--idle-timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds each way, alternating")
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    args = parser.parse_args()
    with fake_upstream(args) as port, work_directory("agent-memory-endpoint-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, port, workdir))
    print_summary(summary)
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
