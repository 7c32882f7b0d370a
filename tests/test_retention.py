"""Retention and forgetting against real SQLite files and PostgreSQL databases: the watermark
rule, age and count limits, raw-callback expiry, bounded batches, space given back, the
schedule, and forgets that leave no byte of the forgotten text in the database files."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import agent_event, condense, integrity_check, on_disk, seed, wait_for
from psycopg.rows import dict_row

import agent_memory.store.postgres.maintenance as pg_maintenance
import agent_memory.store.sqlite.maintenance as maintenance
from agent_memory.cli import main
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import InboxEntry, Message, Summary
from agent_memory.memory.retention import DAY_MS, Retention
from agent_memory.settings import Settings
from agent_memory.store import Store, open_store
from agent_memory.web.keys import RETENTION

pytestmark = pytest.mark.postgres

NO_SWEEP = {"job_sweep_s": 3600}


def lines(count: int, *, start_ms: int, prefix: str = "line", size: int = 0) -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages one second apart from `start_ms`."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{prefix} {i} " + "x" * size,
         "turn_id": i // 2 + 1, "timestamp": start_ms + i * 1000}
        for i in range(count)
    ]  # fmt: skip


async def held(store: Store, user: str, character: str) -> list[Message]:
    """The pair's spoken turns the store still holds, oldest first."""
    return await store.read(lambda view: view.messages.latest(user, character, 100_000))


def summary(user: str, character: str, text: str, watermark_id: int) -> Summary:
    return Summary(user_id=user, character_id=character, text=text, watermark_id=watermark_id,
                   covered_until_ms=0, message_count=0, method="offline", model="test",
                   created_ms=1, updated_ms=now_ms())  # fmt: skip


async def cover(store: Store, user: str, character: str, watermark_id: int) -> None:
    """Commit a summary that covers every message of the pair with id <= `watermark_id`."""
    row = summary(user, character, f"summary up to {watermark_id}", watermark_id)
    await store.write(lambda tx: tx.summaries.put(row))


# The purge report's JSON, as the CLI and `POST /v1/admin/purge` print it (`warning` only
# when the database keeps freed space to itself).
PURGE_KEYS = [
    "settings", "messages", "metrics", "raw_callbacks", "write_batches", "phase_seconds",
    "search_index", "reclaimed", "bytes_before", "bytes_after", "seconds",
]  # fmt: skip
RECLAIMED_KEYS = ["pages_freed", "checkpoint_busy", "wal_pages", "wal_pages_checkpointed"]


async def purge(service: Any) -> dict[str, Any]:
    status, report = await service.api("POST", "/v1/admin/purge")
    assert status == 200, report
    assert [key for key in report if key != "warning"] == PURGE_KEYS
    assert list(report["settings"]) == [
        "retention_max_messages",
        "retention_max_age_days",
        "raw_retention_days",
    ]
    assert list(report["search_index"]) == ["merged", "merge_steps", "owed_forgets", "dead_rows"]
    assert list(report["reclaimed"]) == RECLAIMED_KEYS
    return report


# the watermark rule and the limits


async def test_uncovered_messages_stay_over_the_limit_and_go_once_covered(start_service) -> None:
    service = await start_service(retention_max_messages=5, raw_retention_days=0)
    await seed(service, "u-r", "luna", "AGENT-R1", lines(20, start_ms=now_ms() - 60_000))
    report = await purge(service)
    assert report["messages"] == 0
    rows = await held(service.store, "u-r", "luna")
    assert len(rows) == 20  # over the limit, but no summary covers any of them
    await cover(service.store, "u-r", "luna", rows[11].id)  # the oldest 12
    assert (await purge(service))["messages"] == 12
    kept = await held(service.store, "u-r", "luna")
    assert [r.content for r in kept] == [r.content for r in rows[12:]]  # 8: 3 not covered
    await cover(service.store, "u-r", "luna", rows[-1].id)
    assert (await purge(service))["messages"] == 3
    assert [r.content for r in await held(service.store, "u-r", "luna")] == [r.content for r in rows[15:]]
    assert (await purge(service))["messages"] == 0
    await integrity_check(service.store)
    # What went is gone from search too; what stayed is found.
    status, found = await service.api("GET", "/v1/users/u-r/search", params={"q": "line 3 "})
    assert status == 200, found
    texts = [r["text"] for r in found["results"]]
    assert rows[3].content not in texts and set(texts) <= {r.content for r in rows[15:]}
    _status, found = await service.api("GET", "/v1/users/u-r/search", params={"q": "line 19"})
    assert found["results"][0]["text"] == rows[19].content


