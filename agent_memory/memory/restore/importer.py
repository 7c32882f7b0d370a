"""The second pass over an export: its records written in short transactions, in the new database's ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_memory.core.alignment import canonical, fingerprint
from agent_memory.core.clock import format_datetime
from agent_memory.core.events import TURN
from agent_memory.errors import Conflict
from agent_memory.memory.embedding import schedule_embedding
from agent_memory.memory.jobs import schedule_condense
from agent_memory.memory.restore.plan import Plan, scan
from agent_memory.memory.restore.reader import ExportReader, Source
from agent_memory.memory.restore.records import NOT_RESTORED, RECORDS, checked
from agent_memory.settings import Settings
from agent_memory.store import Store
from agent_memory.store.protocols import ReadView, Transaction
from agent_memory.store.types import NewMessage

T = TypeVar("T")
# Records written per transaction: short enough not to hold the writer long.
BATCH = 1000
# A tool call's or result's fields, kept in `extra` by ingest: what its fingerprint adds.
TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")


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
        self.allowed_forget_ms: int | None = None

    async def run(self) -> ImportReport:
        """Check the whole export, refuse a forgotten user unless forced, then restore it."""
        with self.source() as stream:
            plan = scan(stream)
        report = ImportReport(plan.user_id, sorted(plan.characters))
        report.not_restored = {kind: plan.seen[kind] for kind in NOT_RESTORED if plan.seen.get(kind)}
        report.forgotten_ms = await self.store.read(lambda view: self._forgotten(view, plan))
        # A forget in the export's own millisecond may have come after it: a forget is final, so
        # the tie counts as after (the user can force an import it refuses).
        if report.forgotten_ms is not None and (
            plan.exported_ms is None or report.forgotten_ms >= plan.exported_ms
        ):
            if not self.force:
                taken = (
                    "at an unknown time" if plan.exported_ms is None else format_datetime(plan.exported_ms)
                )
                raise Conflict(
                    f"user {plan.user_id!r} was forgotten at {format_datetime(report.forgotten_ms)} "
                    f"(forgot_ms {report.forgotten_ms}), after or as this export was taken ({taken}): importing "
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
                schedule_condense(tx, self.settings, plan.user_id, character, waiting, ended=True)
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
