"""What both backends read of a message: the columns, in `Message`'s order, and what was said."""

from __future__ import annotations

# What a read returns, in `Message`'s order.
READ_COLUMNS = (
    "id, agent_id, user_id, character_id, seq, role, kind, content, turn_id, ts_ms, at_ms, "
    "source, speaker, interrupted, interrupt_ms, original, gap_before, extra, images"
)
# What window merging needs of a stored message, in `MessageFingerprint`'s order.
FINGERPRINT_COLUMNS = (
    "id, seq, role, fp, gap_before, turn_id, ts_ms, source, speaker, interrupted, interrupt_ms, original, "
    "images"
)
# Memory, summaries and transcripts read what was said; tool calls and results are kept
# (export, GET …/messages) but were never said.
SPOKEN = "kind = 'turn'"