async def test_condensed_messages_are_purged_down_to_the_limit(start_service) -> None:
    service = await start_service(retention_max_messages=4, summary_delay_s=0, **NO_SWEEP)
    await seed(service, "u-c", "luna", "AGENT-C1", lines(12, start_ms=now_ms() - 60_000))
    await condense(service)
    condensed = await service.store.read(lambda view: view.summaries.get("u-c", "luna"))
    assert condensed is not None and condensed.method == "offline"
    report = await purge(service)
    assert report["messages"] == 8
    assert len(await held(service.store, "u-c", "luna")) == 4
    # A new call: the old covered messages are no longer among the latest 4 and go; the new
    # ones are not covered until condensed, so all 6 stay, whatever the limit says.
    await seed(service, "u-c", "luna", "AGENT-C2", lines(6, start_ms=now_ms(), prefix="new"))
    assert (await purge(service))["messages"] == 4
    assert [r.content.split()[0] for r in await held(service.store, "u-c", "luna")] == ["new"] * 6
    _status, _ = await service.api("POST", "/v1/users/u-c/characters/luna/condense")
    await condense(service)
    assert (await purge(service))["messages"] == 2
    assert [r.content.split()[0] for r in await held(service.store, "u-c", "luna")] == ["new"] * 4


async def test_age_limit_removes_only_old_covered_messages(start_service) -> None:
    service = await start_service(retention_max_age_days=30, raw_retention_days=0)
    old, young = now_ms() - 40 * DAY_MS, now_ms() - DAY_MS
    await seed(service, "u-a", "luna", "AGENT-A1", lines(6, start_ms=old, prefix="old"))
    await seed(service, "u-a", "luna", "AGENT-A2", lines(4, start_ms=young, prefix="young"))
    rows = await held(service.store, "u-a", "luna")
    await cover(service.store, "u-a", "luna", max(r.id for r in rows))
    # Late-arriving old messages are above the watermark: not covered, so they stay.
    await seed(service, "u-a", "luna", "AGENT-A3", lines(2, start_ms=old, prefix="late"))
    report = await purge(service)
    assert report["messages"] == 6
    left = sorted(r.content.split()[0] for r in await held(service.store, "u-a", "luna"))
    assert left == ["late"] * 2 + ["young"] * 4


async def test_other_pairs_and_both_limits_together(start_service) -> None:
    service = await start_service(retention_max_messages=3, retention_max_age_days=10)
    start = now_ms() - 20 * DAY_MS
    for user in ("u-p", "u-q"):
        await seed(service, user, "luna", f"AGENT-{user}", lines(8, start_ms=start, prefix=user))
    await seed(service, "u-p", "atlas", "AGENT-p-atlas", lines(8, start_ms=now_ms() - 60_000))
    for user, character in (("u-p", "luna"), ("u-p", "atlas")):
        rows = await held(service.store, user, character)
        await cover(service.store, user, character, max(r.id for r in rows))
    assert (await purge(service))["messages"] == 8 + 5  # old luna: all; young atlas: beyond 3
    assert len(await held(service.store, "u-p", "luna")) == 0
    assert len(await held(service.store, "u-p", "atlas")) == 3
    assert len(await held(service.store, "u-q", "luna")) == 8  # no summary: untouched


