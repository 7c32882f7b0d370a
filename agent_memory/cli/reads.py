"""The commands that read (or forget) memory: the same code here and with --url (cli/api.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_memory.cli.api import MemoryApi, run_api
from agent_memory.cli.common import print_answer, when
from agent_memory.core.clock import now_ms
from agent_memory.errors import (
    AgentMemoryError,
    BadRequest,
)

LATENCY_TABLES = {"latency_ms": "latency (ms)", "latency_stages_ms": "latency by stage (ms)"}
STATS_HEADLINE = ("user_id", "character_id", "window")


def cmd_system_messages(args: argparse.Namespace) -> int:
    options = {"max_tokens": args.max_tokens, "persona": args.persona, "query": args.query}
    result = run_api(args, lambda api: api.system_messages(args.user_id, args.character_id, **options))
    if args.text and not result.system_messages:
        # Not an error (a new pair's first call starts so), but an empty line alone says nothing.
        print(f"no memory is held for {args.user_id} with {args.character_id}", file=sys.stderr)
    elif args.text:
        print("\n\n".join(m["content"] for m in result.system_messages))
    else:
        print_answer(result)
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    print_answer(run_api(args, lambda api: api.forget(args.user_id, args.character_id)), indent=None)
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    user_id, character_id = args.user_id, args.character_id
    result = run_api(args, lambda api: api.facts(user_id, character_id))
    if args.json:
        print_answer(result)
    elif not result.facts:
        print(f"no facts remembered for {user_id}/{character_id}")
    for fact in [] if args.json else result.facts:
        print(f"{fact.id:>6} {fact.scope:<9} {'pinned' if fact.pinned else fact.origin:<8} {fact.text}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    if args.said and args.file is not None:
        raise BadRequest("give messages in a FILE (or on standard input) or as --user/--assistant, not both")
    messages = said_messages(args.said) if args.said else read_messages(args.file)
    result = run_api(
        args, lambda api: api.add_messages(args.user_id, args.character_id, args.session, messages)
    )
    print_answer(result, indent=None)
    return 0


def said_messages(said: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """--user and --assistant in the order given, said now (a millisecond apart, in that order)."""
    start = now_ms()
    return [
        {"role": role, "content": text, "timestamp": start + index} for index, (role, text) in enumerate(said)
    ]


def read_messages(file: str | None) -> list[Any]:
    """Messages from FILE (or standard input, `-` or none): a JSON list, a JSON object with
    `messages` (the route's body), or JSON Lines, one message a line."""
    text = sys.stdin.read() if file in (None, "-") else Path(file).read_text(encoding="utf-8")
    where = "standard input" if file in (None, "-") else file
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise BadRequest(
                f"{where} is neither JSON nor JSON Lines (line {exc.lineno}: {exc.msg}): give a list of "
                '{"role", "content", "timestamp", "id"?} messages, or one such object a line'
            ) from None
    if isinstance(data, dict) and "messages" in data:
        data = data["messages"]
    elif isinstance(data, dict):
        data = [data]  # one message, as one line of JSON Lines is
    if not isinstance(data, list) or not data:
        raise BadRequest(f'{where} holds no messages: give a list of {{"role", "content", "timestamp"}}')
    return data


def cmd_fact_edit(args: argparse.Namespace) -> int:
    pinned = True if args.pin else False if args.unpin else None
    fact = run_api(args, lambda api: api.edit_fact(args.fact_id, text=args.text, pinned=pinned)).fact
    print(f"{fact.id:>6} {fact.scope:<9} {'pinned' if fact.pinned else fact.origin:<8} {fact.text}")
    return 0


def cmd_fact_history(args: argparse.Namespace) -> int:
    result = run_api(args, lambda api: api.fact_history(args.fact_id))
    if args.json:
        print_answer(result)
        return 0
    for version in result.versions:
        until = "now" if version.valid_to is None else when(version.valid_to)
        change = f" ({version.change})" if version.change else ""
        print(f"{when(version.valid_from)} .. {until}{change}: {version.text}")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    jobs = run_api(args, lambda api: api.jobs(status=args.status, limit=args.limit)).jobs
    if not jobs:
        print("no jobs" + (f" with status {args.status}" if args.status else ""))
    for job in jobs:
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(job.due_ms / 1000))
        last_error = f"\n       last error: {job.last_error}" if job.last_error else ""
        print(
            f"{job.id:>6} {job.status:<8} {job.user_id}/{job.character_id} due {due} UTC, "
            f"attempts {job.attempts}, {job.pending_messages} new messages{last_error}"
        )
    return 0


def _rate_line(key: str, value: dict[str, Any]) -> None:
    share = "-" if value["rate"] is None else f"{value['rate']:.1%}"
    print(f"{key:<22} {value['count']} of {value['of']} ({share})")
    if key == "unidentified_sessions" and value["count"]:
        print(
            f"{'':<22} no user label: kept under rtc:<uid> or channel:<name>; see Identity in docs/memory.md"
        )


