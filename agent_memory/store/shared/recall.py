"""The recall index's limits, the same on every backend so that both rank a question's turns alike."""

from __future__ import annotations

# A term in more of a pair's turns than this says little and costs a long posting list.
MAX_POSTINGS = 3000
# Document frequencies reused for this long, across connections (keyed by database, pair, term).
FREQUENCY_TTL_S = 10.0
FREQUENCY_CACHE_SIZE = 100_000
# How many times `limit` turns, by matched words, are ranked with their lengths.
SHORTLIST_FACTOR = 4