async def test_raw_callbacks_expire_once_processed(start_service) -> None:
    service = await start_service(raw_retention_days=7)
    old, young = now_ms() - 8 * DAY_MS, now_ms() - DAY_MS
    rows = [
        (f"{status}-{age}", status, stamp)
        for status in ("done", "ignored", "test", "forgotten", "received", "failed")
        for age, stamp in (("old", old), ("young", young))
    ]

    def insert(tx: Any) -> None:
        for notice_id, status, stamp in rows:
            tx.inbox.insert(InboxEntry(event_id=notice_id, event_type=103, received_ms=stamp,
                                       body='{"secret": "raw text"}', status=status))  # fmt: skip

    await service.store.write(insert)
    report = await purge(service)
    assert report["raw_callbacks"] == 4
    left = {n for n, _, _ in rows if await service.store.read(lambda v, n=n: v.inbox.get(n))}
    assert left == {n for n, status, _ in rows if n.endswith("young") or status in ("received", "failed")}


async def test_purge_in_small_batches_and_space_is_given_back(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "batches.db", retention_max_messages=2)
    store = open_store(settings)
    try:
        rows = [
            {"agent_id": f"A{p}", "user_id": f"u{p}", "character_id": "luna", "seq": i,
             "role": "user", "content": f"pair {p} message {i} " + "y" * 2000,
             "at_ms": 1_000 + i, "created_ms": 1}
            for p in range(3) for i in range(30)
        ]  # fmt: skip
        await store.write(lambda tx: tx.messages.insert(rows))
        for p in range(3):
            top = await store.read(lambda v, p=p: max(m.id for m in v.messages.latest(f"u{p}", "luna", 100)))
            await cover(store, f"u{p}", "luna", top)
        await store.checkpoint()
        before = await store.read(lambda view: view.maintenance.storage_stats())
        report = await Retention(settings, store, batch_rows=7).purge_once()
        assert report.messages == 3 * 28
        assert report.write_batches >= 3 * 28 // 7
        for p in range(3):
            kept = await store.read(lambda v, p=p: v.messages.latest(f"u{p}", "luna", 100))
            assert [m.seq for m in kept] == [28, 29]
        after = await store.read(lambda view: view.maintenance.storage_stats())
        assert after.get("freelist_count") == 0 and after.get("auto_vacuum") == 2
        assert after["advice"] is None
        assert report.reclaimed.pages_freed > 0
        assert report.bytes_after < before["bytes"] / 2
        assert settings.db_path.stat().st_size == after["bytes"]
    finally:
        store.close()


async def test_the_purge_runs_on_its_schedule(start_service) -> None:
    service = await start_service(retention_max_messages=2, retention_sweep_s=0.2)
    await seed(service, "u-s", "luna", "AGENT-S1", lines(6, start_ms=now_ms() - 60_000))
    rows = await held(service.store, "u-s", "luna")
    await cover(service.store, "u-s", "luna", rows[-1].id)
    retention = service.server.app[RETENTION]
    await wait_for(
        lambda: retention.last_report is not None and retention.last_report.messages != 0,
        10,
        failure="the scheduled purge did not run",
    )
    assert len(await held(service.store, "u-s", "luna")) == 2


