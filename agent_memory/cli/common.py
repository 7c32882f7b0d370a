"""What every command shares: settings, the store or the service, bounds of arguments, printing."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from agent_memory.client import AsyncMemoryClient
from agent_memory.core.limits import MAX_TOKENS, MIN_TOKENS
from agent_memory.embed import make_embedder
from agent_memory.errors import (
    ApiError,
    BadRequest,
    StoreUnavailable,
)
from agent_memory.logs import configure_logging
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store

MAX_TOKENS_RANGE = (MIN_TOKENS, MAX_TOKENS)

T = TypeVar("T")

log = logging.getLogger("agent_memory")


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        db_path=getattr(args, "db", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        workers=getattr(args, "workers", None),
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


def with_memory(
    args: argparse.Namespace, use: Callable[[Memory], Awaitable[T]], *, settings: Settings | None = None
) -> T:
    """Open the store, run `use` on a `Memory` over it, and close the store."""

    def run(settings: Settings, store: Store) -> Awaitable[T]:
        return use(Memory(settings, store, embedder=make_embedder(settings)))

    return with_store(args, run, settings=settings)


def with_store(
    args: argparse.Namespace,
    use: Callable[[Settings, Store], Awaitable[T]],
    *,
    settings: Settings | None = None,
) -> T:
    """Open the store, run `use` on it (with the settings it was opened with), and close it."""
    settings = settings or settings_from(args)
    configure_logging(args.log_level or "WARNING", settings.log_format)
    note = check_database(settings)
    if note:
        print(f"agent-memory: {note}", file=sys.stderr)
    store = open_store(settings)

    async def run() -> T:
        return await use(settings, store)

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


def when(ms: int | None) -> str:
    """Epoch milliseconds as UTC time, for people."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
