"""Before/after, side by side: one benchmark against this checkout's server and an earlier one's.

    python bench/compare.py --ref <commit> [--rounds 2] ingest.py --callbacks 4000 --concurrency 16

Checks out `--ref` into a temporary git worktree, then runs the named benchmark script of
*this* checkout `--rounds` times against each server, alternating (before, after, before,
after, ...) so that both see the same machine load. The benchmark starts whichever server
`BENCH_SERVER_REPO` names (bench/_common.py). Prints each run's summary, then, as its last
line, JSON with the median of each numeric figure for both and the after/before ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def last_json(output: str) -> dict[str, Any]:
    """The benchmark's summary: its last line that parses as a JSON object."""
    for line in reversed(output.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise SystemExit(f"the benchmark printed no JSON summary:\n{output[-2000:]}")


def run_once(script: list[str], server_repo: Path | None) -> dict[str, Any]:
    """One benchmark run; `server_repo` None means this checkout."""
    env = dict(os.environ)
    env.pop("BENCH_SERVER_REPO", None)
    if server_repo is not None:
        env["BENCH_SERVER_REPO"] = str(server_repo)
    done = subprocess.run(
        [sys.executable, str(BENCH / script[0]), *script[1:]],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"{script[0]} failed with exit code {done.returncode}")
    return last_json(done.stdout)


def numeric(summary: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The summary's numbers, nested keys joined with dots."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[name] = float(value)
        elif isinstance(value, dict) and key != "machine":
            out.update(numeric(value, f"{name}."))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", required=True, help="the earlier commit (the 'before')")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternating")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="benchmark file and its flags")
    args = parser.parse_args()
    if not args.script:
        parser.error("name a benchmark, e.g. ingest.py --callbacks 4000")
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="agent-memory-before-") as tmp:
        worktree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), args.ref],
            cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        try:
            for round_ in range(1, args.rounds + 1):
                for label, server in (("before", worktree), ("after", None)):
                    summary = run_once(args.script, server)
                    print(f"round {round_} {label}: {json.dumps(summary)}", flush=True)
                    runs[label].append(numeric(summary))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False)
    keys = sorted(set(runs["before"][0]) & set(runs["after"][0]))
    result: dict[str, Any] = {"benchmark": " ".join(args.script), "ref": args.ref,
                              "rounds": args.rounds}  # fmt: skip
    for key in keys:
        before = statistics.median(run[key] for run in runs["before"])
        after = statistics.median(run[key] for run in runs["after"])
        ratio = round(after / before, 3) if before else None
        result[key] = {"before": before, "after": after, "ratio": ratio}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
