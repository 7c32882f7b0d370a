"""Screenshots of the console's main pages for docs/console/, taken in the locked browser.

    .venv/bin/python tests/console_shots.py [OUT_DIR]   (default: docs/console)

A throwaway service on 127.0.0.1 with a temporary SQLite file, the pair of the console tests
(tests/console_data.py), condensed, with per-turn latencies; the same locked chromium as
tests/test_console_browser.py. Never part of the test run.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import aiohttp  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402
from browser import locked_browser, watched_context  # noqa: E402
from conftest import SECRET, TOKEN, Service, agent_event, deliver  # noqa: E402
from console_data import CHARACTER, PAIR_PAGE, USER, seed_console  # noqa: E402

from agent_memory.settings import Settings  # noqa: E402
from agent_memory.web.app import create_app  # noqa: E402
from agent_memory.web.keys import JOBS  # noqa: E402

SHOTS = (
    # name, path, (width, height), what to do first
    ("users", "/console/users", (1000, 560), None),
    ("pair", PAIR_PAGE, (1000, 900), None),
    ("recall", f"{PAIR_PAGE}?q=what+is+my+dog+called#recall", (1000, 620), None),
    ("pair-phone", f"{PAIR_PAGE}#calls", (390, 844), None),
    ("forget", f"/console/users/{USER}/forget", (1000, 560), None),
    ("stats", "/console/stats", (1000, 820), None),
)


async def latencies(service: Service) -> None:
    """111 callbacks with per-turn latencies for the pair's calls (the stats page's chart)."""
    rng = random.Random(7)
    for agent_id in ("CALL-ONE", "CALL-TWO"):
        turns = [
            {
                "turn_id": turn,
                **{name: rng.randint(150, 1900) for name in ("asr_ttlw", "llm_ttfb", "tts_ttfb")},
            }
            for turn in range(1, 9)
        ]
        labels = {"user_id": USER, "character_id": CHARACTER}
        await deliver(service, agent_event(111, agent_id, labels=labels, metrics=turns))


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(
            db_path=Path(folder) / "shots.db",
            api_token=TOKEN,
            webhook_secret=SECRET,
            summary_delay_s=3600,
            summary_after_call_s=3600,
        )
        server = TestServer(create_app(settings), host="127.0.0.1")
        await server.start_server()
        session = aiohttp.ClientSession()
        try:
            service = Service(server, session, settings)
            await seed_console(service)
            await latencies(service)
            status, _ = await service.api("POST", f"/v1/users/{USER}/characters/{CHARACTER}/condense")
            assert status == 202
            await server.app[JOBS].run_due_now()
            async with locked_browser() as browser:
                for name, path, (width, height), _ in SHOTS:
                    async with watched_context(browser, width=width, height=height) as (context, watched):
                        page = await context.new_page()
                        await page.goto(f"{service.url}/console/sign-in?next={path.split('#')[0]}")
                        await page.get_by_label("API key").fill(TOKEN)
                        await page.get_by_role("button", name="Sign in").click()
                        await page.wait_for_load_state()
                        if "#" in path:
                            await page.goto(f"{service.url}{path}")
                        await page.screenshot(path=str(out / f"{name}.png"))
                        watched.assert_clean()
                    print(f"{out / name}.png")
        finally:
            await session.close()
            await server.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "console"))
