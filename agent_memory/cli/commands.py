"""The command table: each command's name, help, arguments and what runs it; the parser is built from it.

A command is one `Command` row: `where` says which shared options it takes (`common`: --db and
--log-level; `remote`: those and --url/--api-key, for commands written over `MemoryApi`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_memory import __version__
from agent_memory.cli import local, reads, serve
from agent_memory.cli.common import MAX_TOKENS_RANGE, at_most, bounded, service_url
from agent_memory.core.domain import KEY_SCOPES
from agent_memory.core.limits import (
    JOBS_LIMIT,
    MAX_PERSONA_CHARS,
    MAX_QUERY_CHARS,
    SEARCH_LIMIT,
    USERS_LIMIT,
)
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.recall import RECALL_SCOPES

Run = Callable[[argparse.Namespace], int]
Where = Literal["none", "common", "remote"]


class Arg:
    """One `add_argument` call, kept to be made on the command's parser."""

    def __init__(self, *flags: str, **options: Any) -> None:
        self.flags = flags
        self.options = options


@dataclass(frozen=True)
class Command:
    """A command (or a group of subcommands) of `agent-memory`."""

    name: str
    help: str
    run: Run | None = None
    where: Where = "common"
    args: tuple[Arg, ...] = ()
    subcommands: tuple[Command, ...] = ()
    # Arguments of which only one may be given.
    exclusive: tuple[Arg, ...] = field(default=())


