"""The export document read as a stream: its fields and records, each with the line it starts on."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from agent_memory.core.jsonutil import MAX_JSON_DEPTH, refuse_deep
from agent_memory.errors import InvalidField, InvalidJSON
from agent_memory.store.shared.export import EXPORT_KINDS

# Opens the document anew for each pass (a file, or a request's body).
Source = Callable[[], IO[str]]
CHUNK_CHARS = 1 << 16
# One record larger than this is refused (a message is at most a few hundred kB).
MAX_RECORD_CHARS = 64 << 20
_SPACE = re.compile(r"[ \t\r\n]+")
# What a NUL or a lone surrogate looks like in JSON text (strict UTF-8 decoding lets in neither).
_ESCAPED = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

# What a database column can hold: a signed 64-bit integer.
INT_MAX = (1 << 63) - 1


def bad(line: int, message: str) -> InvalidJSON:
    """The file is not the JSON of an export (cut short, malformed): 400, naming the line."""
    return InvalidJSON(f"line {line}: {message}")


def invalid(line: int, message: str) -> InvalidField:
    """A record or field the export may not hold: 422, naming the line."""
    return InvalidField(f"line {line}: {message}")


class _Refused(ValueError):
    """A value JSON (or a database column) does not allow."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"it holds {name}, which JSON does not allow")


def _checked_int(digits: str) -> int:
    value = int(digits) if len(digits) <= 20 else INT_MAX + 1
    if abs(value) > INT_MAX:
        raise _Refused(f"the number {digits[:24]} is too large: it must fit a 64-bit integer")
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {text[:24]} is too large")
    return value


@dataclass(slots=True)
class Piece:
    """A top-level field of the document, or one record of one of its lists."""

    key: str
    line: int
    value: Any
    record: bool
    # Its text escapes a NUL or a surrogate: worth looking into (JSON text holds neither raw).
    suspect: bool = False


class ExportReader:
    """The pieces of an export document, read from a text stream a chunk at a time."""

    # The export's lists, streamed record by record.
    LISTS = EXPORT_KINDS

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.buf = ""
        self.pos = 0
        self.line = 1
        self.eof = False
        self.suspect = False  # the last value's text escapes a NUL or a surrogate
        self.lists: set[str] = set()  # the lists the document holds, empty ones too
        self.decoder = json.JSONDecoder(
            parse_constant=_refuse_constant, parse_int=_checked_int, parse_float=_checked_float
        )

    def _fill(self, want: int = CHUNK_CHARS) -> bool:
        """Read more; False at the end of the stream."""
        if self.eof:
            return False
        try:
            chunk = self.stream.read(want)
        except UnicodeDecodeError:
            raise bad(self.line, "the file is not UTF-8 text") from None
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def _advance(self, to: int) -> None:
        self.line += self.buf.count("\n", self.pos, to)
        self.pos = to

    def _peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            skipped = _SPACE.match(self.buf, self.pos)
            if skipped is not None and skipped.end() > self.pos:
                self._advance(skipped.end())
            if self.pos < len(self.buf) or not self._fill():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def _take(self, expected: str, where: str) -> str:
        found = self._peek()
        if found not in expected:
            shown = repr(found) if found else "the end of the file"
            cut = " (the file is cut short)" if not found else ""
            raise bad(
                self.line, f"expected {' or '.join(repr(c) for c in expected)} {where}, found {shown}{cut}"
            )
        self.pos += 1
        return found

    def _value(self, what: str) -> tuple[int, Any]:
        """The JSON value that starts here, and its line."""
        self._peek()
        line = self.line
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except _Refused as exc:
                raise bad(line, f"{what}: {exc}") from None
            except RecursionError:
                raise bad(line, f"{what} nests arrays and objects too deeply") from None
            except json.JSONDecodeError as exc:
                incomplete = exc.pos >= len(self.buf) - 8 or exc.msg.startswith("Unterminated string")
                if incomplete and len(self.buf) - self.pos > MAX_RECORD_CHARS:
                    raise bad(line, f"{what} is larger than {MAX_RECORD_CHARS >> 20} MiB") from None
                if incomplete and self._fill(max(CHUNK_CHARS, len(self.buf) - self.pos)):
                    continue
                at = line + self.buf.count("\n", self.pos, exc.pos)
                cut = " (the file is cut short)" if self.eof and incomplete else ""
                raise bad(at, f"{what} is not valid JSON: {exc.msg}{cut}") from None
            if end >= len(self.buf) and self._fill():
                continue  # a number may go on in the next chunk
            self.suspect = _ESCAPED.search(self.buf, self.pos, end) is not None
            if self.buf.count("[", self.pos, end) + self.buf.count("{", self.pos, end) > MAX_JSON_DEPTH:
                try:  # as deep as the API allows any body (counted cheaply first)
                    refuse_deep(self.buf[self.pos : end].encode("utf-8", "surrogatepass"), what)
                except InvalidJSON as exc:
                    raise bad(line, exc.message) from None
            self._advance(end)
            return line, value

    def pieces(self) -> Iterator[Piece]:
        """Every field and record in the order of the file; checks the document ends after it."""
        self._take("{", "at the start of an export (a JSON object)")
        if self._peek() == "}":
            self.pos += 1
        else:
            while True:
                line, key = self._value("a field name")
                if not isinstance(key, str):
                    raise bad(line, "expected a field name (a string)")
                self._take(":", f"after the field name {key!r}")
                if key in self.LISTS and self._peek() == "[":
                    self.lists.add(key)
                    yield from self._records(key)
                else:
                    line, value = self._value(f"the field {key!r}")
                    if key in self.LISTS:
                        raise invalid(line, f"`{key}` must be a list")
                    yield Piece(key, line, value, record=False)
                if self._take(",}", f"after the field {key!r}") == "}":
                    break
        if self._peek():
            raise bad(self.line, "more follows the end of the export's JSON object")

    def _records(self, key: str) -> Iterator[Piece]:
        self.pos += 1  # the '['
        if self._peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            line, value = self._value(f"{key}[{index}]")
            yield Piece(key, line, value, record=True, suspect=self.suspect)
            index += 1
            if self._take(",]", f"after {key}[{index - 1}]") == "]":
                return


def text_source(body: bytes) -> Source:
    """A request's body as a source (decoded as it is read: a bad byte is named by its line)."""
    return lambda: io.TextIOWrapper(io.BytesIO(body), encoding="utf-8", newline="")


def file_source(path: str) -> Source:
    """A file as a source, opened anew for each pass."""
    return lambda: open(path, encoding="utf-8", newline="")  # closed by the caller's `with`