async def test_cli_purge_prints_what_it_removed(start_service, capsys) -> None:
    service = await start_service()
    await seed(service, "u-cli", "luna", "AGENT-CLI", lines(10, start_ms=now_ms() - 60_000))
    rows = await held(service.store, "u-cli", "luna")
    await cover(service.store, "u-cli", "luna", rows[-1].id)
    db = service.settings.postgres_url or str(service.settings.db_path)
    assert await asyncio.to_thread(main, ["purge", "--db", db, "--max-messages", "3"]) == 0
    out = capsys.readouterr().out
    assert "removed 7 messages, 0 metrics, 0 raw callbacks" in out and "bytes" in out
    assert await asyncio.to_thread(main, ["purge", "--db", db, "--max-messages", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["messages"] == 0
    assert list(printed) == PURGE_KEYS and list(printed["reclaimed"]) == RECLAIMED_KEYS


# forgetting

MARKERS = {
    "english": "Qwxvjzkyzbqfzvqxjw",
    "chinese": "紫鳶獨角獸暗號甲乙丙",
    "korean": "뷁퉯쀍뤣쉛",
}
CONTROL = "Plain control sentence kept for the other user"
# An image shown with a turn: its URL is user data too (stored beside the turn, never its text).
IMAGE_URL = "https://photos.example.test/Zqvxwjkq-holiday-snapshot.jpg"


def trigrams(text: str) -> set[bytes]:
    """What a trigram index stores of `text`: three-character pieces, case-folded."""
    folded = text.lower()
    return {folded[i : i + 3].encode() for i in range(len(folded) - 2)}


async def remember_secrets(service: Any, user: str) -> None:
    secret_lines = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"My code word is {MARKERS['english']}"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            ],
            "turn_id": 1,
        },
        {"role": "assistant", "content": f"记住了:{MARKERS['chinese']}", "turn_id": 1},
        {"role": "user", "content": f"한국어로는 {MARKERS['korean']}", "turn_id": 2},
    ]
    labels = {"user_id": user, "character_id": "luna"}
    for event_type in (101, 103):
        payload: dict[str, Any] = {"contents": secret_lines} if event_type == 103 else {}
        status, _ = await service.callback(agent_event(event_type, "AGENT-SECRET", labels=labels, **payload))
        assert status == 200
    status, _ = await service.callback(
        agent_event(111, "AGENT-SECRET", labels=labels, metrics=[{"turn_id": 1, "llm_ttfb": 300}])
    )
    status, body = await service.api(
        "POST", f"/v1/users/{user}/characters/luna/facts",
        json={"text": f"Code word {MARKERS['english']}", "scope": "user"},
    )  # fmt: skip
    assert status == 201
    # A fact's earlier text is kept as its history: forget must reach it too.
    status, body = await service.api(
        "PATCH", f"/v1/facts/{body['fact']['id']}", json={"text": f"Code word {MARKERS['korean']}"}
    )
    assert status == 200, body
    await cover(service.store, user, "luna", 0)
    shared = summary(user, "luna", f"They share {MARKERS['chinese']} and {MARKERS['korean']}.", 0)
    await service.store.write(lambda tx: tx.summaries.put(shared))
    await seed(service, "u-other", "luna", "AGENT-OTHER", [{"role": "user", "content": CONTROL}])
    for marker in MARKERS.values():
        status, found = await service.api("GET", f"/v1/users/{user}/search", params={"q": marker})
        assert found["results"], marker
    status, held = await service.api("GET", f"/v1/users/{user}/characters/luna/messages")
    assert [image["url"] for m in held["messages"] for image in m["images"]] == [IMAGE_URL]


def database_files(db_path: Path | str) -> bytes:
    """What anyone with disk access reads of the database: SQLite's file and WAL, or every file
    of the PostgreSQL database's directory (base/<its oid>) once the scrubs still owed have run
    and the server has written its buffers out (the test process is root: it reads its files)."""
    if isinstance(db_path, Path):
        return on_disk(db_path)
    with psycopg.connect(db_path, autocommit=True, row_factory=dict_row) as conn:
        # The scrubs the service runs next (retention's job): a forget's own scrub leaves a table
        # owed when a snapshot older than the forget stays open past its wait (a loaded machine).
        for _ in range(5):
            if not pg_maintenance.PostgresMaintenance.scrub(conn)[0]:
                break
            time.sleep(0.2)
        conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT current_setting('data_directory'), oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        names = {
            str(r["node"]): r["relname"]
            for r in conn.execute("SELECT pg_relation_filenode(oid) AS node, relname FROM pg_class")
            if r["node"] is not None
        }
    assert row is not None
    place = Path(row["current_setting"], "base", str(row["oid"]))
    files = sorted(path for path in place.rglob("*") if path.is_file())
    assert len(files) > 100  # the database's catalogs and tables are all there
    parts = [path.read_bytes() for path in files]
    data = DatabaseFiles(b"".join(parts))
    start = 0
    for path, part in zip(files, parts, strict=True):
        node = path.name.split("_")[0].split(".")[0]
        data.spans.append((start, start + len(part), f"{names.get(node, '?')} ({path.name})"))
        start += len(part)
    return data


