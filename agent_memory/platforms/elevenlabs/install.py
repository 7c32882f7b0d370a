"""The ElevenLabs platform's one entry point into the web app: its two webhook routes."""

from __future__ import annotations

import logging

from aiohttp import web

from agent_memory.memory.service import Memory
from agent_memory.platforms.elevenlabs.webhook import ElevenLabsReceiver
from agent_memory.web.declare import add_routes

log = logging.getLogger(__name__)


def install(app: web.Application, memory: Memory) -> None:
    """Add `POST /webhooks/elevenlabs` and `POST /webhooks/elevenlabs/initiation`."""
    add_routes(app, ElevenLabsReceiver(memory).routes())
    settings = memory.settings
    if settings.elevenlabs_prompt and "{memory}" not in settings.elevenlabs_prompt:
        log.warning(
            "AGENT_MEMORY_ELEVENLABS_PROMPT has no {memory}: ElevenLabs calls start with that prompt "
            "and no memory in it"
        )
