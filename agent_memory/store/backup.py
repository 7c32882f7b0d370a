"""`agent-memory backup`: a consistent copy of the SQLite database, taken while the service runs.

SQLite's online backup API copies it in steps inside one read transaction (every step reads the
same commit, while the writer carries on); the copy is renamed into place once complete and
checked, so a half-written file never carries the name. PostgreSQL has pg_dump for this."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent_memory.errors import BadRequest
from agent_memory.settings import Settings

Progress = Callable[[int, int], None]
PG_DUMP_ADVICE = (
    "the database is PostgreSQL: back it up with pg_dump (pg_dump --format=custom --file=memory.dump "
    '"$AGENT_MEMORY_DB") and restore with pg_restore; docs/operations.md says how'
)


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a backup wrote."""

    path: str
    pages: int
    bytes: int
    seconds: float
    integrity: str


def backup_sqlite(
    settings: Settings, target: str, *, pages: int = 4096, progress: Progress | None = None
) -> BackupReport:
    """Copy the SQLite database the settings name to `target` (which must not exist) and check the copy."""
    if settings.backend != "sqlite":
        raise BadRequest(PG_DUMP_ADVICE)
    source_path = Path(settings.db_path)
    if not source_path.is_file():
        raise BadRequest(f"{source_path} is not a SQLite database file (--db, AGENT_MEMORY_DB)")
    destination = Path(target)
    if destination.exists():
        raise BadRequest(f"{destination} exists already: name a new file (a backup never overwrites)")
    if not destination.parent.is_dir():
        raise BadRequest(f"{destination.parent} is not a folder")
    if pages < 1:
        raise BadRequest("--pages must be at least 1")
    started = time.monotonic()
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    source = sqlite3.connect(f"file:{source_path}?mode=ro", uri=True, isolation_level=None, timeout=30)
    try:
        # One read transaction for the whole copy: each step sees the same commit.
        source.execute("BEGIN")
        source.execute("SELECT count(*) FROM sqlite_master").fetchone()
        copy = sqlite3.connect(partial, isolation_level=None)
        try:
            source.backup(
                copy,
                pages=pages,
                progress=(lambda _status, left, total: progress(total - left, total)) if progress else None,
            )
            integrity = str(copy.execute("PRAGMA integrity_check").fetchone()[0])
            total = int(copy.execute("PRAGMA page_count").fetchone()[0])
        finally:
            copy.close()
        source.execute("COMMIT")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    if integrity != "ok":
        partial.unlink(missing_ok=True)
        raise BadRequest(f"the copy failed SQLite's integrity check ({integrity}); nothing was written")
    os.chmod(partial, 0o600)  # as private as the database itself
    partial.replace(destination)
    return BackupReport(
        str(destination), total, destination.stat().st_size, round(time.monotonic() - started, 3), integrity
    )
