"""The `agent-memory` command: serve, replay fixture callbacks, print memory, forget.

Each command parses its arguments, opens the store, calls `Memory` (the same use-cases
the HTTP API calls) and prints what it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from agent_memory import __version__
from agent_memory.client import AsyncMemoryClient, read_answer
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import KEY_SCOPES, InboxStatus, Job
from agent_memory.core.jsonutil import dumps
from agent_memory.core.limits import MAX_PERSONA_CHARS, MAX_QUERY_CHARS, MAX_TOKENS, MIN_TOKENS
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.recall import RECALL_SCOPES
from agent_memory.embed import make_embedder
from agent_memory.errors import (
    AgentMemoryError,
    ApiError,
    BadRequest,
    InvalidJSON,
    JobHeld,
    NotConfigured,
    StoreUnavailable,
)
from agent_memory.logs import configure_logging
from agent_memory.memory.service import Condensed, Memory
from agent_memory.platforms.agora.events import looks_like_callback, parse_callback
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store
from agent_memory.web.answers import (
    ChannelBindingOut,
    CharacterStats,
    Export,
    FactOut,
    FactsAnswer,
    ForgetAnswer,
    JobOut,
    JobsAnswer,
    KeyOut,
    OverallStats,
    RecallAnswer,
    SystemMessagesAnswer,
    UserSearchAnswer,
    UserStats,
)
from agent_memory.web.answers import (
    RecallAnswer as RecallModel,
)

T = TypeVar("T")
AnswerT = TypeVar("AnswerT", bound=BaseModel)

# The HTTP API's limits, which the CLI applies too (core/limits.py: no aiohttp to import).
MAX_TOKENS_RANGE = (MIN_TOKENS, MAX_TOKENS)
# How long a thread holding the GIL keeps it from one that waits (`tune_interpreter`).
SWITCH_INTERVAL_S = 0.001
# How often `condense` says it is still waiting for the running service's job.
CONDENSE_PROGRESS_S = 5.0

log = logging.getLogger("agent_memory")


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        db_path=getattr(args, "db", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        insecure_webhooks=True if getattr(args, "insecure_dev_webhooks", False) else None,
        allow_open_api=True if getattr(args, "allow_open_api", False) else None,
        log_level=getattr(args, "log_level", None),
    )


def check_database(settings: Settings) -> str | None:
    """Refuse a SQLite file in a folder that cannot be written; the note to give when the file is new."""
    if settings.backend != "sqlite":
        return None
    path = settings.db_path
    folder = path.parent
    while not folder.exists():  # open() creates the missing folders: the first existing one must take them
        folder = folder.parent
    try:
        # SQLite in WAL mode writes path-wal and path-shm beside the file, even to read it.
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".agent-memory-"):
            pass
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot write in {folder} ({exc.strerror}): SQLite keeps its journal ({path.name}-wal, "
            f"{path.name}-shm) beside the database, so give --db (AGENT_MEMORY_DB) a path in a folder "
            "this user can write, or change the folder's permissions"
        ) from None
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise StoreUnavailable(
                f"the database {path} is read-only for this user: it is written to even to be read "
                "(WAL); change its permissions or copy it somewhere writable"
            )
        return None
    made = "" if folder == path.parent else f" (and its folder {path.parent})"
    return f"no database at {path}: creating a new, empty one{made}"


def check_listen(host: str, port: int) -> None:
    """Raise the OSError that listening on host:port would meet, before the database opens."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
            sock.bind(address)


