"""Images shown with a turn (content parts): kept with the turn, never in memory's text."""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Service, agent_event, condense, deliver, wait_for
from fakes.upstream_llm import FakeUpstreamLLM, Script
from sqlite_utils import Database
from test_retention import database_files

import agent_memory.store.postgres.migrations as pg_migrations
from agent_memory.core.alignment import fingerprint
from agent_memory.core.images import MAX_URL_BYTES, kept_image
from agent_memory.store.sqlite.migrations import migrations as sqlite_migrations

pytestmark = pytest.mark.postgres

LLM_TOKEN = "agora-llm-key"
PAIR = {"user_id": "u-pic", "character_id": "luna"}
PHOTO = "https://cdn.example.test/photos/IMGMARK-cat-on-sofa.jpg?sig=abc"
AGORA_STYLE = "https://cdn.example.test/photos/IMGMARK-agora-sample.png"
PIXELS = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3  # 776 bytes
PIXELS_B64 = base64.b64encode(PIXELS).decode()
INLINE = f"data:image/png;base64,{PIXELS_B64}"
TOO_LONG = "https://cdn.example.test/LONGMARK/" + "x" * MAX_URL_BYTES
OTHER_SCHEME = "ftp://files.example.test/FTPMARK.png"
QUESTION = "What breed is this cat, do you think?"
KEPT = [
    {"kind": "url", "url": PHOTO},
    {"kind": "data", "media_type": "image/png", "size_bytes": len(PIXELS)},
    {"kind": "url", "url": AGORA_STYLE},
]


