"""Typed keys of what the Agora platform keeps in the aiohttp application."""

from __future__ import annotations

from aiohttp import web

from agent_memory.memory.follow_recall import FollowRecall
from agent_memory.memory.refresh import Refresher
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.platforms.agora.llm_proxy import LlmProxy
from agent_memory.platforms.agora.poller import Poller

AGORA = web.AppKey("agora", AgoraClient)
POLLER = web.AppKey("poller", Poller)
REFRESHER = web.AppKey("refresher", Refresher)
LLM_PROXY = web.AppKey("llm_proxy", LlmProxy)
FOLLOW = web.AppKey("follow_recall", FollowRecall)
