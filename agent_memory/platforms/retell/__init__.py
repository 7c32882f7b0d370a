"""Retell AI: its call webhooks, signed with the API key, and the inbound-call memory answer."""
