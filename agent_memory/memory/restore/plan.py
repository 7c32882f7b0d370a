"""The first pass over an export: every record checked, and what the writes need to know first."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import IO, Any

from agent_memory.memory.restore.reader import ExportReader, Piece, invalid
from agent_memory.memory.restore.records import NUL, RECORDS, checked

FORMAT_PREFIX = "agent-memory-export/"
READABLE_VERSIONS = ("1",)
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