def _latency_table(key: str, value: dict[str, Any]) -> None:
    print(f"{LATENCY_TABLES[key]:<22} none recorded" if not value else LATENCY_TABLES[key])
    if value:
        print(f"  {'metric':<14}{'count':>8}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
    for metric, row in value.items():
        print(
            f"  {metric:<14}{row['count']:>8}{row['p50']:>9g}{row['p90']:>9g}{row['p99']:>9g}{row['max']:>9g}"
        )


def _rows(key: str, value: list[dict[str, Any]]) -> None:
    print(key + ("" if value else "   none"))
    for row in value:
        name = row.get("character_id", row.get("user_id"))
        print(
            f"  {name:<20} {row['sessions']:>5} sessions {row.get('messages', 0):>7} messages "
            f"{row['minutes_talked']:>9.1f} min"
        )


def _value_line(key: str, value: Any) -> None:
    if isinstance(value, dict):
        shown = ", ".join(f"{k or '-'}: {v}" for k, v in value.items() if v is not None)
        print(f"{key:<22} {shown or '-'}")
    elif key.endswith("_ms") and key != "talk_ms":
        print(f"{key:<22} {when(value)}")
    else:
        print(f"{key:<22} {value}")


def _is_rate(value: Any) -> bool:
    return isinstance(value, dict) and {"count", "of", "rate"} <= set(value)


def print_stats(stats: dict[str, Any]) -> None:
    """A statistics answer as aligned lines and small tables, who and when it is about first."""
    # The model lists the counts every report has before the report's own fields.
    for key, value in sorted(stats.items(), key=lambda item: item[0] not in STATS_HEADLINE):
        if _is_rate(value):
            _rate_line(key, value)
        elif key in LATENCY_TABLES:
            _latency_table(key, value)
        elif isinstance(value, list):
            _rows(key, value)
        else:
            _value_line(key, value)


def _stats_of(args: argparse.Namespace, api: MemoryApi) -> Awaitable[BaseModel]:
    """The report asked for: a user's, a character's, or the whole service's."""
    window = {"since_ms": args.since_ms, "until_ms": args.until_ms}
    if args.user:
        return api.user_stats(args.user)
    if args.character:
        return api.character_stats(args.character, **window)
    return api.stats(**window)


def cmd_stats(args: argparse.Namespace) -> int:
    try:
        report = run_api(args, lambda api: _stats_of(args, api))
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


def cmd_users(args: argparse.Namespace) -> int:
    page = run_api(args, lambda api: api.users(q=args.q, cursor=args.cursor, limit=args.limit))
    if args.json:
        print_answer(page)
        return 0
    if not page.users:
        print("no users" + (f" whose id contains {args.q!r}" if args.q else ""))
    for user in page.users:
        characters = ", ".join(user.characters) or "-"
        print(f"{user.user_id}  {user.calls} calls  last seen {when(user.last_seen_ms)}  {characters}")
    if page.next_cursor is not None:
        print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    if not args.query.strip():
        print("agent-memory: the query is empty", file=sys.stderr)
        return 2
    options = {"character_id": args.character, "limit": args.limit}
    found = run_api(args, lambda api: api.search(args.user_id, args.query, **options))
    if args.json:
        print_answer(found)
        return 0
    if not found.results:
        print(f"nothing found for {args.query!r}")
    for item in found.results:
        who = item.character_id or "(user)"
        print(f"{item.rank:>3}. {when(item.at_ms)}  {who}  {item.role or item.kind}: {item.snippet}")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    if not args.question.strip():
        print("agent-memory: the question is empty", file=sys.stderr)
        return 2
    options = {"max_tokens": args.max_tokens, "scope": args.scope}
    recalled = run_api(
        args, lambda api: api.recall(args.user_id, args.character_id, args.question, **options)
    )
    if args.json:
        print_answer(recalled)
    elif recalled.memories:
        print(recalled.system_message.content)
        print(f"({len(recalled.memories)} memories, about {recalled.tokens} tokens)", file=sys.stderr)
    else:
        print(f"nothing recalled for {args.question!r}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"agent-memory: {args.file}: no such file", file=sys.stderr)
        return 1
    try:
        report = run_api(args, lambda api: api.import_export(path, force=args.force))
    except AgentMemoryError as exc:
        if exc.status not in (400, 409, 413, 422):
            raise
        # The file's fault (a bad line, a forgotten user, too large to send): say which file.
        print(f"agent-memory: {args.file}: {exc.message}", file=sys.stderr)
        return 1
    print_answer(report)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    try:
        document = run_api(args, lambda api: api.export(args.user_id))
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
        held = ", ".join(f"{count} {name}" for name, count in document.counts.items())
        print(f"wrote {held} to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0
