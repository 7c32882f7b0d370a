"""Debian's chromium driven by Playwright, locked to loopback, watching every request and error.

The browser comes from the distribution (.ci/run installs the `chromium` package when it is
missing): nothing is downloaded at run time. It resolves no name but 127.0.0.1, sends anything
else to a proxy on a closed loopback port, and does no background networking, so a page that
reached for another host (a CDN, an image in a transcript) would fail and be seen here.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

# Playwright is imported where a browser starts: every test process collects the browser tests'
# module, and only the slow tier runs them.
if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, ConsoleMessage, Page, Request

CHROMIUM = Path("/usr/bin/chromium")
LOCKED_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1",
    "--disable-background-networking",
]


def chromium() -> str:
    """The distribution's chromium, or a failure that says how to install it."""
    found = CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")
    if not found:
        raise AssertionError("no /usr/bin/chromium: install Debian's package (apt-get install chromium)")
    return str(found)


@dataclass
class Watched:
    """What the pages of a context did that they must not: console errors, requests elsewhere."""

    errors: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"{message.type}: {message.text}")

    def request(self, request: Request) -> None:
        self.requests.append(request.url)
        host = urlsplit(request.url).hostname
        if request.url.startswith(("data:", "about:")):
            return
        if host != "127.0.0.1":
            self.elsewhere.append(request.url)

    def assert_clean(self) -> None:
        assert not self.errors, self.errors
        assert not self.elsewhere, self.elsewhere


@asynccontextmanager
async def locked_browser() -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium(), args=LOCKED_ARGS, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def watched_context(
    browser: Browser, *, width: int = 1280, height: int = 900
) -> AsyncIterator[tuple[BrowserContext, Watched]]:
    """A fresh context (no cookies) whose pages report their errors and requests to `Watched`."""
    context = await browser.new_context(viewport={"width": width, "height": height})
    watched = Watched()
    context.on("request", watched.request)
    context.on("page", lambda page: _watch_page(page, watched))
    try:
        yield context, watched
    finally:
        await context.close()


def _watch_page(page: Page, watched: Watched) -> None:
    page.on("console", watched.console)
    page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