class DatabaseFiles(bytes):
    """A PostgreSQL database's files joined; `in` notes which relation's file holds what it
    finds, and the repr says it, so that a failed byte scan names the table still holding it."""

    def __init__(self, data: bytes) -> None:
        self.spans: list[tuple[int, int, str]] = []
        self.found: dict[bytes, str] = {}

    def __contains__(self, piece: object) -> bool:
        at = self.find(piece) if isinstance(piece, bytes) else -1
        if at < 0:
            return False
        assert isinstance(piece, bytes)
        self.found[piece] = next((name for first, end, name in self.spans if first <= at < end), "?")
        return True

    def __repr__(self) -> str:
        return f"<the database's files, {len(self):,} bytes; found in: {self.found}>"


def assert_no_trace(db_path: Path | str) -> None:
    data = database_files(db_path)
    assert CONTROL.encode() in data  # the scan does see text that is still held
    assert IMAGE_URL.encode() not in data
    for name, marker in MARKERS.items():
        assert marker.encode() not in data, name
        left = [piece.decode() for piece in trigrams(marker) if piece in data]
        # Three given bytes turn up by chance in megabytes of pages (a page header's LSN and
        # checksum are as good as random: one "xjw" was found so, once in four runs under load),
        # while what an index keeps of a word is all its pieces. So one lone ASCII trigram is
        # chance; two, or one of multibyte text (nine given bytes), is the marker's.
        chance = len(left) == 1 and len(left[0].encode()) == 3
        assert not left or chance, (name, {piece: around(data, piece.encode()) for piece in left})


def around(data: bytes, piece: bytes) -> bytes:
    """The bytes around the first place `piece` is found, to tell whose text it is."""
    at = data.find(piece)
    return data[max(0, at - 40) : at + 40]


async def test_forget_leaves_no_trace_on_disk(service, db_path, backend) -> None:
    await remember_secrets(service, "u-secret")
    before = database_files(db_path)
    assert all(marker.encode() in before for marker in (*MARKERS.values(), IMAGE_URL))
    status, body = await service.api("DELETE", "/v1/users/u-secret")
    assert status == 200, body
    receipt = body["deleted"]
    assert receipt["messages"] == 3 and receipt["facts"] == 1 and receipt["summaries"] == 1
    assert receipt["fact_history"] == 1
    assert receipt["search_index_rows"] == 5 and receipt["search_index_scrub_pending"] == 0
    assert receipt["metrics"] == 1 and receipt["sessions"] == 1 and receipt["raw_callbacks"] >= 3
    await service.store.checkpoint()
    assert_no_trace(db_path)
    if backend == "sqlite":
        await integrity_check(service.store)
    assert (await service.store.read(lambda view: view.maintenance.search_state()))["scrub_owed"] == 0
    status, found = await service.api("GET", "/v1/users/u-secret/search", params={"q": MARKERS["english"]})
    assert found["results"] == []
    assert (await service.api("GET", "/v1/users/u-secret/export"))[0] == 404
    assert (await service.api("GET", "/v1/users/u-secret/stats"))[0] == 404
    status, body = await service.api(
        "GET", "/v1/search/mentions", params={"q": MARKERS["english"], "role": "any"}
    )
    assert body["users"] == []
    status, body = await service.api("GET", "/v1/users/u-other/search", params={"q": "control"})
    assert len(body["results"]) == 1


