"""Ingest benchmark: signed 103 callbacks posted to the real server, durably committed.

    python bench/ingest.py [--callbacks 5000] [--concurrency 32] [--messages 32]

Starts `python -m agent_memory.cli serve` on a fresh database in a temporary directory,
pre-builds N signed NCS 103 (agent history) callbacks, warms up, then posts them with
`--concurrency` tasks over keep-alive connections and measures each request from send to
the end of the response. Every 200 means the callback was committed (WAL, synchronous=FULL)
before the answer. Afterwards the server is stopped with SIGTERM and the database is checked
with sqlite3: every answered noticeId is in the inbox and the messages are all there.
The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    Noise,
    Server,
    db_size_bytes,
    fmt_ms,
    latency_summary,
    machine_info,
    make_contents,
    print_machine,
    print_summary,
    self_cpu_seconds,
    work_directory,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent_memory.platforms.agora.signatures import agora_headers

SECRET = "bench-notification-secret"
USERS = 1000
CHARACTERS = ("luna", "atlas", "mira")
BASE_MS = 1_763_000_000_000  # Nov 2025


def make_callbacks(
    count: int, messages: int, *, prefix: str, seed: int
) -> list[tuple[str, bytes, dict[str, str]]]:
    """(noticeId, body, headers) of `count` signed 103 callbacks, each a different agent run."""
    rng = random.Random(seed)
    callbacks = []
    for index in range(count):
        user = f"u-{rng.randrange(USERS):04d}"
        character = rng.choice(CHARACTERS)
        uid = str(1000 + rng.randrange(9000))
        agent_id = f"{prefix}-{index:07d}-{rng.getrandbits(48):012x}"
        start_ms = BASE_MS + index * 60_000 + rng.randrange(60_000)
        contents = make_contents(rng, messages, start_ms, uid)
        stop_ms = contents[-1]["timestamp"] + 2000 if contents else start_ms
        notify_ms = stop_ms + rng.randint(100, 900)
        envelope: dict[str, Any] = {
            "noticeId": f"{rng.getrandbits(32)}:{index}:{prefix}:103",
            "productId": 17,
            "eventType": 103,
            "notifyMs": notify_ms,
            "sid": f"SID{rng.getrandbits(40):010X}",
            "payload": {
                "agent_id": agent_id,
                "name": f"agent-{user}-{character}-{index}",
                "channel": f"room-{user}-{index}",
                "start_ts": start_ms // 1000,
                "stop_ts": stop_ms // 1000,
                "contents": contents,
                "labels": {"user_id": user, "character_id": character},
            },
        }
        body = json.dumps(envelope, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", **agora_headers(SECRET, body)}
        callbacks.append((envelope["noticeId"], body, headers))
    return callbacks


async def post_all(
    url: str, callbacks: list[tuple[str, bytes, dict[str, str]]], concurrency: int
) -> tuple[list[float], list[str], list[str], float]:
    """Post every callback with `concurrency` workers; (latencies s, accepted ids, errors, wall s)."""
    latencies: list[float] = []
    accepted: list[str] = []
    errors: list[str] = []
    work = iter(callbacks)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            for notice_id, body, headers in work:
                started = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as resp:
                        answer = await resp.read()
                        status = resp.status
                except (TimeoutError, aiohttp.ClientError) as exc:
                    errors.append(f"{notice_id}: {type(exc).__name__}: {exc}")
                    continue
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    errors.append(f"{notice_id}: HTTP {status}: {answer[:200]!r}")
                    continue
                outcome = json.loads(answer).get("status")
                if outcome != "done":
                    errors.append(f"{notice_id}: status {outcome}")
                accepted.append(notice_id)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return latencies, accepted, errors, wall


def index_lag(db: Path) -> int | None:
    """Messages not yet in the search index, if the schema defers indexing (else None)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute("SELECT value FROM search_state WHERE name = 'messages_indexed_upto'").fetchone()
        if row is None:
            return None
        newest = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        return max(newest - row[0], 0)
    except sqlite3.OperationalError:  # no search_state table: nothing is deferred
        return None
    finally:
        conn.close()


