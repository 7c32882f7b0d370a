"""Recall benchmark: do the memories the service hands back answer questions about the past?

    python bench/recall.py [--users 20] [--sessions 8 15] [--exchanges 15 30] [--seed 7]
                           [--condense session|end|off] [--sm-query] [--concurrency 8] [--keep]
                           [--scale-total 1000000] [--scale-requests 300]
                           [--backend sqlite|postgres] [--db postgresql://…]

Generates (bench/recall_data.py, seeded) long multi-session conversations in English and
Chinese with planted facts, dated events and facts that change later, `--users` users per
language; starts the real server on a fresh database; posts every session as a signed Agora
103 callback, in rounds (every user's first session, then every user's second, ...). With
`--condense session` (default) each round is condensed before the next (the offline
condenser: `POST …/condense` for each pair, then wait until no job is pending or running), as
if every call were followed by its condense job; `end` condenses once after all rounds; `off`
never. Then, for every question, it asks:

- `system_messages` at 1,500 tokens (`GET …/system-messages?max_tokens=1500`; with
  `--sm-query` the question goes along as `query`): is the answer in the returned text?
- search (`GET /v1/users/{u}/search?q=<question>&character_id=…`): the results in rank order
  whose text fits in 500 tokens;
- recall (`GET /v1/users/{u}/characters/{c}/recall?q=<question>&max_tokens=500`): `null` while
  the endpoint answers 404;
- the pure-recency baseline: the pair's latest turns (`GET …/messages?limit=1000`, rendered
  `role: content`, one line each) that fit in 500 and in 1,500 tokens.

"Answered" means every piece of evidence the question needs is in the text: the answering
turn's content, or the answer itself (a name, a place, an absolute date such as 2025-03-15).
Tokens are counted with `agent_memory.core.tokens.count_tokens`. Prints hit rates per question
kind and per language. Then it times recall at `--scale-total` stored messages (default 1M, a
pair with 10k) on bench/system_messages.py's cached database (built on first use, several
minutes), in process and over HTTP, and prints the JSON line.

With `--backend postgres` both parts run on PostgreSQL: a durable throwaway cluster started from
the machine's binaries, or the server of `--db postgresql://…` (which holds the data set at
scale, built when empty; the questions get a fresh database `recall_quality` beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import system_messages
from _common import (
    Server,
    fmt_ms,
    latency_summary,
    machine_info,
    print_machine,
    print_summary,
    work_directory,
)
from recall_data import KINDS, LANGUAGES, Question, User, collisions, generate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent_memory.core.tokens import count_tokens
from agent_memory.platforms.agora.signatures import agora_headers

SECRET = "bench-notification-secret"
PAIR = "{url}/v1/users/{user}/characters/{character}"
METRICS = ("system_messages_1500", "search_500", "recall_500", "recent_500", "recent_1500")
LABELS = {
    "system_messages_1500": "sys-msgs 1500",
    "search_500": "search 500",
    "recall_500": "recall 500",
    "recent_500": "recent 500",
    "recent_1500": "recent 1500",
}


def callback(payload: dict[str, Any], number: int) -> tuple[bytes, dict[str, str]]:
    """A signed NCS envelope of event 103 carrying one session."""
    envelope = {
        "noticeId": f"recall:{number}:{payload['agent_id']}:103",
        "productId": 17,
        "eventType": 103,
        "notifyMs": payload["stop_ts"] * 1000 + 500,
        "sid": f"SID{number:010d}",
        "payload": payload,
    }
    body = json.dumps(envelope, ensure_ascii=False).encode()
    return body, {"Content-Type": "application/json", **agora_headers(SECRET, body)}


async def gather_limited(jobs: Iterable[Callable[[], Any]], concurrency: int) -> list[Any]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Any]) -> Any:
        async with semaphore:
            return await job()

    return await asyncio.gather(*(one(job) for job in jobs))


async def get_json(session: aiohttp.ClientSession, url: str, **params: Any) -> tuple[int, Any]:
    async with session.get(url, params=params) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text


async def wait_jobs(session: aiohttp.ClientSession, url: str, timeout: float) -> dict[str, int]:
    """Until no condense job is pending or running; the dead ones are counted."""
    deadline = time.monotonic() + timeout
    while True:
        busy = 0
        for status in ("pending", "running"):
            _, answer = await get_json(session, f"{url}/v1/jobs", status=status, limit=1000)
            busy += len(answer["jobs"])
        if not busy or time.monotonic() > deadline:
            _, dead = await get_json(session, f"{url}/v1/jobs", status="dead", limit=1000)
            return {"left": busy, "dead": len(dead["jobs"])}
        await asyncio.sleep(0.05)


async def ingest(
    session: aiohttp.ClientSession, url: str, users: Sequence[User], args: argparse.Namespace
) -> dict[str, Any]:
    """Every session as a signed 103, round by round, condensing as `--condense` says."""
    rounds = max(len(user.sessions) for user in users)
    errors: list[str] = []
    condense_s = 0.0
    dead = left = 0
    number = 0
    started = time.perf_counter()

    async def post(payload: dict[str, Any], number: int) -> None:
        body, headers = callback(payload, number)
        async with session.post(f"{url}/webhooks/agora", data=body, headers=headers) as resp:
            answer = await resp.text()
            if resp.status != 200 or json.loads(answer).get("status") != "done":
                errors.append(f"{payload['agent_id']}: HTTP {resp.status} {answer[:200]}")

    async def condense(user: User) -> None:
        pair = PAIR.format(url=url, user=user.user_id, character=user.character_id)
        async with session.post(f"{pair}/condense") as resp:
            if resp.status != 202:
                errors.append(f"condense {user.user_id}: HTTP {resp.status} {(await resp.text())[:200]}")

    for index in range(rounds):
        batch = [user for user in users if index < len(user.sessions)]
        jobs = []
        for user in batch:
            number += 1
            jobs.append(lambda p=user.sessions[index], n=number: post(p, n))
        await gather_limited(jobs, args.concurrency)
        if args.condense == "session" or (args.condense == "end" and index == rounds - 1):
            condensing = time.perf_counter()
            await gather_limited([lambda u=user: condense(u) for user in batch], args.concurrency)
            waited = await wait_jobs(session, url, args.condense_timeout)
            dead, left = dead + waited["dead"], left + waited["left"]
            condense_s += time.perf_counter() - condensing
    return {
        "sessions": number,
        "messages": sum(len(s["contents"]) for user in users for s in user.sessions),
        "errors": errors,
        "seconds": time.perf_counter() - started,
        "condense_s": condense_s,
        "dead_jobs": dead,
        "jobs_left": left,
    }


def fit(lines: Iterable[str], budget: int) -> str:
    """The leading `lines` whose tokens (one more per line break) fit in `budget`, joined."""
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = count_tokens(line) + (1 if kept else 0)
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def recency_text(messages: list[dict[str, Any]], budget: int) -> str:
    """The latest spoken turns that fit in `budget` (newest kept first, shown oldest first)."""
    lines = [f"{m['role']}: {m['content']}" for m in messages if m.get("kind", "turn") == "turn"]
    return "\n".join(reversed(fit(reversed(lines), budget).split("\n")))


def recall_text(answer: dict[str, Any]) -> str:
    """Everything a recall answer hands over: its rendered system message and the memories."""
    parts = [str((answer.get("system_message") or {}).get("content") or "")]
    for memory in answer.get("memories") or []:
        parts.append(str(memory.get("text") or ""))
        for neighbour in memory.get("context") or []:
            parts.append(str(neighbour.get("content") or neighbour.get("text") or neighbour))
    return "\n".join(parts)


async def ask(
    session: aiohttp.ClientSession, url: str, users: Sequence[User], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every question against every source; one row of hits per question."""
    rows: list[dict[str, Any]] = []
    timings: dict[str, list[float]] = {"search": [], "recall": [], "system_messages": []}
    recall_tokens: list[int] = []
    recall_over: list[int] = []
    recall_exists: bool | None = None

    async def timed(kind: str, target: str, **params: Any) -> tuple[int, Any]:
        began = time.perf_counter()
        status, answer = await get_json(session, target, **params)
        if status == 200:
            timings[kind].append(time.perf_counter() - began)
        return status, answer

    def text_of(messages: list[dict[str, Any]]) -> str:
        return "\n".join(str(m.get("content") or "") for m in messages)

    for user in users:
        pair = PAIR.format(url=url, user=user.user_id, character=user.character_id)
        status, listed = await get_json(session, f"{pair}/messages", limit=1000)
        assert status == 200, listed
        history = listed["messages"]
        recent = {budget: recency_text(history, budget) for budget in (500, 1500)}
        system_text = None
        if not args.sm_query:
            status, context = await timed("system_messages", f"{pair}/system-messages", max_tokens=1500)
            assert status == 200, context
            system_text = text_of(context["system_messages"])
        for question in user.questions:
            q = question.text
            if args.sm_query:
                status, context = await timed(
                    "system_messages", f"{pair}/system-messages", max_tokens=1500, query=q
                )
                assert status == 200, context
                text = text_of(context["system_messages"])
            else:
                text = system_text or ""
            row: dict[str, Any] = {"question": question, "system_messages_1500": question.answered_by(text)}

            status, found = await timed(
                "search",
                f"{url}/v1/users/{user.user_id}/search",
                q=q,
                character_id=user.character_id,
                limit=100,
            )
            assert status == 200, found
            row["search_500"] = question.answered_by(fit((hit["text"] for hit in found["results"]), 500))

            if recall_exists is not False:
                status, recalled = await timed("recall", f"{pair}/recall", q=q, max_tokens=500)
                if recall_exists is None:
                    recall_exists = status != 404
                if recall_exists:
                    assert status == 200, recalled
                    text = recall_text(recalled)
                    recall_tokens.append(int(recalled.get("tokens") or 0))
                    if count_tokens(str((recalled.get("system_message") or {}).get("content") or "")) > 500:
                        recall_over.append(1)
                    row["recall_500"] = question.answered_by(text)
            if not recall_exists:
                row["recall_500"] = None
            row["recent_500"] = question.answered_by(recent[500])
            row["recent_1500"] = question.answered_by(recent[1500])
            rows.append(row)
    extra = {
        "latency": {kind: latency_summary(values) for kind, values in timings.items() if values},
        "recall_exists": bool(recall_exists),
        "recall_mean_tokens": round(sum(recall_tokens) / len(recall_tokens), 1) if recall_tokens else None,
        "recall_over_budget": len(recall_over) if recall_exists else None,
    }
    return rows, extra


