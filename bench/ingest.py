"""Ingest benchmark: signed 103 callbacks posted to the real server, durably committed.

    python bench/ingest.py [--callbacks 5000] [--concurrency 32] [--messages 32]
                           [--backends sqlite,postgres] [--instances 1,2] [--metrics on|off]

Starts `python -m agent_memory.cli serve` on a fresh database in a temporary directory,
pre-builds N signed NCS 103 (agent history) callbacks, warms up, then posts them with
`--concurrency` tasks over keep-alive connections and measures each request from send to
the end of the response. Every 200 means the callback was committed (WAL, synchronous=FULL)
before the answer. Afterwards the server is stopped with SIGTERM and the database is checked
with sqlite3: every answered noticeId is in the inbox and the messages are all there.
With `--backends sqlite,postgres --instances 1,2` the same callbacks are sent, one configuration
after another in one run, to SQLite and to 1 and 2 instances sharing a PostgreSQL the bench
starts from the machine's binaries (durable: fsync on), spread round-robin over the instances;
PostgreSQL's own CPU is reported beside the service's. The last line printed is a JSON summary
(the first configuration's figures at the top level, every configuration under "configs").
`--metrics off` starts the servers with AGENT_MEMORY_METRICS=0; with metrics on (the default)
GET /metrics is scraped every `--scrape-s` seconds while the callbacks are timed, as Prometheus
would, and the scrapes' count and slowest answer are reported.
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
    CLOCK_TICKS,
    Noise,
    Server,
    db_size_bytes,
    fmt_ms,
    latency_summary,
    machine_info,
    main_thread_cpu_seconds,
    make_contents,
    print_machine,
    print_summary,
    process_cpu_seconds,
    self_cpu_seconds,
    work_directory,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from null_servers import NullServer

from agent_memory.platforms.agora.signatures import agora_headers

SECRET = "bench-notification-secret"
USERS = 1000
CHARACTERS = ("luna", "atlas", "mira")
BASE_MS = 1_763_000_000_000  # Nov 2025


def make_callbacks(
    count: int, messages: int, *, prefix: str, seed: int, pairs: int = 0
) -> list[tuple[str, bytes, dict[str, str]]]:
    """(noticeId, body, headers) of `count` signed 103 callbacks, each a different agent run.

    `pairs` > 0: callback i belongs to pair i % pairs (each pair gets count / pairs calls);
    0: a pair drawn at random from USERS x CHARACTERS.
    """
    rng = random.Random(seed)
    callbacks = []
    for index in range(count):
        user = f"u-{rng.randrange(USERS):04d}"
        character = rng.choice(CHARACTERS)
        if pairs:
            user, character = (
                f"u-{index % pairs // len(CHARACTERS):04d}",
                CHARACTERS[index % pairs % len(CHARACTERS)],
            )
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


def index_lag(db: Path | str) -> int | None:
    """Messages not yet in the search index, if the schema defers indexing (else None); on
    PostgreSQL, those queued for the recall index (indexed once the instances' writes pause)."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db) as pg:
            row = pg.execute("SELECT count(*) FROM recall_pending").fetchone()
        return int(row[0]) if row else 0
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


async def wait_for_index(db: Path | str, servers: list[Server], timeout: float) -> dict[str, Any] | None:
    """After the burst: how long, and how much server CPU, the deferred indexing takes."""
    behind = index_lag(db)
    if behind is None:
        return None
    started, cpu_0 = time.perf_counter(), sum(server.cpu_seconds() for server in servers)
    lag = behind
    while lag and time.perf_counter() - started < timeout:
        await asyncio.sleep(0.05)
        lag = index_lag(db) or 0
    return {
        "behind": behind,
        "left": lag,
        "seconds": time.perf_counter() - started,
        "cpu_s": sum(server.cpu_seconds() for server in servers) - cpu_0,
    }


def open_jobs(db: Path, horizon_ms: int) -> int:
    """Jobs pending or running that are due within `horizon_ms` from now."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        due = int(time.time() * 1000) + horizon_ms
        row = conn.execute(
            "SELECT count(*) FROM jobs WHERE status = 'running' OR (status = 'pending' AND due_ms <= ?)",
            (due,),
        ).fetchone()
        return int(row[0])
    finally:
        conn.close()


def jobs_done(db: Path) -> int:
    """Pairs condensed so far (a condense job's row is deleted when it is done: its summary stays)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM summaries").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


async def wait_until_idle(db: Path, server: Server, cpu_0: float, timeout: float) -> dict[str, Any]:
    """After the burst: wait until the service is idle (no job due within a minute, the search index
    caught up, and under 2% of a core used over the last 2 s); its CPU from `cpu_0` until then."""
    started = time.perf_counter()
    window: list[tuple[float, float]] = []
    idle = False
    while time.perf_counter() - started < timeout:
        await asyncio.sleep(0.25)
        now, cpu = time.perf_counter(), server.cpu_seconds()
        window.append((now, cpu))
        # The newest sample at least 2 s old starts the window: polls a little over 0.25 s apart
        # (always, on a busy machine) would otherwise never span the 2 s and never see idle.
        while len(window) > 1 and now - window[1][0] >= 2.0:
            window.pop(0)
        quiet = now - window[0][0] >= 2.0 and (cpu - window[0][1]) / (now - window[0][0]) < 0.02
        if quiet and not index_lag(db) and not open_jobs(db, 60_000):
            idle = True
            # The quiet seconds are not part of the work: count up to the start of the window.
            cpu = window[0][1]
            break
    return {
        "idle": idle,
        "seconds": time.perf_counter() - started,
        "cpu_s": cpu - cpu_0,
        "jobs_done": jobs_done(db),
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


def verify_postgres(url: str, accepted: list[str], expected_messages: int, prefix: str) -> dict[str, Any]:
    """The same check as `verify`, with psycopg on the shared PostgreSQL database."""
    import psycopg

    with psycopg.connect(url) as conn:
        inbox = dict(conn.execute("SELECT notice_id, status FROM inbox").fetchall())
        pattern = f"{prefix}-%"
        messages = conn.execute("SELECT count(*) FROM messages WHERE agent_id LIKE %s", (pattern,)).fetchone()
        sessions = conn.execute("SELECT count(*) FROM sessions WHERE agent_id LIKE %s", (pattern,)).fetchone()
        doubled = conn.execute(
            "SELECT count(*) FROM (SELECT agent_id, seq FROM messages GROUP BY agent_id, seq HAVING count(*) > 1) d"
        ).fetchone()
    missing = [n for n in accepted if n not in inbox]
    not_done = [n for n in accepted if n in inbox and inbox[n] != "done"]
    count = int(messages[0]) if messages else 0
    return {
        "accepted": len(accepted),
        "missing_from_inbox": len(missing),
        "inbox_not_done": len(not_done),
        "messages": count,
        "expected_messages": expected_messages,
        "sessions": int(sessions[0]) if sessions else 0,
        "quick_check": "ok" if doubled and doubled[0] == 0 else "doubled",
        "ok": not missing and not not_done and count == expected_messages,
    }


async def post_spread(
    urls: list[str], callbacks: list[tuple[str, bytes, dict[str, str]]], concurrency: int
) -> tuple[list[float], list[str], list[str], float]:
    """Post the callbacks round-robin over the instances, `concurrency` workers in all."""
    if len(urls) == 1:
        return await post_all(urls[0], callbacks, concurrency)
    shares = [callbacks[index :: len(urls)] for index in range(len(urls))]
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            post_all(url, share, max(concurrency // len(urls), 1))
            for url, share in zip(urls, shares, strict=True)
        )
    )
    wall = time.perf_counter() - started
    latencies = [value for result in results for value in result[0]]
    accepted = [value for result in results for value in result[1]]
    errors = [value for result in results for value in result[2]]
    return latencies, accepted, errors, wall


NULL = "null"
# --whole-cost: the service as deployed (default debounce and condensing), only the secret set.
WHOLE_COST_ENV = {"AGORA_WEBHOOK_SECRET": SECRET, "AGENT_MEMORY_LOG_LEVEL": "WARNING"}
SERVER_ENV = {
    "AGORA_WEBHOOK_SECRET": SECRET,
    "AGENT_MEMORY_SUMMARY_DELAY_S": "3600",
    # Keep condense jobs from coming due during the run (nor after each call's transcript):
    # this measures ingest only.
    "AGENT_MEMORY_SUMMARY_MAX_MESSAGES": "100000000",
    "AGENT_MEMORY_SUMMARY_AFTER_CALL_S": "3600",
    "AGENT_MEMORY_LOG_LEVEL": "WARNING",
}


async def scrape_while(urls: list[str], every_s: float, stop: asyncio.Event) -> list[float]:
    """GET /metrics of every server each `every_s` seconds until `stop`; each scrape's seconds."""
    took: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        while not stop.is_set():
            for url in urls:
                started = time.perf_counter()
                async with session.get(url) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise SystemExit(f"GET {url} answered {resp.status}")
                took.append(time.perf_counter() - started)
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except TimeoutError:
                pass
    return took


async def measure(
    label: str,
    database: Path | str,
    instances: int,
    args: argparse.Namespace,
    callbacks: list[tuple[str, bytes, dict[str, str]]],
    warm: list[tuple[str, bytes, dict[str, str]]],
    workdir: Path,
    database_pids: list[int],
    workers: int = 1,
) -> dict[str, Any]:
    """Ingest the callbacks through `instances` servers (of `workers` processes) on `database`."""
    env = {
        **(WHOLE_COST_ENV if args.whole_cost else SERVER_ENV),
        "AGENT_MEMORY_METRICS": "1" if args.metrics == "on" else "0",
        "AGENT_MEMORY_WORKERS": str(workers),
    }
    null = database == NULL
    servers: list[Any] = (
        [NullServer("webhook", secret=SECRET, log_path=workdir / f"{label}-server.log")]
        if null
        else [
            Server(database, env=env, log_path=workdir / f"{label}-server-{index}.log")
            for index in range(instances)
        ]
    )
    try:
        for server in servers:
            await server.wait_healthy(30.0 * workers)  # each worker imports and opens on its own
        urls = [f"{server.url}/webhooks/agora" for server in servers]
        print(f"\n[{label}] {instances} server(s) {', '.join(str(s.pid) for s in servers)} on {database}")
        if warm:
            _, _, warm_errors, warm_wall = await post_spread(urls, warm, args.concurrency)
            print(f"warm-up: {len(warm)} callbacks in {warm_wall:.2f} s, {len(warm_errors)} errors")
            if args.whole_cost and isinstance(database, Path):
                # The warm-up's own indexing and condensing (due seconds later) is not the burst's.
                settled = await wait_until_idle(database, servers[0], 0.0, args.idle_timeout)
                print(
                    f"warm-up settled: {'idle' if settled['idle'] else 'NOT idle'} after {settled['seconds']:.1f} s"
                )
        cpu_server_0 = sum(server.cpu_seconds() for server in servers)
        cpu_loop_0 = sum(main_thread_cpu_seconds(server.pid) for server in servers)
        cpu_db_0, cpu_self_0 = tree_cpu_seconds(database_pids), self_cpu_seconds()
        noise = Noise(*(server.pid for server in servers), *database_pids)
        stop_scraping = asyncio.Event()
        scraping = asyncio.ensure_future(
            scrape_while([f"{server.url}/metrics" for server in servers], args.scrape_s, stop_scraping)
            if args.metrics == "on" and not null
            else asyncio.sleep(0, result=[])
        )
        latencies, accepted, errors, wall = await post_spread(urls, callbacks, args.concurrency)
        stop_scraping.set()
        scrapes: list[float] = await scraping
        other_cores = noise.other_cores()
        cpu_server = sum(server.cpu_seconds() for server in servers) - cpu_server_0
        cpu_loop = sum(main_thread_cpu_seconds(server.pid) for server in servers) - cpu_loop_0
        cpu_db = tree_cpu_seconds(database_pids) - cpu_db_0
        cpu_client = self_cpu_seconds() - cpu_self_0
        indexing = None if null else await wait_for_index(database, servers, args.index_timeout)
        whole = (
            await wait_until_idle(database, servers[0], cpu_server_0, args.idle_timeout)
            if args.whole_cost and isinstance(database, Path)
            else None
        )
    finally:
        exit_codes = [server.stop() for server in servers]
    rate = len(accepted) / wall
    lat = latency_summary(latencies)
    print(f"ingest: {len(callbacks)} callbacks x {args.messages} messages, concurrency {args.concurrency}")
    print(f"  wall            {wall:.2f} s")
    print(f"  callbacks/s     {rate:,.0f}")
    print(f"  messages/s      {rate * args.messages:,.0f}")
    print(f"  latency         {fmt_ms(lat)}  (mean {lat['mean']:.2f} ms)")
    print(f"  errors          {len(errors)}")
    for line in errors[:5]:
        print(f"    {line}")
    if scrapes:
        print(f"  /metrics        scraped {len(scrapes)} times while timing, "
              f"slowest {max(scrapes) * 1e3:.1f} ms")  # fmt: skip
    per_callback = max(len(accepted), 1)
    print(f"  service CPU     {cpu_server:.2f} s ({cpu_server / wall * 100:.0f}% of one core, "
          f"{cpu_server / per_callback * 1e3:.2f} ms per callback)")  # fmt: skip
    if database_pids:
        print(f"  PostgreSQL CPU  {cpu_db:.2f} s ({cpu_db / wall * 100:.0f}% of one core, "
              f"{cpu_db / per_callback * 1e3:.2f} ms per callback)")  # fmt: skip
    print(f"  client CPU      {cpu_client:.2f} s (this process, same machine)")
    print(f"  other processes {other_cores:.2f} cores busy on average while timing"
          f"{' (figures are skewed)' if other_cores > 0.1 else ''}")  # fmt: skip
    if indexing is not None:
        per = indexing["cpu_s"] / max(indexing["behind"], 1) * 1e6
        left = f", {indexing['left']:,} still left" if indexing["left"] else ""
        print(f"  {'recall index' if database_pids else 'search index'}    {indexing['behind']:,} messages behind at the end of the burst; "
              f"caught up in {indexing['seconds']:.2f} s using {indexing['cpu_s']:.2f} CPU-s "
              f"({per:.1f} us/message){left}")  # fmt: skip
    print(f"  server exit     {exit_codes} after SIGTERM")
    for server, code in zip(servers, exit_codes, strict=True):
        if code not in (0, -15):
            print("  server log tail:\n" + server.log_tail(10))
    if whole is not None:
        in_requests = cpu_server / per_callback * 1e3
        indexed = in_requests + (indexing["cpu_s"] if indexing else 0.0) / per_callback * 1e3
        total = whole["cpu_s"] / per_callback * 1e3
        print(f"  whole cost      CPU per callback from the burst's start: {in_requests:.2f} ms in the requests, "
              f"{indexed:.2f} ms with the search index caught up, {total:.2f} ms until idle "
              f"({whole['seconds']:.1f} s after the burst{'' if whole['idle'] else ', NOT idle at the timeout'}; "
              f"{whole['jobs_done']} pairs condensed)")  # fmt: skip
    expected = len(accepted) * args.messages
    if null:
        check = {"ok": True, "accepted": len(accepted)}
        print(f"null server: {len(accepted)} answered 200 (nothing stored)")
    elif isinstance(database, Path):
        check = verify(database, accepted, expected, "bench")
        print(f"database: {db_size_bytes(database) / 2**20:.1f} MiB on disk")
    else:
        check = verify_postgres(database, accepted, expected, "bench")
    if not null:
        print(f"verify (after shutdown): {check['accepted']} answered 200, "
              f"{check['missing_from_inbox']} missing from inbox, {check['inbox_not_done']} not done, "
              f"{check['messages']}/{check['expected_messages']} messages, {check['sessions']} sessions, "
              f"check {check['quick_check']} -> {'OK' if check['ok'] else 'FAILED'}")  # fmt: skip
    return {
        "config": label,
        "instances": instances,
        "callbacks_per_s": round(rate, 1),
        "messages_per_s": round(rate * args.messages),
        "p50_ms": round(lat["p50"], 2),
        "p90_ms": round(lat["p90"], 2),
        "p99_ms": round(lat["p99"], 2),
        "max_ms": round(lat["max"], 2),
        "errors": len(errors),
        "verified": check["ok"],
        "server_cpu_s": round(cpu_server, 2),
        "server_cpu_ms_per_callback": round(cpu_server / per_callback * 1e3, 3),
        # The main thread: the event loop (HTTP, signature, JSON, validation, the hand-off to the writer).
        "loop_cpu_ms_per_callback": round(cpu_loop / per_callback * 1e3, 3),
        "database_cpu_ms_per_callback": round(cpu_db / per_callback * 1e3, 3) if database_pids else None,
        "client_cpu_s": round(cpu_client, 2),
        "other_cores": round(other_cores, 2),
        "wall_s": round(wall, 2),
        "index_behind": indexing["behind"] if indexing else None,
        "index_catch_up_s": round(indexing["seconds"], 2) if indexing else None,
        "index_catch_up_cpu_s": round(indexing["cpu_s"], 2) if indexing else None,
        "whole_cost_ms_per_callback": round(whole["cpu_s"] / per_callback * 1e3, 3) if whole else None,
        "whole_cost_indexed_ms_per_callback": (
            round((cpu_server + (indexing["cpu_s"] if indexing else 0.0)) / per_callback * 1e3, 3)
            if whole
            else None
        ),
        "whole_cost_idle_after_s": round(whole["seconds"], 1) if whole else None,
        "server_exit": exit_codes[0],
        "metrics": args.metrics,
        "scrapes": len(scrapes),
        "scrape_max_ms": round(max(scrapes) * 1e3, 2) if scrapes else None,
    }


def tree_cpu_seconds(pids: list[int]) -> float:
    """CPU of the PostgreSQL server: the postmaster and every backend it forked."""
    total = 0.0
    for pid in pids:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for each in [pid, *map(int, children)]:
            try:
                total += process_cpu_seconds(each)
            except OSError:
                pass
    # The postmaster reaps its backends: a closed connection's CPU is counted in its cutime.
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text()
            after = fields[fields.rfind(")") + 2 :].split()
            total += (int(after[13]) + int(after[14])) / CLOCK_TICKS
        except OSError:
            pass
    return total


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    print(f"building {args.callbacks} signed 103 callbacks of {args.messages} messages "
          f"({USERS} users x {len(CHARACTERS)} characters) ...", flush=True)  # fmt: skip
    built = time.perf_counter()
    callbacks = make_callbacks(
        args.callbacks, args.messages, prefix="bench", seed=args.seed, pairs=args.pairs
    )
    warm = make_callbacks(args.warmup, args.messages, prefix="warm", seed=args.seed + 1)
    body_bytes = sum(len(body) for _, body, _ in callbacks) / max(len(callbacks), 1)
    print(f"  built in {time.perf_counter() - built:.1f} s, mean body {body_bytes / 1024:.1f} KiB")

    results = []
    cluster = None
    try:
        for backend in args.backends.split(","):
            if backend == NULL:
                results.append(await measure(NULL, NULL, 1, args, callbacks, warm, workdir, []))
                continue
            if backend == "sqlite":
                results.append(
                    await measure("sqlite", workdir / "bench.db", 1, args, callbacks, warm, workdir, [])
                )
                continue
            if cluster is None:
                from postgres_server import PostgresCluster

                # Durable, as a deployment runs it: fsync and synchronous commit on.
                cluster = PostgresCluster(durable=True).start()
                print(f"PostgreSQL {cluster.bin} on port {cluster.port} (fsync on)")
            for count in (int(n) for n in args.instances.split(",")):
                url = cluster.database()
                results.append(
                    await measure(
                        f"postgres x{count}", url, count, args, callbacks, warm, workdir, [cluster.pid()]
                    )
                )
            for count in (int(n) for n in args.workers.split(",") if n):
                url = cluster.database()
                label = f"postgres w{count}"
                results.append(
                    await measure(
                        label, url, 1, args, callbacks, warm, workdir, [cluster.pid()], workers=count
                    )
                )
    finally:
        if cluster is not None:
            cluster.stop()
    print("\nside by side:")
    for result in results:
        db_cpu = result["database_cpu_ms_per_callback"]
        print(f"  {result['config']:<12} {result['callbacks_per_s']:>7,.0f} callbacks/s  p99 {result['p99_ms']:>7.2f} ms  "
              f"service CPU {result['server_cpu_ms_per_callback']:.2f} ms/callback"
              + (f", PostgreSQL CPU {db_cpu:.2f} ms/callback" if db_cpu is not None else ""))  # fmt: skip
    served = [result for result in results if result["config"] != NULL]
    first = served[0] if served else results[0]
    floor = next((result for result in results if result["config"] == NULL), None)
    if floor is not None:
        for result in served:
            ratio = result["callbacks_per_s"] / floor["callbacks_per_s"]
            cpu_ratio = result["server_cpu_ms_per_callback"] / max(floor["server_cpu_ms_per_callback"], 1e-9)
            print(
                f"  {result['config']} / null: {ratio:.3f}x the callbacks/s, {cpu_ratio:.1f}x the CPU per callback"
            )
    return {
        "null_callbacks_per_s": floor["callbacks_per_s"] if floor else None,
        "null_cpu_ms_per_callback": floor["server_cpu_ms_per_callback"] if floor else None,
        "ratio_to_null": round(first["callbacks_per_s"] / floor["callbacks_per_s"], 3)
        if floor and served
        else None,
        "bench": "ingest",
        "callbacks": len(callbacks),
        "messages_per_callback": args.messages,
        "concurrency": args.concurrency,
        **{key: value for key, value in first.items() if key not in ("config", "instances")},
        "configs": results,
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
    parser.add_argument(
        "--pairs", type=int, default=0, help="callback i goes to pair i %% N (0: pairs drawn at random)"
    )
    parser.add_argument(
        "--whole-cost",
        action="store_true",
        help="default debounce and condensing; count the service's CPU from the burst's start until it is idle",
    )
    parser.add_argument(
        "--idle-timeout", type=float, default=300.0, help="--whole-cost: seconds to wait for idle"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    parser.add_argument(
        "--metrics", choices=("on", "off"), default="on", help="off: AGENT_MEMORY_METRICS=0 on the servers"
    )
    parser.add_argument("--scrape-s", type=float, default=1.0, help="metrics on: seconds between scrapes")
    parser.add_argument(
        "--backends",
        default="sqlite",
        help="comma-separated, measured one after another: null (the null aiohttp webhook server: "
        "verify the signature, parse the JSON), sqlite, postgres (a local cluster it starts)",
    )
    parser.add_argument(
        "--instances", default="1", help="PostgreSQL: comma-separated instance counts, e.g. 1,2"
    )
    parser.add_argument(
        "--workers",
        default="",
        help="PostgreSQL: then one server with each of these comma-separated `serve --workers` counts, e.g. 2",
    )
    args = parser.parse_args()
    with work_directory("agent-memory-bench-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    print_summary(summary)
    good = all(result["verified"] and not result["errors"] for result in summary["configs"])
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
