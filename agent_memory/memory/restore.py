"""Import: an export (GET /v1/users/{user_id}/export, `agent-memory export`) restored.

The document is read as a stream, record by record, with the line each starts on, so a file
of any size takes little memory and a bad one is named by its line. It is read twice: once to
check every record (nothing is written from a file that is malformed or cut short: `counts`
must match what follows) and learn what the second pass needs (the user, the summaries'
watermarks, the sessions), then to write it in short transactions. Each record is written only
if it is not held yet, so importing twice changes nothing, and an import that stopped part way
(the service stopped, the database went away) is completed by importing again.

Rows take the new database's ids: a summary's watermark is carried over to the ids its messages
got (never covering a message it did not cover), a fact's history to its fact's new id. A user
forgotten after the export was taken is refused unless forced. Imported messages are counted as
changes of their pairs, indexed for recall and search, and condensed and embedded as ingest's are.
Not restored: jobs (scheduled anew from what was restored) and followed agents (the state of
calls that were running when the export was taken).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_memory.core.alignment import canonical, fingerprint
from agent_memory.core.clock import format_datetime
from agent_memory.core.domain import FactChange, FactOrigin, SessionStatus, SummaryMethod
from agent_memory.core.events import TURN, IdentitySource
from agent_memory.core.jsonutil import MAX_JSON_DEPTH, refuse_deep
from agent_memory.errors import Conflict, InvalidField, InvalidJSON
from agent_memory.memory.embedding import schedule_embedding
from agent_memory.memory.ingest import Ingestor
from agent_memory.settings import Settings
from agent_memory.store import Store
from agent_memory.store.protocols import ReadView, Transaction
from agent_memory.store.types import NewMessage

T = TypeVar("T")
# Opens the document anew for each pass (a file, or a request's body).
Source = Callable[[], IO[str]]
FORMAT_PREFIX = "agent-memory-export/"
READABLE_VERSIONS = ("1",)
CHUNK_CHARS = 1 << 16
# One record larger than this is refused (a message is at most a few hundred kB).
MAX_RECORD_CHARS = 64 << 20
# Records written per transaction: short enough not to hold the writer long.
BATCH = 1000
# A tool call's or result's fields, kept in `extra` by ingest: what its fingerprint adds.
TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")
_SPACE = re.compile(r"[ \t\r\n]+")
# What a NUL or a lone surrogate looks like in JSON text (strict UTF-8 decoding lets in neither).
_ESCAPED = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
NUL = "\x00"


# What a database column can hold: a signed 64-bit integer.
INT_MAX = (1 << 63) - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


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

    LISTS = frozenset(
        (
            "sessions",
            "messages",
            "summaries",
            "facts",
            "fact_history",
            "bindings",
            "channel_bindings",
            "jobs",
            "followed_agents",
            "metrics",
            "raw_callbacks",
        )
    )

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


# The records restored, as the export writes them (columns it may lack in older exports: optional).


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class SessionRecord(_Record):
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)
    identity_source: IdentitySource
    status: SessionStatus


class MessageRecord(_Record):
    id: int
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)
    seq: int
    role: str
    kind: Literal["turn", "tool_call", "tool_result"] = "turn"
    content: str
    turn_id: int | None = None
    ts_ms: int | None = None
    at_ms: int
    source: str | None = None
    speaker: str | None = None
    interrupted: bool = False
    interrupt_ms: int | None = None
    original: str | None = None
    gap_before: bool = False
    extra: Any = None
    images: Any = None
    created_ms: int | None = None
    # Exported since issue 27; recomputed for older exports.
    fp: str | None = None


class SummaryRecord(_Record):
    character_id: str = Field(min_length=1)
    text: str
    watermark_id: int
    covered_until_ms: int | None = None
    message_count: int = 0
    method: SummaryMethod = "offline"
    model: str | None = None
    created_ms: int = 0
    updated_ms: int = 0


class FactRecord(_Record):
    id: int
    character_id: str
    text: str = Field(min_length=1)
    pinned: bool = False
    origin: FactOrigin = "manual"
    created_ms: int = 0
    updated_ms: int | None = None
    valid_from: int | None = None


class FactVersionRecord(_Record):
    fact_id: int
    character_id: str
    text: str
    origin: FactOrigin | None = None
    valid_from: int
    valid_to: int
    change: FactChange


class BindingRecord(_Record):
    agent_id: str = Field(min_length=1)
    character_id: str = Field(min_length=1)


class ChannelBindingRecord(_Record):
    channel: str = Field(min_length=1)
    character_id: str = Field(min_length=1)


class MetricRecord(_Record):
    agent_id: str = Field(min_length=1)
    turn_id: int
    metric: str
    value_ms: float
    at_ms: int


class RawRecord(_Record):
    notice_id: str = Field(min_length=1)
    event_type: int
    received_ms: int
    status: str
    agent_id: str | None = None


RECORDS: dict[str, type[_Record]] = {
    "sessions": SessionRecord,
    "messages": MessageRecord,
    "summaries": SummaryRecord,
    "facts": FactRecord,
    "fact_history": FactVersionRecord,
    "bindings": BindingRecord,
    "channel_bindings": ChannelBindingRecord,
    "metrics": MetricRecord,
    "raw_callbacks": RawRecord,
}
NOT_RESTORED = ("jobs", "followed_agents")
# What every export holds (the Export model's required fields).
REQUIRED = (
    "format",
    "exported_ms",
    "user_id",
    "characters",
    "counts",
    "sessions",
    "messages",
    "facts",
    "summaries",
)


def _holds_nul(value: Any) -> bool:
    """Whether a string of the value holds what no database text can: NUL, a lone surrogate."""
    if isinstance(value, str):
        return NUL in value or _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def checked(piece: Piece, index: int) -> dict[str, Any]:
    """A record as its model reads it (a dict), or a 400 naming its line and what is wrong."""
    if not isinstance(piece.value, dict):
        raise invalid(piece.line, f"{piece.key}[{index}] must be an object")
    if piece.suspect and _holds_nul(piece.value):
        raise invalid(
            piece.line,
            f"{piece.key}[{index}] holds a NUL character or a lone surrogate, which cannot be stored",
        )
    try:
        return RECORDS[piece.key].model_validate(piece.value).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise invalid(piece.line, f"{piece.key}[{index}].{where}: {first['msg']}") from None


@dataclass
class Plan:
    """What the first pass learned: whose export it is, and what the writes need to know first."""

    user_id: str
    exported_ms: int | None
    seen: dict[str, int]
    agents: dict[str, str]  # agent id → character
    characters: set[str]
    summaries: dict[str, dict[str, Any]]  # character → its exported summary
    fact_ids: set[int]

    @property
    def watermarks(self) -> dict[str, int]:
        return {character: summary["watermark_id"] for character, summary in self.summaries.items()}


def scan(stream: IO[str]) -> Plan:
    """Read the whole export once, checking every record; nothing is written."""
    header: dict[str, tuple[int, Any]] = {}
    plan = Plan("", None, {}, {}, set(), {}, set())
    talked: dict[str, int] = {}  # each message's agent run, and the line it was first seen on
    reader = ExportReader(stream)
    for piece in reader.pieces():
        if not piece.record:
            header[piece.key] = (piece.line, piece.value)
            continue
        index = plan.seen.get(piece.key, 0)
        plan.seen[piece.key] = index + 1
        if piece.key in RECORDS:  # jobs and followed agents are not restored; later lists ignored
            _note(plan, talked, piece, checked(piece, index))
    # A message belongs to a call of the export (whose owner here decides whether it is restored).
    for agent, line in talked.items():
        if agent not in plan.agents:
            raise invalid(line, f"a message of agent run {agent!r}, which no session of the export holds")
    plan.user_id, plan.exported_ms = _checked_header(header, reader.lists, plan.seen)
    return plan


def _note(plan: Plan, talked: dict[str, int], piece: Piece, record: dict[str, Any]) -> None:
    """What the writes need to know first of one checked record."""
    if piece.key in ("sessions", "messages", "summaries", "bindings", "channel_bindings"):
        plan.characters.add(record["character_id"])
    if piece.key == "sessions":
        plan.agents[record["agent_id"]] = record["character_id"]
    elif piece.key == "summaries":
        plan.summaries[record["character_id"]] = record
    elif piece.key == "facts":
        plan.fact_ids.add(record["id"])
    elif piece.key == "messages" and record["agent_id"] not in talked:
        talked[record["agent_id"]] = piece.line


def _checked_header(
    header: dict[str, tuple[int, Any]], lists: Collection[str], seen: dict[str, int]
) -> tuple[str, int]:
    """The export's user and time, once its format, names and counts are checked."""
    line, version = header.get("format", (1, None))
    if not isinstance(version, str) or not version.startswith(FORMAT_PREFIX):
        raise invalid(line, f"not an agent-memory export: its `format` must be {FORMAT_PREFIX}1")
    if version.removeprefix(FORMAT_PREFIX) not in READABLE_VERSIONS:
        raise invalid(line, f"{version} is a format this version cannot read (it reads {FORMAT_PREFIX}1)")
    for name in REQUIRED:
        if name not in header and name not in lists:
            raise invalid(1, f"the export has no `{name}`: every export names {', '.join(REQUIRED)}")
    line, user_id = header.get("user_id", (1, None))
    if not isinstance(user_id, str) or not user_id or NUL in user_id:
        raise invalid(line, "the export names no user: `user_id` must be a non-empty string")
    line, exported_ms = header.get("exported_ms", (1, None))
    if not isinstance(exported_ms, int) or isinstance(exported_ms, bool):
        raise invalid(line, "`exported_ms` must be an integer (milliseconds since 1970)")
    line, characters_listed = header.get("characters", (1, None))
    if not isinstance(characters_listed, list) or not all(isinstance(c, str) for c in characters_listed):
        raise invalid(line, "`characters` must be a list of character ids")
    _check_counts(*header.get("counts", (1, None)), seen)
    return user_id, exported_ms


