"""The custom-LLM endpoint: time to first and last token through it vs straight to the model.

    python bench/llm_proxy.py [--total 1000000] [--streams 50] [--rounds 10] [--calls 3]
                              [--turn-gap-ms 2000] [--chunks 20] [--first-token-ms 60]
                              [--chunk-ms 15] [--record]

A fake upstream LLM (its own process, aiohttp on loopback) streams `--chunks` chunks, the
first after `--first-token-ms`, the rest `--chunk-ms` apart. The real server
(`python -m agent_memory.cli serve`) runs on a copy of the cached database of
bench/system_messages.py (`--total` messages; u-bench/luna holds `--pair-messages`) with
AGENT_MEMORY_UPSTREAM_BASE_URL pointing at the fake. Rounds alternate (ABBA): `--streams`
concurrent streaming calls through `POST /v1/llm/chat/completions`, then as many straight to
the fake. A caller is one voice call: its calls are its turns, `--turn-gap-ms` apart (the reply
spoken, the user answering; 0 sends them back to back, a stress far past what `--streams`
voice calls ask). Each call is a short Agora-shaped conversation of u-bench/luna (extended fields,
`llm.params` at the top level, a bearer key) ending in a question recall can answer. With
`--record` each caller is an agent run (`agent_id` in `llm.params`) whose calls are its turns,
each carrying the run's earlier turns: the endpoint records them as it goes, as in a real call.
Reported: p50/p99 time to first token and to last token of both, the added time to first
token, how many forwarded requests carried recalled memory, the endpoint's recall counters
(how many were brief, past the deadline, failed), and the server's memory per open
stream (RSS with 5x `--streams` streams held open, less RSS with `--streams`, divided by the
difference), and RSS before each timed round (nothing kept per call: a long `--rounds` run is a soak).

The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    Noise,
    Server,
    fmt_ms,
    latency_summary,
    machine_info,
    print_machine,
    print_summary,
    process_cpu_seconds,
    self_cpu_seconds,
)
from aiohttp import web
from system_messages import BIG, ensure_database

LLM_TOKEN = "bench-llm-token"
API_TOKEN = "bench-api-token"
MODEL = "fake-model"
PERSONA = "You are Luna, a warm companion. Answer in two sentences."
# Questions the heavy pair's generated history can answer (bench/_common.py USER_LINES).
QUESTIONS = [
    "Do you remember the name of my dog?",
    "What did I say about the trip to Valencia?",
    "How far did I run the other morning?",
    "What was the problem with the heating?",
    "Who is visiting me next weekend?",
    "What did I have in the fridge when I asked about dinner?",
    "What was I anxious about on Thursday?",
    "Which notebook did I mean?",
]


# -- the fake upstream LLM (its own process) --------------------------------------------------


def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One `chat.completion.chunk` as an SSE event."""
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1_763_700_000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@contextmanager
def fake_upstream(args: argparse.Namespace) -> Iterator[Any]:
    """The fake model in a process of its own (`--chunks`, `--first-token-ms`, `--chunk-ms`),
    started before any event loop so that it gets a clean one; yields what it listens on."""
    queue: multiprocessing.Queue = multiprocessing.Queue()
    fake = multiprocessing.Process(
        target=serve_upstream,
        args=(queue, args.chunks, args.first_token_ms / 1000, args.chunk_ms / 1000),
        daemon=True,
    )
    fake.start()
    try:
        yield queue.get(timeout=30)
    finally:
        fake.kill()
        fake.join()