def rates(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Hit rate (%) per metric over `rows`; None for a metric that was not measured."""
    out: dict[str, Any] = {"n": len(rows)}
    for metric in METRICS:
        values = [row[metric] for row in rows if row[metric] is not None]
        out[metric] = round(100 * sum(values) / len(values), 1) if values and rows else None
    return out


def report(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def where(test: Callable[[Question], bool]) -> list[dict[str, Any]]:
        return [row for row in rows if test(row["question"])]

    return {
        "overall": rates(rows),
        "by_language": {lang: rates(where(lambda q, lang=lang: q.language == lang)) for lang in LANGUAGES},
        "by_kind": {kind: rates(where(lambda q, kind=kind: q.kind == kind)) for kind in KINDS},
        "by_kind_language": {
            f"{kind}/{lang}": rates(
                where(lambda q, kind=kind, lang=lang: q.kind == kind and q.language == lang)
            )
            for kind in KINDS
            for lang in LANGUAGES
        },
    }


def print_table(figures: dict[str, Any]) -> None:
    def cell(value: float | None) -> str:
        return "   null" if value is None else f"{value:6.1f}%"

    header = f"{'questions':<16}{'n':>5}  " + "  ".join(f"{LABELS[m]:>13}" for m in METRICS)
    print(header)
    print("-" * len(header))
    lines = [("all", figures["overall"])]
    lines += [(lang, figures["by_language"][lang]) for lang in LANGUAGES]
    for kind in KINDS:
        lines.append((kind, figures["by_kind"][kind]))
        lines += [(f"  {kind}/{lang}", figures["by_kind_language"][f"{kind}/{lang}"]) for lang in LANGUAGES]
    for name, line in lines:
        print(f"{name:<16}{line['n']:>5}  " + "  ".join(f"{cell(line[m]):>13}" for m in METRICS))


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    built = time.perf_counter()
    users = generate(
        args.users, seed=args.seed, sessions=tuple(args.sessions), exchanges=tuple(args.exchanges)
    )
    questions = sum(len(user.questions) for user in users)
    clashes = collisions(users)
    print(f"generated {len(users)} users ({args.users} per language), "
          f"{sum(len(u.sessions) for u in users)} sessions, "
          f"{sum(len(s['contents']) for u in users for s in u.sessions):,} messages, {questions} questions "
          f"in {time.perf_counter() - built:.2f} s; answers also said elsewhere: {len(clashes)}")  # fmt: skip
    for clash in clashes[:5]:
        print(f"  {clash}")
    with system_messages.postgres_server(args) as cluster:
        db: Path | str = workdir / "recall.db"
        if args.backend == "postgres":
            db = system_messages.fresh_database(args, cluster, "recall_quality")
        return await answered_and_timed(args, workdir, info, users, clashes, db, cluster)


async def answered_and_timed(
    args: argparse.Namespace,
    workdir: Path,
    info: dict[str, Any],
    users: Sequence[User],
    clashes: Sequence[str],
    db: Path | str,
    cluster: Any,
) -> dict[str, Any]:
    """Ingest, ask every question, then time at scale: the rest of `run`, on database `db`."""
    env = {
        "AGORA_WEBHOOK_SECRET": SECRET,
        "AGENT_MEMORY_LOG_LEVEL": "WARNING",
        "AGENT_MEMORY_JOB_SWEEP_S": "0.2",
    }
    if args.condense == "off":
        env.update({"AGENT_MEMORY_SUMMARY_DELAY_S": "3600", "AGENT_MEMORY_SUMMARY_MAX_MESSAGES": "100000000"})
    else:
        # Due as soon as the round is in; `POST …/condense` makes it due at once anyway.
        env.update({"AGENT_MEMORY_SUMMARY_DELAY_S": "0.1", "AGENT_MEMORY_SUMMARY_MAX_WAIT_S": "0.1"})
    server = Server(db, env=env, log_path=workdir / "server.log")
    try:
        await server.wait_healthy()
        print(f"server pid {server.pid} on {server.url}, database {db}")
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            ingested = await ingest(session, server.url, users, args)
            print(f"ingested {ingested['sessions']} sessions ({ingested['messages']:,} messages) in "
                  f"{ingested['seconds']:.1f} s, of which condensing ({args.condense}) "
                  f"{ingested['condense_s']:.1f} s; {len(ingested['errors'])} errors, "
                  f"{ingested['dead_jobs']} dead jobs, {ingested['jobs_left']} jobs left")  # fmt: skip
            for line in ingested["errors"][:5]:
                print(f"  {line}")
            asked = time.perf_counter()
            rows, extra = await ask(session, server.url, users, args)
            print(f"asked {len(rows)} questions in {time.perf_counter() - asked:.1f} s; recall endpoint "
                  f"{'present' if extra['recall_exists'] else 'absent (404): recall_500 is null'}")  # fmt: skip
    finally:
        exit_code = server.stop()
    print()
    figures = report(rows)
    print_table(figures)
    print()
    for kind, summary in extra["latency"].items():
        print(f"{kind:<16} HTTP {fmt_ms(summary)}")
    if extra["recall_exists"]:
        print(f"recall: mean {extra['recall_mean_tokens']} tokens per answer, "
              f"{extra['recall_over_budget']} system messages over 500")  # fmt: skip
    at_scale = await latency_at_scale(args, workdir, cluster) if args.scale_total else None
    return {
        "bench": "recall",
        "backend": args.backend,
        "users_per_language": args.users,
        "sessions_per_user": args.sessions,
        "exchanges_per_session": args.exchanges,
        "seed": args.seed,
        "condense": args.condense,
        "sm_query": args.sm_query,
        "sessions": ingested["sessions"],
        "messages": ingested["messages"],
        "questions": len(rows),
        **figures,
        "recall_mean_tokens": extra["recall_mean_tokens"],
        "recall_over_budget": extra["recall_over_budget"],
        "latency_ms": {k: {p: round(v[p], 2) for p in ("p50", "p99")} for k, v in extra["latency"].items()},
        "at_scale": at_scale,
        "answer_collisions": len(clashes),
        "errors": len(ingested["errors"]),
        "dead_jobs": ingested["dead_jobs"],
        "server_exit": exit_code,
        "machine": info,
    }


async def latency_at_scale(args: argparse.Namespace, workdir: Path, cluster: Any) -> dict[str, Any]:
    """Recall (and start contexts) timed on bench/system_messages.py's database of
    `--scale-total` messages, in process and over HTTP, the modes in turn."""
    scale = argparse.Namespace(
        total=args.scale_total, pair_messages=10_000, users=20_000, seed=1, rebuild=False,
        backend=args.backend, db=args.db,
    )  # fmt: skip
    print(f"\nlatency at {args.scale_total:,} stored messages (a pair with {scale.pair_messages:,})")
    location = system_messages.scale_location(scale, cluster)
    path, counts, _ = await system_messages.ensure_database(scale, location)
    local = await system_messages.time_in_process(path, args.scale_requests, 20)
    remote = await system_messages.time_http(path, args.scale_requests, 20, workdir)
    big_local, big_remote = local["big"], remote["big"]
    print(f"  recall in process   {fmt_ms(big_local['recall'])}")
    print(f"  recall over HTTP    {fmt_ms(big_remote['recall'])}")
    print(f"  system-messages over HTTP: cached {fmt_ms(big_remote['cached'])}")
    print(f"  system-messages over HTTP: with a new query each time {fmt_ms(big_remote['query_varied'])}")
    print(f"  other processes: {max(remote['other_cores'], 0):.2f} cores busy while timing over HTTP")

    def ms(summary: dict[str, float]) -> dict[str, float]:
        return {p: round(summary[p], 2) for p in ("p50", "p99")}

    return {
        "messages": counts["messages"],
        "pair_messages": counts["big_pair"],
        "recall_in_process_ms": ms(big_local["recall"]),
        "recall_http_ms": ms(big_remote["recall"]),
        "system_messages_http_ms": ms(big_remote["cached"]),
        "system_messages_new_query_http_ms": ms(big_remote["query_varied"]),
        "system_messages_repeated_query_http_ms": ms(big_remote["query_cached"]),
        "other_cores": round(remote["other_cores"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20, help="users per language (English, Chinese)")
    parser.add_argument(
        "--sessions",
        type=int,
        nargs=2,
        default=[8, 15],
        metavar=("LO", "HI"),
        help="sessions per user, a range",
    )
    parser.add_argument(
        "--exchanges",
        type=int,
        nargs=2,
        default=[15, 30],
        metavar=("LO", "HI"),
        help="user/assistant exchanges per session, a range",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--condense",
        choices=("session", "end", "off"),
        default="session",
        help="offline condensing after every round of sessions (default), once at the end, or never",
    )
    parser.add_argument("--condense-timeout", type=float, default=120.0, help="seconds to wait per round")
    parser.add_argument(
        "--sm-query", action="store_true", help="pass each question as system-messages' query"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    parser.add_argument(
        "--scale-total", type=int, default=1_000_000, help="time recall on a database this large (0: skip)"
    )
    parser.add_argument("--scale-requests", type=int, default=300, help="timed recalls at scale per mode")
    system_messages.add_backend_arguments(parser)
    args = parser.parse_args()
    system_messages.check_backend_arguments(parser, args)
    with work_directory("agent-memory-recall-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    print_summary(summary)
    return 0 if not summary["errors"] and not summary["dead_jobs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
