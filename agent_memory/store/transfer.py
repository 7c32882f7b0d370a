"""`agent-memory migrate-db`: copy a SQLite memory into a PostgreSQL database, and prove the copy.

Each table is copied from its SQLite namesake in one transaction (COPY, ids preserved), the
sequences and the memory clock moved past every id and version SQLite handed out, the recall
index rebuilt by the backend itself; each table is then read back and compared (row counts and
an order-independent checksum). A target that holds memory is refused unless it is replaced."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from agent_memory.errors import BadRequest, Conflict
from agent_memory.settings import Settings
from agent_memory.store.factory import open_store
from agent_memory.store.postgres.engine import PostgresStore
from agent_memory.store.protocols import Store

Progress = Callable[[str], None]

# The tables copied row for row, parents before the rows that reference them.
COPIED = (
    "inbox",
    "sessions",
    "bindings",
    "channel_bindings",
    "messages",
    "message_vectors",
    "facts",
    "fact_history",
    "summaries",
    "jobs",
    "watched_agents",
    "agent_metrics",
    "llm_routes",
    # After facts and summaries, whose triggers count versions: it replaces what they counted.
    "memory_versions",
    "api_keys",
    "forgets",
    "console_sessions",
)
# PostgreSQL tables rebuilt from messages by the backend (its recall index): emptied by --replace.
REBUILT = ("recall_pairs", "recall_docs", "recall_pending")
# Rows copied between progress lines.
PROGRESS_EVERY = 20_000
MODULUS = 1 << 128
# Memory for building each table's indexes once it is copied.
INDEX_BUILD_MEMORY = "256MB"


@dataclass(frozen=True, slots=True)
class TableCheck:
    """One table on both sides: rows and checksums."""

    table: str
    source_rows: int
    target_rows: int
    source_checksum: str
    target_checksum: str

    @property
    def ok(self) -> bool:
        return (self.source_rows, self.source_checksum) == (self.target_rows, self.target_checksum)


@dataclass(frozen=True, slots=True)
class TransferReport:
    """What migrate-db copied and how the copy compared with its source."""

    tables: list[TableCheck]
    turns_indexed: int
    seconds: float

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.tables)


class Checksum:
    """An order-independent checksum of rows: the sum of their SHA-256 digests (128 bits)."""

    __slots__ = ("rows", "total")

    def __init__(self) -> None:
        self.rows = 0
        self.total = 0

    def add(self, row: Sequence[Any]) -> None:
        digest = hashlib.sha256(b"\x1e".join(_encode(value) for value in row)).digest()
        self.total = (self.total + int.from_bytes(digest[:16], "big")) % MODULUS
        self.rows += 1

    @property
    def hex(self) -> str:
        return f"{self.total:032x}"


def _encode(value: Any) -> bytes:
    """A value as bytes that tell its type apart (5, 5.0, '5' and b'5' differ)."""
    if value is None:
        return b"N"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, float):
        return b"f" + value.hex().encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    return b"b" + bytes(value)


def _converter(pg_type: str, table: str, column: str) -> Callable[[Any], Any]:
    """How a SQLite value becomes the PostgreSQL column's (checked: nothing is silently changed)."""

    def fail(value: Any) -> Any:
        raise BadRequest(f"{table}.{column}: {value!r} does not fit PostgreSQL's {pg_type}")

    def to_int(value: Any) -> Any:
        if value is None or isinstance(value, int):
            return value
        return int(value) if isinstance(value, float) and value.is_integer() else fail(value)

    def to_float(value: Any) -> Any:
        return float(value) if isinstance(value, int | float) else value if value is None else fail(value)

    def to_text(value: Any) -> Any:
        return value if value is None or isinstance(value, str) else fail(value)

    def to_bytes(value: Any) -> Any:
        return (
            bytes(value) if isinstance(value, bytes | memoryview) else value if value is None else fail(value)
        )

    if pg_type in ("bigint", "integer", "smallint"):
        return to_int
    return {"double precision": to_float, "real": to_float, "bytea": to_bytes}.get(pg_type, to_text)


def sqlite_path(source: str) -> Path:
    """The SQLite file a `--from` names (sqlite:///path or a path); it must exist."""
    path = Path(source.removeprefix("sqlite:///"))
    if source.startswith(("postgres://", "postgresql://")) or not path.is_file():
        raise BadRequest(f"--from must name an existing SQLite file (sqlite:///path), not {source!r}")
    return path


def migrate_db(
    source: str, target: str, *, replace: bool = False, progress: Progress | None = None
) -> TransferReport:
    """Copy the SQLite memory at `source` into the PostgreSQL database at `target` and verify it."""
    say = progress or (lambda _: None)
    started = time.monotonic()
    path = sqlite_path(source)
    if not target.startswith(("postgres://", "postgresql://")):
        raise BadRequest(f"--to must be a postgresql:// URL, not {target!r}")
    # Both schemas brought up to date, as the service would at start.
    open_store(Settings(db_path=path)).close()
    # Without the background indexer: this command indexes the copy itself and counts it (the
    # indexer, racing it, left nothing to count and the progress said no turn was indexed).
    store = PostgresStore(target, index=False)
    store.open()
    try:
        copied = _copy(path, target, replace=replace, say=say)
        indexed = asyncio.run(_index(store, say))
    finally:
        store.close()
    checks = _verify(target, copied, say)
    return TransferReport(checks, indexed, round(time.monotonic() - started, 3))


@dataclass(frozen=True, slots=True)
class _Copied:
    """A table as copied: its columns, and the checksum of the rows written."""

    columns: list[str]
    checksum: Checksum


