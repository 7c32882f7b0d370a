"""The Vapi platform's one entry point into the web app: its webhook and its custom-LLM route."""

from __future__ import annotations

import logging

from aiohttp import web

from agent_memory.memory.service import Memory
from agent_memory.platforms.vapi.custom_llm import custom_llm_routes
from agent_memory.platforms.vapi.webhook import VapiReceiver
from agent_memory.web.declare import add_routes
from agent_memory.web.keys import METRICS, SETTINGS

log = logging.getLogger(__name__)


def install(app: web.Application, memory: Memory) -> None:
    """Add `POST /webhooks/vapi` and the per-turn custom-LLM route; say at start what is not set."""
    settings = app[SETTINGS]
    add_routes(app, [VapiReceiver(memory, settings, app.get(METRICS)).route()])
    add_routes(app, custom_llm_routes(app, memory))
    if not settings.vapi_secret and not settings.insecure_webhooks:
        log.info("AGENT_MEMORY_VAPI_SECRET is not set: Vapi's messages will be refused until it is")