def test_every_postgres_table_is_cleared_by_forget_or_holds_nothing_of_a_user(pg_cluster) -> None:
    with psycopg.connect(pg_cluster.database()) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    assert tables == {held.table for held in maintenance.HELD} | set(pg_maintenance.NOT_HELD)


async def test_the_rewrite_waits_for_snapshots_that_still_see_the_forgotten_rows(
    service, db_path, backend, monkeypatch, caplog
) -> None:
    """VACUUM FULL copies along the rows an open snapshot may still read: the scrub waits for it."""
    if backend == "sqlite":
        pytest.skip("PostgreSQL's table rewrite")
    wait_s = pg_maintenance.HORIZON_WAIT_S
    monkeypatch.setattr(pg_maintenance, "HORIZON_WAIT_S", 0.2)
    url = db_path
    marker = MARKERS["english"]
    await seed(service, "u-seen", "luna", "AGENT-SEEN", [{"role": "user", "content": f"word {marker}"}])
    await seed(service, "u-other", "luna", "AGENT-OTHER", [{"role": "user", "content": CONTROL}])
    with psycopg.connect(url) as report:  # a long read that began before the forget
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        assert report.execute("SELECT count(*) FROM messages WHERE user_id = 'u-seen'").fetchone() == (1,)
        status, _ = await service.api("DELETE", "/v1/users/u-seen")
        assert status == 200
        left, rewritten, _pages = await service.store.checkpoint()
        assert left >= 2 and rewritten == 0
        # The operator is told that forgotten words are still on disk, and which backend holds them.
        waits = [r.getMessage() for r in caplog.records if "the rewrite waits" in r.getMessage()]
        assert waits and f"backend {report.info.backend_pid} " in waits[-1], waits
        assert all(r.levelname == "WARNING" for r in caplog.records if "the rewrite waits" in r.getMessage())
        assert marker.encode() in database_files(url)
        assert report.execute("SELECT count(*) FROM messages WHERE user_id = 'u-seen'").fetchone() == (1,)
    # The service's own wait again: other databases of a shared server may be busy (see below).
    monkeypatch.setattr(pg_maintenance, "HORIZON_WAIT_S", wait_s)
    left, rewritten, _pages = await service.store.checkpoint()
    assert left == 0 and rewritten >= 2
    assert_no_trace(url)


def filenodes(url: str) -> dict[str, int]:
    """The file of each table forget owes a rewrite (VACUUM FULL gives it a new one)."""
    tables = [held.table for held in maintenance.HELD]
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT t, pg_relation_filenode(t::regclass) FROM unnest(%s::text[]) AS t", (tables,)
        )
        return dict(rows.fetchall())


async def test_the_rewrite_waits_for_older_transactions_of_other_databases(
    service, db_path, backend, request, monkeypatch, caplog
) -> None:
    """VACUUM FULL's own snapshot counts every transaction still running on the server, of any
    database (on a shared server, a CREATE DATABASE copying its template for seconds): the rows
    a forget deleted after one began would be copied along, so the scrub waits for it, naming
    it, instead of rewriting every table in vain."""
    if backend == "sqlite":
        pytest.skip("PostgreSQL's table rewrite")
    wait_s = pg_maintenance.HORIZON_WAIT_S
    monkeypatch.setattr(pg_maintenance, "HORIZON_WAIT_S", 0.2)
    marker = MARKERS["english"]
    await seed(service, "u-seen", "luna", "AGENT-SEEN", [{"role": "user", "content": f"word {marker}"}])
    await seed(service, "u-other", "luna", "AGENT-OTHER", [{"role": "user", "content": CONTROL}])
    with psycopg.connect(request.getfixturevalue("pg_cluster").url("postgres")) as other:
        other.execute("SELECT pg_current_xact_id()")  # a write, under way before the forget
        files = filenodes(db_path)
        status, _ = await service.api("DELETE", "/v1/users/u-seen")
        assert status == 200
        left, rewritten, _pages = await service.store.checkpoint()
        assert left >= 2 and rewritten == 0
        assert filenodes(db_path) == files  # nothing was rewritten only to keep the deleted rows
        waits = [r.getMessage() for r in caplog.records if "the rewrite waits" in r.getMessage()]
        assert waits and f"backend {other.info.backend_pid} " in waits[-1], waits
        assert "of database postgres" in waits[-1]
    monkeypatch.setattr(pg_maintenance, "HORIZON_WAIT_S", wait_s)
    left, rewritten, _pages = await service.store.checkpoint()
    assert left == 0 and rewritten >= 2
    assert not set(filenodes(db_path).items()) & set(files.items())  # each one rewritten now
    assert_no_trace(db_path)