def parts() -> list[dict[str, Any]]:
    """A user turn as an OpenAI-style parts list: text, then images of every kind."""
    return [
        {"type": "text", "text": QUESTION},
        {"type": "image_url", "image_url": {"url": PHOTO, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": INLINE}},
        {"type": "image_url", "image_url": {"url": TOO_LONG}},
        {"type": "image_url", "image_url": {"url": OTHER_SCHEME}},
        # Agora's custom-LLM sample server declares image parts this way.
        {"type": "image", "image_url": AGORA_STYLE},
    ]


def leaks(text: str) -> list[str]:
    """Which of the images' URLs (or inline data) appear in `text`."""
    marks = ("IMGMARK", "LONGMARK", "FTPMARK", PIXELS_B64[:40], "cdn.example.test", "data:image")
    return [mark for mark in marks if mark in text]


async def messages(service: Service, count: int = 1) -> list[dict[str, Any]]:
    status, body = await service.api("GET", "/v1/users/u-pic/characters/luna/messages")
    assert status == 200, body
    found: list[dict[str, Any]] = body["messages"]
    return found if len(found) >= count else []


async def assert_memory_text_has_no_image(service: Service) -> None:
    """System messages, recall and the summary (what condensing read) say the words, not the images."""
    await condense(service)
    status, body = await service.api("GET", "/v1/users/u-pic/characters/luna/system-messages")
    assert status == 200, body
    text = json.dumps(body)
    assert "breed" in text and not leaks(text)
    status, body = await service.api(
        "GET", "/v1/users/u-pic/characters/luna/recall", params={"q": "cat breed"}
    )
    assert status == 200, body
    assert body["memories"] and not leaks(json.dumps(body))


# the custom-LLM endpoint


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstreamLLM]:
    async with FakeUpstreamLLM() as fake:
        yield fake


async def test_images_in_the_custom_llm_requests_history_are_kept_with_their_turn(
    start_service: Any, upstream: FakeUpstreamLLM, caplog: pytest.LogCaptureFixture, db_path: Any
) -> None:
    service = await start_service(
        llm_token=LLM_TOKEN, upstream_base_url=upstream.base_url, upstream_api_key="k",
        recall_timeout_ms=5000, llm_reply_settle_s=0.05,
    )  # fmt: skip
    upstream.script(Script(words=["Looks like a tabby."]))
    body = {
        "model": "m",
        "stream": True,
        "agent_id": "A-PIC",
        "messages": [
            {"role": "system", "content": "You are Luna."},
            {"role": "user", "content": parts(), "turn_id": 1, "metadata": {"source": "asr"}},
        ],
        **PAIR,
    }
    caplog.set_level(logging.INFO)
    async with service.session.post(
        f"{service.url}/v1/llm/chat/completions", json=body, headers={"Authorization": f"Bearer {LLM_TOKEN}"}
    ) as answer:
        assert answer.status == 200
        await answer.read()
    # The model still sees the images as they were sent: only what is stored is bounded.
    assert upstream.requests[0]["messages"][-1]["content"][1]["image_url"]["url"] == PHOTO
    found = await wait_for(lambda: messages(service, 2))
    user = found[0]
    assert (user["role"], user["content"]) == ("user", QUESTION)
    assert user["images"] == KEPT
    assert found[1]["images"] == []
    served = json.dumps(found)
    assert "LONGMARK" not in served and "FTPMARK" not in served and PIXELS_B64[:40] not in served
    # What was dropped is counted by reason; no URL reaches the log.
    notes = [r.getMessage() for r in caplog.records if "image(s) of a turn not kept" in r.getMessage()]
    assert notes and "2 image(s)" in notes[0] and f"URL over {MAX_URL_BYTES} bytes" in notes[0]
    assert not any(leaks(r.getMessage()) for r in caplog.records)
    await assert_memory_text_has_no_image(service)
    # Nothing on disk holds the inline image, nor the URLs that were not kept.
    await service.store.checkpoint()
    data = database_files(db_path)
    assert PHOTO.encode() in data
    assert PIXELS_B64[:40].encode() not in data and b"LONGMARK" not in data and b"FTPMARK" not in data


# the 103 callback


async def test_images_in_a_signed_103_are_kept_shown_exported_and_left_out_of_memory(
    service: Service,
) -> None:
    contents = [
        {"role": "assistant", "content": "Hi! Show me anything.", "turn_id": 1},
        {"role": "user", "content": parts(), "turn_id": 2},
        {"role": "assistant", "content": "That cat looks like a tabby.", "turn_id": 2},
    ]
    await deliver(service, agent_event(103, "A-103", labels=dict(PAIR), contents=contents), expect="done")
    found = await messages(service, 3)
    assert [(m["content"], m["images"]) for m in found] == [
        ("Hi! Show me anything.", []),
        (QUESTION, KEPT),
        ("That cat looks like a tabby.", []),
    ]
    status, export = await service.api("GET", "/v1/users/u-pic/export")
    assert status == 200, export
    assert [m["images"] for m in export["messages"]] == [[], KEPT, []]
    exported = json.dumps(export["messages"])
    assert "LONGMARK" not in exported and PIXELS_B64[:40] not in exported
    await assert_memory_text_has_no_image(service)


async def test_images_move_with_their_session_to_its_user(service: Service) -> None:
    contents = [{"role": "user", "content": parts(), "turn_id": 1}]
    await deliver(service, agent_event(103, "A-MOVE", contents=contents), expect="done")  # no labels
    status, body = await service.api("POST", "/v1/sessions/A-MOVE/bind", json=dict(PAIR))
    assert status == 200, body
    found = await messages(service)
    assert [(m["content"], m["images"]) for m in found] == [(QUESTION, KEPT)]


# databases of the previous schema


def previous_sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    sqlite_migrations.apply(Database(conn), stop_before="m017_message_images")
    return conn


def previous_postgres(pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    url = pg_cluster.create("before_images")
    before = [m for m in pg_migrations.MIGRATIONS if m[0] != "m007_message_images"]
    with monkeypatch.context() as patch, psycopg.connect(url) as conn:
        patch.setattr(pg_migrations, "MIGRATIONS", before)
        pg_migrations.apply(conn)
    return url


OLD_TURNS = [("user", QUESTION, 0), ("assistant", "That cat looks like a tabby.", 1)]


async def test_a_populated_database_of_the_previous_schema_upgrades_and_keeps_its_turns(
    start_service: Any, backend: str, tmp_path: Path, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    session = (
        "INSERT INTO sessions (agent_id, user_id, character_id, identity_source, status, start_ms, "
        "message_count) VALUES ('A-OLD', 'u-pic', 'luna', 'labels', 'stopped', 1763690000000, 2)"
    )
    insert = (
        "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, turn_id, at_ms, fp) "
        "VALUES ('A-OLD', 'u-pic', 'luna', {mark}, {mark}, {mark}, 1, 1763690000000, {mark})"
    )
    rows = [(seq, role, text, fingerprint(role, text)) for role, text, seq in OLD_TURNS]
    db: Path | str
    if backend == "sqlite":
        db = tmp_path / "old.db"
        with previous_sqlite(db) as conn:
            conn.execute(session)
            conn.executemany(insert.format(mark="?"), rows)
        conn.close()
    else:
        db = previous_postgres(request.getfixturevalue("pg_cluster"), monkeypatch)
        with psycopg.connect(db) as pg:
            pg.execute(session.encode())
            with pg.cursor() as cursor:
                cursor.executemany(insert.format(mark="%s").encode(), rows)
    service = await start_service(db_path=db)
    status, health = await service.api("GET", "/healthz")
    assert status == 200 and {"m017_message_images", "m007_message_images"} & set(health["schema"])
    found = await messages(service, 2)
    assert [(m["content"], m["images"]) for m in found] == [(text, []) for _, text, _ in OLD_TURNS]
    # The same call's transcript again, now with its images: the stored turn gains them, no turn doubles.
    contents = [
        {"role": "user", "content": parts(), "turn_id": 1},
        {"role": "assistant", "content": OLD_TURNS[1][1], "turn_id": 1},
    ]
    await deliver(service, agent_event(103, "A-OLD", labels=dict(PAIR), contents=contents), expect="done")
    found = await messages(service, 2)
    assert [(m["content"], m["images"]) for m in found] == [(QUESTION, KEPT), (OLD_TURNS[1][1], [])]


# what is kept of one URL


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://a.test/x.png", {"kind": "url", "url": "https://a.test/x.png"}),
        ("HTTP://a.test/x.png", {"kind": "url", "url": "HTTP://a.test/x.png"}),
        (
            "https://a.test/" + "x" * (MAX_URL_BYTES - 15),
            {"kind": "url", "url": "https://a.test/" + "x" * (MAX_URL_BYTES - 15)},
        ),
        ("https://a.test/" + "x" * (MAX_URL_BYTES - 14), None),
        ("data:image/jpeg;base64,/9j/4A==", {"kind": "data", "media_type": "image/jpeg", "size_bytes": 4}),
        ("data:image/gif;base64,R0lG\nODlh", {"kind": "data", "media_type": "image/gif", "size_bytes": 6}),
        ("data:,hello%20there", {"kind": "data", "media_type": None, "size_bytes": 11}),
        ("data:image/png;base64", None),
        ("javascript:alert(1)", None),
        ("file:///etc/passwd", None),
        ("/relative/x.png", None),
        ("https://a.test/\ud800.png", None),
        (42, None),
    ],
)
def test_what_is_kept_of_an_image_url(url: Any, kept: Any, backend: str) -> None:
    assert kept_image(url)[0] == kept
