"""System-messages benchmark: building a call's long-term memory from a large database.

    python bench/system_messages.py [--total 1000000] [--pair-messages 10000] [--requests 2000]
                                    [--backend sqlite|postgres] [--db postgresql://…]

Builds (once; on SQLite cached in bench/.cache/, keyed by the parameters and the schema) a
database of `--total` messages with the store's own API: many (user, character) pairs in sessions
of about 32 messages, one heavy pair u-bench/luna with `--pair-messages` messages, a summary
and facts, and one light pair u-small/luna with a single session. Then times:

  (a) in-process: `load_context(...)` as the HTTP handler calls it (reader thread + build);
  (b) over HTTP: sequential GET /v1/users/{u}/characters/luna/system-messages on one
      keep-alive connection to the real server (`python -m agent_memory.cli serve`).

With `--backend postgres` the same is timed on PostgreSQL: a durable throwaway cluster started
from the machine's binaries (tests/postgres_server.py), built afresh each run, or the database
`--db postgresql://…` names (built when empty, reused when it holds this data set).

The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
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
)
from psycopg import conninfo, sql

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # postgres_server: a throwaway PostgreSQL
from agent_memory.core.domain import Session, Summary  # noqa: E402
from agent_memory.memory.ingest.arrivals import arrival, stored_values  # noqa: E402
from agent_memory.memory.reading import ContextRequest, build_in  # noqa: E402
from agent_memory.memory.service import Memory  # noqa: E402
from agent_memory.platforms.agora.events import session_event  # noqa: E402
from agent_memory.platforms.agora.payloads import AgentHistory  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import Transaction, open_store  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
BUILD_VERSION = 2  # bump when the generated data changes
CHARACTERS = ("luna", "atlas", "mira")
BIG = ("u-bench", "luna")
SMALL = ("u-small", "luna")
SESSION_MESSAGES = 32
SESSIONS_PER_WRITE = 1000
NOW_MS = 1_763_700_000_000  # the end of the generated history (Nov 2025)
SPAN_MS = 180 * 86_400_000  # half a year of conversations
TOKEN = "bench-api-token"

FACTS = [
    ("The user's name is Sam.", True),
    ("Sam has a dog called Biscuit.", True),
    ("Sam works as a software engineer at a logistics company.", False),
    ("Sam's sister Ana is visiting next month.", False),
    ("Sam is learning Spanish for a trip to Valencia in June.", False),
    ("Sam started running again and aims for a 10 km race in autumn.", False),
    ("Sam is vegetarian.", True),
    ("Sam gets anxious before job interviews.", False),
    ("Sam likes long family-saga novels on flights.", False),
    ("Sam's landlord is slow to fix the heating.", False),
    ("Sam prefers short answers in the morning.", False),
    ("Sam's favourite tea is genmaicha.", False),
]
USER_WIDE_FACTS = ["Sam lives in Rotterdam.", "Sam speaks English and some Dutch."]
SUMMARY = (
    "Sam talks to Luna most evenings after work. Over the last months the conversations "
    "moved from the stress of a new job (a logistics platform with tight deadlines and a "
    "manager who keeps moving them) to plans for the future: a trip to Valencia in June, for "
    "which Sam is learning Spanish with a podcast and flashcards, and a 10 km race in the "
    "autumn after starting to run again. Sam's dog Biscuit comes up often, as does the "
    "heating in the flat, which the landlord has not fixed. Sam asked Luna for help writing "
    "messages, for vegetarian recipes with what is left in the fridge, and for short stories "
    "before sleep; Luna's lighthouse-keeper story became a running joke. Sam gets anxious "
    "before interviews and liked practising questions together. Sam's sister Ana visits "
    "next month and Sam wants to show her the old town and the botanical garden. Recent "
    "calls were shorter and lighter; Sam seemed more settled at work and asked Luna to keep "
    "morning answers brief."
)


def cache_path(args: argparse.Namespace) -> Path:
    """The cached database for these parameters and this schema."""
    schema = (REPO / "agent_memory" / "store" / "sqlite" / "migrations.py").read_bytes()
    key = hashlib.sha1(
        f"{BUILD_VERSION}|{args.total}|{args.pair_messages}|{args.users}|{args.seed}|".encode() + schema
    ).hexdigest()[:10]
    return CACHE / f"system-messages-{args.total}-{args.pair_messages}-{args.users}u-{key}.db"


def session_rows(
    rng: random.Random,
    agent_id: str,
    user_id: str,
    character_id: str,
    count: int,
    start_ms: int,
) -> tuple[Session, list[list[Any]]]:
    """A stored session and its messages, made by the service's own conversion of a window."""
    uid = str(1000 + rng.randrange(9000))
    history = session_event(
        AgentHistory.model_validate(
            {"agent_id": agent_id, "contents": make_contents(rng, count, start_ms, uid)}
        )
    )
    stamp = start_ms + count * 10_000
    items = [arrival(message, start_ms) for message in history.messages]
    stop_ms = items[-1].at_ms + 2000 if items else start_ms
    session = Session(
        agent_id=agent_id,
        user_id=user_id,
        character_id=character_id,
        identity_source="labels",
        status="stopped",
        channel=f"room-{agent_id}",
        name=f"agent-{user_id}-{character_id}",
        start_ms=start_ms,
        stop_ms=stop_ms,
        labels={"user_id": user_id, "character_id": character_id},
        rtc_uid=uid,
        message_count=len(items),
        first_seen_ms=start_ms,
        updated_ms=stop_ms,
    )
    messages = [stored_values(item, session, seq, False, stamp) for seq, item in enumerate(items)]
    return session, messages