def _check_counts(line: int, counts: Any, seen: dict[str, int]) -> None:
    """`counts` is an object of whole numbers, each the number of records of its kind held."""
    if not isinstance(counts, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in counts.values()
    ):
        raise invalid(line, "`counts` must be an object of whole numbers (records of each kind)")
    for key, said in counts.items():
        if said != seen.get(key, 0) and key in ExportReader.LISTS:
            raise invalid(
                line,
                f"`counts` says {said} {key} but the file holds {seen.get(key, 0)}: it was cut short or edited",
            )


@dataclass
class PairIds:
    """Where a pair's exported messages landed, against its exported summary's watermark."""

    covered_top: int = 0  # the highest new id of a message the summary covered
    uncovered_low: int | None = None  # the lowest new id of one it did not
    kept_ids: bool = True  # every message kept its exported id
    new_turns: int = 0

    def land(self, old_id: int, new_id: int, watermark: int | None) -> None:
        self.kept_ids = self.kept_ids and old_id == new_id
        if watermark is not None and old_id <= watermark:
            self.covered_top = max(self.covered_top, new_id)
        elif self.uncovered_low is None or new_id < self.uncovered_low:
            self.uncovered_low = new_id

    def watermark(self, exported: int) -> int:
        """The watermark in the new ids: every message it covered, and none it did not."""
        top = exported if self.kept_ids else self.covered_top
        if self.uncovered_low is not None:
            top = min(top, self.uncovered_low - 1)
        return top


