"""Typed keys of what the aiohttp application holds."""

from __future__ import annotations

from aiohttp import web

from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.memory.ingest import Ingestor
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.platforms.agora.poller import Poller
from agent_memory.memory.retention import Retention
from agent_memory.settings import Settings
from agent_memory.store import SQLiteStore

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", SQLiteStore)
INGESTOR = web.AppKey("ingestor", Ingestor)
JOBS = web.AppKey("jobs", CondenseJobs)
AGORA = web.AppKey("agora", AgoraClient)
POLLER = web.AppKey("poller", Poller)
RETENTION = web.AppKey("retention", Retention)