def plan_sessions(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(user, character, messages) of every session, in insertion order: the heavy pair's
    sessions are spread evenly among the others, as they would arrive over months."""
    rng = random.Random(args.seed)
    small = SESSION_MESSAGES
    bulk = args.total - args.pair_messages - small
    if bulk < 0:
        raise SystemExit("--total must be at least --pair-messages + 32")
    plan: list[tuple[str, str, int]] = []
    pairs = args.users * len(CHARACTERS)
    for start in range(0, bulk, SESSION_MESSAGES):
        pair = rng.randrange(pairs)
        plan.append((f"u-{pair // len(CHARACTERS):05d}", CHARACTERS[pair % len(CHARACTERS)],
                     min(SESSION_MESSAGES, bulk - start)))  # fmt: skip
    big_sessions = [
        min(SESSION_MESSAGES, args.pair_messages - start)
        for start in range(0, args.pair_messages, SESSION_MESSAGES)
    ]
    step = max(1, len(plan) // max(len(big_sessions), 1))
    for index, count in reversed(list(enumerate(big_sessions))):
        plan.insert(min(index * step, len(plan)), (*BIG, count))
    plan.insert(len(plan) // 2, (*SMALL, small))
    return plan


async def build(path: Path, args: argparse.Namespace) -> None:
    """Build the SQLite file under a temporary name, then give it its cached name."""
    building = path.with_suffix(".building.db")
    for leftover in CACHE.glob(building.name + "*"):
        leftover.unlink()
    await fill(building, args)
    for suffix in ("-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    building.rename(path)


async def fill(location: Path | str, args: argparse.Namespace) -> None:
    """Write the database through the store's own writes, in large batches, showing progress."""
    plan = plan_sessions(args)
    store = open_store(Settings(db_path=location))
    rng = random.Random(args.seed + 1)
    # Session start times are spread over SPAN_MS; the heavy pair's come in time order.
    big_times = iter(sorted(NOW_MS - SPAN_MS + rng.randrange(SPAN_MS)
                            for _ in range(sum(1 for p in plan if p[:2] == BIG))))  # fmt: skip
    started = time.perf_counter()
    written = 0
    pending: asyncio.Future[Any] | None = None
    print(f"building {Path(str(location)).name}: {args.total:,} messages in {len(plan):,} sessions "
          f"({args.users:,} users x {len(CHARACTERS)} characters, {BIG[0]}/{BIG[1]} "
          f"with {args.pair_messages:,}) ...", flush=True)  # fmt: skip
    try:
        for first in range(0, len(plan), SESSIONS_PER_WRITE):
            sessions: list[Session] = []
            messages: list[list[Any]] = []
            for number, (user, character, count) in enumerate(
                plan[first : first + SESSIONS_PER_WRITE], first
            ):
                start_ms = (
                    next(big_times) if (user, character) == BIG else NOW_MS - SPAN_MS + rng.randrange(SPAN_MS)
                )
                session, rows = session_rows(
                    rng,
                    f"agent-{number:07d}-{rng.getrandbits(32):08x}",
                    user,
                    character,
                    count,
                    start_ms,
                )
                sessions.append(session)
                messages.extend(rows)

            def insert(tx: Transaction, sessions: list[Session] = sessions,
                       messages: list[list[Any]] = messages) -> None:  # fmt: skip
                for session in sessions:
                    tx.sessions.insert(session)
                tx.messages.insert_values(messages)

            # The writer thread inserts this batch while the next one is generated.
            if pending is not None:
                await pending
                batch_number = first // SESSIONS_PER_WRITE
                if sys.stdout.isatty() or batch_number % 8 == 0:
                    print(f"{chr(13) if sys.stdout.isatty() else ''}  {written:,}/{args.total:,} messages "
                          f"({written / (time.perf_counter() - started):,.0f}/s)",
                          end="" if sys.stdout.isatty() else "\n", flush=True)  # fmt: skip
            pending = asyncio.ensure_future(store.write(insert))
            written += len(messages)
        if pending is not None:
            await pending

        def memory(tx: Transaction) -> None:
            user, character = BIG
            for text, pinned in FACTS:
                tx.facts.add(user, character, text, scope="character", pinned=pinned,
                             origin="manual" if pinned else "llm")  # fmt: skip
            for text in USER_WIDE_FACTS:
                tx.facts.add(user, character, text, scope="user", pinned=False, origin="llm")
            tx.summaries.put(
                Summary(
                    user_id=user,
                    character_id=character,
                    text=SUMMARY,
                    watermark_id=0,
                    covered_until_ms=NOW_MS - 86_400_000,
                    message_count=max(args.pair_messages - 100, 0),
                    method="llm",
                    model="bench",
                    created_ms=NOW_MS - SPAN_MS,
                    updated_ms=NOW_MS - 86_400_000,
                )
            )

        await store.write(memory)
        # The search and recall indexes, as the idle writer would build them after ingest.
        indexing = time.perf_counter()
        indexed = 0
        while step := await store.catch_up_search():
            indexed += step
            if sys.stdout.isatty() or indexed % 200_000 < step:
                print(f"{chr(13) if sys.stdout.isatty() else ''}  indexed {indexed:,} messages",
                      end="" if sys.stdout.isatty() else "\n", flush=True)  # fmt: skip
        print(f"{chr(13) if sys.stdout.isatty() else ''}  indexed {indexed:,} messages for search and recall "
              f"in {time.perf_counter() - indexing:.1f} s")  # fmt: skip
        if isinstance(location, Path):
            await store.checkpoint()
    finally:
        store.close()
    if not isinstance(location, Path):
        # What autovacuum would have done by the time such a database is read: planner
        # statistics, and pages marked all-visible.
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
    elapsed = time.perf_counter() - started
    print(f"{chr(13) if sys.stdout.isatty() else ''}  {written:,}/{args.total:,} messages in "
          f"{elapsed:.1f} s ({written / elapsed:,.0f}/s)            ")  # fmt: skip


def count_check(location: Path | str) -> dict[str, int]:
    """What the database holds: messages, the two timed pairs', sessions and pairs."""
    pair_count = "SELECT count(*) FROM messages WHERE user_id = ? AND character_id = ?"
    if isinstance(location, Path):
        conn: Any = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
    else:
        conn = psycopg.connect(location)
        pair_count = pair_count.replace("?", "%s")
    try:
        total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        big, small = (conn.execute(pair_count, pair).fetchone()[0] for pair in (BIG, SMALL))
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        pairs = conn.execute(
            "SELECT count(*) FROM (SELECT DISTINCT user_id, character_id FROM sessions) p"
        ).fetchone()[0]
    finally:
        conn.close()
    return {
        "messages": total,
        "big_pair": big,
        "small_pair": small,
        "sessions": sessions,
        "pairs": pairs,
    }


# Questions about the heavy pair's memory: what an app would know a call is about.
QUERIES = [
    "how is Biscuit doing", "the trip to Valencia in June", "practising interview questions",
    "the heating in my flat", "my sister Ana visiting", "running again after the knee",
    "vegetarian recipes for dinner", "learning Spanish with a podcast", "the lighthouse keeper story",
    "a novel for the flight", "my new job and the deadlines", "the old town and the botanical garden",
]  # fmt: skip
MODES = ("rebuilt", "cached", "query_rebuilt", "query_cached", "recall")


def request_of(settings: Settings, pair: tuple[str, str], query: str | None = None) -> ContextRequest:
    return ContextRequest(user_id=pair[0], character_id=pair[1], max_tokens=settings.context_max_tokens,
                          recent_messages=settings.context_recent_messages, query=query)  # fmt: skip


def mode_calls(settings: Settings, store: Any, memory: Memory, pair: tuple[str, str]) -> dict[str, Any]:
    """Each in-process mode as a call of the request number."""
    user, character = pair

    def topic(i: int) -> str:
        return QUERIES[i % len(QUERIES)]

    return {
        "rebuilt": lambda i: store.read(lambda view: build_in(view, request_of(settings, pair))),
        "cached": lambda i: memory.reading.system_messages(user, character),
        # A different query each call: nothing to reuse, the worst case.
        "query_rebuilt": lambda i: store.read(
            lambda view: build_in(view, request_of(settings, pair, f"{topic(i)} {i}"))
        ),
        "query_cached": lambda i: memory.reading.system_messages(user, character, query=topic(i)),
        "recall": lambda i: memory.reading.recall(user, character, topic(i)),
    }


async def time_in_process(path: Path | str, requests: int, warmup: int) -> dict[str, Any]:
    """Side by side, call by call in turn: the start context rebuilt every time (as before the
    cache), through the cache, the same two with a `query`, and recall alone."""
    settings = Settings(db_path=path)
    store = open_store(settings)
    memory = Memory(settings, store)
    results: dict[str, Any] = {}
    try:
        for label, pair in (("big", BIG), ("small", SMALL)):
            calls = mode_calls(settings, store, memory, pair)
            for i in range(warmup):
                for call in calls.values():
                    await call(i)
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            answers: dict[str, Any] = {}
            for i in range(requests):
                for mode in MODES:
                    started = time.perf_counter()
                    answers[mode] = await calls[mode](i)
                    times[mode].append(time.perf_counter() - started)
            results[label] = {
                **{mode: latency_summary(times[mode]) for mode in MODES},
                "tokens": answers["cached"].tokens,
                "included": answers["cached"].included,
                "query_included": answers["query_cached"].included,
                "recall_tokens": answers["recall"].tokens,
                "recall_memories": len(answers["recall"].memories),
            }
    finally:
        store.close()
    return results


HTTP_MODES = ("cached", "query_varied", "query_cached", "recall")


def http_call(base: str, mode: str, i: int) -> tuple[str, dict[str, str]]:
    """The URL and parameters of request `i` of a mode."""
    topic = QUERIES[i % len(QUERIES)]
    if mode == "recall":
        return f"{base}/recall", {"q": topic}
    params = (
        {"query": f"{topic} {i}"}
        if mode == "query_varied"
        else {"query": topic}
        if mode == "query_cached"
        else {}
    )
    return f"{base}/system-messages", params


async def time_http(path: Path | str, requests: int, warmup: int, workdir: Path) -> dict[str, Any]:
    """Over one keep-alive connection, the modes in turn request by request."""
    server = Server(
        path,
        env={"AGENT_MEMORY_API_TOKEN": TOKEN, "AGORA_WEBHOOK_SECRET": "bench-notification-secret",
             "AGENT_MEMORY_SUMMARY_DELAY_S": "3600", "AGENT_MEMORY_LOG_LEVEL": "WARNING"},
        log_path=workdir / "server.log",
    )  # fmt: skip
    results: dict[str, Any] = {}
    try:
        await server.wait_healthy()
        print(f"server pid {server.pid} on {server.url}")
        noise = Noise(server.pid)
        connector = aiohttp.TCPConnector(limit=1)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            for label, (user, character) in (("big", BIG), ("small", SMALL)):
                base = f"{server.url}/v1/users/{user}/characters/{character}"
                for i in range(warmup):
                    for mode in HTTP_MODES:
                        url, params = http_call(base, mode, i)
                        async with session.get(url, params=params) as resp:
                            if resp.status != 200:
                                raise RuntimeError(f"GET {url}: HTTP {resp.status}: {await resp.text()}")
                            await resp.read()
                latencies: dict[str, list[float]] = {mode: [] for mode in HTTP_MODES}
                errors = 0
                cpu_0 = server.cpu_seconds()
                for i in range(requests):
                    for mode in HTTP_MODES:
                        url, params = http_call(base, mode, i)
                        started = time.perf_counter()
                        async with session.get(url, params=params) as resp:
                            await resp.read()
                            errors += resp.status != 200
                        latencies[mode].append(time.perf_counter() - started)
                results[label] = {
                    **{mode: latency_summary(latencies[mode]) for mode in HTTP_MODES},
                    "errors": errors,
                    "server_cpu_ms_per_request": (server.cpu_seconds() - cpu_0)
                    / (requests * len(HTTP_MODES))
                    * 1000,
                }
        results["other_cores"] = noise.other_cores()
    finally:
        results["server_exit"] = server.stop()
        if results["server_exit"] not in (0, -15):
            print(server.log_tail())
    return results


def database_size(location: Path | str) -> int:
    """Bytes on disk: the SQLite file and its WAL, or the PostgreSQL database."""
    if isinstance(location, Path):
        return db_size_bytes(location)
    with psycopg.connect(location) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def postgres_server(args: argparse.Namespace) -> Iterator[Any]:
    """The PostgreSQL server to time on: the one `--db` names (None), or a durable throwaway cluster."""
    if args.backend != "postgres" or args.db:
        yield None
        return
    from postgres_server import PostgresCluster

    started = time.perf_counter()
    cluster = PostgresCluster(durable=True).start()
    print(f"PostgreSQL {cluster.url()} started in {time.perf_counter() - started:.1f} s (durable: fsync on)")
    try:
        yield cluster
    finally:
        cluster.stop()


def fresh_database(args: argparse.Namespace, cluster: Any, name: str) -> str:
    """An empty database `name` on the PostgreSQL server in use (dropped first if it exists)."""
    if cluster is not None:
        return str(cluster.create(name))
    with psycopg.connect(conninfo.make_conninfo(args.db, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return str(conninfo.make_conninfo(args.db, dbname=name))


def scale_location(args: argparse.Namespace, cluster: Any) -> Path | str:
    """Where the data set lives: the SQLite cache file, `--db`, or a database of the cluster."""
    if args.backend == "sqlite":
        return cache_path(args)
    return str(args.db or cluster.create(f"scale_{args.total}"))


async def ensure_database(
    args: argparse.Namespace, location: Path | str | None = None
) -> tuple[Path | str, dict[str, int], int]:
    """The database for `args` (built when missing), its counts and size."""
    if isinstance(location, str):
        return await ensure_postgres(location, args)
    CACHE.mkdir(parents=True, exist_ok=True)
    path = cache_path(args)
    if getattr(args, "rebuild", False) and path.exists():
        path.unlink()
    if path.exists():
        print(f"reusing {path.relative_to(REPO)} (--rebuild to make it again)")
    else:
        # Same parameters, older schema or generator: stale, and hundreds of MiB each.
        for stale in CACHE.glob(path.name.rsplit("-", 1)[0] + "-*.db"):
            print(f"removing stale {stale.relative_to(REPO)}")
            stale.unlink()
        await build(path, args)
    counts = count_check(path)
    size = db_size_bytes(path)
    print(f"database: {counts['messages']:,} messages, {counts['sessions']:,} sessions, "
          f"{counts['pairs']:,} pairs; {BIG[0]}/{BIG[1]} has {counts['big_pair']:,}, "
          f"{SMALL[0]}/{SMALL[1]} has {counts['small_pair']:,}; {size / 2**20:,.0f} MiB on disk")  # fmt: skip
    if counts["messages"] != args.total or counts["big_pair"] != args.pair_messages:
        raise SystemExit("count check failed: the cached database does not hold what was asked")
    return path, counts, size


async def ensure_postgres(url: str, args: argparse.Namespace) -> tuple[str, dict[str, int], int]:
    """The PostgreSQL database at `url`, built when empty and reused when it holds this data set."""
    open_store(Settings(db_path=url)).close()  # migrated, so it can be counted
    counts = count_check(url)
    if not counts["messages"]:
        await fill(url, args)
        counts = count_check(url)
    else:
        print(f"reusing {url} ({counts['messages']:,} messages)")
    size = database_size(url)
    print(f"database: {counts['messages']:,} messages, {counts['sessions']:,} sessions, "
          f"{counts['pairs']:,} pairs; {BIG[0]}/{BIG[1]} has {counts['big_pair']:,}, "
          f"{SMALL[0]}/{SMALL[1]} has {counts['small_pair']:,}; {size / 2**20:,.0f} MiB in PostgreSQL")  # fmt: skip
    if counts["messages"] != args.total or counts["big_pair"] != args.pair_messages:
        raise SystemExit(
            f"count check failed: {url} holds other data than was asked (an empty database is built)"
        )
    return url, counts, size


LABELS = {
    "rebuilt": "rebuilt each call (before)", "cached": "cached (now)",
    "query_rebuilt": "query, a new one each call", "query_cached": "query, repeated topics",
    "query_varied": "query, a new one each call", "recall": "recall",
}  # fmt: skip


def rounded(summary: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in summary.items() if k in ("p50", "p99", "max")}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    with postgres_server(args) as cluster:
        return await timed_on(args, info, scale_location(args, cluster))


async def timed_on(args: argparse.Namespace, info: dict[str, Any], location: Path | str) -> dict[str, Any]:
    """Build (or reuse) the data set at `location` and time it in process and over HTTP."""
    path, counts, size = await ensure_database(args, location)

    print(f"\n(a) in process, {args.requests} calls per mode and pair, the modes in turn")
    noise = Noise()
    local = await time_in_process(path, args.requests, args.warmup)
    local_other = noise.other_cores()
    for label, pair in (("big", BIG), ("small", SMALL)):
        r = local[label]
        inc = r["included"]
        print(f"  {pair[0]}/{pair[1]} ({counts[label + '_pair']:,} messages): "
              f"{inc['messages']}/{inc['messages_available']} messages, {inc['facts']} facts, "
              f"summary {inc['summary']}, {r['tokens']} tokens; with a query {r['query_included']['recalled']} "
              f"recalled; recall {r['recall_memories']} memories, {r['recall_tokens']} tokens")  # fmt: skip
        for mode in MODES:
            print(f"    {LABELS[mode]:<30} {fmt_ms(r[mode])}")
    print(f"  other processes: {local_other:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if local_other > 0.1 else ''}")  # fmt: skip

    print(f"\n(b) HTTP GET on one keep-alive connection, {args.requests} requests per mode and pair, in turn")
    with tempfile.TemporaryDirectory(prefix="agent-memory-bench-") as tmp:
        remote = await time_http(path, args.requests, args.warmup, Path(tmp))
    for label, pair in (("big", BIG), ("small", SMALL)):
        r = remote[label]
        print(
            f"  {pair[0]}/{pair[1]}: errors {r['errors']}, server CPU {r['server_cpu_ms_per_request']:.2f} ms/request"
        )
        for mode in HTTP_MODES:
            print(f"    {LABELS[mode]:<30} {fmt_ms(r[mode])}")
    print(f"  server exit {remote['server_exit']} after SIGTERM")
    print(f"  other processes: {remote['other_cores']:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if remote['other_cores'] > 0.1 else ''}")  # fmt: skip

    big = local["big"]
    return {
        "bench": "system_messages",
        "backend": args.backend,
        "total_messages": counts["messages"],
        "pair_messages": counts["big_pair"],
        "requests": args.requests,
        "db_mib": round(size / 2**20, 1),
        "in_process_big_ms": {mode: rounded(big[mode]) for mode in MODES},
        "in_process_small_ms": {mode: rounded(local["small"][mode]) for mode in MODES},
        "cache_speedup_p50": round(big["rebuilt"]["p50"] / big["cached"]["p50"], 1),
        "http_big_ms": {mode: rounded(remote["big"][mode]) for mode in HTTP_MODES},
        "http_small_ms": {mode: rounded(remote["small"][mode]) for mode in HTTP_MODES},
        "http_errors": remote["big"]["errors"] + remote["small"]["errors"],
        "server_cpu_big_ms": round(remote["big"]["server_cpu_ms_per_request"], 3),
        "big_included": big["included"],
        "other_cores": round(max(local_other, remote["other_cores"]), 2),
        "machine": info,
    }


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend", choices=("sqlite", "postgres"), default=None,
        help="the store timed (postgres: a durable throwaway cluster unless --db names a database)",
    )  # fmt: skip
    parser.add_argument("--db", help="a postgresql:// database for the data set (built when empty)")


def check_backend_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--db` implies `--backend postgres`; the default is SQLite."""
    if args.db and not args.db.startswith(("postgresql://", "postgres://")):
        parser.error("--db must be a postgresql:// URL (SQLite's data set is cached in bench/.cache/)")
    if args.db and args.backend == "sqlite":
        parser.error("--db names a PostgreSQL database: it goes with --backend postgres")
    args.backend = args.backend or ("postgres" if args.db else "sqlite")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total", type=int, default=1_000_000, help="messages in the database")
    parser.add_argument("--pair-messages", type=int, default=10_000, help="messages of u-bench/luna")
    parser.add_argument("--requests", type=int, default=2000, help="timed calls per pair and mode")
    parser.add_argument("--users", type=int, default=20_000, help="users (x 3 characters)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached database")
    add_backend_arguments(parser)
    args = parser.parse_args()
    check_backend_arguments(parser, args)
    summary = asyncio.run(run(args))
    print_summary(summary)
    return 0 if not summary["http_errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
