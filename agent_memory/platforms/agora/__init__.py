"""Agora's Conversational AI Engine: payloads, signatures, webhook, REST client, poller."""
