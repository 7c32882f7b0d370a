"""What a summary's lines count, kept as lines come and go (the offline condenser's trimming)."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.core.tokens import count_tokens


@dataclass
class Tally:
    """Tokens (as `offline.lines_tokens` counts them, line by line), characters and number of lines."""

    tokens: int = 0
    chars: int = 0
    lines: int = 0

    def add(self, line: str, sign: int = 1) -> None:
        """Count `line` in (`sign` 1) or out (-1)."""
        self.tokens += sign * (count_tokens(line) + 1)
        self.chars += sign * len(line)
        self.lines += sign

    def fits(self, max_tokens: int, max_chars: int) -> bool:
        """What `offline.fits` says of the lines counted."""
        joined = self.chars + self.lines - 1 if self.lines else 0
        return self.tokens <= max_tokens and joined <= max_chars