async def test_a_rewrite_that_had_to_keep_the_forgotten_rows_leaves_the_table_owed(
    service, db_path, backend, monkeypatch, caplog
) -> None:
    """PostgreSQL's horizon may count a snapshot the scrub's own check does not see (a backend
    still starting up): the rewrite then copies the deleted rows along, and the table must stay
    owed until a rewrite leaves them."""
    if backend == "sqlite":
        pytest.skip("PostgreSQL's table rewrite")
    horizon_passed = pg_maintenance._horizon_passed
    monkeypatch.setattr(pg_maintenance, "_horizon_passed", lambda conn, xid: True)  # blind to it
    marker = MARKERS["english"]
    await seed(service, "u-seen", "luna", "AGENT-SEEN", [{"role": "user", "content": f"word {marker}"}])
    await seed(service, "u-other", "luna", "AGENT-OTHER", [{"role": "user", "content": CONTROL}])
    with psycopg.connect(db_path) as report:  # a snapshot older than the forget
        report.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        # Taken without reading a table: one read would hold its lock, and its rewrite would
        # wait for it in vain (5 s each time, holding back the other databases' rewrites).
        report.execute("SELECT pg_current_snapshot()")
        status, _ = await service.api("DELETE", "/v1/users/u-seen")
        assert status == 200
        left, _rewritten, _pages = await service.store.checkpoint()
        assert left >= 1  # the tables copied with their deleted rows are still owed
        assert any(r.getMessage().startswith("scrub: messages kept ") for r in caplog.records)
        kept = [r.getMessage() for r in caplog.records if "deleted rows an older snapshot" in r.getMessage()]
        assert kept and all(r.levelname == "WARNING" for r in caplog.records if r.getMessage() in kept)
    # Seeing again: other databases of a shared server may be busy (the test above).
    monkeypatch.setattr(pg_maintenance, "_horizon_passed", horizon_passed)
    left, rewritten, _pages = await service.store.checkpoint()
    assert left == 0 and rewritten >= 1
    assert_no_trace(db_path)


def as_if_large(backend: str, monkeypatch: pytest.MonkeyPatch, *, batch_ms: int) -> None:
    """As if the database were too big to scrub right after a forget: SQLite's search index
    (merged by the job in short steps), PostgreSQL's tables (rewritten by the job, in a batch
    `batch_ms` after the first forget)."""
    if backend == "sqlite":
        monkeypatch.setattr(maintenance, "INLINE_SCRUB_MAX_ROWS", 0)
    else:
        monkeypatch.setattr(pg_maintenance, "INLINE_SCRUB_MAX_BYTES", 0)
        monkeypatch.setattr(pg_maintenance, "SCRUB_BATCH_MS", batch_ms)