async def wait_for_index(db: Path, server: Server, timeout: float) -> dict[str, Any] | None:
    """After the burst: how long, and how much server CPU, the deferred search indexing takes."""
    behind = index_lag(db)
    if behind is None:
        return None
    started, cpu_0 = time.perf_counter(), server.cpu_seconds()
    lag = behind
    while lag and time.perf_counter() - started < timeout:
        await asyncio.sleep(0.05)
        lag = index_lag(db) or 0
    return {
        "behind": behind,
        "left": lag,
        "seconds": time.perf_counter() - started,
        "cpu_s": server.cpu_seconds() - cpu_0,
    }


def verify(db: Path, accepted: list[str], expected_messages: int, prefix: str) -> dict[str, Any]:
    """Check, with sqlite3 on the closed database, that what was answered 200 is stored."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        inbox = dict(conn.execute("SELECT notice_id, status FROM inbox"))
        missing = [n for n in accepted if n not in inbox]
        not_done = [n for n in accepted if n in inbox and inbox[n] != "done"]
        lo, hi = f"{prefix}-", f"{prefix}."  # '.' sorts right after '-'
        messages = conn.execute(
            "SELECT count(*) FROM messages WHERE agent_id >= ? AND agent_id < ?",
            (lo, hi),
        ).fetchone()[0]
        sessions = conn.execute(
            "SELECT count(*) FROM sessions WHERE agent_id >= ? AND agent_id < ?",
            (lo, hi),
        ).fetchone()[0]
        integrity = conn.execute("PRAGMA quick_check").fetchone()[0]
    finally:
        conn.close()
    return {
        "accepted": len(accepted),
        "missing_from_inbox": len(missing),
        "inbox_not_done": len(not_done),
        "messages": messages,
        "expected_messages": expected_messages,
        "sessions": sessions,
        "quick_check": integrity,
        "ok": not missing and not not_done and messages == expected_messages and integrity == "ok",
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    db = workdir / "bench.db"
    print(f"building {args.callbacks} signed 103 callbacks of {args.messages} messages "
          f"({USERS} users x {len(CHARACTERS)} characters) ...", flush=True)  # fmt: skip
    built = time.perf_counter()
    callbacks = make_callbacks(args.callbacks, args.messages, prefix="bench", seed=args.seed)
    warm = make_callbacks(args.warmup, args.messages, prefix="warm", seed=args.seed + 1)
    body_bytes = sum(len(body) for _, body, _ in callbacks) / max(len(callbacks), 1)
    print(f"  built in {time.perf_counter() - built:.1f} s, mean body {body_bytes / 1024:.1f} KiB")

    server = Server(
        db,
        env={
            "AGORA_WEBHOOK_SECRET": SECRET,
            "AGENT_MEMORY_SUMMARY_DELAY_S": "3600",
            # Keep condense jobs from coming due during the run: this measures ingest only.
            "AGENT_MEMORY_SUMMARY_MAX_MESSAGES": "100000000",
            "AGENT_MEMORY_LOG_LEVEL": "WARNING",
        },
        log_path=workdir / "server.log",
    )
    try:
        await server.wait_healthy()
        print(f"server pid {server.pid} on {server.url}, database {db}")
        url = f"{server.url}/webhooks/agora"
        if warm:
            _, _, warm_errors, warm_wall = await post_all(url, warm, args.concurrency)
            print(f"warm-up: {len(warm)} callbacks in {warm_wall:.2f} s, {len(warm_errors)} errors")
        cpu_server_0, cpu_self_0 = server.cpu_seconds(), self_cpu_seconds()
        noise = Noise(server.pid)
        latencies, accepted, errors, wall = await post_all(url, callbacks, args.concurrency)
        other_cores = noise.other_cores()
        cpu_server = server.cpu_seconds() - cpu_server_0
        cpu_client = self_cpu_seconds() - cpu_self_0
        indexing = await wait_for_index(db, server, args.index_timeout)
    finally:
        exit_code = server.stop()
    log_tail = server.log_tail(10)

    rate = len(accepted) / wall
    lat = latency_summary(latencies)
    print()
    print(f"ingest: {len(callbacks)} callbacks x {args.messages} messages, concurrency {args.concurrency}")
    print(f"  wall            {wall:.2f} s")
    print(f"  callbacks/s     {rate:,.0f}")
    print(f"  messages/s      {rate * args.messages:,.0f}")
    print(f"  latency         {fmt_ms(lat)}  (mean {lat['mean']:.2f} ms)")
    print(f"  errors          {len(errors)}")
    for line in errors[:5]:
        print(f"    {line}")
    print(f"  server CPU      {cpu_server:.2f} s ({cpu_server / wall * 100:.0f}% of one core, "
          f"{cpu_server / max(len(accepted), 1) * 1e3:.2f} ms per callback)")  # fmt: skip
    print(f"  client CPU      {cpu_client:.2f} s (this process, same machine)")
    print(f"  other processes {other_cores:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if other_cores > 0.1 else ''}")  # fmt: skip
    if indexing is not None:
        per = indexing["cpu_s"] / max(indexing["behind"], 1) * 1e6
        left = f", {indexing['left']:,} still left" if indexing["left"] else ""
        print(f"  search index    {indexing['behind']:,} messages behind at the end of the burst; "
              f"caught up in {indexing['seconds']:.2f} s using {indexing['cpu_s']:.2f} CPU-s "
              f"({per:.1f} us/message){left}")  # fmt: skip
    print(f"  server exit     {exit_code} after SIGTERM")
    if exit_code not in (0, -15) and log_tail:
        print("  server log tail:\n" + log_tail)

    check = verify(db, accepted, len(accepted) * args.messages, "bench")
    print(f"verify (sqlite3, after shutdown): {check['accepted']} answered 200, "
          f"{check['missing_from_inbox']} missing from inbox, {check['inbox_not_done']} not done, "
          f"{check['messages']}/{check['expected_messages']} messages, {check['sessions']} sessions, "
          f"quick_check {check['quick_check']} -> {'OK' if check['ok'] else 'FAILED'}")  # fmt: skip
    print(f"database: {db_size_bytes(db) / 2**20:.1f} MiB on disk")
    return {
        "bench": "ingest",
        "callbacks": len(callbacks),
        "messages_per_callback": args.messages,
        "concurrency": args.concurrency,
        "callbacks_per_s": round(rate, 1),
        "messages_per_s": round(rate * args.messages),
        "p50_ms": round(lat["p50"], 2),
        "p90_ms": round(lat["p90"], 2),
        "p99_ms": round(lat["p99"], 2),
        "max_ms": round(lat["max"], 2),
        "errors": len(errors),
        "verified": check["ok"],
        "server_cpu_s": round(cpu_server, 2),
        "client_cpu_s": round(cpu_client, 2),
        "other_cores": round(other_cores, 2),
        "wall_s": round(wall, 2),
        "index_behind": indexing["behind"] if indexing else None,
        "index_catch_up_s": round(indexing["seconds"], 2) if indexing else None,
        "index_catch_up_cpu_s": round(indexing["cpu_s"], 2) if indexing else None,
        "server_exit": exit_code,
        "machine": info,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callbacks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--messages", type=int, default=32, help="messages per callback")
    parser.add_argument("--warmup", type=int, default=200, help="callbacks posted before timing")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--index-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for deferred search indexing after the burst",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    args = parser.parse_args()
    with work_directory("agent-memory-bench-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    print_summary(summary)
    return 0 if summary["verified"] and not summary["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