@dataclass
class ImportReport:
    """What an import restored, what was held already, and what it left out."""

    user_id: str
    characters: list[str]
    restored: dict[str, int] = field(default_factory=dict)
    already_held: dict[str, int] = field(default_factory=dict)
    not_restored: dict[str, int] = field(default_factory=dict)
    forgotten_ms: int | None = None
    forced: bool = False

    def count(self, kind: str, inserted: int, offered: int) -> None:
        self.restored[kind] = self.restored.get(kind, 0) + inserted
        self.already_held[kind] = self.already_held.get(kind, 0) + offered - inserted

    def left_out(self, kind: str) -> None:
        self.not_restored[kind] = self.not_restored.get(kind, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "characters": self.characters,
            "restored": self.restored,
            "already_held": self.already_held,
            "not_restored": self.not_restored,
            "forgotten_ms": self.forgotten_ms,
            "forced": self.forced,
        }


def fingerprint_of(record: dict[str, Any]) -> str:
    """The message's fingerprint as ingest made it (older exports do not carry it)."""
    if record.get("fp"):
        return str(record["fp"])
    found = record.get("extra")
    extra: dict[str, Any] = found if isinstance(found, dict) else {}
    tool = canonical({k: extra[k] for k in TOOL_FIELDS if k in extra}) if record["kind"] != TURN else ""
    return fingerprint(record["role"], record["content"], tool if tool != "{}" else "")