def listen_problem(exc: OSError, host: str, port: int) -> str:
    """What to tell an operator when `serve` cannot listen on host:port."""
    if isinstance(exc, socket.gaierror):
        return (
            f"cannot listen on {host!r}: no such host or address (--host, AGENT_MEMORY_HOST); "
            "give an address of this machine, e.g. 127.0.0.1, or 0.0.0.0 for all of them"
        )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use: stop what listens there or choose another "
            "--port (AGENT_MEMORY_PORT)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine (--host, AGENT_MEMORY_HOST): give one of "
            "its addresses, e.g. 127.0.0.1, or 0.0.0.0 for all of them"
        )
    if exc.errno == errno.EACCES:
        return (
            f"no permission to listen on port {port} of {host}: ports below 1024 need privileges; "
            "choose another --port (AGENT_MEMORY_PORT)"
        )
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def bounded(name: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer within [low, high], refused with the HTTP API's own sentence."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}, got {value}")
        return value

    return parse


def at_most(name: str, chars: int) -> Callable[[str], str]:
    """An argparse type: text of at most `chars` characters, as the HTTP API allows."""

    def parse(raw: str) -> str:
        if len(raw) > chars:
            raise argparse.ArgumentTypeError(f"{name} is at most {chars} characters, got {len(raw)}")
        return raw

    return parse


def tune_interpreter() -> None:
    """Fewer and shorter pauses for the event loop: collect young objects less often, and take
    the GIL back from a busy thread sooner.

    Each callback allocates thousands of short-lived objects (32 messages, their models and
    rows); with the default threshold of 700 the collector runs several times per callback,
    and its full collections stall every request in flight. Measured with bench/ingest.py:
    p99 61 ms -> 28 ms at 16 concurrent callbacks. Objects alive at start are frozen so that
    full collections do not walk them again and again.

    The loop serves every stream, and shares the GIL with the writer thread (merging and
    indexing what live calls say) and the reader threads: each SQLite statement it runs hands
    the GIL over, and getting it back waits up to the switch interval (5 ms by default).
    At 1 ms, with every turn recorded, side by side (`python bench/compare.py --ref c7340d4~1
    --rounds 2 llm_proxy.py --record --rounds 3`): added time to first token p99 4.97 -> 4.37 ms,
    p50 3.40 -> 3.57 ms; without recording, no difference either way.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def serving_loop(wanted: str) -> tuple[asyncio.AbstractEventLoop, str]:
    """The event loop `serve` runs on, and its name: uvloop unless declined or not installed.

    Every request's time on the loop (parsing, middlewares, relaying a model's chunks) is about
    a tenth cheaper on uvloop; measured with bench/llm_proxy.py, side by side: service CPU per
    call 13.7 -> 12.4 ms, added time to first token p50 6.6 -> 6.1 ms.
    """
    if wanted == "uvloop":
        try:
            import uvloop
        except ImportError:  # Windows, or a build without it
            pass
        else:
            return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from agent_memory.web.app import create_app
    from agent_memory.web.auth import open_api_warning

    settings = settings_from(args)
    configure_logging(settings.log_level, settings.log_format)
    try:
        # Said before the database opens and jobs start, not as a traceback once they have.
        check_listen(settings.host, settings.port)
    except OSError as exc:
        log.error("%s", listen_problem(exc, settings.host, settings.port))
        return 2
    try:
        warning = open_api_warning(settings)
    except NotConfigured as exc:
        log.error("%s", exc.message)
        return 2
    if warning:
        log.warning("%s", warning)
    note = check_database(settings)
    if note:
        log.info("%s", note)
    tune_interpreter()
    loop, loop_name = serving_loop(settings.event_loop)
    log.info(
        "agent-memory on http://%s:%d, database %s, condensing with %s, event loop %s",
        settings.host,
        settings.port,
        settings.database,
        settings.llm_model if settings.llm_configured else "the offline condenser",
        loop_name,
    )
    app = create_app(settings)
    started = time.monotonic()

    async def stopping(_: web.Application) -> None:
        log.info("agent-memory on port %d is shutting down: finishing what is in flight", settings.port)

    app.on_shutdown.append(stopping)
    web.run_app(app, host=settings.host, port=settings.port, print=None, access_log=None, loop=loop)
    log.info("agent-memory stopped after %.0f s", time.monotonic() - started)
    return 0


def with_memory(
    args: argparse.Namespace,
    use: Callable[[Memory], Awaitable[T]],
    *,
    settings: Settings | None = None,
    build: Callable[[Settings, Store], Memory] | None = None,
) -> T:
    """Open the store, run `use` on a `Memory` over it, and close the store."""
    settings = settings or settings_from(args)
    configure_logging(args.log_level or "WARNING", settings.log_format)
    note = check_database(settings)
    if note:
        print(f"agent-memory: {note}", file=sys.stderr)
    store = open_store(settings)

    async def run() -> T:
        if build is None:
            return await use(Memory(settings, store, embedder=make_embedder(settings)))
        return await use(build(settings, store))

    try:
        return asyncio.run(run())
    finally:
        store.close()


def print_json(value: Any, *, indent: int | None = None) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=indent))


def with_client(args: argparse.Namespace, use: Callable[[AsyncMemoryClient], Awaitable[T]]) -> T:
    """Run `use` on a client of the service at --url, with --api-key (or AGENT_MEMORY_API_TOKEN)."""
    if args.db:
        raise BadRequest("give --db (a database here) or --url (a running service), not both")
    settings = settings_from(args)
    configure_logging(args.log_level or "WARNING", settings.log_format)

    async def run() -> T:
        async with AsyncMemoryClient(args.url, args.api_key or settings.api_token) as client:
            return await use(client)

    try:
        return asyncio.run(run())
    except ApiError as exc:
        if exc.status != 401:
            raise
        hint = f"{exc.message} (give --api-key, or set AGENT_MEMORY_API_TOKEN)"
        raise ApiError(exc.status, exc.code, hint, request_id=exc.request_id) from None


def answer(
    args: argparse.Namespace,
    model: type[AnswerT],
    local: Callable[[Memory], Awaitable[Any]],
    remote: Callable[[AsyncMemoryClient], Awaitable[AnswerT]],
) -> AnswerT:
    """The command's answer as the API's model: from the service at --url, or from the database
    here shaped as the API shapes it, so that one printing code serves both."""
    if args.url:
        return with_client(args, remote)
    local_answer = with_memory(args, local)
    if isinstance(local_answer, model):
        return local_answer
    return read_answer(model, json.loads(dumps(local_answer)))


def print_answer(value: BaseModel, *, indent: int | None = 2) -> None:
    """An answer as the API sent it."""
    print_json(value.model_dump(mode="json", by_alias=True, exclude_unset=True), indent=indent)


def service_url(raw: str) -> str:
    """An argparse type: the address of a running service."""
    if not raw.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(
            f"give the service's address, e.g. http://127.0.0.1:8080; got {raw!r}"
        )
    return raw


def read_callback_files(paths: Sequence[str]) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """The envelopes in the files (one or a list each; directories walked), and a sentence per unreadable file."""
    envelopes: list[tuple[Path, dict[str, Any]]] = []
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
        for file in files:
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except OSError as exc:
                problems.append(f"{file}: cannot read it ({exc.strerror})")
                continue
            except ValueError as exc:  # not UTF-8, or not JSON
                problems.append(f"{file}: not JSON ({exc})")
                continue
            for item in data if isinstance(data, list) else [data]:
                if looks_like_callback(item):
                    envelopes.append((file, item))
    return envelopes, problems


def cmd_replay(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    envelopes, problems = read_callback_files(args.files)
    for problem in problems:
        print(f"agent-memory: {problem}", file=sys.stderr)
    if not envelopes:
        print("agent-memory: no callbacks found in the given files", file=sys.stderr)
        return 1
    statuses: Counter[str] = Counter()
    new_messages = 0

    async def replay(memory: Memory) -> None:
        nonlocal new_messages
        started = time.monotonic()
        for index, (file, data) in enumerate(envelopes, 1):
            try:
                raw, event = parse_callback(dumps(data), now_ms(), follow=settings.agora_configured)
            except InvalidJSON as exc:
                statuses["invalid"] += 1
                print(f"{file}: {exc.message}", file=sys.stderr)
                continue
            outcome = await memory.accept_event(raw, event)
            statuses[outcome.status] += 1
            new_messages += outcome.new_messages
            if index % 100 == 0 or index == len(envelopes):
                rate = index / max(time.monotonic() - started, 1e-9)
                print(f"\r{index}/{len(envelopes)} callbacks ({rate:.0f}/s)", end="", file=sys.stderr)
        print(file=sys.stderr)

    with_memory(args, replay, settings=settings)
    summary = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    unread = f"; {len(problems)} files could not be read" if problems else ""
    print(
        f"replayed {len(envelopes)} callbacks into {settings.database}: {summary}; "
        f"{new_messages} new messages{unread}"
    )
    # A partial callback had parts set aside: worth a look, like a failed one.
    return 0 if not (problems or statuses["failed"] or statuses["invalid"] or statuses["partial"]) else 1


def cmd_system_messages(args: argparse.Namespace) -> int:
    user_id, character_id = args.user_id, args.character_id
    options = {"max_tokens": args.max_tokens, "persona": args.persona, "query": args.query}

    async def build(memory: Memory) -> dict[str, Any]:
        context = await memory.system_messages(user_id, character_id, **options)
        return {"user_id": user_id, "character_id": character_id, **context.as_json()}

    result = answer(
        args,
        SystemMessagesAnswer,
        build,
        lambda client: client.system_messages(user_id, character_id, **options),
    )
    if args.text:
        print("\n\n".join(m["content"] for m in result.system_messages))
    else:
        print_answer(result)
    return 0


def cmd_llm_block(args: argparse.Namespace) -> int:
    from agent_memory.platforms.agora.routes import TOKEN_PLACEHOLDER, custom_llm_block, memory_llm_url

    settings = settings_from(args)
    base = args.url or settings.public_url
    if not base:
        print(
            "agent-memory: give --url or set AGENT_MEMORY_PUBLIC_URL: the address at which Agora "
            "reaches this service",
            file=sys.stderr,
        )
        return 2
    params = {"model": args.upstream_model} if args.upstream_model else {}
    token = settings.llm_token if args.show_token else None
    block = custom_llm_block(
        memory_llm_url(base), token or TOKEN_PLACEHOLDER, args.user_id, args.character_id, params
    )
    print_json({"llm": block}, indent=2)
    if token:
        return 0
    if settings.llm_token:
        print(
            f"api_key: put the value of AGENT_MEMORY_LLM_TOKEN (set here) in place of {TOKEN_PLACEHOLDER}, "
            "or rerun with --show-token to print it",
            file=sys.stderr,
        )
    else:
        print(
            f"api_key: AGENT_MEMORY_LLM_TOKEN is not set here; the server must have one, and "
            f"{TOKEN_PLACEHOLDER} is replaced by it",
            file=sys.stderr,
        )
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    async def forget(memory: Memory) -> dict[str, Any]:
        receipt = await memory.forget(args.user_id, args.character_id)
        return {"user_id": args.user_id, "character_id": args.character_id, "deleted": receipt}

    receipt = answer(
        args, ForgetAnswer, forget, lambda client: client.forget(args.user_id, args.character_id)
    )
    print_answer(receipt, indent=None)
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    user_id, character_id = args.user_id, args.character_id

    async def facts(memory: Memory) -> FactsAnswer:
        held = await memory.facts(user_id, character_id)
        return FactsAnswer(user_id=user_id, character_id=character_id, facts=[FactOut.of(f) for f in held])

    result = answer(args, FactsAnswer, facts, lambda client: client.facts(user_id, character_id))
    if args.json:
        print_answer(result)
    elif not result.facts:
        print(f"no facts remembered for {user_id}/{character_id}")
    for fact in [] if args.json else result.facts:
        print(f"{fact.id:>6} {fact.scope:<9} {'pinned' if fact.pinned else fact.origin:<8} {fact.text}")
    return 0


def cmd_bind_channel(args: argparse.Namespace) -> int:
    from agent_memory.web.schemas import check_channel

    channel = check_channel(args.channel)
    if (args.user_id is None) != (args.character_id is None) or (args.delete and args.user_id):
        print(
            "agent-memory: give USER and CHARACTER to bind, --delete to unbind, or neither to show",
            file=sys.stderr,
        )
        return 2
    if args.user_id is not None:
        bound = with_memory(
            args, lambda memory: memory.bind_channel(channel, args.user_id, args.character_id)
        )
        print_json(
            {
                "binding": ChannelBindingOut.of(bound.binding).model_dump(mode="json"),
                "moved_sessions": bound.moved,
            }
        )
        return 0
    if args.delete:
        row = with_memory(args, lambda memory: memory.unbind_channel(channel))
    else:
        row = with_memory(args, lambda memory: memory.channel_binding(channel))
    if row is None:
        print(f"agent-memory: channel {channel} is not bound", file=sys.stderr)
        return 1
    print_json({"deleted" if args.delete else "binding": ChannelBindingOut.of(row).model_dump(mode="json")})
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    async def listed(memory: Memory) -> JobsAnswer:
        return JobsAnswer(jobs=[JobOut.of(job) for job in await memory.list_jobs(args.status, args.limit)])

    jobs = answer(
        args, JobsAnswer, listed, lambda client: client.jobs(status=args.status, limit=args.limit)
    ).jobs
    if not jobs:
        print("no jobs" + (f" with status {args.status}" if args.status else ""))
    for job in jobs:
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job.due_ms / 1000))
        print(
            f"{job.id:>6} {job.status:<8} {job.user_id}/{job.character_id} "
            f"due {due} UTC, attempts {job.attempts}, {job.pending_messages} new messages"
            + (f"\n       last error: {job.last_error}" if job.last_error else "")
        )
    return 0


def cmd_retry_job(args: argparse.Namespace) -> int:
    job = with_memory(args, lambda memory: memory.retry_job(args.job_id))
    print(f"job {job.id} for {job.user_id}/{job.character_id} is pending again")
    return 0


def cmd_condense(args: argparse.Namespace) -> int:
    from agent_memory.condense import make_condenser
    from agent_memory.memory.jobs import CondenseJobs

    def build(settings: Settings, store: Store) -> Memory:
        return Memory(settings, store, jobs=CondenseJobs(settings, store, make_condenser(settings)))

    said_at = -CONDENSE_PROGRESS_S

    def waiting(job: Job, waited: float) -> None:
        nonlocal said_at
        if waited - said_at >= CONDENSE_PROGRESS_S:  # a line now and then, not one per look
            said_at = waited
            print(
                f"{args.user_id}/{args.character_id} is being condensed by the running service "
                f"(job {job.id}); waiting for it: {waited:.0f}s of --wait {args.wait:g}s",
                file=sys.stderr,
            )

    async def condense(memory: Memory) -> Condensed:
        try:
            return await memory.condense(args.user_id, args.character_id, wait_s=args.wait, waiting=waiting)
        finally:
            if memory.jobs is not None:
                await memory.jobs.stop()  # closes the condenser

    try:
        condensed = with_memory(args, condense, build=build)
    except JobHeld as exc:
        print(
            f"agent-memory: {exc.message}. Run it again later, or give a longer --wait; if no "
            "service is running, one stopped while condensing and frees the job when it starts.",
            file=sys.stderr,
        )
        return 3
    job, summary = condensed.job, condensed.summary
    if job is not None and job.last_error:
        print(f"condensing failed: {job.last_error} (job {job.id} is {job.status})", file=sys.stderr)
        return 1
    print(summary.text if summary else "nothing to condense")
    return 0


REPROCESSED: tuple[InboxStatus, ...] = ("failed", "partial")
LATENCY_TABLES = {"latency_ms": "latency (ms)", "latency_stages_ms": "latency by stage (ms)"}
STATS_HEADLINE = ("user_id", "character_id", "window")


def cmd_reprocess(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    wanted = args.status or list(REPROCESSED)
    statuses: Counter[str] = Counter()
    new_messages = 0
    count = 0

    async def run(memory: Memory) -> None:
        nonlocal new_messages, count
        entries = await memory.recorded_events(wanted, args.limit)
        count = len(entries)
        for index, entry in enumerate(entries, 1):
            try:
                raw, event = parse_callback(entry.body, entry.received_ms, follow=settings.agora_configured)
            except InvalidJSON as exc:
                statuses["unreadable"] += 1
                print(f"\n{entry.event_id}: still not an envelope: {exc.message}", file=sys.stderr)
                continue
            outcome = await memory.reapply_event(raw, event)
            statuses[outcome.status] += 1
            new_messages += outcome.new_messages
            if outcome.status in REPROCESSED:
                # What is left is what this version cannot apply: say what, for each callback.
                print(f"\n{entry.event_id}: still {outcome.status}: {outcome.detail}", file=sys.stderr)
            print(f"\r{index}/{len(entries)} reprocessed", end="", file=sys.stderr)
        print(file=sys.stderr)

    with_memory(args, run, settings=settings)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "nothing to do"
    print(f"reprocessed {count} {' or '.join(wanted)} callbacks: {summary}; {new_messages} new messages")
    return 0 if not statuses["failed"] and not statuses["unreadable"] else 1


def _when(ms: int | None) -> str:
    """Epoch milliseconds as UTC time, for people."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def print_stats(stats: dict[str, Any]) -> None:
    """A statistics answer as aligned lines and small tables, who and when it is about first."""
    # The model lists the counts every report has before the report's own fields.
    for key, value in sorted(stats.items(), key=lambda item: item[0] not in STATS_HEADLINE):
        if isinstance(value, dict) and {"count", "of", "rate"} <= set(value):
            share = "-" if value["rate"] is None else f"{value['rate']:.1%}"
            print(f"{key:<22} {value['count']} of {value['of']} ({share})")
            if key == "unidentified_sessions" and value["count"]:
                print(
                    f"{'':<22} no user label: kept under rtc:<uid> or channel:<name>; "
                    "see Identity in docs/memory.md"
                )
        elif key in LATENCY_TABLES:
            print(LATENCY_TABLES[key] + ("" if value else "          none recorded"))
            if value:
                print(f"  {'metric':<14}{'count':>8}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
            for metric, row in value.items():
                print(
                    f"  {metric:<14}{row['count']:>8}{row['p50']:>9g}{row['p90']:>9g}"
                    f"{row['p99']:>9g}{row['max']:>9g}"
                )
        elif isinstance(value, list):
            print(key + ("" if value else "   none"))
            for row in value:
                name = row.get("character_id", row.get("user_id"))
                print(
                    f"  {name:<20} {row['sessions']:>5} sessions {row.get('messages', 0):>7} messages "
                    f"{row['minutes_talked']:>9.1f} min"
                )
        elif isinstance(value, dict):
            shown = ", ".join(f"{k or '-'}: {v}" for k, v in value.items() if v is not None)
            print(f"{key:<22} {shown or '-'}")
        elif key.endswith("_ms") and key != "talk_ms":
            print(f"{key:<22} {_when(value)}")
        else:
            print(f"{key:<22} {value}")


def cmd_stats(args: argparse.Namespace) -> int:
    window = {"since_ms": args.since_ms, "until_ms": args.until_ms}
    try:
        report: BaseModel
        if args.user:
            report = answer(
                args,
                UserStats,
                lambda memory: memory.user_stats(args.user),
                lambda client: client.user_stats(args.user),
            )
        elif args.character:
            report = answer(
                args,
                CharacterStats,
                lambda memory: memory.character_stats(args.character, **window),
                lambda client: client.character_stats(args.character, **window),
            )
        else:
            report = answer(
                args,
                OverallStats,
                lambda memory: memory.overall_stats(**window),
                lambda client: client.stats(**window),
            )
    except AgentMemoryError as exc:
        if exc.status != 404:  # NotFound here, or the service's 404
            raise
        print(exc.message, file=sys.stderr)
        return 1
    if args.json:
        print_answer(report)
    else:
        print_stats(report.model_dump(mode="json", exclude_unset=True))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    if not args.query.strip():
        print("agent-memory: the query is empty", file=sys.stderr)
        return 2
    options = {"character_id": args.character, "limit": args.limit}
    found = answer(
        args,
        UserSearchAnswer,
        lambda memory: memory.search(args.user_id, args.query, **options),
        lambda client: client.search(args.user_id, args.query, **options),
    )
    if args.json:
        print_answer(found)
        return 0
    if not found.results:
        print(f"nothing found for {args.query!r}")
    for item in found.results:
        print(
            f"{item.rank:>3}. {_when(item.at_ms)}  {item.character_id or '(user)'}  {item.role or item.kind}: "
            f"{item.snippet}"
        )
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    if not args.question.strip():
        print("agent-memory: the question is empty", file=sys.stderr)
        return 2
    user_id, character_id, options = (
        args.user_id,
        args.character_id,
        {"max_tokens": args.max_tokens, "scope": args.scope},
    )

    async def recall(memory: Memory) -> RecallModel:
        recalled = await memory.recall(user_id, character_id, args.question, **options)
        return RecallModel.of(user_id, character_id, args.scope, recalled)

    recalled = answer(
        args,
        RecallAnswer,
        recall,
        lambda client: client.recall(user_id, character_id, args.question, **options),
    )
    if args.json:
        print_answer(recalled)
    elif recalled.memories:
        print(recalled.system_message.content)
        print(f"({len(recalled.memories)} memories, about {recalled.tokens} tokens)", file=sys.stderr)
    else:
        print(f"nothing recalled for {args.question!r}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    try:
        document = answer(
            args,
            Export,
            lambda memory: memory.export(args.user_id),
            lambda client: client.export(args.user_id),
        )
    except AgentMemoryError as exc:
        if exc.status != 404:  # NotFound here, or the service's 404
            raise
        print(exc.message, file=sys.stderr)
        return 1
    text = json.dumps(document.model_dump(mode="json", exclude_unset=True), ensure_ascii=False, indent=2)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"agent-memory: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
            return 1
        print(f"wrote {document.counts} to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    from agent_memory.memory.retention import Retention

    overrides = {
        "retention_max_messages": args.max_messages,
        "retention_max_age_days": args.max_age_days,
        "raw_retention_days": args.raw_days,
    }
    settings = settings_from(args).model_copy(update={k: v for k, v in overrides.items() if v is not None})

    def build(settings: Settings, store: Store) -> Memory:
        return Memory(settings, store, retention=Retention(settings, store))

    def progress(line: str) -> None:
        print(f"\r{line:<60}", end="", file=sys.stderr)

    report = with_memory(args, lambda memory: memory.purge(progress), settings=settings, build=build)
    print(file=sys.stderr)
    if args.json:
        print_json(report.to_json(), indent=2)
        return 0
    print(
        f"removed {report.messages} messages, {report.metrics} metrics, "
        f"{report.raw_callbacks} raw callbacks in {report.seconds:.2f}s "
        f"({report.write_batches} write batches)"
    )
    print(
        f"database {report.bytes_before:,} -> {report.bytes_after:,} bytes; "
        f"{report.reclaimed.pages_freed} pages given back; search index "
        f"{'merged' if report.search_index.merged else 'left as it was'}"
    )
    if report.warning:
        print(f"warning: {report.warning}", file=sys.stderr)
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    issued = with_memory(args, lambda memory: memory.create_api_key(args.scope, args.name))
    print(issued.key)  # alone on stdout, for KEY=$(agent-memory keys create …)
    print(
        f"key {issued.record.id} ({issued.record.scope}"
        + (f", {issued.record.name}" if issued.record.name else "")
        + "): keep it now, only its hash is stored (keys are asked for once AGENT_MEMORY_API_TOKEN is set)",
        file=sys.stderr,
    )
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    keys = with_memory(args, lambda memory: memory.api_keys())
    if args.json:
        print_json([KeyOut.of(key).model_dump(mode="json") for key in keys], indent=2)
        return 0
    if not keys:
        print("no keys; agent-memory keys create --scope read|write|admin makes one")
    for key in keys:
        state = (
            f"revoked {_when(key.revoked_ms)}" if key.revoked_ms else f"last used {_when(key.last_used_ms)}"
        )
        print(f"{key.id:>5} {key.scope:<6} {key.name or '-':<24} made {_when(key.created_ms)}, {state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    key = with_memory(args, lambda memory: memory.revoke_api_key(args.key_id))
    print(f"key {key.id} ({key.scope}) revoked; a running service refuses it within seconds")
    return 0


def cmd_migrate_db(args: argparse.Namespace) -> int:
    from agent_memory.store.transfer import describe, migrate_db

    def progress(line: str) -> None:
        print(f"\r{line:<60}", end="", file=sys.stderr)

    report = migrate_db(args.source, args.target, replace=args.replace, progress=progress)
    print(file=sys.stderr)
    for line in describe(report):
        print(line)
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory", description="Long-term memory for Agora voice agents."
    )
    parser.add_argument("--version", action="version", version=f"agent-memory {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help="SQLite file (AGENT_MEMORY_DB, default ./agent_memory.db)")
    common.add_argument("--log-level", help="DEBUG, INFO, WARNING (AGENT_MEMORY_LOG_LEVEL)")
    # Read commands and forget: a running service instead of the database here.
    remote = argparse.ArgumentParser(add_help=False, parents=[common])
    remote.add_argument(
        "--url", type=service_url, help="ask the service running there instead, e.g. http://127.0.0.1:8080"
    )
    remote.add_argument("--api-key", help="its key (AGENT_MEMORY_API_TOKEN)")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", parents=[common], help="run the service")
    serve.add_argument("--host", help="address to listen on (AGENT_MEMORY_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (AGENT_MEMORY_PORT, 8080)")
    serve.add_argument(
        "--allow-open-api",
        action="store_true",
        help="serve /v1 without AGENT_MEMORY_API_TOKEN on a non-loopback --host (a trusted network only; "
        "AGENT_MEMORY_ALLOW_OPEN_API)",
    )
    serve.add_argument(
        "--insecure-dev-webhooks",
        action="store_true",
        help="accept unsigned callbacks when AGORA_WEBHOOK_SECRET is unset (local testing only)",
    )
    serve.set_defaults(func=cmd_serve)

    replay = commands.add_parser(
        "replay", parents=[common], help="ingest callback JSON files (an envelope or a list)"
    )
    replay.add_argument("files", nargs="+", help="files or directories, e.g. fixtures/conversations")
    replay.set_defaults(func=cmd_replay)

    show = commands.add_parser(
        "system-messages", parents=[remote], help="print the system_messages of a user and character"
    )
    show.add_argument("user_id")
    show.add_argument("character_id")
    show.add_argument("--max-tokens", type=bounded("max_tokens", *MAX_TOKENS_RANGE))
    show.add_argument("--persona", type=at_most("persona", MAX_PERSONA_CHARS))
    show.add_argument(
        "--query",
        type=at_most("query", MAX_QUERY_CHARS),
        help="what the call is about: memories recalled for it are included",
    )
    show.add_argument("--text", action="store_true", help="print the contents only")
    show.set_defaults(func=cmd_system_messages)

    llm_block = commands.add_parser(
        "llm-block",
        parents=[common],
        help="print the join body's llm block that gives an agent memory in every turn",
    )
    llm_block.add_argument("user_id")
    llm_block.add_argument("character_id")
    llm_block.add_argument("--url", help="where Agora reaches this service (AGENT_MEMORY_PUBLIC_URL)")
    llm_block.add_argument("--upstream-model", help="the model the endpoint asks your LLM for (params.model)")
    llm_block.add_argument(
        "--show-token", action="store_true", help="put AGENT_MEMORY_LLM_TOKEN itself in api_key"
    )
    llm_block.set_defaults(func=cmd_llm_block)

    forget = commands.add_parser(
        "forget", parents=[remote], help="delete everything held for a user, or a user and character"
    )
    forget.add_argument("user_id")
    forget.add_argument("character_id", nargs="?")
    forget.set_defaults(func=cmd_forget)

    facts = commands.add_parser(
        "facts", parents=[remote], help="the facts remembered for a user and character"
    )
    facts.add_argument("user_id")
    facts.add_argument("character_id")
    facts.add_argument("--json", action="store_true", help="print the JSON answer")
    facts.set_defaults(func=cmd_facts)

    bind_channel = commands.add_parser(
        "bind-channel",
        parents=[common],
        help="tie a channel to a user and character (apps with one channel per user); "
        "without USER CHARACTER: show its binding",
    )
    bind_channel.add_argument("channel")
    bind_channel.add_argument("user_id", nargs="?")
    bind_channel.add_argument("character_id", nargs="?")
    bind_channel.add_argument("--delete", action="store_true", help="remove the channel's binding")
    bind_channel.set_defaults(func=cmd_bind_channel)

    jobs = commands.add_parser("jobs", parents=[remote], help="list condense jobs")
    jobs.add_argument("--status", choices=["pending", "running", "dead"])
    jobs.add_argument("--limit", type=bounded("limit", 1, 1000), default=100)
    jobs.set_defaults(func=cmd_jobs)

    retry = commands.add_parser("retry-job", parents=[common], help="make a dead job pending again")
    retry.add_argument("job_id", type=int)
    retry.set_defaults(func=cmd_retry_job)

    condense = commands.add_parser(
        "condense", parents=[common], help="condense a user and character's memory now"
    )
    condense.add_argument("user_id")
    condense.add_argument("character_id")
    condense.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="when the running service is condensing the pair, wait this long for it (default "
        "%(default)g; 0: exit 3 at once)",
    )
    condense.set_defaults(func=cmd_condense)

    reprocess = commands.add_parser(
        "reprocess",
        parents=[common],
        help="apply again the raw callbacks that failed or were applied only in part",
    )
    reprocess.add_argument("--limit", type=int, default=10_000)
    reprocess.add_argument(
        "--status",
        action="append",
        choices=REPROCESSED,
        help="only callbacks of this outcome (repeatable; default: failed and partial)",
    )
    reprocess.set_defaults(func=cmd_reprocess)

    stats = commands.add_parser(
        "stats", parents=[remote], help="statistics: overall, or of a user or a character"
    )
    who = stats.add_mutually_exclusive_group()
    who.add_argument("--user", help="one user's sessions, messages, favourite characters")
    who.add_argument("--character", help="one character's users, sessions, rates, latencies")
    stats.add_argument("--since-ms", type=int, help="only sessions started at or after (epoch ms)")
    stats.add_argument("--until-ms", type=int, help="only sessions started before (epoch ms)")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(func=cmd_stats)

    search = commands.add_parser(
        "search", parents=[remote], help="search a user's messages, facts and summaries"
    )
    search.add_argument("user_id")
    search.add_argument("query", type=at_most("q", MAX_QUERY_CHARS))
    search.add_argument("--character", help="only this character (and user-wide facts)")
    search.add_argument("--limit", type=bounded("limit", 1, 100), default=20, metavar="1..100")
    search.add_argument("--json", action="store_true", help="print the JSON answer")
    search.set_defaults(func=cmd_search)

    recall = commands.add_parser(
        "recall", parents=[remote], help="the memories that answer a question, ranked and dated"
    )
    recall.add_argument("user_id")
    recall.add_argument("character_id")
    recall.add_argument("question", type=at_most("q", MAX_QUERY_CHARS))
    recall.add_argument(
        "--max-tokens",
        type=bounded("max_tokens", *MAX_TOKENS_RANGE),
        default=DEFAULT_RECALL_TOKENS,
        help="budget (default %(default)s)",
    )
    recall.add_argument(
        "--scope", choices=RECALL_SCOPES, default="pair", help="user: all the user's characters"
    )
    recall.add_argument("--json", action="store_true", help="print the JSON answer")
    recall.set_defaults(func=cmd_recall)

    export = commands.add_parser(
        "export", parents=[remote], help="everything held about a user, as one JSON document"
    )
    export.add_argument("user_id")
    export.add_argument("--output", "-o", help="write to this file instead of standard output")
    export.set_defaults(func=cmd_export)

    purge = commands.add_parser(
        "purge", parents=[common], help="apply retention now: remove what may go, give space back"
    )
    purge.add_argument("--max-messages", type=int, help="keep this many per pair (overrides the setting)")
    purge.add_argument("--max-age-days", type=float, help="drop covered messages older than this")
    purge.add_argument("--raw-days", type=float, help="drop processed raw callbacks older than this")
    purge.add_argument("--json", action="store_true", help="print the report as JSON")
    purge.set_defaults(func=cmd_purge)

    keys = commands.add_parser("keys", help="scoped keys of the /v1 API: create, list, revoke")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create_key = key_commands.add_parser(
        "create", parents=[common], help="make a key and print it (once: only its hash is stored)"
    )
    create_key.add_argument(
        "--scope",
        required=True,
        choices=KEY_SCOPES,
        help="read: a pair's memory; write: also change it, bind, start agents; admin: everything",
    )
    create_key.add_argument("--name", type=at_most("name", 200), help="what the key is for")
    create_key.set_defaults(func=cmd_keys_create)
    list_keys = key_commands.add_parser("list", parents=[common], help="every key, revoked ones too")
    list_keys.add_argument("--json", action="store_true", help="print JSON")
    list_keys.set_defaults(func=cmd_keys_list)
    revoke_key = key_commands.add_parser("revoke", parents=[common], help="revoke a key for good")
    revoke_key.add_argument("key_id", type=int)
    revoke_key.set_defaults(func=cmd_keys_revoke)

    migrate = commands.add_parser(
        "migrate-db", help="copy a SQLite memory into PostgreSQL, then verify it table by table"
    )
    migrate.add_argument("--from", dest="source", required=True, help="sqlite:///path (or a path)")
    migrate.add_argument("--to", dest="target", required=True, help="postgresql://user:password@host/db")
    migrate.add_argument("--replace", action="store_true", help="empty the target first instead of refusing")
    migrate.set_defaults(func=cmd_migrate_db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        # A pipe's stdout is block-buffered: what is still held is written here, where a
        # closed pipe is handled, not at exit, where Python reports it and exits with 120.
        sys.stdout.flush()
        return code
    except AgentMemoryError as exc:
        print(f"agent-memory: {exc.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (`agent-memory stats | head`): end quietly, as Unix tools
        # do, and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
