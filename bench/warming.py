"""A pair's first recall cold (its index not held in memory) against warm (read in when its call started).

In process, on SQLite: one pair of `--turns` stored turns (Agora 103 callbacks applied through
`Memory.accept_event`), then, `--rounds` times, the recall index copies are dropped and the first
recall of a fresh question is timed: once cold, once after `Memory.warming` read the pair in.

    .venv/bin/python bench/warming.py --turns 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_memory.platforms.agora.events import parse_callback
from agent_memory.settings import Settings
from agent_memory.store.sqlite.recall import POSTINGS
from agent_memory.web.app import create_app
from agent_memory.web.keys import MEMORY, STORE

WORDS = [
    "garden",
    "pottery",
    "sister",
    "dog",
    "biscuit",
    "exam",
    "chemistry",
    "violin",
    "marathon",
    "paris",
    "kyoto",
    "bakery",
    "cousin",
    "wedding",
    "guitar",
    "novel",
    "hiking",
    "lake",
    "piano",
    "interview",
    "promotion",
    "recipe",
    "tomato",
    "kitten",
    "harbour",
]
LABELS = {"user_id": "u-bench", "character_id": "luna"}


def envelope(agent_id: str, turns: list[dict[str, Any]]) -> str:
    payload = {"agent_id": agent_id, "channel": f"room-{agent_id}", "start_ts": 1_763_690_000,
               "labels": LABELS, "contents": turns}  # fmt: skip
    return json.dumps({"noticeId": f"{agent_id}:103", "productId": 17, "eventType": 103,
                       "notifyMs": 1_763_700_000_000, "sid": f"sid-{agent_id}", "payload": payload})  # fmt: skip


async def measure(turns: int, rounds: int, postgres: str | None) -> dict[str, float]:
    from aiohttp.test_utils import TestServer

    rng = random.Random(turns)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(db_path=postgres or Path(folder) / "bench.db", summary_delay_s=3600, summary_after_call_s=3600,
                            summary_max_messages=10_000_000, summary_max_wait_s=3600)  # fmt: skip
        server = TestServer(create_app(settings), host="127.0.0.1")
        await server.start_server()
        try:
            memory, store = server.app[MEMORY], server.app[STORE]
            per_call = min(500, turns)
            for call in range(turns // per_call):
                said = [
                    {"role": "user" if i % 2 == 0 else "assistant",
                     "content": " ".join(rng.choice(WORDS) for _ in range(12)),
                     "turn_id": i // 2 + 1, "timestamp": 1_700_000_000_000 + call * 10**8 + i * 1000}
                    for i in range(per_call)
                ]  # fmt: skip
                raw, event = parse_callback(envelope(f"a-{call}", said), 1_763_700_000_000, follow=False)
                await memory.accept_event(raw, event)
            while await store.catch_up_search():
                pass
            cold, warm, warming = [], [], []
            for round_ in range(rounds):
                question = (
                    f"do you remember the {WORDS[round_ % len(WORDS)]} and the {WORDS[-1 - round_ % 5]}?"
                )
                store.forget_held()
                started = time.perf_counter()
                await memory.reading.recall(
                    LABELS["user_id"], LABELS["character_id"], question, indexed_only=True
                )
                cold.append((time.perf_counter() - started) * 1000)
                POSTINGS.wait_for_reads()  # the cold recall may have started reading the pair in
                store.forget_held()
                started = time.perf_counter()
                memory.reading.warming.warm(LABELS["user_id"], LABELS["character_id"])
                await memory.reading.warming.settled()
                warming.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                await memory.reading.recall(
                    LABELS["user_id"], LABELS["character_id"], question, indexed_only=True
                )
                warm.append((time.perf_counter() - started) * 1000)
            return {"cold_ms": statistics.median(cold), "cold_max_ms": max(cold),
                    "warm_ms": statistics.median(warm), "warm_max_ms": max(warm),
                    "warming_ms": statistics.median(warming)}  # fmt: skip
        finally:
            await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--postgres", action="store_true", help="on a throwaway durable PostgreSQL cluster")
    args = parser.parse_args()
    cluster = None
    if args.postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from postgres_server import PostgresCluster

        cluster = PostgresCluster(durable=True).start()
    print("turns   first recall cold (median / max)   warm (median / max)   warming read (median)")
    try:
        for turns in args.turns:
            url = cluster.create(f"warming_{turns}") if cluster is not None else None
            got = asyncio.run(measure(turns, args.rounds, url))
            print(f"{turns:>6}   {got['cold_ms']:8.2f} / {got['cold_max_ms']:8.2f} ms"
                  f"       {got['warm_ms']:6.2f} / {got['warm_max_ms']:6.2f} ms   {got['warming_ms']:8.1f} ms")  # fmt: skip

    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
