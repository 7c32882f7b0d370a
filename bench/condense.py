"""Condensing: jobs per second against a fake OpenAI-compatible LLM, and tokens per job as history grows.

    python bench/condense.py [--pairs 400] [--rounds 20] [--latency-ms 0] [--concurrency 4]

The fake LLM runs in a separate process (its CPU is not ours) and answers through the real
openai SDK over loopback. Part 1 condenses one job per pair (32 new messages each). Part 2
grows one pair's history session by session and condenses after each: the tokens sent must
follow the new messages, not the whole history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "tests"),
]

from _common import machine_info, print_machine, self_cpu_seconds  # noqa: E402

from agent_memory.condense.openai_compatible import LLMCondenser  # noqa: E402
from agent_memory.core.clock import now_ms  # noqa: E402
from agent_memory.core.jsonutil import dumps  # noqa: E402
from agent_memory.memory.ingest import Ingestor  # noqa: E402
from agent_memory.memory.jobs import CondenseJobs  # noqa: E402
from agent_memory.platforms.agora.events import parse_callback  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import Store, open_store  # noqa: E402

MESSAGES_PER_SESSION = 32


def serve_fake_llm(port_queue: multiprocessing.Queue, latency_s: float) -> None:
    """Run FakeOpenAI until killed, reporting its base URL."""
    from fakes.openai_server import FakeOpenAI

    async def main() -> None:
        fake = FakeOpenAI()
        if latency_s:
            answer = fake._chat_completions

            async def slow(request: Any) -> Any:
                await asyncio.sleep(latency_s)  # a model that takes its time
                return await answer(request)

            fake._chat_completions = slow  # type: ignore[method-assign]
        async with fake:
            port_queue.put(fake.base_url)
            await asyncio.Event().wait()

    asyncio.run(main())


def session_envelope(user: str, agent: str, round_index: int) -> dict[str, Any]:
    start = 1_763_000_000_000 + round_index * 86_400_000
    contents = []
    for i in range(MESSAGES_PER_SESSION):
        role = "user" if i % 2 == 0 else "assistant"
        text = (
            f"On day {round_index} I told you about my garden, the tomatoes number {i} and my sister's plans."
            if role == "user"
            else f"That sounds lovely. Tell me more about tomato {i} and how the weeding went on day {round_index}."
        )
        contents.append(
            {
                "role": role,
                "content": text,
                "turn_id": i // 2 + 1,
                "timestamp": start + i * 4000,
                "metadata": {"source": "asr" if role == "user" else "llm"},
            }
        )
    return {
        "noticeId": f"{agent}:103", "productId": 17, "eventType": 103, "notifyMs": start,
        "payload": {"agent_id": agent, "start_ts": start, "labels": {"user_id": user, "character_id": "luna"},
                    "contents": contents},
    }  # fmt: skip


async def ingest(store: Store, ingestor: Ingestor, envelopes: list[dict[str, Any]]) -> None:
    parsed = [parse_callback(dumps(e), now_ms(), follow=False) for e in envelopes]
    await asyncio.gather(*(
        store.write(lambda tx, raw=raw, event=event: ingestor.accept(tx, raw, event))
        for raw, event in parsed
    ))  # fmt: skip


async def run(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-condense-"))
    settings = Settings(
        db_path=workdir / "bench.db", openai_base_url=base_url, openai_api_key="bench",
        llm_max_retries=0, llm_timeout_s=30, summary_delay_s=0, summary_max_messages=1,
        condense_concurrency=args.concurrency,
    )  # fmt: skip
    store = open_store(settings)
    ingestor = Ingestor(settings)
    jobs = CondenseJobs(settings, store, LLMCondenser(settings))
    try:
        # Part 1: throughput.
        await ingest(store, ingestor, [session_envelope(f"u{p}", f"A{p}", 0) for p in range(args.pairs)])
        cpu0, wall0 = self_cpu_seconds(), time.perf_counter()
        await jobs.start()  # as the service runs it: the scheduler's sweep, jobs chaining
        while await store.read(lambda v: v.maintenance.counts()["jobs"]):
            await asyncio.sleep(0.01)
        wall, cpu = time.perf_counter() - wall0, self_cpu_seconds() - cpu0
        jobs.scheduler.shutdown(wait=False)
        jobs.scheduler = None
        done = await store.read(lambda v: v.maintenance.counts()["summaries"])
        print(
            f"part 1: {done} jobs of {MESSAGES_PER_SESSION} messages in {wall:.2f} s "
            f"= {done / wall:.1f} jobs/s (concurrency {args.concurrency}, LLM latency "
            f"{args.latency_ms} ms); our CPU {cpu:.2f} s = {1000 * cpu / done:.2f} ms per job"
        )

        # Part 2: tokens per job as one pair's history grows.
        print("\npart 2: one pair, a new session of 32 messages before each condense")
        print(f"{'round':>5} {'stored messages':>16} {'tokens sent':>12}")
        tokens: list[int] = []
        for round_index in range(1, args.rounds + 1):
            await ingest(store, ingestor, [session_envelope("u-grow", f"G{round_index}", round_index)])
            await jobs.run_due_now()
            summary = await store.read(lambda v: v.summaries.get("u-grow", "luna"))
            stored = await store.read(lambda v: len(v.messages.latest("u-grow", "luna", 100_000)))
            assert summary is not None
            sent = summary.meta["tokens_sent"]
            tokens.append(sent)
            print(f"{round_index:>5} {stored:>16} {sent:>12}")
        growth = tokens[-1] / tokens[1] if len(tokens) > 1 else 1.0
        print(
            f"tokens sent in the last round / the second: {growth:.2f} "
            f"(history grew {args.rounds}x; flat means only new messages are sent)"
        )
        return {
            "jobs_per_s": round(done / wall, 1),
            "cpu_ms_per_job": round(1000 * cpu / done, 2),
            "tokens_first": tokens[0],
            "tokens_last": tokens[-1],
            "history_messages": args.rounds * MESSAGES_PER_SESSION,
        }
    finally:
        await jobs.condenser.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=0)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    print_machine(machine_info())
    ports: multiprocessing.Queue = multiprocessing.Queue()
    fake = multiprocessing.Process(target=serve_fake_llm, args=(ports, args.latency_ms / 1000), daemon=True)
    fake.start()
    try:
        base_url = ports.get(timeout=30)
        summary = asyncio.run(run(args, base_url))
    finally:
        fake.terminate()
        fake.join(5)
    print(json.dumps({"bench": "condense", **summary}))


if __name__ == "__main__":
    main()
