"""Retention benchmark: purging a million-message database, and what it weighs before and after.

    python bench/retention.py [--total 1000000] [--keep 100] [--max-age-days 0] [--raw-days 7]

Takes the database bench/search.py builds (the same cache: conversations of 5,000 users in
English, Chinese and Korean, a summary per pair covering all but its last session, the raw
103 callback of every session in the inbox spread over 180 days), copies it, and runs one
`Retention.purge_once()` with the given settings as the service's scheduled job runs it:
covered messages beyond the latest `--keep` per pair, processed raw callbacks older than
`--raw-days`, then the search-index merge, the incremental vacuum and a checkpoint.

While it runs, a probe commits a one-row write every 20 ms through the same writer, to show
how long other writers (webhooks) wait behind the purge's batches. Then a second purge shows
the cost of a sweep with nothing to do. Prints the purge throughput and the database size
per million messages before and after. The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    db_size_bytes,
    fmt_ms,
    latency_summary,
    machine_info,
    print_machine,
    print_summary,
)
from search import REPO, ensure_database

sys.path.insert(0, str(REPO))
from agent_memory.memory.retention import BATCH_ROWS, PurgeReport, Retention
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store

PROBE_EVERY_S = 0.02


def counts(path: Path) -> dict[str, int]:
    """Row counts of the tables retention touches."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("messages", "inbox", "sessions", "summaries")
        }
    finally:
        conn.close()


async def purge_with_probe(store: Store, retention: Retention) -> tuple[PurgeReport, list[float]]:
    """Run the purge while a probe measures how long a small write waits."""
    waits: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await store.write(lambda tx: tx.bindings.bind_agent("probe-agent", "u-probe", "probe"))
            waits.append(time.perf_counter() - started)
            await asyncio.sleep(PROBE_EVERY_S)

    def progress(line: str) -> None:
        print(f"\r  {line:<60}", end="", flush=True)

    task = asyncio.ensure_future(probe())
    try:
        report = await retention.purge_once(progress)
    finally:
        done.set()
        await task
    print()
    return report, waits


async def run(path: Path, settings: Settings, batch: int) -> tuple[PurgeReport, list[float], PurgeReport]:
    """The purge with the probe, then a second purge with nothing left to do."""
    store = open_store(settings)
    try:
        retention = Retention(settings, store, batch_rows=batch)
        report, waits = await purge_with_probe(store, retention)
        again = await retention.purge_once()
    finally:
        store.close()
    return report, waits, again


def main() -> None:
    """Copy the cached database, purge it, print the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--total", type=int, default=1_000_000, help="messages in the database")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", type=int, default=100, help="retention_max_messages (0: off)")
    parser.add_argument("--max-age-days", type=float, default=0, help="retention_max_age_days (0: off)")
    parser.add_argument("--raw-days", type=float, default=7, help="raw_retention_days (0: keep)")
    parser.add_argument("--batch", type=int, default=BATCH_ROWS, help="rows per write transaction")
    args = parser.parse_args()
    info = machine_info()
    print_machine(info)
    source = ensure_database(args)
    with tempfile.TemporaryDirectory(dir=source.parent) as workdir:
        path = Path(workdir) / "retention.db"
        shutil.copyfile(source, path)
        before = {"bytes": db_size_bytes(path), **counts(path)}
        print(f"before: {before['bytes'] / 1e6:,.1f} MB, {before['messages']:,} messages, "
              f"{before['inbox']:,} raw callbacks, {before['summaries']:,} summaries")  # fmt: skip
        settings = Settings(db_path=path, retention_max_messages=args.keep,
                            retention_max_age_days=args.max_age_days, raw_retention_days=args.raw_days)  # fmt: skip
        print(f"purge: keep {args.keep} per pair, max age {args.max_age_days or 'off'} days, "
              f"raw callbacks {args.raw_days or 'kept'} days, {args.batch} rows per write")  # fmt: skip
        report, waits, again = asyncio.run(run(path, settings, args.batch))
        after = {"bytes": db_size_bytes(path), **counts(path)}
    phases = report.phase_seconds
    removed = report.messages + report.raw_callbacks + report.metrics
    figures = {
        "messages_removed": report.messages,
        "messages_per_s": round(report.messages / max(phases["messages"], 1e-9)),
        "raw_callbacks_removed": report.raw_callbacks,
        "raw_callbacks_per_s": round(report.raw_callbacks / max(phases["raw_callbacks"], 1e-9)),
        "rows_per_s_overall": round(removed / max(report.seconds, 1e-9)),
        "seconds": report.seconds,
        "phase_seconds": phases,
        "write_batches": report.write_batches,
        "index_merge_steps": report.search_index.merge_steps,
        "pages_freed": report.reclaimed.pages_freed,
        "mb_before": round(before["bytes"] / 1e6, 1),
        "mb_after": round(after["bytes"] / 1e6, 1),
        "mb_per_million_messages_before": round(before["bytes"] / 1e6 / (before["messages"] / 1e6), 1),
        "mb_per_million_ingested_after": round(after["bytes"] / 1e6 / (before["messages"] / 1e6), 1),
        "mb_per_million_stored_after": round(after["bytes"] / 1e6 / max(after["messages"] / 1e6, 1e-9), 1),
        "messages_after": after["messages"],
        "raw_callbacks_after": after["inbox"],
        "writer_wait_ms": latency_summary(waits),
        "noop_sweep_seconds": again.seconds,
    }
    print(f"removed {report.messages:,} messages ({figures['messages_per_s']:,}/s) and "
          f"{report.raw_callbacks:,} raw callbacks ({figures['raw_callbacks_per_s']:,}/s) "
          f"in {report.seconds:.1f} s in {report.write_batches} write batches")  # fmt: skip
    print("  phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
    print(f"  search index merged in {figures['index_merge_steps']} steps; {figures['pages_freed']:,} pages "
          f"given back")  # fmt: skip
    print(f"  a one-row write waited {fmt_ms(figures['writer_wait_ms'])} ({len(waits)} probes)")
    print(f"size: {figures['mb_before']:,} MB with {before['messages']:,} messages "
          f"({figures['mb_per_million_messages_before']} MB per million messages) -> "
          f"{figures['mb_after']:,} MB with {after['messages']:,} kept "
          f"({figures['mb_per_million_ingested_after']} MB per million ingested, "
          f"{figures['mb_per_million_stored_after']} MB per million stored)")  # fmt: skip
    print(f"a second sweep with nothing to remove took {again.seconds:.2f} s")
    print_summary({"bench": "retention", "machine": info, "settings": vars(args), "before": before,
                   "after": after, "results": figures})  # fmt: skip


if __name__ == "__main__":
    main()
