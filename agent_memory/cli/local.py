"""The commands on the database here: replay, condense, reprocess, purge, keys, bindings, migration."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_memory.cli.common import print_json, settings_from, when, with_memory, with_store
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import InboxStatus, Job
from agent_memory.core.jsonutil import dumps
from agent_memory.errors import (
    BadRequest,
    InvalidJSON,
    JobHeld,
)
from agent_memory.memory.condensing import Condensed, Condensing
from agent_memory.memory.service import Memory, count_tokens_with
from agent_memory.platforms.agora.events import looks_like_callback, parse_callback
from agent_memory.platforms.recorded import reread
from agent_memory.settings import Settings
from agent_memory.store import Store
from agent_memory.store.backup import backup_sqlite
from agent_memory.web.answers import (
    ChannelBindingOut,
    KeyOut,
)

if TYPE_CHECKING:  # imported where migrate-db runs: it loads psycopg
    from agent_memory.store.transfer import TransferReport

CONDENSE_PROGRESS_S = 5.0


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
            args, lambda memory: memory.identity.bind_channel(channel, args.user_id, args.character_id)
        )
        print_json(
            {
                "binding": ChannelBindingOut.of(bound.binding).model_dump(mode="json"),
                "moved_sessions": bound.moved,
            }
        )
        return 0
    if args.delete:
        row = with_memory(args, lambda memory: memory.identity.unbind_channel(channel))
    else:
        row = with_memory(args, lambda memory: memory.identity.channel_binding(channel))
    if row is None:
        print(f"agent-memory: channel {channel} is not bound", file=sys.stderr)
        return 1
    print_json({"deleted" if args.delete else "binding": ChannelBindingOut.of(row).model_dump(mode="json")})
    return 0


def cmd_retry_job(args: argparse.Namespace) -> int:
    job = with_memory(args, lambda memory: memory.queue.retry_job(args.job_id))
    print(f"job {job.id} for {job.user_id}/{job.character_id} is pending again")
    return 0


def cmd_condense(args: argparse.Namespace) -> int:
    from agent_memory.condense import make_condenser
    from agent_memory.memory.jobs import CondenseJobs

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

    async def condense(settings: Settings, store: Store) -> Condensed:
        count_tokens_with(settings)
        jobs = CondenseJobs(settings, store, make_condenser(settings))
        try:
            return await Condensing(store, jobs).condense(
                args.user_id, args.character_id, wait_s=args.wait, waiting=waiting
            )
        finally:
            await jobs.stop()  # closes the condenser

    try:
        condensed = with_store(args, condense)
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
                raw, event = reread(entry, settings)
            except BadRequest as exc:
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


def cmd_backup(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    shown = [-1.0]

    def progress(done: int, total: int) -> None:
        # A line every 5% on a terminal or a log: a large database takes a while.
        if total and (done == total or done / total - shown[0] >= 0.05):
            shown[0] = done / total
            print(f"backup: {done:,} / {total:,} pages ({100 * done // total}%)", file=sys.stderr)

    report = backup_sqlite(settings, args.path, pages=args.pages, progress=progress)
    print(
        f"wrote {report.path}: {report.pages:,} pages, {report.bytes:,} bytes in {report.seconds:.1f}s; "
        f"integrity check: {report.integrity}",
        file=sys.stderr,
    )
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    from agent_memory.memory.retention import Retention

    overrides = {
        "retention_max_messages": args.max_messages,
        "retention_max_age_days": args.max_age_days,
        "raw_retention_days": args.raw_days,
    }
    settings = settings_from(args).model_copy(update={k: v for k, v in overrides.items() if v is not None})

    def progress(line: str) -> None:
        print(f"\r{line:<60}", end="", file=sys.stderr)

    report = with_store(
        args, lambda settings, store: Retention(settings, store).purge_once(progress), settings=settings
    )
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
    issued = with_memory(args, lambda memory: memory.keys.create_api_key(args.scope, args.name))
    print(issued.key)  # alone on stdout, for KEY=$(agent-memory keys create …)
    print(
        f"key {issued.record.id} ({issued.record.scope}"
        + (f", {issued.record.name}" if issued.record.name else "")
        + "): keep it now, only its hash is stored (keys are asked for once AGENT_MEMORY_API_TOKEN is set)",
        file=sys.stderr,
    )
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    keys = with_memory(args, lambda memory: memory.keys.api_keys())
    if args.json:
        print_json([KeyOut.of(key).model_dump(mode="json") for key in keys], indent=2)
        return 0
    if not keys:
        print("no keys; agent-memory keys create --scope read|write|admin makes one")
    for key in keys:
        state = f"revoked {when(key.revoked_ms)}" if key.revoked_ms else f"last used {when(key.last_used_ms)}"
        print(f"{key.id:>5} {key.scope:<6} {key.name or '-':<24} made {when(key.created_ms)}, {state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    key = with_memory(args, lambda memory: memory.keys.revoke_api_key(args.key_id))
    print(f"key {key.id} ({key.scope}) revoked; a running service refuses it within seconds")
    return 0


def cmd_migrate_db(args: argparse.Namespace) -> int:
    from agent_memory.store.transfer import migrate_db

    def progress(line: str) -> None:
        print(f"\r{line:<60}", end="", file=sys.stderr)

    report = migrate_db(args.source, args.target, replace=args.replace, progress=progress)
    print(file=sys.stderr)
    for line in describe(report):
        print(line)
    return 0 if report.ok else 1


def describe(report: TransferReport) -> Iterable[str]:
    """The report as lines: each table's rows and checksums on both sides, then the verdict."""
    yield f"{'table':<18} {'sqlite rows':>12} {'postgres rows':>14}  {'checksum (sqlite = postgres)':<34}"
    for check in report.tables:
        same = check.source_checksum if check.ok else f"{check.source_checksum} != {check.target_checksum}"
        yield (
            f"{check.table:<18} {check.source_rows:>12,} {check.target_rows:>14,}  {same}"
            f"  {'ok' if check.ok else 'MISMATCH'}"
        )
    verdict = "verified: every table matches" if report.ok else "NOT verified: some tables differ"
    yield f"{verdict}; {report.turns_indexed:,} turns indexed for recall in {report.seconds:.1f}s"