def serve_upstream(port_queue: multiprocessing.Queue, chunks: int, first_s: float, gap_s: float) -> None:
    """Serve `POST /v1/chat/completions` (streaming) and `GET /stats` until killed."""
    seen = {"requests": 0, "with_memory": 0}

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen["requests"] += 1
        # The bench sends one system message; the endpoint adds one of recalled memories.
        systems = sum(1 for m in body.get("messages", []) if m.get("role") == "system")
        seen["with_memory"] += systems > 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(first_s)
        await response.write(chunk(0, {"role": "assistant", "content": "Of"}))
        # The memory measurement keeps streams open this long (the endpoint passes the field on).
        await asyncio.sleep(float(body.get("bench_hold_ms", 0)) / 1000)
        for index in range(1, chunks):
            await asyncio.sleep(gap_s)
            await response.write(chunk(index, {"content": f" word{index}"}))
        await response.write(chunk(chunks, {}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(seen)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", completions)
        app.router.add_get("/stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        host, port = runner.addresses[0][:2]
        port_queue.put(f"http://{host}:{port}")
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the calls -----------------------------------------------------------------------------------


def agora_request(call: int, agent: str | None = None, turns: int = 0, reply: str = "") -> dict[str, Any]:
    """A custom-LLM request as Agora sends it: extended fields, params at the top level.

    With `agent` (`--record`), it is turn `turns` + 1 of that agent run: the run's earlier
    questions and `reply` to each come first, and `agent_id` names the run the endpoint records into.
    """
    # A run's earlier turns are the same in each of its calls (times included), as Agora resends them.
    first = call - turns
    at = 1_763_800_000_000 + first * 60_000
    asked = [QUESTIONS[(first + k) % len(QUESTIONS)] for k in range(turns + 1)]
    lines = ["Hi Luna, it's me again.", "Hello again! It's good to hear from you."]
    for question in asked[:-1]:
        lines += [question, reply]
    lines.append(asked[-1])
    messages: list[dict[str, Any]] = [{"role": "system", "content": PERSONA}]
    for index, line in enumerate(lines):
        role = "user" if index % 2 == 0 else "assistant"
        messages.append({
            "role": role, "content": line, "turn_id": index // 2 + 1, "timestamp": at + index * 3000,
            "metadata": {"source": "asr", "user": "1001"} if role == "user" else {"source": "llm"},
        })  # fmt: skip
    body = {
        "model": MODEL, "stream": True, "messages": messages, "turn_id": len(lines) // 2 + 1,
        "timestamp": at + len(lines) * 3000, "interruptable": True,
        "user_id": BIG[0], "character_id": BIG[1],
    }  # fmt: skip
    if agent is not None:
        body["agent_id"] = agent
    return body


def fake_reply(chunks: int) -> str:
    """What the fake model says (`serve_upstream`), as Agora keeps it in the next request."""
    return "Of" + "".join(f" word{index}" for index in range(1, chunks))


class Timed:
    """One streaming call's times (seconds since it was sent)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.error: str | None = None


async def stream_call(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], opened: asyncio.Event | None
) -> Timed:
    """POST one streaming request and read it to `[DONE]`; `opened` is set at the first token."""
    timed = Timed()
    started = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                timed.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return timed
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    timed.last = time.perf_counter() - started
                    break
                if timed.first is None and b'"content"' in data:
                    timed.first = time.perf_counter() - started
                    if opened is not None:
                        opened.set()
    except aiohttp.ClientError as exc:
        timed.error = repr(exc)
    if timed.last is None and timed.error is None:
        timed.error = "the stream ended without [DONE]"
    return timed


def rss_bytes(pid: int) -> int:
    """Resident memory of a process, from /proc/<pid>/status."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def round_of(
    session: aiohttp.ClientSession,
    url: str,
    args: argparse.Namespace,
    first_call: int,
    server_pid: int | None,
) -> tuple[list[Timed], int | None]:
    """`args.streams` streams kept open; with `server_pid`, the server's RSS once all of them are.

    Steady (the default): each of `streams` callers is a voice call making `--calls` calls, one
    per turn, `--turn-gap-ms` apart (the reply spoken, the user answering); the callers' first
    calls spread over one turn's length, as turns of many calls arrive. With `--turn-gap-ms 0`
    the calls follow back to back (far more requests than 50 voice calls make: a stress test).
    With `--burst`: every caller's one call at the same instant.
    """
    streams, calls = args.streams, 1 if args.burst else args.calls
    stream_s = (args.first_token_ms + args.chunks * args.chunk_ms) / 1000
    spread_s = 0.0 if args.burst else stream_s + args.turn_gap_ms / 1000
    opened = [asyncio.Event() for _ in range(streams)]
    timed: list[Timed] = []

    async def caller(index: int) -> None:
        await asyncio.sleep(spread_s * index / streams)
        # With --record each caller is one agent run, its calls the run's turns.
        agent = f"bench-run-{first_call}-{index}" if args.record else None
        for number in range(calls):
            if number:
                await asyncio.sleep(args.turn_gap_ms / 1000)
            turns = number if agent else 0
            body = agora_request(first_call + index * calls + number, agent, turns, fake_reply(args.chunks))
            timed.append(await stream_call(session, url, body, opened[index] if number == 0 else None))

    tasks = [asyncio.ensure_future(caller(i)) for i in range(streams)]
    rss = None
    if server_pid is not None:
        # Every caller has its first stream open: `streams` streams are open now.
        waiting = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in opened)))
        done, _ = await asyncio.wait([waiting], timeout=30)
        if done:
            rss = rss_bytes(server_pid)
    await asyncio.gather(*tasks)
    return timed, rss