def message_row(user_id: str, record: dict[str, Any]) -> NewMessage:
    """An exported message as the row a store inserts."""

    def text(value: Any) -> str | None:
        return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    return {
        "agent_id": record["agent_id"],
        "user_id": user_id,
        "character_id": record["character_id"],
        "seq": record["seq"],
        "role": record["role"],
        "kind": record["kind"],
        "content": record["content"],
        "turn_id": record["turn_id"],
        "ts_ms": record["ts_ms"],
        "at_ms": record["at_ms"],
        "source": record["source"],
        "speaker": record["speaker"],
        "interrupted": record["interrupted"],
        "interrupt_ms": record["interrupt_ms"],
        "original": record["original"],
        "fp": fingerprint_of(record),
        "gap_before": record["gap_before"],
        "extra": record["extra"] if isinstance(record["extra"], str) else text(record["extra"]),
        "created_ms": record["created_ms"],
        "images": text(record["images"]) if record["images"] else None,
    }


class Importer:
    """One import: the checks before any write, then the writes in short transactions."""

    def __init__(self, settings: Settings, store: Store, source: Source, *, force: bool) -> None:
        self.settings = settings
        self.store = store
        self.source = source
        self.force = force
        self.ingestor = Ingestor(settings)
        self.allowed_forget_ms: int | None = None

    async def run(self) -> ImportReport:
        """Check the whole export, refuse a forgotten user unless forced, then restore it."""
        with self.source() as stream:
            plan = scan(stream)
        report = ImportReport(plan.user_id, sorted(plan.characters))
        report.not_restored = {kind: plan.seen[kind] for kind in NOT_RESTORED if plan.seen.get(kind)}
        report.forgotten_ms = await self.store.read(lambda view: self._forgotten(view, plan))
        if report.forgotten_ms is not None and (
            plan.exported_ms is None or report.forgotten_ms > plan.exported_ms
        ):
            if not self.force:
                taken = (
                    "at an unknown time" if plan.exported_ms is None else format_datetime(plan.exported_ms)
                )
                raise Conflict(
                    f"user {plan.user_id!r} was forgotten at {format_datetime(report.forgotten_ms)} "
                    f"(forgot_ms {report.forgotten_ms}), after this export was taken ({taken}): importing "
                    "it brings back what was forgotten; force it (agent-memory import --force, "
                    "POST /v1/import?force=true) if that is meant"
                )
            report.forced = True
        # The forget decided about above; a later one (during the import) stops it.
        self.allowed_forget_ms = report.forgotten_ms
        owners = await self.store.read(lambda view: view.restore.session_owners(list(plan.agents)))
        # Runs another user holds stay theirs: their messages, metrics and raw callbacks are not ours.
        refused = {agent for agent, owner in owners.items() if owner != plan.user_id}
        await self._write(plan, report, refused)
        while await self.store.catch_up_search():
            pass  # recall and search see the imported turns at once
        return report

    @staticmethod
    def _forgotten(view: ReadView, plan: Plan) -> int | None:
        """When the user, one of its pairs or one of its calls was last forgotten (None: never)."""
        cutoffs = [view.maintenance.forget_cutoff(plan.user_id, character) for character in plan.characters]
        cutoffs.append(view.maintenance.forget_cutoff(plan.user_id, ""))
        cutoffs += [
            view.maintenance.forget_cutoff(plan.user_id, character, agent)
            for agent, character in plan.agents.items()
        ]
        found = [cutoff.at_ms for cutoff in cutoffs if cutoff is not None]
        return max(found) if found else None

    async def _write(self, plan: Plan, report: ImportReport, refused: set[str]) -> None:
        """The records in the file's order, a batch of one kind per transaction; summaries last."""
        state = _State()
        later: list[dict[str, Any]] = []  # history read before its fact
        batch: list[dict[str, Any]] = []
        kind = ""
        with self.source() as stream:
            counters: dict[str, int] = {}
            for piece in ExportReader(stream).pieces():
                if not piece.record or piece.key not in RECORDS or piece.key == "summaries":
                    continue
                index = counters.get(piece.key, 0)
                counters[piece.key] = index + 1
                record = checked(piece, index)
                if record.get("agent_id") in refused:
                    report.left_out(piece.key)
                    continue
                if batch and (piece.key != kind or len(batch) >= BATCH):
                    await self._flush(kind, batch, plan, report, state)
                    batch = []
                if piece.key == "fact_history" and _before_its_fact(record, plan, state):
                    later.append(record)
                    continue
                kind = piece.key
                batch.append(record)
        if batch:
            await self._flush(kind, batch, plan, report, state)
        if later:
            await self._flush("fact_history", later, plan, report, state)
        stored = await self._write_under_locks(plan, [], lambda tx: self._finish(tx, plan, state))
        report.count("summaries", stored, len(plan.summaries))

    async def _flush(
        self, kind: str, records: list[dict[str, Any]], plan: Plan, report: ImportReport, state: _State
    ) -> None:
        """Write one batch; what it learned (new ids) is kept once it committed (a retried
        transaction must not count twice)."""
        user_id = plan.user_id
        if kind == "messages":
            landed, new = await self._write_under_locks(
                plan, records, lambda tx: self._messages(tx, user_id, records)
            )
            watermarks = plan.watermarks
            for record in records:
                character = record["character_id"]
                pair = state.pairs.setdefault(character, PairIds())
                pair.land(
                    record["id"], landed[(record["agent_id"], record["seq"])], watermarks.get(character)
                )
            for record in new:
                state.pairs[record["character_id"]].new_turns += record["kind"] == TURN
            report.count(kind, len(new), len(records))
        elif kind == "facts":
            placed = await self._write_under_locks(
                plan, [], lambda tx: [tx.restore.fact(user_id, record) for record in records]
            )
            for record, (new_id, _) in zip(records, placed, strict=True):
                state.fact_ids[record["id"]] = new_id
            report.count(kind, sum(created for _, created in placed), len(records))
        elif kind == "fact_history":
            known = dict(state.fact_ids)
            done, known = await self._write_under_locks(
                plan, [], lambda tx: self._history(tx, user_id, records, dict(known))
            )
            state.fact_ids.update(known)
            report.count(kind, done, len(records))
        else:
            write = WRITES[kind]
            done = await self._write_under_locks(
                plan, records, lambda tx: sum(write(tx, user_id, record) for record in records)
            )
            report.count(kind, done, len(records))

    async def _write_under_locks(
        self, plan: Plan, records: list[dict[str, Any]], write: Callable[[Transaction], T]
    ) -> T:
        """`write` in a transaction holding the locks ingest's merge holds (on PostgreSQL: the
        sessions' it writes in, then the user's, shared), so a forget waits for it or it for the
        forget; a forget that committed since the import began stops it (forget is final)."""
        agents = sorted({record["agent_id"] for record in records if record.get("agent_id")})

        def run(tx: Transaction) -> T:
            for agent in agents:
                tx.restore.hold_session(agent)
            cutoffs = [tx.maintenance.forget_cutoff(plan.user_id, c) for c in sorted(plan.characters | {""})]
            newest = max((cutoff.at_ms for cutoff in cutoffs if cutoff is not None), default=None)
            if newest is not None and newest > (self.allowed_forget_ms or 0):
                raise Conflict(
                    f"user {plan.user_id!r} was forgotten at {format_datetime(newest)}, while it was being "
                    "imported: the rest was not written (what was written before is forgotten)"
                )
            return write(tx)

        return await self.store.write(run)

    @staticmethod
    def _messages(
        tx: Transaction, user_id: str, records: list[dict[str, Any]]
    ) -> tuple[dict[tuple[str, int], int], list[dict[str, Any]]]:
        """Insert the messages not held at their places; returns every one's id, and the new ones."""
        keys = [(record["agent_id"], record["seq"]) for record in records]
        held = tx.restore.held_messages(keys)
        new = [record for record in records if (record["agent_id"], record["seq"]) not in held]
        # The same place twice in one file: the first one is kept, as a second import would.
        unique = list({(record["agent_id"], record["seq"]): record for record in reversed(new)}.values())
        unique.reverse()
        tx.messages.insert([message_row(user_id, record) for record in unique])
        return (tx.restore.held_messages(keys) if unique else held), unique

    @staticmethod
    def _history(
        tx: Transaction, user_id: str, records: list[dict[str, Any]], known: dict[int, int]
    ) -> tuple[int, dict[int, int]]:
        """Insert the texts facts had; the history of a fact that ended (it is not in the export)
        takes an id no fact holds, or the one an earlier import gave it."""
        done = 0
        for record in records:
            held = tx.restore.version_held(user_id, record)
            if held is not None:
                known.setdefault(record["fact_id"], held)
                continue
            fact_id = known.get(record["fact_id"])
            if fact_id is None:
                fact_id = known[record["fact_id"]] = tx.restore.unused_fact_id()
            done += tx.restore.fact_version(user_id, fact_id, record)
        return done, known

    def _finish(self, tx: Transaction, plan: Plan, state: _State) -> int:
        """The summaries in the new ids; then what ingest would have scheduled for the new turns."""
        stored = 0
        for character, record in plan.summaries.items():
            if tx.restore.summary_held(plan.user_id, character):
                continue
            pair = state.pairs.get(character, PairIds())
            watermark = pair.watermark(record["watermark_id"])
            stored += tx.restore.summary({**record, "user_id": plan.user_id, "watermark_id": watermark})
        for character, pair in state.pairs.items():
            if not pair.new_turns:
                continue
            summary = tx.summaries.get(plan.user_id, character)
            waiting = tx.messages.count_after(plan.user_id, character, summary.watermark_id if summary else 0)
            if waiting:
                self.ingestor.schedule_condense(tx, plan.user_id, character, waiting, ended=True)
            if self.settings.embeddings_model:
                schedule_embedding(tx, plan.user_id, character, pair.new_turns)
        return stored


