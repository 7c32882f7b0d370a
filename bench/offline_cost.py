"""The offline condenser alone: CPU per job and a hash of everything it wrote, on the benchmark sets.

    python bench/offline_cost.py [--sets hard,recall,ingest] [--profile 30] [--rounds 1] [--tokenizer estimate]
    python bench/offline_cost.py --ref <commit> [--sets ...]

Each pair of each set is condensed session by session in this process, as the condense worker
would (the previous summary and the facts added so far go into the next job); every summary,
added fact and shortened summary (`shorten_summary` at a few budgets) goes into one SHA-256 per
set. A cut that keeps the condenser's output byte-identical leaves the hashes as they were.
`hard` and `recall` are bench/recall_hard.py's and bench/recall.py's users; `ingest` is
bench/ingest.py's load (one job of 64 messages, two 32-message runs, per pair). `--profile N`
prints cProfile's N dearest functions of the condensing (not of the hashing).

`--ref <commit>`: that commit's `agent_memory` (from `git archive`, renamed so both import) and
this checkout's condense every job in turn in this one process, alternating which goes first,
so that both see the same machine load: CPU per job of each, their ratio, and how many jobs'
outputs (summary, facts, shortened summaries) differ. On a loaded machine this ratio holds
where separate runs vary by a third.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import importlib
import json
import pstats
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_data
import recall_hard_data
from _common import make_contents

from agent_memory.condense.base import CondenseInput, FactIn
from agent_memory.condense.offline import condense_offline, shorten_summary
from agent_memory.core.domain import Message
from agent_memory.core.textcache import forget_texts
from agent_memory.core.tokens import count_tokens

BUDGETS = (150, 300, 600)
Pair = tuple[str, str, list[list[dict[str, Any]]]]  # user, character, each job's contents


def messages(user: str, character: str, contents: Sequence[dict[str, Any]], agent: str) -> list[Message]:
    """A run's contents as the store gives them to a job."""
    start = min(item["timestamp"] for item in contents)
    return [
        Message(
            id=index,
            agent_id=item.get("agent_id", agent),
            user_id=user,
            character_id=character,
            seq=index,
            role=item["role"],
            kind="turn",
            content=item["content"],
            turn_id=item.get("turn_id"),
            ts_ms=item["timestamp"],
            at_ms=start,
            source=item.get("metadata", {}).get("source"),
            speaker=None,
            interrupted=False,
            interrupt_ms=None,
            original=None,
            gap_before=False,
        )
        for index, item in enumerate(contents)
    ]


def recall_pairs(users: Sequence[Any]) -> Iterator[Pair]:
    """A recall benchmark's users: one job per session."""
    for user in users:
        jobs = [[{**item, "agent_id": s["agent_id"]} for item in s["contents"]] for s in user.sessions]
        yield user.user_id, user.character_id, jobs


def ingest_pairs(pairs: int, seed: int = 3) -> Iterator[Pair]:
    """bench/ingest.py's load: per pair two 32-message runs, condensed in one job."""
    rng = random.Random(seed)
    for index in range(pairs):
        runs = []
        for run in range(2):
            start = 1_763_000_000_000 + (index * 2 + run) * 60_000
            contents = make_contents(rng, 32, start, str(1000 + index))
            runs += [{**item, "agent_id": f"a-{index}-{run}"} for item in contents]
        yield f"u-{index}", "luna", [runs]


def pairs_of(name: str, ingest: int) -> list[Pair]:
    if name == "hard":
        return list(recall_pairs(recall_hard_data.generate()))
    if name == "recall":
        return list(recall_pairs(recall_data.generate()))
    return list(ingest_pairs(ingest))


def run_set(pairs: Sequence[Pair], profile: cProfile.Profile | None) -> dict[str, Any]:
    """Condense every pair's jobs in order; the CPU of the condensing and the hash of its output."""
    digest = hashlib.sha256()
    cpu = 0.0
    jobs = 0
    for user, character, contents in pairs:
        summary: str | None = None
        facts: list[FactIn] = []
        for number, items in enumerate(contents):
            job = CondenseInput(
                user_id=user, character_id=character, previous_summary=summary, facts=list(facts),
                messages=messages(user, character, items, f"{user}-{number}"),
            )  # fmt: skip
            if profile is not None:
                profile.enable()
            started = time.process_time()
            output = condense_offline(job)
            cpu += time.process_time() - started
            if profile is not None:
                profile.disable()
            jobs += 1
            summary = output.summary
            for fact in output.add_facts:
                facts.append(FactIn(id=len(facts) + 1, text=fact.text, scope=fact.scope))
            digest.update(json.dumps(output.model_dump(), ensure_ascii=False, sort_keys=True).encode())
            for budget in BUDGETS:
                digest.update(repr(shorten_summary(summary, budget)).encode())
    return {"jobs": jobs, "cpu_ms_per_job": round(cpu * 1000 / max(jobs, 1), 3), "sha256": digest.hexdigest()}


