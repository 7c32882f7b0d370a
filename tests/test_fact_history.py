"""Facts keep their history: a new value supersedes the old one (kept, with when it held),
edits by hand through `PATCH /v1/facts/{id}`, `GET /v1/facts/{id}/history`, and memory that
reads only what holds now. On both backends, through the real server."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import TOKEN, assert_error, condense, said, seed
from sqlite_utils import Database

from agent_memory.client import AsyncMemoryClient
from agent_memory.core.facts import fact_subject, near_key
from agent_memory.settings import Settings
from agent_memory.store.factory import open_store
from agent_memory.store.postgres import migrations as pg_migrations
from agent_memory.store.sqlite.migrations import migrations as sqlite_migrations

pytestmark = pytest.mark.postgres

PAIR = "/v1/users/u-ann/characters/luna"


async def add(
    service: Any, text: str, scope: str = "character", pair: str = PAIR
) -> tuple[int, dict[str, Any]]:
    status, body = await service.api("POST", pair + "/facts", json={"text": text, "scope": scope})
    assert status in (200, 201), body
    return status, body["fact"]


async def history(service: Any, fact_id: int) -> dict[str, Any]:
    status, body = await service.api("GET", f"/v1/facts/{fact_id}/history")
    assert status == 200, body
    return body


async def current_texts(service: Any, pair: str = PAIR) -> list[str]:
    status, body = await service.api("GET", pair + "/facts")
    assert status == 200, body
    return [fact["text"] for fact in body["facts"]]


async def test_a_new_value_supersedes_the_old_fact_and_keeps_it_as_history(service) -> None:
    status, paris = await add(service, "lives in Paris")
    assert status == 201 and paris["valid_from"] >= paris["created_ms"]
    status, lyon = await add(service, "moved to Lyon")
    # The same fact, holding the new value; the old one is kept, marked, not overwritten.
    assert status == 201 and lyon["id"] == paris["id"] and lyon["text"] == "moved to Lyon"
    assert await current_texts(service) == ["moved to Lyon"]
    body = await history(service, paris["id"])
    assert body["fact_id"] == paris["id"] and body["current"] is True
    old, new = body["versions"]
    assert (old["text"], old["change"], new["text"], new["valid_to"], new["change"]) == (
        "lives in Paris", "superseded", "moved to Lyon", None, None,
    )  # fmt: skip
    assert old["valid_from"] == paris["valid_from"] and old["valid_to"] == new["valid_from"]
    # Facts about other things are not superseded by it.
    status, cat = await add(service, "has a cat named Miso")
    assert status == 201 and cat["id"] != paris["id"]


async def test_a_near_duplicate_is_the_fact_already_held(service) -> None:
    status, first = await add(service, "The user lives in Paris (as of 2026-01-05)")
    assert status == 201
    for again in ("lives in Paris.", "User lives in Paris", "THE USER LIVES IN PARIS (as of 2026-03-01)"):
        status, same = await add(service, again)
        assert status == 200 and same["id"] == first["id"], again
    assert await current_texts(service) == ["The user lives in Paris (as of 2026-01-05)"]
    assert (await history(service, first["id"]))["versions"][0]["valid_to"] is None


async def test_memory_reads_only_what_holds_now(service) -> None:
    await seed(service, "u-ann", "luna", "AGENT-ANN", [{"role": "user", "content": "hello there"}])
    await add(service, "favourite city is Paris")  # no subject the service knows: kept beside
    _, fact = await add(service, "lives in Paris")
    await add(service, "lives in Lyon")
    status, context = await service.api("GET", PAIR + "/system-messages", params={"max_tokens": 2000})
    assert status == 200
    said = " ".join(m["content"] for m in context["system_messages"])
    assert "lives in Lyon" in said and "lives in Paris" not in said
    status, recalled = await service.api("GET", PAIR + "/recall", params={"q": "Where does she live, Paris?"})
    assert status == 200
    texts = [m["text"] for m in recalled["memories"] if m["kind"] == "fact"]
    assert "lives in Paris" not in texts
    assert [v["text"] for v in (await history(service, fact["id"]))["versions"]] == [
        "lives in Paris",
        "lives in Lyon",
    ]


async def test_patch_edits_text_and_pin_keeping_the_old_text(service) -> None:
    _, fact = await add(service, "works as a nurse")
    status, body = await service.api("PATCH", f"/v1/facts/{fact['id']}", json={"text": "works as a midwife"})
    assert status == 200, body
    assert body["fact"]["text"] == "works as a midwife" and body["fact"]["pinned"] is True
    status, body = await service.api("PATCH", f"/v1/facts/{fact['id']}", json={"pinned": False})
    assert status == 200 and body["fact"]["pinned"] is False and body["fact"]["text"] == "works as a midwife"
    versions = (await history(service, fact["id"]))["versions"]
    assert [(v["text"], v["change"]) for v in versions] == [
        ("works as a nurse", "edited"),
        ("works as a midwife", None),
    ]


async def test_patch_refuses_what_it_cannot_do_with_a_clear_message(service) -> None:
    _, fact = await add(service, "likes tea")
    _, other = await add(service, "likes coffee")
    url = f"/v1/facts/{fact['id']}"
    status, body = await service.api("PATCH", url, json={})
    assert "text" in assert_error(status, body, 422, "invalid_field")
    status, body = await service.api("PATCH", url, json={"txt": "likes green tea"})
    assert "txt" in assert_error(status, body, 422, "invalid_field")
    status, body = await service.api("PATCH", url, json={"text": " ... "})
    assert "fact needs some text" in assert_error(status, body, 422, "invalid_field")
    status, body = await service.api("PATCH", url, json={"pinned": "yes"})
    assert "pinned" in assert_error(status, body, 422, "invalid_field")
    for nulled in ({"text": None}, {"text": None, "pinned": True}, {"pinned": None}):
        # The document says text and pinned may be left out, never null: the body is held to it.
        message = assert_error(*await service.api("PATCH", url, json=nulled), 422, "invalid_field")
        assert "must not be null" in message and next(iter(nulled)) in message
    status, body = await service.api("PATCH", url, json={"text": "x" * 501})
    assert "text" in assert_error(status, body, 422, "invalid_field")
    status, body = await service.api("PATCH", url, json={"text": "Likes coffee!"})
    assert f"fact {other['id']} already says this" in assert_error(status, body, 409, "conflict")
    status, body = await service.api("PATCH", "/v1/facts/999999", json={"pinned": True})
    assert "999999" in assert_error(status, body, 404, "not_found")
    status, body = await service.api("GET", "/v1/facts/999999/history")
    assert_error(status, body, 404, "not_found")
    status, body = await service.api("GET", "/v1/facts/abc/history")
    assert_error(status, body, 422, "invalid_field")
    assert await current_texts(service) == ["likes tea", "likes coffee"]


async def test_deleting_a_fact_deletes_its_history(service) -> None:
    _, fact = await add(service, "lives in Paris")
    await add(service, "lives in Rome")
    assert len((await history(service, fact["id"]))["versions"]) == 2
    status, _ = await service.api("DELETE", f"/v1/facts/{fact['id']}")
    assert status == 200
    status, body = await service.api("GET", f"/v1/facts/{fact['id']}/history")
    assert_error(status, body, 404, "not_found")
    rows = await service.store.read(lambda view: view.facts.history(fact["id"]))
    assert rows == []


async def test_a_fact_that_ended_keeps_its_history_and_its_id(service) -> None:
    _, fact = await add(service, "has a dog named Rex")
    assert await service.store.write(lambda tx: tx.facts.end(fact["id"]))
    assert await current_texts(service) == []
    body = await history(service, fact["id"])
    assert body["current"] is False and [v["change"] for v in body["versions"]] == ["ended"]
    # A new fact never takes an ended fact's id (its history would become the new fact's).
    _, new = await add(service, "has a cat named Miso")
    assert new["id"] != fact["id"]
    assert [v["text"] for v in (await history(service, new["id"]))["versions"]] == ["has a cat named Miso"]


async def test_the_client_edits_and_reads_history(service) -> None:
    async with AsyncMemoryClient(service.url, TOKEN) as memory:
        added = await memory.add_fact("u-ann", "luna", "lives in Paris")
        moved = await memory.add_fact("u-ann", "luna", "moved to Lyon")
        assert moved.created and moved.fact.id == added.fact.id
        edited = await memory.edit_fact(added.fact.id, text="moved to Lyon in May", pinned=False)
        assert edited.fact.text == "moved to Lyon in May" and not edited.fact.pinned
        past = await memory.fact_history(added.fact.id)
        assert [(v.text, v.change) for v in past.versions] == [
            ("lives in Paris", "superseded"), ("moved to Lyon", "edited"), ("moved to Lyon in May", None),
        ]  # fmt: skip


def test_subjects_and_near_keys() -> None:
    assert (
        fact_subject("lives in Paris") == fact_subject("The user moved to Lyon (2026-03-01)") == "residence"
    )
    assert fact_subject("用户住在北京 (截至 2026-01-02)") == fact_subject("用户搬到了上海") == "residence"
    assert fact_subject("The user's name is Ann") == fact_subject("My name is Bo") == "name"
    assert fact_subject("Ann lives in Lisbon") is None  # someone named, not the user
    assert fact_subject("The user's sister's name is Mia") is None
    assert fact_subject("has a cat named Miso") is None
    assert near_key("The user lives in Paris (as of 2026-01-05)") == near_key("lives in Paris.")
    assert near_key("lives in Paris") != near_key("lives in Lyon")


# -- the migration upgrades a populated database ------------------------------------------------

OLD_FACT = (
    "INSERT INTO facts (user_id, character_id, text, norm, pinned, origin, created_ms, updated_ms) "
    "VALUES ('u-old', 'luna', 'lives in Paris', 'lives in paris', 1, 'manual', 1000, 2000)"
)


async def upgraded(db: Any) -> None:
    """The old fact holds since it last changed, and is superseded like any other."""
    store = open_store(Settings(db_path=db))
    try:
        (old,) = store.read_now(lambda view: view.facts.of_pair("u-old", "luna"))
        assert old.valid_from == 2000 and old.text == "lives in Paris"
        fact, created = await store.write(
            lambda tx: tx.facts.add(
                "u-old", "luna", "moved to Lyon", scope="character", pinned=True, origin="manual"
            )
        )
        assert created and fact.id == old.id
        versions = store.read_now(lambda view: view.facts.history(old.id))
        assert (versions[0].text, versions[0].valid_from, versions[0].change) == (
            "lives in Paris",
            2000,
            "superseded",
        )
    finally:
        store.close()


@pytest.mark.sqlite_only
async def test_sqlite_upgrade_keeps_the_facts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    sqlite_migrations.apply(Database(conn), stop_before="m020_fact_history")
    conn.execute(OLD_FACT)
    conn.commit()
    conn.close()
    await upgraded(path)


@pytest.mark.sqlite_only
async def test_postgres_upgrade_keeps_the_facts(pg_cluster: Any, monkeypatch: Any) -> None:
    url = pg_cluster.create("fact_history_upgrade")
    names = [name for name, _ in pg_migrations.MIGRATIONS]
    at = names.index("m010_fact_history")
    monkeypatch.setattr(pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[:at])
    with psycopg.connect(url) as conn:
        pg_migrations.apply(conn)
        conn.execute(OLD_FACT)
    monkeypatch.undo()
    await upgraded(url)


async def test_the_offline_condenser_supersedes_where_the_user_lives(start_service) -> None:
    service = await start_service(summary_delay_s=0, job_sweep_s=3600)
    await seed(service, "u-ann", "luna", "AGENT-1", said("I live in Paris.", start_ms=1_763_690_000_000))
    await condense(service)
    (paris,) = [f for f in (await facts_of(service)) if "Paris" in f["text"]]
    await seed(service, "u-ann", "luna", "AGENT-2", said("We moved to Lyon.", start_ms=1_766_000_000_000))
    await condense(service)
    now = await facts_of(service)
    assert [f["text"] for f in now if "Paris" in f["text"] or "Lyon" in f["text"]] == [
        "The user moved to Lyon (2025-12-17)"
    ]
    versions = (await history(service, paris["id"]))["versions"]
    assert [(v["text"], v["origin"], v["change"]) for v in versions] == [
        (paris["text"], "offline", "superseded"), ("The user moved to Lyon (2025-12-17)", "offline", None),
    ]  # fmt: skip


async def test_a_model_made_fact_never_supersedes_one_said_by_hand(service) -> None:
    _, pinned = await add(service, "lives in Paris", scope="user")
    fact, created = await service.store.write(
        lambda tx: tx.facts.add(
            "u-ann", "luna", "The user moved to Lyon", scope="user", pinned=False, origin="llm"
        )
    )
    assert created and fact.id != pinned["id"]
    assert await current_texts(service) == ["lives in Paris", "The user moved to Lyon"]
    # Said by hand, the new value supersedes either.
    status, by_hand = await add(service, "lives in Rome", scope="user")
    assert status == 201 and by_hand["id"] == fact.id
    assert await current_texts(service) == ["lives in Paris", "lives in Rome"]


async def facts_of(service: Any) -> list[dict[str, Any]]:
    status, body = await service.api("GET", PAIR + "/facts")
    assert status == 200, body
    return list(body["facts"])
