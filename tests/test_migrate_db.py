"""`agent-memory migrate-db`: a SQLite memory filled through the service is copied into a real
PostgreSQL database, verified table by table, and the service on PostgreSQL then answers as it
did on SQLite; a target that holds memory is refused, and a value that does not fit aborts the
whole copy."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import CONVERSATIONS, TOKEN, agent_event, condense, deliver, load_conversations, seed

from agent_memory.cli import main
from agent_memory.core.domain import LlmRoute
from agent_memory.store.shared.maintenance import SERVICE
from agent_memory.store.sqlite.maintenance import HELD, NOT_HELD
from agent_memory.store.transfer import COPIED, REBUILT, Checksum

WORDS = re.compile(r"\w{4,}")
# PostgreSQL tables each database keeps its own (schema, counters, leases, owed scrubs).
OWN = ("agent_memory_migrations", "store_state", "leases", "scrub_owed")
# SQLite tables with no PostgreSQL namesake: its search and recall indexes, its bookkeeping
# and the memory clock (a sequence on PostgreSQL, moved past the last tick).
SQLITE_ONLY = (
    "_sqlite_migrations",
    "sqlite_sequence",
    "search_state",
    "search_pairs",
    "memory_clock",
    "recall_docs",
    "recall_pairs",
    "recall_pending",
    "recall_terms",
)


def pg_tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def pg_indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'")}


def pairs_of(path: Path) -> list[tuple[str, str, str]]:
    """Each pair the SQLite file holds turns of, with a word its user said (a query)."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT user_id, character_id, content FROM messages WHERE role = 'user' AND kind = 'turn' ORDER BY id"
        ).fetchall()
    words: dict[tuple[str, str], str] = {}
    for user, character, content in rows:
        found = WORDS.findall(content)
        if found and (user, character) not in words:
            words[user, character] = max(found, key=len)
    return [(user, character, word) for (user, character), word in sorted(words.items())]


