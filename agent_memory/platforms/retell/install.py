"""The Retell platform's one entry point into the web app: its webhook."""

from __future__ import annotations

import logging

from aiohttp import web

from agent_memory.memory.service import Memory
from agent_memory.platforms.retell.webhook import RetellReceiver
from agent_memory.web.declare import add_routes
from agent_memory.web.keys import METRICS, SETTINGS

log = logging.getLogger(__name__)


def install(app: web.Application, memory: Memory) -> None:
    """Add `POST /webhooks/retell` (call events and the inbound-call webhook)."""
    settings = app[SETTINGS]
    add_routes(app, [RetellReceiver(memory, settings, app.get(METRICS)).route()])
    if not settings.retell_api_key and not settings.insecure_webhooks:
        log.info("AGENT_MEMORY_RETELL_API_KEY is not set: Retell webhooks will be refused until it is")
