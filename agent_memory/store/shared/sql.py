"""SQL written once for both backends: a repository states a statement with `?` placeholders,
and its backend's `Sql` runs it in that backend's dialect (placeholders, a list parameter, many
rows at once, rows read by column name); upserts, `RETURNING` and savepoints are written alike."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ["Duplicate", "LockedRead", "Repository", "Row", "Sql", "pair_scope", "values_of"]

R = TypeVar("R")
# A row by column name: `row["id"]`, `**row`.
Row = Mapping[str, Any]
# A read a write makes under a lock (`Sql.locked`): the lock's key and seed, the statement, its
# parameters, and whether the lock is shared.
LockedRead = tuple[str, int, str, Sequence[Any], bool]


class Duplicate(Exception):
    """A unique key refused what a `Sql.savepoint` block wrote (the block's writes are undone)."""


def _duplicate(exc: BaseException) -> bool:
    """Whether `exc` is a unique key's refusal, as either driver says it (store.shared imports neither)."""
    return getattr(exc, "sqlite_errorname", None) == "SQLITE_CONSTRAINT_UNIQUE" or (
        getattr(exc, "sqlstate", None) == "23505"
    )


class Sql(ABC):
    """One backend's way of running the statements repositories share (inside the caller's transaction)."""

    # What orders text by its bytes, whatever the database's locale (SQLite's default does).
    binary = ""
    # What a write's read of rows it will change adds, to lock them (one writer needs nothing).
    for_update = ""
    # The most values `among` binds in one statement.
    list_max = 1 << 30
    # The scalar least and greatest of their arguments.
    least, greatest = "least", "greatest"
    # What stands for "no limit" before an OFFSET.
    no_limit = "LIMIT ALL"

    @abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Every row the statement returns."""

    @abstractmethod
    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """The statement's first row, or None."""

    @abstractmethod
    def records(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> list[R]:
        """`make(*row)` of each row, columns in the statement's order."""

    @abstractmethod
    def build(self, make: Callable[..., R], row: Row) -> R:
        """`make(*row)`: a row of `one` or `locked`, columns in the statement's order."""

    @abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; returns how many rows it changed."""

    @abstractmethod
    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per row of parameters."""

    @abstractmethod
    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: the condition and its parameters."""

    def chunks(self, column: str, values: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
        """`among` over `values`, as many at once as the backend binds (`list_max`)."""
        for start in range(0, len(values), self.list_max):
            yield self.among(column, values[start : start + self.list_max])

    @abstractmethod
    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert many rows at once, in order (ids follow it)."""

    @abstractmethod
    def database(self) -> str:
        """Which database this connection reads, as a key its readers and writers (and instances) share."""

    @abstractmethod
    def bump(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Count a change of each (user, character) pair's messages (`memory_versions`)."""

    def total(self, expr: str) -> str:
        """The sum of an integer expression over a group, 0 for none, as an integer."""
        return f"coalesce(sum({expr}), 0)"

    def unindexed(self, column: str) -> str:
        """The column, read without its index where the planner would pick it for a worse plan."""
        return column

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads that see one commit throughout (a backend whose reads already do: nothing to do)."""
        return nullcontext()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Undo only what the block wrote if it raises; a unique key's refusal raises `Duplicate`."""
        self.run("SAVEPOINT shared_block")
        try:
            yield
        except BaseException as exc:
            self.run("ROLLBACK TO SAVEPOINT shared_block")
            self.run("RELEASE SAVEPOINT shared_block")
            if _duplicate(exc):
                raise Duplicate(str(exc)) from exc
            raise
        self.run("RELEASE SAVEPOINT shared_block")

    def locked(
        self, key: str, seed: int, sql: str, params: Sequence[Any] = (), *, shared: bool = False
    ) -> Row | None:
        """`one` once a write holds the lock of (`key`, `seed`) or a share of it (one writer needs none)."""
        return self.one(sql, params)

    def locked_each(self, reads: Sequence[LockedRead]) -> list[Row | None]:
        """`locked` of each read in order; a backend may send them all at once."""
        return [
            self.locked(key, seed, sql, params, shared=shared) for key, seed, sql, params, shared in reads
        ]

    def record(self, make: Callable[..., R], sql: str, params: Sequence[Any] = ()) -> R | None:
        """`make(*row)` of the first row, or None."""
        found = self.records(make, sql, params)
        return found[0] if found else None

    @abstractmethod
    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """The single integer a `count(*)` query answers."""

    def set(self, table: str, key: str, value: Any, changes: Mapping[str, Any], *, send: bool = False) -> int:
        """`UPDATE table SET changes WHERE key = value` (our column names); how many rows (`send`: 0)."""
        if not changes:
            return 0
        assignments = ", ".join(f"{column} = ?" for column in changes)
        statement, params = f"UPDATE {table} SET {assignments} WHERE {key} = ?", (*changes.values(), value)
        if send:
            self.send(statement, params)
            return 0
        return self.run(statement, params)

    def insert_new(self, table: str, key: str, row: Mapping[str, Any]) -> int:
        """Insert `row` (by column, ours) unless a row with its `key` is held; how many were inserted."""
        return self.run(
            f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))}) "
            f"ON CONFLICT ({key}) DO NOTHING",
            list(row.values()),
        )

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a write whose result is not read; a backend may send it with its next statement."""
        self.run(sql, params)


def pair_scope(user_id: str, character_id: str | None, alias: str = "") -> tuple[str, tuple[str, ...]]:
    """`user_id = ?` of a user's rows, or with `character_id = ?` of one pair's, and its parameters."""
    if character_id is None:
        return f"{alias}user_id = ?", (user_id,)
    return f"{alias}user_id = ? AND {alias}character_id = ?", (user_id, character_id)


def values_of(record: Any) -> tuple[Any, ...]:
    """A record's fields, in order: a row of the table whose columns follow it."""
    return tuple(getattr(record, field.name) for field in fields(record))


class Repository:
    """One aggregate's SQL, written once, run by its backend's `Sql`."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql
