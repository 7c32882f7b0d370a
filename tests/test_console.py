"""The operator console over HTTP: sign-in and sessions, CSRF, scopes, the pages, GET /v1/users."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import TOKEN, Service, agent_event, deliver, on_disk
from console_data import CHARACTER, PAIR_PAGE, PHOTO, USER, seed_console
from sqlite_utils import Database
from test_speakers import CALL, GUEST, LABELS, history
from test_speakers import CHARACTER as SHARED_CHARACTER

from agent_memory.cli import main
from agent_memory.client import AsyncMemoryClient
from agent_memory.store.postgres import migrations as pg_migrations
from agent_memory.store.sqlite.migrations import migrations as sqlite_migrations
from agent_memory.web.keys import MEMORY

pytestmark = pytest.mark.postgres

HTML = {"Accept": "text/html"}


async def sign_in(service: Service, key: str = TOKEN) -> aiohttp.ClientSession:
    """A browser-like session signed in with `key` (its cookie jar holds the session)."""
    jar = aiohttp.CookieJar(unsafe=True)  # keep cookies of 127.0.0.1
    session = aiohttp.ClientSession(cookie_jar=jar, headers=HTML)
    async with session.post(
        f"{service.url}/console/sign-in", data={"key": key, "next": "/console"}, allow_redirects=False
    ) as resp:
        assert resp.status == 303, await resp.text()
    return session


async def page(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url, allow_redirects=False) as resp:
        return resp.status, await resp.text()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_the_pair_page_shows_calls_facts_summary_context_and_recall(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    try:
        status, html = await page(browser, f"{service.url}{PAIR_PAGE}?q=what+is+my+dog+called")
        tools_status, tools = await page(browser, f"{service.url}/console/users/u-tools/characters/luna")
    finally:
        await browser.close()
    # Tool calls and results, with their data, between the turns.
    assert tools_status == 200
    assert "tool call</span>" in tools and "get_weather" in tools and "call_abc123" in tools
    assert "tool result</span>" in tools and "cloudy" in tools
    assert status == 200, html
    assert "my dog is called Rex" in html
    # The interruption: what was heard, and what was cut.
    assert "heard:" in html and "who would chase every wave" in html
    assert "Gap: turns are missing here" in html
    # The image is a link, never an <img>.
    assert f'href="{PHOTO}"' in html and "<img" not in html
    assert "The user&#39;s dog is called Rex" in html
    assert "Start-of-call memory" in html and "tokens</strong>" in html
    assert re.search(r'class="score">[0-9.]+<', html)


async def test_without_a_key_a_browser_is_sent_to_sign_in_and_a_tool_gets_401(service: Service) -> None:
    async with service.session.get(f"{service.url}{PAIR_PAGE}", headers=HTML, allow_redirects=False) as resp:
        assert resp.status == 303
        assert resp.headers["Location"] == f"/console/sign-in?next={PAIR_PAGE}"
    async with service.session.get(f"{service.url}{PAIR_PAGE}") as resp:
        assert resp.status == 401
        assert "sign in to the console" in (await resp.json())["error"]["message"]
    # A wrong key is refused at sign-in like the API refuses it, and no session is made.
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.post(f"{service.url}/console/sign-in", data={"key": "wrong"}) as resp:
            assert resp.status == 401
            assert "wrong or revoked" in await resp.text()
        assert not list(jar)


async def test_sign_in_only_returns_to_a_console_page(service: Service) -> None:
    for asked, landed in (
        ("/console/users?q=a", "/console/users?q=a"),
        ("https://evil.example.test/console", "/console"),
        ("//evil.example.test/console", "/console"),
        ("/consolex", "/console"),
        ("/console/users\r\nX-Evil: 1", "/console"),
    ):
        async with service.session.post(
            f"{service.url}/console/sign-in", data={"key": TOKEN, "next": asked}, allow_redirects=False
        ) as resp:
            assert resp.status == 303 and resp.headers["Location"] == landed, asked
            assert "X-Evil" not in resp.headers


async def test_the_session_cookie_is_httponly_strict_and_secure_behind_https(start_service: Any) -> None:
    for public_url, secure in ((None, False), ("https://memory.example.test", True)):
        service = await start_service(public_url=public_url)
        async with service.session.post(
            f"{service.url}/console/sign-in", data={"key": TOKEN}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
            cookie = resp.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        assert ("Secure" in cookie) is secure, cookie
        assert "Max-Age=43200" in cookie  # 12 hours at most
        assert TOKEN not in cookie


async def fact_texts(service: Service) -> list[str]:
    status, body = await service.api("GET", f"/v1/users/{USER}/characters/{CHARACTER}/facts")
    assert status == 200, body
    return [fact["text"] for fact in body["facts"]]


async def test_a_cross_site_form_post_is_refused(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    add = f"{service.url}{PAIR_PAGE}/facts"
    try:
        _, html = await page(browser, f"{service.url}{PAIR_PAGE}")
        csrf = csrf_of(html)
        # What another site's form can send: the cookie (were it not SameSite), never the token.
        for data, headers in (
            ({"text": "forged one"}, {}),
            ({"text": "forged two", "csrf": "0" * 64}, {}),
            ({"text": "forged three", "csrf": csrf}, {"Origin": "https://evil.example.test"}),
            ({"text": "forged four", "csrf": csrf}, {"Sec-Fetch-Site": "cross-site"}),
        ):
            async with browser.post(add, data=data, headers=headers, allow_redirects=False) as resp:
                assert resp.status == 403, data
                assert "refused" in await resp.text() or "CSRF" in await resp.text()
        assert not [text for text in await fact_texts(service) if "forged" in text]
        own = {"Origin": service.url}
        async with browser.post(
            add, data={"text": "likes long walks", "csrf": csrf}, headers=own, allow_redirects=False
        ) as resp:
            assert resp.status == 303, await resp.text()
            assert resp.headers["Location"].endswith("?done=added#facts")
    finally:
        await browser.close()
    assert "likes long walks" in await fact_texts(service)


async def test_a_read_key_reads_a_pair_but_cannot_edit_nor_reach_across_users(service: Service) -> None:
    await seed_console(service)
    status, made = await service.api("POST", "/v1/keys", json={"scope": "read", "name": "support"})
    assert status == 201, made
    browser = await sign_in(service, made["key"])
    try:
        status, html = await page(browser, f"{service.url}{PAIR_PAGE}")
        assert status == 200 and "my dog is called Rex" in html
        assert "Add a fact" not in html and "Delete" not in html  # no controls it may not use
        (fact_id,) = re.findall(r"/facts/(\d+)\"", html)[:1]
        status, _ = await page(browser, f"{service.url}{PAIR_PAGE}/facts/{fact_id}")
        assert status == 200
        for path, data in (
            (f"{PAIR_PAGE}/facts", {"text": "sneaky"}),
            (f"{PAIR_PAGE}/facts/{fact_id}", {"action": "edit", "text": "sneaky"}),
            (f"{PAIR_PAGE}/facts/{fact_id}", {"action": "delete"}),
        ):
            async with browser.post(
                f"{service.url}{path}", data={**data, "csrf": csrf_of(html)}, allow_redirects=False
            ) as resp:
                assert resp.status == 403, path
                assert "needs a key of scope write" in await resp.text()
        for path in (
            "/console/users",
            "/console/stats",
            "/console/running",
            "/console/keys",
            f"/console/users/{USER}/export",
        ):
            status, html_denied = await page(browser, f"{service.url}{path}")
            assert status == 403 and "needs a key of scope admin" in html_denied, path
        async with browser.post(
            f"{service.url}{PAIR_PAGE}/forget", data={"confirm": USER, "csrf": csrf_of(html)}
        ) as resp:
            assert resp.status == 403
    finally:
        await browser.close()
    assert await fact_texts(service) == ["The user's dog is called Rex"]


async def test_a_bearer_key_is_accepted_and_needs_no_csrf(service: Service) -> None:
    await seed_console(service)
    status, made = await service.api("POST", "/v1/keys", json={"scope": "write"})
    assert status == 201
    bearer = {"Authorization": f"Bearer {made['key']}"}
    async with service.session.get(f"{service.url}{PAIR_PAGE}", headers=bearer) as resp:
        assert resp.status == 200 and "my dog is called Rex" in await resp.text()
    async with service.session.post(
        f"{service.url}{PAIR_PAGE}/facts",
        data={"text": "plays the cello"},
        headers=bearer,
        allow_redirects=False,
    ) as resp:
        assert resp.status == 303
    assert "plays the cello" in await fact_texts(service)
    async with service.session.get(
        f"{service.url}{PAIR_PAGE}", headers={"Authorization": "Bearer nope"}
    ) as resp:
        assert resp.status == 401


async def signed_in_status(browser: aiohttp.ClientSession, service: Service) -> int:
    async with browser.get(f"{service.url}{PAIR_PAGE}", allow_redirects=False) as resp:
        return resp.status


async def test_sessions_end_on_sign_out_expiry_and_key_revocation(service: Service) -> None:
    await seed_console(service)
    # Sign-out ends the session in the database: the old cookie, replayed, is refused.
    browser = await sign_in(service)
    try:
        _, html = await page(browser, f"{service.url}{PAIR_PAGE}")
        cookie = {c.key: c.value for c in browser.cookie_jar}
        async with browser.post(
            f"{service.url}/console/sign-out", data={"csrf": csrf_of(html)}, allow_redirects=False
        ) as resp:
            assert resp.status == 303 and resp.headers["Location"] == "/console/sign-in"
    finally:
        await browser.close()
    async with aiohttp.ClientSession(cookies=cookie, headers=HTML) as replay:
        assert await signed_in_status(replay, service) == 303
    # Expiry: a session past its end is not honoured.
    browser = await sign_in(service)
    try:
        assert await signed_in_status(browser, service) == 200
        await service.store.write(
            lambda tx: tx.console_sessions.sql.run("UPDATE console_sessions SET expires_ms = 1")
        )
        assert await signed_in_status(browser, service) == 303
    finally:
        await browser.close()
    # Revocation: revoking the key ends its sessions.
    status, made = await service.api("POST", "/v1/keys", json={"scope": "write"})
    browser = await sign_in(service, made["key"])
    try:
        assert await signed_in_status(browser, service) == 200
        status, _ = await service.api("DELETE", f"/v1/keys/{made['api_key']['id']}")
        assert status == 200
        assert await signed_in_status(browser, service) == 303
    finally:
        await browser.close()
    left = await service.store.read(
        lambda view: view.console_sessions.sql.count(
            "SELECT count(*) FROM console_sessions WHERE expires_ms > 1"
        )
    )
    assert left == 0


async def test_facts_are_added_edited_pinned_and_deleted_with_their_history(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    try:
        _, html = await page(browser, f"{service.url}{PAIR_PAGE}")
        csrf = csrf_of(html)
        (fact_id,) = re.findall(r'href="[^"]*/facts/(\d+)"', html)

        async def post(action: str, **more: str) -> str:
            async with browser.post(
                f"{service.url}{PAIR_PAGE}/facts/{fact_id}", data={"action": action, "csrf": csrf, **more}
            ) as resp:
                assert resp.status == 200
                return await resp.text()

        landed = await post("edit", text="The user's dog is called Rex, a beagle")
        assert "Fact saved" in landed and "a beagle" in landed
        assert "Fact unpinned." in await post("unpin")
        status, history = await page(browser, f"{service.url}{PAIR_PAGE}/facts/{fact_id}")
        assert status == 200
        assert history.index("a beagle") < history.index("The user&#39;s dog is called Rex<")
        assert "edited" in history
        assert "Fact deleted" in await post("delete")
    finally:
        await browser.close()
    assert await fact_texts(service) == []
    status, _ = await service.api("GET", f"/v1/facts/{fact_id}/history")
    assert status == 404


async def test_forget_names_what_goes_and_shows_the_receipt(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    try:
        status, html = await page(browser, f"{service.url}/console/users/{USER}/forget")
        assert status == 200
        assert "<strong>2</strong> calls" in html and "<strong>1</strong> facts" in html
        csrf = csrf_of(html)
        forget = f"{service.url}/console/users/{USER}/forget"
        async with browser.post(forget, data={"csrf": csrf, "confirm": "someone else"}) as resp:
            assert resp.status == 422 and "nothing was forgotten" in await resp.text()
        assert await fact_texts(service)
        async with browser.post(forget, data={"csrf": csrf, "confirm": USER}) as resp:
            assert resp.status == 200
            receipt = await resp.text()
        assert "was forgotten at" in receipt and re.search(
            r"<th scope=\"row\">messages</th><td class=\"num\">\d+", receipt
        )
        status, users = await page(browser, f"{service.url}/console/users")
        assert status == 200 and USER not in users  # the operator's own session survives
    finally:
        await browser.close()
    assert await fact_texts(service) == []


# A guest of another user's shared call: the forget also takes their turns in that call's
# session, and the page says so, with the number the receipt will give.
async def test_the_forget_page_counts_a_guests_turns_in_other_users_shared_calls(service: Service) -> None:
    await deliver(service, history(CALL, LABELS), expect="done")
    console = service.server.app[MEMORY].console
    # Their own session's copies of their two turns, and the two in the owner's call.
    expected = {"sessions": 1, "messages": 4, "shared_call_turns": 2, "facts": 0, "summaries": 0}
    assert await console.holdings(GUEST) == expected
    assert await console.holdings(GUEST, SHARED_CHARACTER) == expected
    owner = await console.holdings(LABELS["user_id"])
    assert (owner["messages"], owner["shared_call_turns"]) == (len(CALL), 0)
    browser = await sign_in(service)
    try:
        status, html = await page(browser, f"{service.url}/console/users/{GUEST}/forget")
        assert status == 200
        assert "<strong>1</strong> calls and <strong>4</strong> messages" in html, html
        assert "<strong>2</strong> of them said as a guest in other users' shared calls" in html, html
    finally:
        await browser.close()
    status, body = await service.api("DELETE", f"/v1/users/{GUEST}")
    assert status == 200 and body["deleted"]["messages"] == expected["messages"], body


async def test_users_stats_running_and_export_pages(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    try:
        status, html = await page(browser, f"{service.url}/console/users?q=ALICE")
        assert status == 200 and f">{USER}</a>" in html and "u-tools" not in html
        status, html = await page(browser, f"{service.url}/console/users/{USER}")
        assert status == 200 and f"/characters/{CHARACTER}" in html
        status, html = await page(browser, f"{service.url}/console/stats")
        assert status == 200 and "<svg" in html and "callbacks per day" in html
        status, html = await page(browser, f"{service.url}/console/running")
        assert status == 200 and "No agent is followed now" in html
        memory = service.server.app[MEMORY]
        labels = {"user_id": USER, "character_id": CHARACTER}
        await deliver(service, agent_event(101, "LIVE-1", labels=labels))
        following = await memory.follows.follow(
            "LIVE-1", origin="manual", base_system_messages=[{"role": "system", "content": "x"}]
        )
        assert following.watch is not None
        status, html = await page(browser, f"{service.url}/console/running")
        assert status == 200 and "<code>LIVE-1</code>" in html and f"{USER} · {CHARACTER}</a>" in html
        assert "refresh" in html.lower() and "(manual)" in html
        async with browser.get(f"{service.url}/console/users/{USER}/export") as resp:
            assert resp.status == 200
            assert (
                resp.headers["Content-Disposition"]
                == 'attachment; filename="agent-memory-export-u-alice.json"'
            )
            document = await resp.json()
        assert document["user_id"] == USER and document["counts"]["sessions"] == 3  # the live one too
        async with browser.get(f"{service.url}/console/static/console.css") as resp:
            assert resp.status == 200 and resp.content_type == "text/css"
    finally:
        await browser.close()


async def test_keys_are_made_listed_and_revoked_and_revoking_ends_their_sessions(service: Service) -> None:
    admin = await sign_in(service)
    try:
        _, html = await page(admin, f"{service.url}/console/keys")
        async with admin.post(
            f"{service.url}/console/keys",
            data={"scope": "read", "name": "support desk", "csrf": csrf_of(html)},
        ) as resp:
            assert resp.status == 201
            made = await resp.text()
        key = re.search(r'id="made-key" value="([^"]+)"', made)
        assert key and "shown this once" in made and "support desk" in made
        (key_id,) = re.findall(r'action="/console/keys/(\d+)/revoke"', made)
        reader = await sign_in(service, key.group(1))
        try:
            assert await signed_in_status(reader, service) == 200
            async with admin.post(
                f"{service.url}/console/keys/{key_id}/revoke",
                data={"csrf": csrf_of(made)},
                allow_redirects=False,
            ) as resp:
                assert resp.status == 303
            assert await signed_in_status(reader, service) == 303
        finally:
            await reader.close()
        async with admin.post(
            f"{service.url}/console/keys", data={"scope": "root", "csrf": csrf_of(made)}
        ) as resp:
            assert resp.status == 422 and "scope" in await resp.text()
    finally:
        await admin.close()
    status, body = await service.api("GET", "/v1/keys")
    assert status == 200
    assert [(k["name"], k["scope"], k["revoked_ms"] is not None) for k in body["api_keys"]] == [
        ("support desk", "read", True)
    ]


async def test_bad_input_is_a_clear_4xx_never_a_5xx(service: Service) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    try:
        _, html = await page(browser, f"{service.url}{PAIR_PAGE}")
        csrf = csrf_of(html)
        for path, status in (
            (f"{PAIR_PAGE}?calls=abc", 422),
            (f"{PAIR_PAGE}?calls=0", 422),
            (f"{PAIR_PAGE}?style=cobol", 422),
            (f"{PAIR_PAGE}?q=" + "x" * 5000, 422),
            (f"{PAIR_PAGE}/facts/99999999999999999999", 422),
            (f"{PAIR_PAGE}/facts/424242", 404),
            ("/console/users/nobody", 404),
            ("/console/users/nobody/export", 404),
            ("/console/static/../../settings.py", 404),
            ("/console/static/nothing.css", 404),
        ):
            got, text = await page(browser, f"{service.url}{path}")
            assert got == status, (path, got, text[:300])
        for data, status in (
            ({"text": "", "csrf": csrf}, 400),
            ({"text": "x" * 5000, "csrf": csrf}, 400),
            ({"text": "nul \x00 inside", "csrf": csrf}, 400),
            ({"text": "fine", "scope": "galaxy", "csrf": csrf}, 400),
        ):
            async with browser.post(f"{service.url}{PAIR_PAGE}/facts", data=data) as resp:
                assert resp.status in (status, 422), (data, resp.status, (await resp.text())[:300])
        async with browser.post(
            f"{service.url}{PAIR_PAGE}/facts/1", data={"action": "explode", "csrf": csrf}
        ) as resp:
            assert resp.status == 422
        async with browser.post(
            f"{service.url}{PAIR_PAGE}/facts",
            data=b"\xff\xfe=\xff",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ) as resp:
            assert 400 <= resp.status < 500
    finally:
        await browser.close()
    async with service.session.post(f"{service.url}/console/sign-in", data=b"key=\xff%00") as resp:
        assert 400 <= resp.status < 500


# GET /v1/users, the client and the CLI


async def test_users_are_listed_searched_and_paged_for_admins_only(service: Service) -> None:
    await seed_console(service)
    for index in range(3):
        status, _ = await service.api(
            "POST",
            f"/v1/users/u-page-{index}/characters/kai/facts",
            json={"text": f"likes the number {index}"},
        )
        assert status == 201
    status, body = await service.api("GET", "/v1/users")
    assert status == 200, body
    ids = [user["user_id"] for user in body["users"]]
    assert ids == ["u-alice", "u-page-0", "u-page-1", "u-page-2", "u-tools"]
    alice = body["users"][0]
    assert alice["characters"] == [CHARACTER] and alice["calls"] == 2 and alice["last_seen_ms"]
    # Paging with the cursor, the search kept.
    status, first = await service.api("GET", "/v1/users?q=PAGE&limit=2")
    assert [u["user_id"] for u in first["users"]] == ["u-page-0", "u-page-1"]
    status, second = await service.api("GET", f"/v1/users?q=PAGE&limit=2&cursor={first['next_cursor']}")
    assert [u["user_id"] for u in second["users"]] == ["u-page-2"] and second["next_cursor"] is None
    # LIKE's wildcards are taken literally.
    status, none = await service.api("GET", "/v1/users?q=%25")
    assert none["users"] == []
    status, _ = await service.api("GET", "/v1/users?limit=0")
    assert status == 422
    status, made = await service.api("POST", "/v1/keys", json={"scope": "write"})
    status, refused = await service.api("GET", "/v1/users", token=made["key"])
    assert status == 403 and "scope admin" in refused["error"]["message"]


async def test_users_through_the_client_and_the_cli(service: Service, capsys: Any) -> None:
    await seed_console(service)
    async with AsyncMemoryClient(service.url, TOKEN) as client:
        page_one = await client.users(q="u-", limit=1)
    assert [u.user_id for u in page_one.users] == ["u-alice"] and page_one.next_cursor == "u-alice"
    command = ["users", "--url", service.url, "--api-key", TOKEN, "--q", "tools"]
    assert await asyncio.to_thread(main, command) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("u-tools  1 calls") and "luna" in printed


@pytest.mark.sqlite_only  # scans SQLite's files
async def test_a_forget_from_the_console_leaves_no_text_on_disk_and_sessions_hold_none(
    service: Service,
) -> None:
    await seed_console(service)
    browser = await sign_in(service)
    said = ("my dog is called Rex and he loves the beach", "who would chase every wave", "The user's dog")
    try:
        # Browsing with the recall form keeps nothing of what was asked or shown.
        status, html = await page(browser, f"{service.url}{PAIR_PAGE}?q=beach+waves")
        assert status == 200
        assert all(text.encode() in on_disk(service.settings.db_path) for text in said)
        async with browser.post(
            f"{service.url}/console/users/{USER}/forget", data={"csrf": csrf_of(html), "confirm": USER}
        ) as resp:
            assert resp.status == 200
        # The operator is still signed in: the session row survives, holding no user text.
        assert await signed_in_status(browser, service) == 200
    finally:
        await browser.close()
    data = on_disk(service.settings.db_path)
    for text in (*said, "beach waves"):
        assert text.encode() not in data and text.casefold().encode() not in data, f"{text!r} is on disk"
    rows = await service.store.read(
        lambda view: view.console_sessions.sql.all("SELECT * FROM console_sessions")
    )
    assert rows and all(USER not in str(dict(row)) for row in rows)


# the migration (SQLite m021, PostgreSQL m011) upgrades a populated database

OLD_ROWS = (
    "INSERT INTO facts (user_id, character_id, text, norm, pinned, origin, created_ms, updated_ms, valid_from) "
    "VALUES ('u-old', 'luna', 'lives in Paris', 'lives in paris', 1, 'manual', 1000, 2000, 2000)",
    "INSERT INTO api_keys (name, scope, key_hash, created_ms) VALUES ('old', 'write', 'ab12', 1000)",
)


async def upgraded(db: Any) -> None:
    """The old rows are listed and a console session opens with the old key."""
    from agent_memory.memory.service import Memory
    from agent_memory.settings import Settings
    from agent_memory.store.factory import open_store

    settings = Settings(db_path=db)
    store = open_store(settings)
    try:
        memory = Memory(settings, store)
        found = await memory.console.users()
        assert [(u.user_id, u.characters, u.calls, u.last_seen_ms) for u in found.users] == [
            ("u-old", ["luna"], 0, 2000)
        ]
        token = await memory.keys.open_console_session("ab12", 60_000)
        signed = await memory.keys.console_session(token)
        assert signed is not None and signed.key is not None and signed.key.name == "old"
    finally:
        store.close()


@pytest.mark.sqlite_only
async def test_sqlite_upgrade_to_console_sessions_keeps_what_was_held(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    sqlite_migrations.apply(Database(conn), stop_before="m021_console_sessions")
    for statement in OLD_ROWS:
        conn.execute(statement)
    conn.commit()
    conn.close()
    await upgraded(path)


@pytest.mark.sqlite_only
async def test_postgres_upgrade_to_console_sessions_keeps_what_was_held(
    pg_cluster: Any, monkeypatch: Any
) -> None:
    url = pg_cluster.create("console_sessions_upgrade")
    names = [name for name, _ in pg_migrations.MIGRATIONS]
    monkeypatch.setattr(
        pg_migrations, "MIGRATIONS", pg_migrations.MIGRATIONS[: names.index("m011_console_sessions")]
    )
    with psycopg.connect(url) as conn:
        pg_migrations.apply(conn)
        for statement in OLD_ROWS:
            conn.execute(statement)
    monkeypatch.undo()
    await upgraded(url)