def ref_package(commit: str, into: Path) -> str:
    """`agent_memory` as of `commit`, importable as `agent_memory_ref` from `into`."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "archive", commit, "agent_memory"], cwd=repo, check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "agent_memory").rename(into / "agent_memory_ref")
    for path in (into / "agent_memory_ref").rglob("*.py"):
        path.write_text(re.sub(r"\bagent_memory\b", "agent_memory_ref", path.read_text()))
    sys.path.insert(0, str(into))
    return "agent_memory_ref"


def side_by_side(name: str, pairs: Sequence[Pair], ref: str) -> dict[str, Any]:
    """Every job condensed by the ref's condenser and this one, in turn; CPU of each, outputs compared."""
    base = importlib.import_module(f"{ref}.condense.base")
    ref_offline = importlib.import_module(f"{ref}.condense.offline")
    ref_message = importlib.import_module(f"{ref}.core.domain").Message
    cpu = {"ref": 0.0, "this": 0.0}
    jobs = differing = 0
    for user, character, contents in pairs:
        summary: str | None = None
        facts: list[FactIn] = []
        for number, items in enumerate(contents):
            said = messages(user, character, items, f"{user}-{number}")
            job = CondenseInput(
                user_id=user,
                character_id=character,
                previous_summary=summary,
                facts=list(facts),
                messages=said,
            )
            ref_job = base.CondenseInput(
                user_id=user, character_id=character, previous_summary=summary,
                facts=[base.FactIn(**fact.model_dump()) for fact in facts],
                messages=[ref_message(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)}) for m in said],
            )  # fmt: skip
            runs = [("ref", ref_offline.condense_offline, ref_job), ("this", condense_offline, job)]
            outputs = {}
            for side, condense, given in runs if jobs % 2 else runs[::-1]:
                started = time.process_time()
                outputs[side] = condense(given)
                cpu[side] += time.process_time() - started
            jobs += 1
            summary = outputs["this"].summary
            shortened = [shorten_summary(summary, budget) for budget in BUDGETS]
            ref_shortened = [
                ref_offline.shorten_summary(outputs["ref"].summary, budget) for budget in BUDGETS
            ]
            differing += (
                outputs["this"].model_dump() != outputs["ref"].model_dump() or shortened != ref_shortened
            )
            for fact in outputs["this"].add_facts:
                facts.append(FactIn(id=len(facts) + 1, text=fact.text, scope=fact.scope))
    ref_ms, this_ms = (round(cpu[side] * 1000 / max(jobs, 1), 3) for side in ("ref", "this"))
    print(f"{name:>7}: {jobs:>5} jobs, ref {ref_ms:7.3f} ms, this {this_ms:7.3f} ms CPU per job "
          f"({ref_ms / this_ms:.2f}x), {differing} differing outputs")  # fmt: skip
    return {"jobs": jobs, "ref_ms_per_job": ref_ms, "this_ms_per_job": this_ms, "differing": differing}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="hard,recall,ingest")
    parser.add_argument("--ingest-pairs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1, help="rounds per set (caches emptied between)")
    parser.add_argument("--profile", type=int, default=0, help="print this many of cProfile's dearest")
    parser.add_argument(
        "--tokenizer", default="o200k_base", help="as the service tells its workers; or estimate"
    )
    parser.add_argument("--ref", help="side by side with this commit's condenser, in this process")
    args = parser.parse_args()
    workdir = tempfile.TemporaryDirectory(prefix="offline-ref-")
    ref = ref_package(args.ref, Path(workdir.name)) if args.ref else None
    if args.tokenizer != "estimate":
        from agent_memory.memory.tokenizer import use_tokenizer

        use_tokenizer(args.tokenizer)
        count_tokens("loaded before the clock starts")
        if ref:
            importlib.import_module(f"{ref}.memory.tokenizer").use_tokenizer(args.tokenizer)
            importlib.import_module(f"{ref}.core.tokens").count_tokens("loaded before the clock starts")
    results: dict[str, Any] = {}
    for name in args.sets.split(","):
        pairs = pairs_of(name, args.ingest_pairs)
        if ref:
            results[name] = side_by_side(name, pairs, ref)
            continue
        profile = cProfile.Profile() if args.profile else None
        rounds = []
        for _ in range(args.rounds):
            forget_texts()  # each round starts as a fresh worker process would
            rounds.append(run_set(pairs, profile))
        assert len({r["sha256"] for r in rounds}) == 1, "the condenser's output changed between rounds"
        results[name] = {**rounds[0], "cpu_ms_per_job": min(r["cpu_ms_per_job"] for r in rounds)}
        print(f"{name:>7}: {results[name]['jobs']:>5} jobs, {results[name]['cpu_ms_per_job']:7.3f} ms CPU per job,"
              f" sha256 {results[name]['sha256'][:16]}")  # fmt: skip
        if profile is not None:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
