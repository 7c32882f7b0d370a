"""The one JSON encoding the service writes (compact, UTF-8 text kept as is), and how it is read back."""

from __future__ import annotations

import json
from typing import Any

_SEPARATORS = (",", ":")


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII text unescaped (storage columns and HTTP bodies alike)."""
    return json.dumps(value, ensure_ascii=False, separators=_SEPARATORS)


def loads_object(text: str | None) -> dict[str, Any]:
    """A stored JSON object; {} for none (or for text that is not one)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