async def test_forget_on_a_large_index_is_scrubbed_by_the_job(service, db_path, backend, monkeypatch) -> None:
    as_if_large(backend, monkeypatch, batch_ms=3_600_000)
    await remember_secrets(service, "u-big")
    status, body = await service.api("DELETE", "/v1/users/u-big")
    assert status == 200, body
    assert body["deleted"]["search_index_scrub_pending"] == 1
    await service.store.checkpoint()
    data = database_files(db_path)
    for marker in MARKERS.values():
        if backend == "sqlite":
            assert marker.encode() not in data  # the rows themselves are gone at once
            # ...but the old index segments still hold pieces of the text: the scan would see them.
            assert any(piece in data for piece in trigrams(marker)), marker
        else:
            # The deleted rows are still in the table's pages until the rewrite.
            assert marker.encode() in data, marker
    _status, found = await service.api("GET", "/v1/users/u-big/search", params={"q": MARKERS["chinese"]})
    assert found["results"] == []  # and nothing can find the old index entries
    owed = (await service.store.read(lambda view: view.maintenance.search_state()))["scrub_owed"]
    if backend == "postgres":
        assert owed >= 5  # messages, facts, summaries, sessions, raw callbacks... each a table
        monkeypatch.setattr(pg_maintenance, "SCRUB_BATCH_MS", 0)  # the batch is due
    scrub = await service.server.app[RETENTION].scrub_if_owed()
    assert scrub.merged and scrub.owed_forgets == (1 if backend == "sqlite" else owed)
    await service.store.checkpoint()
    assert_no_trace(db_path)
    assert (await service.server.app[RETENTION].scrub_if_owed()).merged is False


async def test_the_scrub_after_a_forget_runs_on_its_own(start_service, db_path, backend, monkeypatch) -> None:
    as_if_large(backend, monkeypatch, batch_ms=1000)
    service = await start_service(retention_sweep_s=0.2)
    await remember_secrets(service, "u-later")
    _status, body = await service.api("DELETE", "/v1/users/u-later")
    assert body["deleted"]["search_index_scrub_pending"] == 1

    async def scrubbed() -> bool:
        state = await service.store.read(lambda view: view.maintenance.search_state())
        return not state["scrub_owed"]

    await wait_for(scrubbed, 10, failure="the scrub did not run")
    await service.store.checkpoint()
    assert_no_trace(db_path)


async def test_forgetting_a_pair_keeps_the_users_other_memory(service) -> None:
    await seed(service, "u-two", "luna", "AGENT-L2", [{"role": "user", "content": "luna secret pineapple"}])
    await seed(service, "u-two", "atlas", "AGENT-A2", [{"role": "user", "content": "atlas pineapple too"}])
    status, _ = await service.api("POST", "/v1/users/u-two/characters/luna/facts",
                                  json={"text": "Allergic to pineapple", "scope": "user"})  # fmt: skip
    status, body = await service.api("DELETE", "/v1/users/u-two/characters/luna")
    assert status == 200 and body["deleted"]["messages"] == 1 and body["deleted"]["facts"] == 0
    status, found = await service.api("GET", "/v1/users/u-two/search", params={"q": "pineapple"})
    assert sorted((r["kind"], r["character_id"]) for r in found["results"]) == [
        ("fact", ""),
        ("message", "atlas"),
    ]
    status, stats = await service.api("GET", "/v1/users/u-two/stats")
    assert stats["sessions"] == 1 and stats["favourite_characters"][0]["character_id"] == "atlas"


@pytest.mark.parametrize("character", [None, "luna"])
async def test_forget_then_new_messages_are_indexed_again(service, character) -> None:
    await seed(service, "u-back", "luna", "AGENT-B1", [{"role": "user", "content": "first life"}])
    path = "/v1/users/u-back" + (f"/characters/{character}" if character else "")
    assert (await service.api("DELETE", path))[0] == 200
    await seed(service, "u-back", "luna", "AGENT-B2", [{"role": "user", "content": "second life"}])
    _status, found = await service.api("GET", "/v1/users/u-back/search", params={"q": "life"})
    assert [r["text"] for r in found["results"]] == ["second life"]
