"""The one JSON encoding the service writes: compact, UTF-8 text kept as is."""

from __future__ import annotations

import json
from typing import Any

_SEPARATORS = (",", ":")


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII text unescaped (storage columns and HTTP bodies alike)."""
    return json.dumps(value, ensure_ascii=False, separators=_SEPARATORS)
