"""The bounds of what the API and the CLI accept, written once: both read them here.

Pure constants, so that the CLI applies the HTTP API's limits without importing aiohttp.
"""

from __future__ import annotations

from typing import Final

# A token budget (max_tokens of system-messages, recall, an agent's start and watch).
MIN_TOKENS: Final = 50
MAX_TOKENS: Final = 200_000
# A persona travels in the query string (web/app.py lets a line this long through).
MAX_PERSONA_CHARS: Final = 20_000
# A question (q) and what a call is about (query).
MAX_QUERY_CHARS: Final = 500
# Epoch milliseconds: the largest integer a JSON number holds exactly.
MAX_MS: Final = 2**53
MAX_CHANNEL_BYTES: Final = 64  # Agora's limit for a channel name
# How many a list answers: (default, most) per list.
MESSAGES_LIMIT: Final = (100, 1000)
JOBS_LIMIT: Final = (100, 1000)
MENTIONS_LIMIT: Final = (100, 1000)
SEARCH_LIMIT: Final = (20, 100)
# The generic write API (POST …/messages): messages in one post, the words of one, and the
# length of a session_id or a message's id.
MAX_POSTED_MESSAGES: Final = 1000
MAX_MESSAGE_CHARS: Final = 32_000
MAX_SOURCE_ID_CHARS: Final = 256
# How far ahead of this service's clock a message may be dated (clocks drift): a message dated
# later could be posted again after a forget and kept, as said after it.
MAX_FUTURE_SKEW_MS: Final = 10 * 60 * 1000
# GET /v1/users: a page of users (default, most).
USERS_LIMIT: Final = (50, 500)