@dataclass
class _State:
    """What the writes learned so far: where each pair's messages landed, the facts' new ids."""

    pairs: dict[str, PairIds] = field(default_factory=dict)
    fact_ids: dict[int, int] = field(default_factory=dict)


def _before_its_fact(record: dict[str, Any], plan: Plan, state: _State) -> bool:
    """A fact's history read before its fact was written (later in the file, or in this batch)."""
    return record["fact_id"] in plan.fact_ids and record["fact_id"] not in state.fact_ids


WRITES: dict[str, Callable[[Transaction, str, dict[str, Any]], int]] = {
    "sessions": lambda tx, user_id, record: tx.restore.session(user_id, record),
    "bindings": lambda tx, user_id, record: tx.restore.binding(user_id, record),
    "channel_bindings": lambda tx, user_id, record: tx.restore.channel_binding(user_id, record),
    "metrics": lambda tx, _user_id, record: tx.restore.metric(record),
    "raw_callbacks": lambda tx, _user_id, record: tx.restore.raw_callback(record),
}


def text_source(body: bytes) -> Source:
    """A request's body as a source (decoded as it is read: a bad byte is named by its line)."""
    return lambda: io.TextIOWrapper(io.BytesIO(body), encoding="utf-8", newline="")


def file_source(path: str) -> Source:
    """A file as a source, opened anew for each pass."""
    return lambda: open(path, encoding="utf-8", newline="")  # closed by the caller's `with`
