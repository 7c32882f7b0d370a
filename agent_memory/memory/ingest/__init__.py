"""Ingest: platform events and history windows become sessions and one transcript per agent run.

A platform maps what it receives to `core.events` (SessionEvent, HistoryWindow, RawEvent);
`Ingestor` (`events`) applies them. Everything here runs on the store's writer thread, inside
the transaction that also records the raw event, so an event is either fully taken in or not
at all. Whose each run is, `sessions` decides; `merge` merges windows by `core.alignment`
(only what lies outside the stored transcript is inserted, overlapping copies enrich the
stored rows, and a window that overlaps nothing is recorded after a gap), on messages in
their stored form (`arrivals`); `speakers` keeps each other speaker of a shared call apart.
"""

from agent_memory.memory.ingest.events import Ingestor

__all__ = ["Ingestor"]
