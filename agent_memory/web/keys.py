"""Typed keys of what the aiohttp application holds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from agent_memory.memory.embedding import EmbeddingJobs
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.memory.retention import Retention
from agent_memory.memory.service import Memory
from agent_memory.metrics import Metrics
from agent_memory.settings import Settings
from agent_memory.store import Store

SETTINGS = web.AppKey("settings", Settings)
MEMORY = web.AppKey("memory", Memory)
STORE = web.AppKey("store", Store)
JOBS = web.AppKey("jobs", CondenseJobs)
RETENTION = web.AppKey("retention", Retention)
EMBEDDINGS = web.AppKey("embeddings", EmbeddingJobs)
# Only when metrics are on (AGENT_MEMORY_METRICS): `app.get(METRICS)`.
METRICS = web.AppKey("metrics", Metrics)

# Why a /v1 request was refused: no key, a wrong or revoked one, a key without the scope the
# route needs, or an address still waiting after too many wrong keys (web/auth.py).
Refusal = Literal["missing", "wrong", "scope", "limited"]


@dataclass(slots=True)
class AuthStats:
    """Refused /v1 requests by reason, since start (for /metrics)."""

    refused: Counter[Refusal] = field(default_factory=Counter)

    def refuse(self, reason: Refusal) -> None:
        self.refused[reason] += 1


AUTH_STATS = web.AppKey("auth_stats", AuthStats)
