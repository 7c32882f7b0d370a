"""A 103's write transaction on PostgreSQL alone (issue 28): CPU of the service and of the server per callback.

No HTTP and no background indexing: bench/ingest.py's signed 32-message callbacks are parsed
first, then applied one after another with `Ingestor.accept` in `PostgresStore.write_now` on a
throwaway cluster (fsync off: a commit's wait is not CPU). This process's CPU and the
postmaster's and its backends' are read around each round; the median round is reported, and
the queries the service sent per callback (`statements_per_callback`: each query one round trip,
COPY two; statements kept for the next round trip go in one query with it). `--drop "DROP INDEX messages_trgm"` measures what
a piece of the schema costs. The store is `BENCH_SERVER_REPO`'s when set (bench/compare.py).

    python bench/pg_ingest_tx.py [--callbacks 400] [--rounds 3] [--drop SQL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
# The store measured: BENCH_SERVER_REPO's (bench/compare.py's "before"), else this checkout's;
# imported before bench/ingest.py, which puts this checkout first on the path.
sys.path.insert(0, os.environ.get("BENCH_SERVER_REPO") or str(Path(__file__).resolve().parent.parent))
from postgres_server import PostgresCluster

from agent_memory.memory.ingest import Ingestor
from agent_memory.platforms.agora.events import parse_callback
from agent_memory.settings import Settings
from agent_memory.store.postgres import PostgresStore, common

sys.path.insert(1, str(Path(__file__).resolve().parent))
from _common import print_summary
from ingest import make_callbacks, tree_cpu_seconds


def counting(sent: list[int]) -> None:
    """Count every statement a cursor sends (COPY and transaction control included)."""
    execute, copy = psycopg.Cursor.execute, psycopg.Cursor.copy
    command = psycopg.Connection._exec_command

    def noted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return execute(self, *args, **kwargs)

    def noted_copy(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return copy(self, *args, **kwargs)

    def noted_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return command(self, *args, **kwargs)

    # A query with a COPY's rows in it (store/postgres/common.py) is sent by the store itself.
    with_rows = getattr(common, "_sent_with_rows", None)
    if with_rows is not None:

        def noted_rows(*args: Any) -> Any:
            sent[0] += 1
            return with_rows(*args)

        common._sent_with_rows = noted_rows
    psycopg.Cursor.execute = noted_execute  # type: ignore[method-assign]
    psycopg.Cursor.copy = noted_copy  # type: ignore[method-assign]
    psycopg.Connection._exec_command = noted_command  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callbacks", type=int, default=400, help="callbacks per round (each a new run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drop", default="", help="SQL run on the fresh database first (';'-separated)")
    args = parser.parse_args()
    cluster = PostgresCluster().start()
    try:
        url = cluster.database()
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in filter(None, (part.strip() for part in args.drop.split(";"))):
                conn.execute(statement.encode())
        store = PostgresStore(url, index=False)
        store.open()
        settings = Settings(
            db_path=url, summary_delay_s=3600, summary_after_call_s=3600, summary_max_messages=10**8
        )
        ingestor = Ingestor(settings)
        sent = [0]
        counting(sent)
        service, server, statements = [], [], []
        for round_ in range(args.rounds):
            callbacks = make_callbacks(
                args.callbacks, 32, prefix=f"r{round_}", seed=round_ + 1, pairs=args.callbacks
            )
            parsed = [parse_callback(body, 1_763_000_000_000, follow=False) for _, body, _ in callbacks]
            sent[0] = 0
            server_before, service_before = tree_cpu_seconds([cluster.pid()]), time.process_time()
            for raw, event in parsed:
                outcome = store.write_now(lambda tx, raw=raw, event=event: ingestor.accept(tx, raw, event))
                assert outcome.status == "done", outcome
            service.append((time.process_time() - service_before) / args.callbacks * 1e3)
            server.append((tree_cpu_seconds([cluster.pid()]) - server_before) / args.callbacks * 1e3)
            statements.append(sent[0] / args.callbacks)
            print(f"round {round_ + 1}: service {service[-1]:.3f} ms, PostgreSQL {server[-1]:.3f} ms CPU "
                  f"per callback, {statements[-1]:.2f} queries (round trips)", flush=True)  # fmt: skip
        store.close()
    finally:
        cluster.stop()
    summary = {
        "bench": "pg_ingest_tx",
        "callbacks": args.callbacks,
        "service_cpu_ms_per_callback": round(statistics.median(service), 3),
        "database_cpu_ms_per_callback": round(statistics.median(server), 3),
        "total_cpu_ms_per_callback": round(
            statistics.median(s + p for s, p in zip(service, server, strict=True)), 3
        ),
        "statements_per_callback": round(statistics.median(statements), 2),
    }
    print_summary(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
