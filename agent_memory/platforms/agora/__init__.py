"""Agora's Conversational AI Engine: everything that knows Agora, behind one entry point.

`install.install(app, memory)` adds it to the web app. Inside: `payloads` (Agora's wire
format), `events` (payloads → `core.events`), `metrics`, `signatures`, `webhook`, `client`
(REST), `poller` (history while agents run; due refreshes), `routes` (start, follow,
refresh, leave agents; render custom-LLM messages), `custom_llm`, `keys`.
"""
