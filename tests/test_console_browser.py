"""The console in a real headless browser locked to loopback: sign in, browse a pair, edit a
fact, ask the recall form, forget with confirmation; no console error, no request elsewhere."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from browser import locked_browser, watched_context
from conftest import TOKEN, Service
from console_data import CHARACTER, PAIR_PAGE, PHOTO, USER, seed_console

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.slow


async def signed_in(page: Page, service: Service, path: str) -> None:
    """Open `path`, be sent to sign in, sign in with the admin key by its label, land on `path`."""
    await page.goto(f"{service.url}{path}")
    assert page.url.startswith(f"{service.url}/console/sign-in?next=")
    await page.get_by_label("API key").fill(TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{service.url}{path}")


async def test_sign_in_browse_edit_recall_and_forget_in_a_locked_browser(service: Service) -> None:
    from playwright.async_api import expect

    await seed_console(service)
    async with locked_browser() as browser, watched_context(browser) as (context, watched):
        page = await context.new_page()
        await signed_in(page, service, "/console/users")
        # Browse: the list, the user, the pair.
        await page.get_by_label("User id contains").fill("alice")
        await page.get_by_role("button", name="Search").click()
        await page.get_by_role("link", name=USER, exact=True).click()
        await page.get_by_role("link", name=CHARACTER, exact=True).click()
        await expect(page.get_by_role("heading", level=1)).to_contain_text(f"{USER} with {CHARACTER}")
        # The transcript: what was heard and cut, the gap, the tool-free call, the image as a link.
        calls = page.locator("details.call")
        await expect(calls).to_have_count(2)
        await calls.nth(1).locator("summary").click()
        transcripts = page.locator("ol.transcript")
        await expect(transcripts.get_by_text("my dog is called Rex and he loves the beach")).to_be_visible()
        await expect(transcripts.get_by_text("who would chase every wave")).to_be_visible()
        await expect(transcripts.get_by_text("Gap: turns are missing here")).to_be_visible()
        await expect(page.locator(f'a[href="{PHOTO}"]')).to_have_count(1)
        assert await page.locator("img").count() == 0
        # Recall: the form's input named q, ranked memories with scores, dates and tokens.
        await page.locator("input[name=q]").fill("what is my dog called")
        await page.get_by_role("button", name="Recall").click()
        first = page.locator("ol.recalled li").first
        await expect(first).to_contain_text("Rex")
        assert re.search(
            r"score \d+\.\d{3} · \d{4}-\d\d-\d\d \d\d:\d\d UTC · \d+ tokens", await first.inner_text()
        )
        # Edit a fact, then see its history.
        await page.get_by_role("link", name="Edit · history").first.click()
        await page.get_by_label("New text").fill("The user's dog is called Rex, a beagle")
        await page.get_by_role("button", name="Save").click()
        await expect(page.get_by_role("status")).to_have_text("Fact saved; its old text is in its history.")
        await expect(page.locator("ul.facts")).to_contain_text("a beagle")
        await page.get_by_role("link", name="Edit · history").first.click()
        await expect(page.locator("table")).to_contain_text("The user's dog is called Rex")
        # Forget the user: the confirmation names what goes; then the receipt.
        await page.goto(f"{service.url}/console/users/{USER}")
        await page.get_by_role("link", name="Forget this user…").click()
        going = page.locator("ul.going")
        await expect(going).to_contain_text("2 calls")
        await expect(going).to_contain_text("1 facts")
        await page.get_by_label("Type the user id").fill(USER)
        await page.get_by_role("button", name="Forget for good").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Forgotten")
        await expect(page.locator("table.receipt")).to_contain_text("messages")
        await page.goto(f"{service.url}/console/users")
        await expect(page.get_by_role("link", name=USER, exact=True)).to_have_count(0)
    watched.assert_clean()
    assert any(url.endswith("/console/static/console.css") for url in watched.requests)


async def test_the_console_fits_a_phone_and_works_from_the_keyboard(service: Service) -> None:
    from playwright.async_api import expect

    await seed_console(service)
    async with (
        locked_browser() as browser,
        watched_context(browser, width=390, height=844) as (context, watched),
    ):
        page = await context.new_page()
        await signed_in(page, service, PAIR_PAGE)
        for path in (PAIR_PAGE, "/console/users", "/console/stats", f"{PAIR_PAGE}?q=dog"):
            await page.goto(f"{service.url}{path}")
            wide = await page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, f"{path} is {wide} px wide on a 390 px phone"
        # Every control is labelled.
        unlabelled = await page.evaluate(
            """[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
               .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                             && !(el.textContent || '').trim()).length"""
        )
        assert unlabelled == 0
        # From the keyboard: the first Tab reaches the skip link, which leads to the content.
        await page.goto(f"{service.url}{PAIR_PAGE}")
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
        await page.keyboard.press("Enter")
        assert await page.evaluate("document.activeElement.id") == "main"
        # Recall with the keyboard alone: focus the question, type, Enter.
        await page.locator("input[name=q]").focus()
        await page.keyboard.type("dog")
        await page.keyboard.press("Enter")
        await expect(page.locator("ol.recalled")).to_contain_text("Rex")
    watched.assert_clean()
