"""Typed keys of what the aiohttp application holds."""

from __future__ import annotations

from aiohttp import web

from .agora import AgoraClient
from .ingest import Ingestor
from .jobs import CondenseJobs
from .poller import Poller
from .retention import Retention
from .settings import Settings
from .store import SQLiteStore

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", SQLiteStore)
INGESTOR = web.AppKey("ingestor", Ingestor)
JOBS = web.AppKey("jobs", CondenseJobs)
AGORA = web.AppKey("agora", AgoraClient)
POLLER = web.AppKey("poller", Poller)
RETENTION = web.AppKey("retention", Retention)
