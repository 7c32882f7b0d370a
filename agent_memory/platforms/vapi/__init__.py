"""Vapi: its server messages (`POST /webhooks/vapi`) and the memory an inbound call starts with."""