def _copy(path: Path, target: str, *, replace: bool, say: Progress) -> dict[str, _Copied]:
    """Copy every table in one PostgreSQL transaction, from one SQLite snapshot."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        source.execute("BEGIN")  # one snapshot of every table, even if the service writes on
        with psycopg.connect(target) as conn:
            conn.execute(f"SET maintenance_work_mem = '{INDEX_BUILD_MEMORY}'".encode())
            _make_room(conn, replace=replace)
            types = _pg_columns(conn)
            copied = {table: _copy_table(source, conn, table, types[table], say) for table in COPIED}
            _advance_counters(source, conn)
        return copied
    finally:
        source.close()


def _make_room(conn: psycopg.Connection[Any], *, replace: bool) -> None:
    """Refuse a target that holds memory, or empty it when it is to be replaced."""
    held = [
        table
        for table in COPIED
        if _scalar(conn, sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table)))
    ]
    if held and not replace:
        raise Conflict(
            f"the target already holds memory ({', '.join(held)}); "
            "pass --replace to delete it and copy the SQLite memory in its place"
        )
    if held:
        # TRUNCATE gives the tables new files: nothing of the old memory stays in them.
        conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(table) for table in (*COPIED, *REBUILT))
            )
        )
        conn.execute(b"DELETE FROM scrub_owed")


def _pg_columns(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[str, str]]]:
    """Each table's columns and their types, in order."""
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in conn.execute(
        b"SELECT table_name, column_name, data_type FROM information_schema.columns "
        b"WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    ):
        columns.setdefault(table, []).append((column, data_type))
    return columns


def _copy_table(
    source: sqlite3.Connection,
    conn: psycopg.Connection[Any],
    table: str,
    pg_columns: list[tuple[str, str]],
    say: Progress,
) -> _Copied:
    """COPY one table's rows (ids included), converted to the column types and checksummed."""
    have = [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
    missing = sorted(set(have) - {name for name, _ in pg_columns})
    if missing:
        raise BadRequest(f"{table}: PostgreSQL's schema has no column for {', '.join(missing)}")
    # Columns only PostgreSQL has (leases) start empty, as for a row never claimed.
    columns = [(name, data_type) for name, data_type in pg_columns if name in have]
    names = [name for name, _ in columns]
    convert = [_converter(data_type, table, name) for name, data_type in columns]
    total = int(source.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    if table == "memory_versions":
        conn.execute(b"DELETE FROM memory_versions")  # what the facts' and summaries' triggers counted
    checksum = Checksum()
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(name) for name in names)
    )
    # Built once after the rows are in rather than entry by entry: several times faster for
    # the trigram indexes. Constraints' indexes stay (foreign keys check against them).
    indexes = conn.execute(
        b"SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        b"JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass "
        b"AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        (table,),
    ).fetchall()
    for name, _definition in indexes:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
    with conn.cursor().copy(statement) as copy:
        for raw in source.execute(f'SELECT {", ".join(f"[{name}]" for name in names)} FROM "{table}"'):
            row = [fn(value) for fn, value in zip(convert, raw, strict=True)]
            copy.write_row(row)
            checksum.add(row)
            if checksum.rows % PROGRESS_EVERY == 0:
                say(f"{table}: {checksum.rows:,} / {total:,} rows")
    if indexes:
        say(f"{table}: {checksum.rows:,} rows copied; indexing")
    for _name, definition in indexes:
        conn.execute(definition.encode())
    say(f"{table}: {checksum.rows:,} rows copied")
    return _Copied(names, checksum)


def _advance_counters(source: sqlite3.Connection, conn: psycopg.Connection[Any]) -> None:
    """Move each identity sequence past every id SQLite handed out (deleted ones too: a watermark
    must never cover a later message), and the memory clock past its last tick."""
    handed_out = dict(source.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
    for table, column in conn.execute(
        b"SELECT table_name, column_name FROM information_schema.columns "
        b"WHERE table_schema = current_schema() AND is_identity = 'YES' AND table_name = ANY(%s)",
        (list(COPIED),),
    ).fetchall():
        top = max(
            _scalar(
                conn,
                sql.SQL("SELECT coalesce(max({}), 0) FROM {}").format(
                    sql.Identifier(column), sql.Identifier(table)
                ),
            ),
            int(handed_out.get(table) or 0),
        )
        if top:
            conn.execute(b"SELECT setval(pg_get_serial_sequence(%s, %s), %s)", (table, column, top))
    tick = int(source.execute("SELECT coalesce(max(tick), 0) FROM memory_clock").fetchone()[0])
    clock = max(tick, _scalar(conn, b"SELECT coalesce(max(version), 0) FROM memory_versions"))
    if clock:
        conn.execute(b"SELECT setval('memory_clock', %s)", (clock,))


async def _index(store: Store, say: Progress) -> int:
    """Index the copied turns for recall through the backend's own queue; returns how many."""
    indexed = 0
    while step := await store.catch_up_search():
        indexed += step
        say(f"recall index: {indexed:,} turns indexed")
    return indexed


def _verify(target: str, copied: dict[str, _Copied], say: Progress) -> list[TableCheck]:
    """Read every copied table back (one snapshot) and compare counts and checksums."""
    checks: list[TableCheck] = []
    with psycopg.connect(target) as conn:
        conn.read_only = True
        for table, source in copied.items():
            checksum = Checksum()
            query = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(sql.Identifier(name) for name in source.columns), sql.Identifier(table)
            )
            with conn.cursor(name=f"verify_{table}") as cursor:
                cursor.itersize = 5000
                cursor.execute(query)
                for row in cursor:
                    checksum.add(row)
            say(f"{table}: {checksum.rows:,} rows verified")
            checks.append(
                TableCheck(table, source.checksum.rows, checksum.rows, source.checksum.hex, checksum.hex)
            )
    return checks


def _scalar(conn: psycopg.Connection[Any], query: sql.Composed | bytes) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0
