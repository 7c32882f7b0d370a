"""`GET /openapi.json` and the `/docs` page: Swagger UI from the swagger-ui-py package, no CDN.

The service may run air-gapped, so the page's script and style are served from the installed
package's files (found without importing it: its module pulls in a template engine we do not use).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from agent_memory.errors import NotConfigured
from agent_memory.web.declare import declared_routes
from agent_memory.web.http import json_response
from agent_memory.web.openapi import document

ASSETS_PATH: Final = "/docs/assets"
# Only what the page loads (the package also ships Swagger Editor, source maps, …).
ASSETS: Final = ("swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png")
# Relative links: the page works behind a proxy that serves the API under a path prefix.
PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>agent-memory API</title>
<link rel="stylesheet" href="docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/assets/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({url: "openapi.json", dom_id: "#swagger-ui", deepLinking: true});
</script>
</body>
</html>
"""

routes = web.RouteTableDef()


@cache
def assets_dir() -> Path | None:
    """Where swagger-ui-py keeps Swagger UI's files, or None when it is not installed."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if folder.is_dir() else None


# The document, built on first use and kept (the app's state is frozen once it runs: a holder).
DOCUMENT: Final = web.AppKey("openapi_document", dict[str, dict[str, Any]])


def add_docs(app: web.Application) -> None:
    """Serve /openapi.json (of the routes `app` declares) and the /docs page."""
    app[DOCUMENT] = {}
    app.router.add_routes(routes)


def app_document(app: web.Application) -> dict[str, Any]:
    """The OpenAPI document of the routes `app` declared."""
    held = app[DOCUMENT]
    if "document" not in held:
        held["document"] = document(declared_routes(app))
    return held["document"]


@routes.get("/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 document of this service."""
    return json_response(app_document(request.app))


@routes.get("/docs")
async def docs_page(request: web.Request) -> web.Response:
    """The API reference, rendered from /openapi.json."""
    return web.Response(text=PAGE, content_type="text/html")


@routes.get(ASSETS_PATH + "/{name}")
async def docs_asset(request: web.Request) -> web.FileResponse:
    """One of the page's script, style and icon files."""
    name = request.match_info["name"]
    if name not in ASSETS:
        raise web.HTTPNotFound()
    folder = assets_dir()
    if folder is None:
        raise NotConfigured("the /docs page needs the swagger-ui-py package: pip install swagger-ui-py")
    return web.FileResponse(folder / name)