class Said(argparse.Action):
    """--user and --assistant into one list of (role, text), in the order given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option: str | None = None,
    ) -> None:
        said = list(getattr(namespace, self.dest, None) or [])
        said.append((str(option).lstrip("-"), str(values)))
        setattr(namespace, self.dest, said)


JSON = Arg("--json", action="store_true", help="print the JSON answer")
PAIR = (Arg("user_id"), Arg("character_id"))

COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run the service",
        serve.cmd_serve,
        args=(
            Arg("--host", help="address to listen on (AGENT_MEMORY_HOST, 127.0.0.1)"),
            Arg("--port", type=int, help="port (AGENT_MEMORY_PORT, 8080)"),
            Arg(
                "--workers",
                type=bounded("workers", 1, 64),
                help="processes serving the port, PostgreSQL only (AGENT_MEMORY_WORKERS, 1)",
            ),
            Arg(
                "--allow-open-api",
                action="store_true",
                help="serve /v1 without AGENT_MEMORY_API_TOKEN on a non-loopback --host (a trusted network only; "
                "AGENT_MEMORY_ALLOW_OPEN_API)",
            ),
            Arg(
                "--insecure-dev-webhooks",
                action="store_true",
                help="accept unsigned callbacks when AGORA_WEBHOOK_SECRET is unset (local testing only)",
            ),
        ),
    ),
    Command(
        "replay",
        "ingest callback JSON files (an envelope or a list)",
        local.cmd_replay,
        args=(Arg("files", nargs="+", help="files or directories, e.g. fixtures/conversations"),),
    ),
    Command(
        "system-messages",
        "print the system_messages of a user and character",
        reads.cmd_system_messages,
        "remote",
        args=(
            *PAIR,
            Arg("--max-tokens", type=bounded("max_tokens", *MAX_TOKENS_RANGE)),
            Arg("--persona", type=at_most("persona", MAX_PERSONA_CHARS)),
            Arg(
                "--query",
                type=at_most("query", MAX_QUERY_CHARS),
                help="what the call is about: memories recalled for it are included",
            ),
            Arg("--text", action="store_true", help="print the contents only"),
        ),
    ),
    Command(
        "llm-block",
        "print the join body's llm block that gives an agent memory in every turn",
        local.cmd_llm_block,
        args=(
            *PAIR,
            Arg("--url", help="where Agora reaches this service (AGENT_MEMORY_PUBLIC_URL)"),
            Arg("--upstream-model", help="the model the endpoint asks your LLM for (params.model)"),
            Arg("--show-token", action="store_true", help="put AGENT_MEMORY_LLM_TOKEN itself in api_key"),
        ),
    ),
    Command(
        "forget",
        "delete everything held for a user, or a user and character",
        reads.cmd_forget,
        "remote",
        args=(Arg("user_id"), Arg("character_id", nargs="?")),
    ),
    Command(
        "facts",
        "the facts remembered for a user and character",
        reads.cmd_facts,
        "remote",
        args=(*PAIR, JSON),
    ),
    Command(
        "add",
        "store messages of a session of yours (a text chat): posting them again stores nothing new",
        reads.cmd_add,
        "remote",
        args=(
            *PAIR,
            Arg("--session", required=True, help="your id of the conversation (it belongs to this pair)"),
            Arg(
                "--file",
                metavar="FILE",
                help='a JSON list of {"role", "content", "timestamp", "id"?}, the route\'s body, or JSON '
                "Lines; - or none: standard input",
            ),
            Arg("--user", dest="said", action=Said, help="what the user said now (repeatable, in order)"),
            Arg("--assistant", dest="said", action=Said, help="what the character said now (repeatable)"),
        ),
    ),
    Command(
        "fact-edit",
        "change a fact by hand: its text (the old one kept as its history) and whether it is pinned",
        reads.cmd_fact_edit,
        "remote",
        args=(Arg("fact_id", type=int), Arg("--text", help="the fact's new text")),
        exclusive=(
            Arg("--pin", action="store_true", help="pin it (always in memory)"),
            Arg("--unpin", action="store_true", help="unpin it"),
        ),
    ),
    Command(
        "fact-history",
        "every text a fact had and when it held, oldest first",
        reads.cmd_fact_history,
        "remote",
        args=(Arg("fact_id", type=int), JSON),
    ),
    Command(
        "bind-channel",
        "tie a channel to a user and character (apps with one channel per user); "
        "without USER CHARACTER: show its binding",
        local.cmd_bind_channel,
        args=(
            Arg("channel"),
            Arg("user_id", nargs="?"),
            Arg("character_id", nargs="?"),
            Arg("--delete", action="store_true", help="remove the channel's binding"),
        ),
    ),
    Command(
        "jobs",
        "list condense and embed jobs",
        reads.cmd_jobs,
        "remote",
        args=(
            Arg("--status", choices=["pending", "running", "dead"]),
            Arg("--limit", type=bounded("limit", 1, JOBS_LIMIT[1]), default=JOBS_LIMIT[0]),
        ),
    ),
    Command(
        "retry-job", "make a dead job pending again", local.cmd_retry_job, args=(Arg("job_id", type=int),)
    ),
    Command(
        "condense",
        "condense a user and character's memory now",
        local.cmd_condense,
        args=(
            *PAIR,
            Arg(
                "--wait",
                type=float,
                default=60.0,
                metavar="SECONDS",
                help="when the running service is condensing the pair, wait this long for it (default "
                "%(default)g; 0: exit 3 at once)",
            ),
        ),
    ),
    Command(
        "reprocess",
        "apply again the raw callbacks that failed or were applied only in part",
        local.cmd_reprocess,
        args=(
            Arg("--limit", type=int, default=10_000),
            Arg(
                "--status",
                action="append",
                choices=local.REPROCESSED,
                help="only callbacks of this outcome (repeatable; default: failed and partial)",
            ),
        ),
    ),
    Command(
        "stats",
        "statistics: overall, or of a user or a character",
        reads.cmd_stats,
        "remote",
        args=(
            Arg("--since-ms", type=int, help="only sessions started at or after (epoch ms)"),
            Arg("--until-ms", type=int, help="only sessions started before (epoch ms)"),
            Arg("--json", action="store_true", help="print JSON instead of a table"),
        ),
        exclusive=(
            Arg("--user", help="one user's sessions, messages, favourite characters"),
            Arg("--character", help="one character's users, sessions, rates, latencies"),
        ),
    ),
    Command(
        "users",
        "list users in id order: their characters, calls and when last seen",
        reads.cmd_users,
        "remote",
        args=(
            Arg(
                "--q", type=at_most("q", MAX_QUERY_CHARS), help="only users whose id contains this (any case)"
            ),
            Arg("--cursor", help="the page after this one (what the previous page said: more: --cursor …)"),
            Arg(
                "--limit",
                type=bounded("limit", 1, USERS_LIMIT[1]),
                default=USERS_LIMIT[0],
                metavar=f"1..{USERS_LIMIT[1]}",
            ),
            JSON,
        ),
    ),
    Command(
        "search",
        "search a user's messages, facts and summaries",
        reads.cmd_search,
        "remote",
        args=(
            Arg("user_id"),
            Arg("query", type=at_most("q", MAX_QUERY_CHARS)),
            Arg("--character", help="only this character (and user-wide facts)"),
            Arg(
                "--limit",
                type=bounded("limit", 1, SEARCH_LIMIT[1]),
                default=SEARCH_LIMIT[0],
                metavar=f"1..{SEARCH_LIMIT[1]}",
            ),
            JSON,
        ),
    ),
    Command(
        "recall",
        "the memories that answer a question, ranked and dated",
        reads.cmd_recall,
        "remote",
        args=(
            *PAIR,
            Arg("question", type=at_most("q", MAX_QUERY_CHARS)),
            Arg(
                "--max-tokens",
                type=bounded("max_tokens", *MAX_TOKENS_RANGE),
                default=DEFAULT_RECALL_TOKENS,
                help="budget (default %(default)s)",
            ),
            Arg("--scope", choices=RECALL_SCOPES, default="pair", help="user: all the user's characters"),
            JSON,
        ),
    ),
    Command(
        "export",
        "everything held about a user, as one JSON document",
        reads.cmd_export,
        "remote",
        args=(
            Arg("user_id"),
            Arg("--output", "-o", help="write to this file instead of standard output"),
        ),
    ),
    Command(
        "import",
        "restore a user from an export (a file of any size here; within the body limit with --url)",
        reads.cmd_import,
        "remote",
        args=(
            Arg(
                "file", help="an export: agent-memory export USER -o FILE, or GET /v1/users/{user_id}/export"
            ),
            Arg(
                "--force",
                action="store_true",
                help="restore a user forgotten after the export was taken (refused otherwise)",
            ),
        ),
    ),
    Command(
        "backup",
        "a consistent copy of the SQLite database, taken while the service runs",
        local.cmd_backup,
        args=(
            Arg("path", help="the copy to write (must not exist)"),
            Arg("--pages", type=int, default=4096, help="pages copied per step (default %(default)s)"),
        ),
    ),
    Command(
        "purge",
        "apply retention now: remove what may go, give space back",
        local.cmd_purge,
        args=(
            Arg("--max-messages", type=int, help="keep this many per pair (overrides the setting)"),
            Arg("--max-age-days", type=float, help="drop covered messages older than this"),
            Arg("--raw-days", type=float, help="drop processed raw callbacks older than this"),
            Arg("--json", action="store_true", help="print the report as JSON"),
        ),
    ),
    Command(
        "keys",
        "scoped keys of the /v1 API: create, list, revoke",
        where="none",
        subcommands=(
            Command(
                "create",
                "make a key and print it (once: only its hash is stored)",
                local.cmd_keys_create,
                args=(
                    Arg(
                        "--scope",
                        required=True,
                        choices=KEY_SCOPES,
                        help="read: a pair's memory; write: also change it, bind, start agents; admin: everything",
                    ),
                    Arg("--name", type=at_most("name", 200), help="what the key is for"),
                ),
            ),
            Command(
                "list",
                "every key, revoked ones too",
                local.cmd_keys_list,
                args=(Arg("--json", action="store_true", help="print JSON"),),
            ),
            Command(
                "revoke", "revoke a key for good", local.cmd_keys_revoke, args=(Arg("key_id", type=int),)
            ),
        ),
    ),
    Command(
        "migrate-db",
        "copy a SQLite memory into PostgreSQL, then verify it table by table",
        local.cmd_migrate_db,
        where="none",
        args=(
            Arg("--from", dest="source", required=True, help="sqlite:///path (or a path)"),
            Arg("--to", dest="target", required=True, help="postgresql://user:password@host/db"),
            Arg("--replace", action="store_true", help="empty the target first instead of refusing"),
        ),
    ),
)


def shared_options() -> dict[Where, list[argparse.ArgumentParser]]:
    """The parents each kind of command takes: --db and --log-level; with --url and --api-key."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help="SQLite file (AGENT_MEMORY_DB, default ./agent_memory.db)")
    common.add_argument("--log-level", help="DEBUG, INFO, WARNING (AGENT_MEMORY_LOG_LEVEL)")
    # Read commands and forget: a running service instead of the database here.
    remote = argparse.ArgumentParser(add_help=False, parents=[common])
    remote.add_argument(
        "--url", type=service_url, help="ask the service running there instead, e.g. http://127.0.0.1:8080"
    )
    remote.add_argument("--api-key", help="its key (AGENT_MEMORY_API_TOKEN)")
    return {"none": [], "common": [common], "remote": [remote]}


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    table: tuple[Command, ...],
    parents: dict[Where, list[argparse.ArgumentParser]],
) -> None:
    """A parser for each command of `table` (and of its subcommands)."""
    for command in table:
        parser = commands.add_parser(command.name, parents=parents[command.where], help=command.help)
        if command.exclusive:
            group = parser.add_mutually_exclusive_group()
            for arg in command.exclusive:
                group.add_argument(*arg.flags, **arg.options)
        for arg in command.args:
            parser.add_argument(*arg.flags, **arg.options)
        if command.subcommands:
            inner = parser.add_subparsers(dest=f"{command.name}_command", required=True)
            add_commands(inner, command.subcommands, parents)
        if command.run is not None:
            parser.set_defaults(func=command.run)


def build_parser() -> argparse.ArgumentParser:
    """The `agent-memory` parser, from the command table."""
    parser = argparse.ArgumentParser(
        prog="agent-memory",
        description="Long-term memory for real-time voice agents: Agora, Vapi, Retell, ElevenLabs, LiveKit, "
        "Pipecat, or any app through the generic write API.",
    )
    parser.add_argument("--version", action="version", version=f"agent-memory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    add_commands(commands, COMMANDS, shared_options())
    return parser