async def fill(service: Any) -> None:
    """Conversations, facts, summaries, metrics, a binding, vectors, a route, and a forgotten user."""
    await load_conversations(service, *CONVERSATIONS)
    labels = {"user_id": "u-alice", "character_id": "luna"}
    await deliver(
        service, agent_event(111, "AGENT-M", labels=labels, metrics=[{"turn_id": 1, "llm_ttfb": 321}])
    )
    shown = [
        {"type": "text", "text": "Look at my jasmine tea set"},
        {"type": "image_url", "image_url": {"url": "https://photos.example.test/tea-set.jpg"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    await deliver(
        service, agent_event(103, "AGENT-PIC", labels=labels, contents=[{"role": "user", "content": shown}])
    )
    for text, scope in (("Lives in Lisbon", "user"), ("Likes jasmine tea", "character")):
        status, _ = await service.api(
            "POST", "/v1/users/u-alice/characters/luna/facts", json={"text": text, "scope": scope}
        )
        assert status == 201
    # A new value supersedes the fact holding the old one, which is kept as its history.
    status, _ = await service.api(
        "POST", "/v1/users/u-alice/characters/luna/facts", json={"text": "Moved to Porto", "scope": "user"}
    )
    assert status == 201
    status, _ = await service.api(
        "POST", "/v1/channels/room-7/bind", json={"user_id": "u-kim", "character_id": "minjun"}
    )
    assert status == 200
    status, _ = await service.api(
        "POST",
        "/v1/sessions/Y4DQXL6904KUVE06GXOQ2AQHB/bind",
        json={"user_id": "u-solo", "character_id": "luna"},
    )  # the fixture's call without labels
    assert status == 200
    await condense(service)
    route = LlmRoute(
        key_hash="ab" * 32, agent_id="AGENT-R", user_id="u-alice", character_id="luna",
        upstream_base_url="https://llm.example/v1", upstream_api_key=None, upstream_model="m",
        upstream_params={"temperature": 0.5}, created_ms=1,
    )  # fmt: skip
    await service.store.write(lambda tx: tx.llm_routes.add(route))
    status, _ = await service.api("POST", "/v1/keys", json={"scope": "read", "name": "dashboard"})
    assert status == 201
    async with service.session.post(
        f"{service.url}/console/sign-in", data={"key": TOKEN}, allow_redirects=False
    ) as resp:
        assert resp.status == 303  # a console sign-in (its session moves across too)
    turns = await service.store.read(lambda view: view.messages.latest("u-alice", "luna", 3))
    await service.store.write(
        lambda tx: tx.vectors.add("fake-embed", [(m.id, [0.25, -0.5, 1.0]) for m in turns])
    )
    # The newest messages are forgotten: SQLite has handed out ids beyond the highest it holds.
    await seed(service, "u-gone", "luna", "AGENT-GONE", [{"role": "user", "content": "soon forgotten"}])
    status, _ = await service.api("DELETE", "/v1/users/u-gone")
    assert status == 200


async def answers(service: Any, pairs: list[tuple[str, str, str]]) -> list[Any]:
    """What the service says of every pair: system_messages, recall, search and the export."""
    said: list[Any] = []
    for user, character, word in pairs:
        pair = f"/v1/users/{user}/characters/{character}"
        for path, params in (
            (f"{pair}/system-messages", {"query": word}),
            (f"{pair}/recall", {"q": word}),
            (f"/v1/users/{user}/search", {"q": word}),
            (f"/v1/users/{user}/export", {}),
        ):
            status, body = await service.api("GET", path, params=params)
            assert status == 200, (path, body)
            body.pop("exported_ms", None)
            for hit in body.get("results", []):
                if hit["kind"] == "summary":
                    del hit["id"]  # a summary has no id of its own: each backend names it its way
            said.append((path, params, body))
    return said


def migrate(*args: str) -> int:
    return main(["migrate-db", *args])


@pytest.mark.slow  # a whole memory copied, verified and asked again on both backends
async def test_a_sqlite_memory_moves_to_postgres_and_answers_the_same(
    start_service, tmp_path: Path, pg_cluster, capsys
) -> None:
    path = tmp_path / "memory.db"
    on_sqlite = await start_service(db_path=path, summary_delay_s=0)
    await fill(on_sqlite)
    pairs = pairs_of(path)
    assert len(pairs) >= 4
    before = await answers(on_sqlite, pairs)
    assert any(body.get("memories") for _path, _params, body in before)  # recall found something
    # Images kept with a turn are exported, and so compared after the copy.
    assert any(m["images"] for _path, _params, body in before for m in body.get("messages", []))
    with sqlite3.connect(path) as conn:
        handed_out = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()[0]
        highest = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert handed_out > highest
    await on_sqlite.server.close()

    url = pg_cluster.database()
    assert await asyncio.to_thread(migrate, "--from", f"sqlite:///{path}", "--to", url) == 0
    out, err = capsys.readouterr()
    assert "messages:" in err and "rows copied" in err and "turns indexed" in err  # progress
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["verified:"]
    for table in COPIED:
        assert lines[table].endswith("ok"), lines[table]
    with sqlite3.connect(path) as conn:
        for table in COPIED:
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert lines[table].split()[1] == f"{rows:,}", table  # the count printed is the source's
            assert rows > 0 or table in ("jobs", "watched_agents"), table  # every kind of row took part

    assert pg_indexes(url) == pg_indexes(pg_cluster.database())  # rebuilt after the copy, as they were
    on_postgres = await start_service(db_path=url, summary_delay_s=0)
    for was, now in zip(before, await answers(on_postgres, pairs), strict=True):
        assert now == was
    # A new message gets an id beyond every one SQLite handed out.
    await seed(on_postgres, "u-new", "luna", "AGENT-NEW", [{"role": "user", "content": "hello again"}])
    new = await on_postgres.store.read(lambda view: view.messages.latest("u-new", "luna", 1))
    assert new[0].id > handed_out

    # The target now holds memory: refused, then replaced on request.
    assert await asyncio.to_thread(migrate, "--from", str(path), "--to", url) == 2
    assert "already holds memory" in capsys.readouterr().err
    await on_postgres.server.close()
    assert await asyncio.to_thread(migrate, "--from", str(path), "--to", url, "--replace") == 0
    assert "verified: every table matches" in capsys.readouterr().out


async def test_a_value_that_does_not_fit_aborts_the_whole_copy(
    tmp_path: Path, pg_cluster, start_service, capsys
) -> None:
    path = tmp_path / "odd.db"
    service = await start_service(db_path=path)
    await load_conversations(service, "en_luna_companion")
    await service.server.close()
    with sqlite3.connect(path) as conn:  # SQLite keeps text in an integer column
        conn.execute("UPDATE messages SET at_ms = 'yesterday' WHERE id = (SELECT max(id) FROM messages)")
    url = pg_cluster.database()
    assert await asyncio.to_thread(migrate, "--from", f"sqlite:///{path}", "--to", url) == 2
    assert "messages.at_ms: 'yesterday' does not fit" in capsys.readouterr().err
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM inbox").fetchone()[0] == 0  # nothing was kept
    assert migrate("--from", str(tmp_path / "missing.db"), "--to", url) == 2
    assert "existing SQLite file" in capsys.readouterr().err


def test_every_table_is_copied_rebuilt_or_each_databases_own(pg_cluster, tmp_path: Path) -> None:
    """A table added to either schema must say how it moves across."""
    assert pg_tables(pg_cluster.database()) == set(COPIED) | set(REBUILT) | set(OWN)
    from agent_memory.settings import Settings
    from agent_memory.store import open_store

    open_store(Settings(db_path=tmp_path / "m.db")).close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {table for table in tables if "_fts" not in table} == set(COPIED) | set(SQLITE_ONLY)
    # Everything forget clears is copied; nothing copied but the service's own is left out of it.
    assert {held.table for held in HELD} == set(COPIED) - set(SERVICE)
    assert set(NOT_HELD) & set(COPIED) == set(SERVICE)


def test_the_checksum_ignores_order_but_not_types_or_values() -> None:
    def of(*rows: tuple[Any, ...]) -> str:
        checksum = Checksum()
        for row in rows:
            checksum.add(row)
        return checksum.hex

    assert of((1, "a"), (2, b"b")) == of((2, b"b"), (1, "a"))
    assert of((1, "5")) != of((1, 5)) != of((1, 5.0))
    assert of((1, None)) != of((1, "")) != of((1, "a"), (1, "a"))


@pytest.mark.parametrize("target", ["sqlite:///elsewhere.db", "mysql://host/db"])
def test_the_target_must_be_postgres(tmp_path: Path, target: str, capsys) -> None:
    path = tmp_path / "m.db"
    sqlite3.connect(path).close()
    assert migrate("--from", str(path), "--to", target) == 2
    assert "--to must be a postgresql:// URL" in capsys.readouterr().err
