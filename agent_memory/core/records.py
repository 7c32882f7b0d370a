"""Immutable records that are cheap to build: what a store reads by the thousand."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """A slotted dataclass that type checkers hold frozen (mypy rejects assigning a field).

    Not frozen at run time: a frozen dataclass sets each field through `object.__setattr__`,
    which makes one ten times dearer to build (a stored message: 3.3 µs against 0.3 µs), and
    the ingest and context paths build them from rows by the hundred per request.
    """
    built = dataclass(slots=True)(cls)
    names = [each.name for each in fields(built)]  # type: ignore[arg-type]
    values = attrgetter(*names)
    one = len(names) == 1

    # Pickled as the class and its values, rebuilt by its own __init__: a slotted dataclass's
    # own state methods walk `fields()` per record, which made sending a condense job's messages
    # to the worker process (~0.6 ms per job) cost a tenth of condensing them.
    def __reduce__(self: Any) -> tuple[type[T], tuple[Any, ...]]:
        got = values(self)
        return built, (got,) if one else got

    built.__reduce__ = __reduce__  # type: ignore[method-assign]
    return built
