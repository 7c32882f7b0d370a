"""The pure core: domain objects, transcript alignment, facts, context building, rendering.

Imports nothing of the service but itself and the exception tree: no aiohttp, openai,
sqlite or platform code, so every rule here is testable without I/O.
"""
