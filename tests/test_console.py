"""The operator console over HTTP: sign-in and sessions, CSRF, scopes, the pages, GET /v1/users."""

from __future__ import annotations

import re

import aiohttp
from conftest import TOKEN, Service
from console_data import PAIR_PAGE, PHOTO, seed_console

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
    finally:
        await browser.close()
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
