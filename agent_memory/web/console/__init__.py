"""The operator console at /console: server-rendered pages over the same `Memory` use-cases as
the API, its own sign-in (sessions in the database), and every asset served from here."""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web

from agent_memory.web.console import pages
from agent_memory.web.console.render import HEADERS

ASSETS: Final = {
    "console.css": "text/css",
    "console.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}


async def asset(request: web.Request) -> web.Response:
    """A stylesheet or script of the console, from the package (no CDN: it works offline)."""
    name = request.match_info["name"]
    if name not in ASSETS:
        raise web.HTTPNotFound()
    body = resources.files(__package__).joinpath("static", name).read_bytes()
    headers = {**HEADERS, "Cache-Control": "public, max-age=3600"}
    return web.Response(body=body, content_type=ASSETS[name], headers=headers)


def install(app: web.Application) -> None:
    """Serve the console's pages under /console (they check keys themselves, not the /v1 gate)."""
    root, pair = pages.ROOT, pages.PAIR_PAGE
    user = root + "/users/{user_id}"
    fact = pair + "/facts/{fact_id}"
    app.router.add_get(root, pages.home)
    app.router.add_get(root + "/static/{name}", asset)
    app.router.add_get(root + "/sign-in", pages.sign_in_page)
    app.router.add_post(root + "/sign-in", pages.sign_in)
    app.router.add_post(root + "/sign-out", pages.sign_out)
    app.router.add_get(root + "/users", pages.users)
    app.router.add_get(root + "/running", pages.running)
    app.router.add_get(root + "/stats", pages.stats)
    app.router.add_get(root + "/keys", pages.keys)
    app.router.add_post(root + "/keys", pages.make_key)
    app.router.add_post(root + "/keys/{key_id}/revoke", pages.revoke_key)
    app.router.add_get(user, pages.user)
    app.router.add_get(user + "/export", pages.export)
    app.router.add_get(user + "/forget", pages.forget_page)
    app.router.add_post(user + "/forget", pages.forget)
    app.router.add_get(pair, pages.pair)
    app.router.add_post(pair + "/facts", pages.add_fact)
    app.router.add_get(fact, pages.fact)
    app.router.add_post(fact, pages.change_fact)
    app.router.add_get(pair + "/forget", pages.forget_page)
    app.router.add_post(pair + "/forget", pages.forget)
