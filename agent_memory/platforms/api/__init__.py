"""The generic write API: messages an app sends of its own sessions, into the same memory."""