async def held_streams_rss(
    session: aiohttp.ClientSession, url: str, args: argparse.Namespace, pid: int
) -> dict[str, float]:
    """The server's RSS with `streams` held-open streams, then with 5x as many: the growth per stream.

    RSS keeps its high-water mark, so the timed rounds (never more than `streams` open) cannot
    show what a stream costs; going past that mark can.
    """
    hold = {"bench_hold_ms": 3000}
    counts = (args.streams, 5 * args.streams)
    samples: list[int] = []
    tasks: list[asyncio.Future[Timed]] = []
    for target in counts:
        opened = [asyncio.Event() for _ in range(target - len(tasks))]
        tasks += [
            asyncio.ensure_future(stream_call(session, url, {**agora_request(i), **hold}, event))
            for i, event in enumerate(opened)
        ]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 30)
        await asyncio.sleep(0.2)
        samples.append(rss_bytes(pid))
    errors = [t.error for t in await asyncio.gather(*tasks) if t.error]
    if errors:
        raise RuntimeError(f"held streams failed: {errors[0]}")
    return {
        "rss_held_mib": samples[0] / 2**20,
        "rss_held_5x_mib": samples[1] / 2**20,
        "kib_per_stream": (samples[1] - samples[0]) / (counts[1] - counts[0]) / 1024,
    }


