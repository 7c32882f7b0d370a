"""The recall queue's drain on PostgreSQL (issue 23, item 11): EXPLAIN ANALYZE of the old and new statement.

A throwaway cluster; the queue is vacuumed and analysed while it holds 3 ids (as autovacuum may
leave it between bursts), then filled to `--queued` ids. Each statement takes `--take` ids, once
as a generic plan cached while the queue was small (what a prepared statement on a pooled
connection can keep) and once planned afresh (how the drain runs now), in a transaction rolled back.

    python bench/pg_drain.py [--queued 35000] [--take 500]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresCluster

STATEMENTS = {
    "old": "DELETE FROM recall_pending WHERE id IN (SELECT id FROM recall_pending ORDER BY id "
    "LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id",
    "new": "WITH picked AS MATERIALIZED (SELECT id FROM recall_pending ORDER BY id LIMIT $1 "
    "FOR UPDATE SKIP LOCKED) DELETE FROM recall_pending p USING picked WHERE p.id = picked.id RETURNING p.id",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=35_000)
    parser.add_argument("--take", type=int, default=500)
    args = parser.parse_args()
    cluster = PostgresCluster().start()
    figures: dict[str, float] = {}
    try:
        with psycopg.connect(cluster.database(), autocommit=True, prepare_threshold=None) as conn:
            conn.execute(b"ALTER TABLE recall_pending SET (autovacuum_enabled = off)")
            for name, statement in STATEMENTS.items():
                for mode in ("force_generic_plan", "force_custom_plan"):
                    conn.execute(b"TRUNCATE recall_pending")
                    conn.execute(b"INSERT INTO recall_pending VALUES (1), (2), (3)")
                    conn.execute(b"VACUUM ANALYZE recall_pending")
                    conn.execute(f"SET plan_cache_mode = {mode}".encode())
                    conn.execute(f"PREPARE drain(int) AS {statement}".encode())
                    conn.execute(f"EXPLAIN EXECUTE drain({args.take:d})".encode())  # the plan is made now
                    conn.execute(
                        b"INSERT INTO recall_pending SELECT g FROM generate_series(10, %s) g",
                        (args.queued + 6,),
                    )
                    with conn.transaction():
                        started = time.perf_counter()
                        plan = conn.execute(
                            f"EXPLAIN ANALYZE EXECUTE drain({args.take:d})".encode()
                        ).fetchall()
                        elapsed = time.perf_counter() - started
                        label = f"{name} {'cached generic plan' if 'generic' in mode else 'planned afresh'}"
                        figures[label] = round(elapsed * 1000, 1)
                        print(
                            f"--- {label}: {elapsed * 1000:.1f} ms to take {args.take} of {args.queued + 3}"
                        )
                        print("\n".join(str(row[0]) for row in plan))
                        raise psycopg.Rollback()
                    conn.execute(b"DEALLOCATE drain")
    finally:
        cluster.stop()
    print(json.dumps({"bench": "pg_drain", "queued": args.queued, "take": args.take, "ms": figures}))


if __name__ == "__main__":
    main()
