"""`agent-memory import` of a large export, and `agent-memory backup` of what it wrote (issue 27).

    python bench/import_export.py [--messages 200000]

Writes two exports of one user (a tenth of `--messages`, and all of them; 100 messages a call),
imports each with the real command into a new SQLite database in its own process, and prints the
file size, the time, and the process's peak memory (ru_maxrss): the import reads the file as a
stream, so its peak memory should not grow with the file. Then backs the larger database up
with `agent-memory backup` and prints how long that took. Last line: a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_CALL = 100
ROOT = Path(__file__).resolve().parent.parent


def write_export(path: Path, messages: int) -> None:
    """An export of `messages` messages (one user, one character), written as it is generated."""
    calls = max(1, messages // PER_CALL)
    start = 1_793_000_000_000
    with path.open("w", encoding="utf-8") as out:
        head = {
            "format": "agent-memory-export/1",
            "exported_ms": 1_795_000_000_000,
            "user_id": "u-bench",
            "characters": ["luna"],
            "counts": {"sessions": calls, "messages": calls * PER_CALL, "facts": 0, "summaries": 0},
        }
        out.write(json.dumps(head, indent=2)[:-2] + ',\n  "sessions": [\n')
        for call in range(calls):
            session = {
                "agent_id": f"BENCH-{call:06d}",
                "user_id": "u-bench",
                "character_id": "luna",
                "identity_source": "labels",
                "status": "stopped",
                "start_ms": start + call * 3_600_000,
                "message_count": PER_CALL,
            }
            out.write(("    " if call == 0 else ",\n    ") + json.dumps(session))
        out.write('\n  ],\n  "messages": [\n')
        number = 0
        for call in range(calls):
            for seq in range(PER_CALL):
                number += 1
                message = {
                    "id": number,
                    "agent_id": f"BENCH-{call:06d}",
                    "character_id": "luna",
                    "seq": seq,
                    "role": ("user", "assistant")[seq % 2],
                    "kind": "turn",
                    "content": f"call {call} turn {seq}: my cat Miso knocked the plant over again, number {number}",
                    "turn_id": seq // 2 + 1,
                    "ts_ms": start + call * 3_600_000 + seq * 5_000,
                    "at_ms": start + call * 3_600_000 + seq * 5_000,
                    "interrupted": False,
                    "gap_before": False,
                }
                out.write(("    " if number == 1 else ",\n    ") + json.dumps(message, ensure_ascii=False))
        out.write('\n  ],\n  "facts": [],\n  "summaries": []\n}\n')


def run(command: list[str]) -> tuple[float, int, str]:
    """Seconds, peak RSS (KiB) of the command's process, and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    # RUSAGE_CHILDREN's maxrss is the largest child's so far: run the smaller file first.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, max(peak, before), done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        for label, count in (("small", args.messages // 10), ("large", args.messages)):
            export = base / f"{label}.json"
            write_export(export, count)
            db = base / f"{label}.db"
            cli = [sys.executable, "-m", "agent_memory.cli"]
            seconds, peak_kib, _ = run([*cli, "import", str(export), "--db", str(db)])
            size_mb = export.stat().st_size / 1e6
            print(
                f"import {count:,} messages ({size_mb:.0f} MB file): {seconds:.1f} s, "
                f"{count / seconds:,.0f} messages/s, peak RSS {peak_kib / 1024:.0f} MiB"
            )
            results[label] = {
                "messages": count,
                "file_mb": round(size_mb, 1),
                "seconds": round(seconds, 1),
                "peak_rss_mib": round(peak_kib / 1024),
            }
        copy = base / "copy.db"
        seconds, _, err = run([*cli, "backup", str(copy), "--db", str(base / "large.db")])
        print(f"backup of the large database ({copy.stat().st_size / 1e6:.0f} MB): {seconds:.1f} s")
        print(err.strip().splitlines()[-1])
        results["backup_seconds"] = round(seconds, 1)
        results["backup_mb"] = round(copy.stat().st_size / 1e6)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