async def time_calls(args: argparse.Namespace, path: Path, workdir: Path, upstream: str) -> dict[str, Any]:
    """The server on a copy of `path`; rounds through it and straight to the fake, alternating."""
    copy = workdir / "memory.db"
    for suffix in ("", "-wal"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            shutil.copyfile(source, Path(f"{copy}{suffix}"))
    server = Server(
        copy,
        env={
            "AGENT_MEMORY_API_TOKEN": API_TOKEN, "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN,
            "AGENT_MEMORY_UPSTREAM_BASE_URL": f"{upstream}/v1", "AGENT_MEMORY_UPSTREAM_API_KEY": "sk-fake",
            "AGENT_MEMORY_UPSTREAM_MODEL": MODEL, "AGORA_WEBHOOK_SECRET": "bench-notification-secret",
            "AGENT_MEMORY_SUMMARY_DELAY_S": "3600", "AGENT_MEMORY_LOG_LEVEL": "WARNING",
            **dict(setting.split("=", 1) for setting in args.server_env),
        },
        log_path=workdir / "server.log",
    )  # fmt: skip
    result: dict[str, Any] = {}
    try:
        await server.wait_healthy(timeout=120)
        print(f"server pid {server.pid} on {server.url}; fake upstream on {upstream}")
        paths = {
            "proxy": f"{server.url}/v1/llm/chat/completions",
            "direct": f"{upstream}/v1/chat/completions",
        }
        timed: dict[str, list[Timed]] = {"proxy": [], "direct": []}
        connector = aiohttp.TCPConnector(limit=0)
        headers = {"Authorization": f"Bearer {LLM_TOKEN}"}
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            # Warm-up: connections open, caches and the pair's index pages loaded.
            for kind in ("proxy", "direct"):
                warm, _ = await round_of(session, paths[kind], args, 0, None)
                result[f"{kind}_warmup_calls"] = len(warm)
                errors = [t.error for t in warm if t.error]
                if errors:
                    raise RuntimeError(f"{kind} warm-up failed: {errors[0]}\n{server.log_tail()}")
            idle: list[int] = []
            busy: list[int] = []
            noise = Noise(server.pid)
            cpu_0, main_0 = server.cpu_seconds(), process_cpu_seconds(server.pid)
            client_0 = self_cpu_seconds()
            timed_0 = time.perf_counter()
            call = args.streams
            proxy_s = 0.0
            for number in range(args.rounds):
                # ABBA: neither side always goes first.
                order = ("proxy", "direct") if number % 4 in (0, 3) else ("direct", "proxy")
                for kind in order:
                    if kind == "proxy":
                        await asyncio.sleep(0.2)  # the previous round's streams are closed
                        idle.append(rss_bytes(server.pid))
                    round_started = time.perf_counter()
                    calls, rss = await round_of(
                        session, paths[kind], args, call, server.pid if kind == "proxy" else None
                    )
                    if kind == "proxy":
                        proxy_s += time.perf_counter() - round_started
                    if rss is not None:
                        busy.append(rss)
                    timed[kind].extend(calls)
                    call += len(calls)
            server_cpu = server.cpu_seconds() - cpu_0
            main_cpu = process_cpu_seconds(server.pid) - main_0
            result["client_cpu_s"] = self_cpu_seconds() - client_0
            result["other_cores"] = noise.other_cores()
            result["upstream_seen"] = await upstream_stats(upstream)
            result["endpoint_stats"] = await endpoint_stats(server.url)
            result.update(await held_streams_rss(session, paths["proxy"], args, server.pid))
        proxied = len(timed["proxy"])
        result["proxy_calls_per_s"] = proxied / proxy_s if proxy_s else 0.0
        result["server_cpu_ms_per_call"] = server_cpu / max(proxied, 1) * 1000
        result["service_cpu_ms_per_call"] = main_cpu / max(proxied, 1) * 1000
        for kind, calls in timed.items():
            good = [t for t in calls if t.error is None and t.first is not None and t.last is not None]
            errors = [t.error for t in calls if t.error]
            result[kind] = {
                "calls": len(calls),
                "errors": len(errors),
                "first_error": errors[0] if errors else None,
                "ttft": latency_summary([t.first for t in good if t.first is not None]),
                "ttlt": latency_summary([t.last for t in good if t.last is not None]),
            }
        result["rss_first_round_mib"] = idle[0] / 2**20
        result["rss_last_round_mib"] = idle[-1] / 2**20
        result["rss_rounds_mib"] = [round(b / 2**20, 1) for b in idle]
        result["timed_s"] = time.perf_counter() - timed_0
        result["rss_open_mib"] = statistics.median(busy) / 2**20 if busy else None
    finally:
        result["server_exit"] = server.stop()
        if result["server_exit"] not in (0, -15):
            print(server.log_tail())
    return result


async def upstream_stats(upstream: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as session, session.get(f"{upstream}/stats") as resp:
        return dict(await resp.json())


async def endpoint_stats(url: str) -> dict[str, int]:
    """The endpoint's own counters (GET /v1/llm/stats): recalls, brief ones, misses."""
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session, session.get(f"{url}/v1/llm/stats") as resp:
        return dict((await resp.json())["llm_proxy"])


def rounded(summary: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 2) for k, v in summary.items() if k in ("p50", "p99", "max")}


async def run(args: argparse.Namespace, upstream: str) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    path, counts, _size = await ensure_database(args)
    with tempfile.TemporaryDirectory(prefix="agent-memory-bench-") as tmp:
        result = await time_calls(args, path, Path(tmp), upstream)
    seen = result["upstream_seen"]
    proxy, direct = result["proxy"], result["direct"]
    added = {k: proxy["ttft"][k] - direct["ttft"][k] for k in ("p50", "p99")}
    added_last = {k: proxy["ttlt"][k] - direct["ttlt"][k] for k in ("p50", "p99")}
    proxied = proxy["calls"] + result["proxy_warmup_calls"]  # the upstream saw those too
    shape = (
        "all at once"
        if args.burst
        else f"from {args.streams} callers making {args.calls} calls each, {args.turn_gap_ms:g} ms apart"
    ) + (", each caller an agent run recorded turn by turn" if args.record else "")
    print(f"\n{args.rounds} rounds each way, alternating, of {args.streams} concurrent streaming calls {shape}; "
          f"the model's first token after {args.first_token_ms} ms, {args.chunks} chunks {args.chunk_ms} ms apart")  # fmt: skip
    for kind in ("direct", "proxy"):
        r = result[kind]
        label = "through the endpoint" if kind == "proxy" else "straight to the model"
        print(f"  {label:<22} {r['calls']} calls, {r['errors']} errors"
              + (f" (first: {r['first_error']})" if r["errors"] else ""))  # fmt: skip
        print(f"    first token  {fmt_ms(r['ttft'])}")
        print(f"    last token   {fmt_ms(r['ttlt'])}")
    print(
        f"  added time to first token: p50 {added['p50']:.2f} ms, p99 {added['p99']:.2f} ms (target p99 <= 5 ms)"
    )
    print(f"  added time to last token:  p50 {added_last['p50']:.2f} ms, p99 {added_last['p99']:.2f} ms")
    print(f"  forwarded with recalled memory: {seen['with_memory']} of {proxied} endpoint calls")
    counted = result["endpoint_stats"]
    recalls = {
        key: counted.get(key, 0) for key in ("recalls", "recalls_brief", "recall_misses", "recall_errors")
    }
    print(f"  recalls: {recalls['recalls']}, {recalls['recalls_brief']} of them read on the event loop (brief); "
          f"{recalls['recall_misses']} past the deadline, {recalls['recall_errors']} failed")  # fmt: skip
    print(f"  server RSS: {result['rss_first_round_mib']:.1f} MiB before the first timed round, "
          f"{result['rss_last_round_mib']:.1f} MiB before the last; {result['rss_held_mib']:.1f} MiB with "
          f"{args.streams} streams held open, {result['rss_held_5x_mib']:.1f} MiB with {5 * args.streams}: "
          f"{result['kib_per_stream']:.1f} KiB per open stream")  # fmt: skip
    print(f"  endpoint calls: {result['proxy_calls_per_s']:.1f} per second while timing")
    print(f"  server CPU {result['server_cpu_ms_per_call']:.2f} ms per endpoint call "
          f"({result['service_cpu_ms_per_call']:.2f} in the service process, the rest in its condense workers); "
          f"client CPU {result['client_cpu_s']:.1f} s; exit {result['server_exit']} after SIGTERM")  # fmt: skip
    print(f"  other processes: {result['other_cores']:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if result['other_cores'] > 0.1 else ''}")  # fmt: skip
    return {
        "bench": "llm_proxy",
        "total_messages": counts["messages"],
        "pair_messages": counts["big_pair"],
        "streams": args.streams,
        "rounds": args.rounds,
        "mode": "burst" if args.burst else f"steady, {args.calls} calls per caller and round",
        "turn_gap_ms": 0 if args.burst else args.turn_gap_ms,
        "endpoint_calls_per_s": round(result["proxy_calls_per_s"], 1),
        "record": args.record,
        "server_env": args.server_env,
        "upstream": {"first_token_ms": args.first_token_ms, "chunks": args.chunks, "chunk_ms": args.chunk_ms},
        "ttft_ms": {"direct": rounded(direct["ttft"]), "proxy": rounded(proxy["ttft"])},
        "ttlt_ms": {"direct": rounded(direct["ttlt"]), "proxy": rounded(proxy["ttlt"])},
        "added_ttft_ms": {k: round(v, 2) for k, v in added.items()},
        "added_ttlt_ms": {k: round(v, 2) for k, v in added_last.items()},
        "errors": proxy["errors"] + direct["errors"],
        "with_memory": seen["with_memory"],
        "recalls": recalls,
        "endpoint_calls": proxied,
        "timed_s": round(result["timed_s"], 1),
        "kib_per_open_stream": round(result["kib_per_stream"], 1),
        "rss_mib": {
            "first_round": round(result["rss_first_round_mib"], 1),
            "last_round": round(result["rss_last_round_mib"], 1),
            "before_each_round": result["rss_rounds_mib"],
            f"held_{args.streams}": round(result["rss_held_mib"], 1),
            f"held_{5 * args.streams}": round(result["rss_held_5x_mib"], 1),
        },
        "server_cpu_ms_per_call": round(result["server_cpu_ms_per_call"], 3),
        "service_cpu_ms_per_call": round(result["service_cpu_ms_per_call"], 3),
        "other_cores": round(result["other_cores"], 2),
        "machine": info,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total", type=int, default=1_000_000, help="messages in the database")
    parser.add_argument("--pair-messages", type=int, default=10_000, help="messages of u-bench/luna")
    parser.add_argument("--users", type=int, default=20_000, help="users (x 3 characters)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached database")
    parser.add_argument("--streams", type=int, default=50, help="concurrent streaming calls")
    parser.add_argument("--rounds", type=int, default=10, help="rounds each way, alternating")
    parser.add_argument("--calls", type=int, default=3, help="calls (turns) each caller makes per round")
    parser.add_argument(
        "--turn-gap-ms",
        type=float,
        default=2000,
        help="between one call's end and the caller's next (the reply spoken, the user answering); "
        "0: back to back",
    )
    parser.add_argument("--burst", action="store_true", help="every call of a round at once instead")
    parser.add_argument(
        "--record",
        action="store_true",
        help="each caller an agent run (agent_id): the endpoint records every turn as it goes",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the server (repeatable), e.g. AGENT_MEMORY_RECALL_TIMEOUT_MS=10",
    )
    parser.add_argument("--chunks", type=int, default=20, help="chunks the fake model streams")
    parser.add_argument(
        "--first-token-ms", type=float, default=60, help="the fake model's time to first token"
    )
    parser.add_argument("--chunk-ms", type=float, default=15, help="between the fake model's chunks")
    args = parser.parse_args()
    with fake_upstream(args) as port:
        summary = asyncio.run(run(args, port))
    print_summary(summary)
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
