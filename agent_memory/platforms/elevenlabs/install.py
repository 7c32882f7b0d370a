"""The ElevenLabs platform's one entry point into the web app: its webhooks and custom-LLM route."""

from __future__ import annotations

import logging

from aiohttp import web

from agent_memory.memory.service import Memory
from agent_memory.platforms.elevenlabs.custom_llm import custom_llm_routes
from agent_memory.platforms.elevenlabs.webhook import ElevenLabsReceiver
from agent_memory.web.declare import add_routes
from agent_memory.web.keys import METRICS, SETTINGS

log = logging.getLogger(__name__)


def install(app: web.Application, memory: Memory) -> None:
    """Add `POST /webhooks/elevenlabs`, `POST /webhooks/elevenlabs/initiation` and the per-turn
    custom-LLM route."""
    settings = app[SETTINGS]
    add_routes(app, ElevenLabsReceiver(memory, settings, app.get(METRICS)).routes())
    add_routes(app, custom_llm_routes(app, memory))
    if not settings.elevenlabs_secret and not settings.insecure_webhooks:
        log.info(
            "AGENT_MEMORY_ELEVENLABS_SECRET is not set: ElevenLabs' post-call webhooks will be refused until it is"
        )
    if settings.elevenlabs_prompt and "{memory}" not in settings.elevenlabs_prompt:
        log.warning(
            "AGENT_MEMORY_ELEVENLABS_PROMPT has no {memory}: ElevenLabs calls start with that prompt "
            "and no memory in it"
        )
