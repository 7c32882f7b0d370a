"""The images of a turn: what is kept of each, never rendered into memory text.

A turn's content may be a list of parts (OpenAI's `{"type": "image_url", "image_url": {"url":
…}}`, or Agora's sample `{"type": "image", "image_url": "…"}`). What was shown belongs with
what was said, so each image is kept with its turn, as little of it as says what it was: an
`http(s)` URL as sent (up to `MAX_URL_BYTES`), and of a `data:` URL only its media type and
size (the image itself is the user's data and can be megabytes). Anything else is dropped,
and the reason counted, never the URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote_to_bytes

# An http(s) URL longer than this (in UTF-8 bytes) is not kept: a link that long is data
# smuggled into a URL, not a reference to an image.
MAX_URL_BYTES: Final = 4096
# Images kept of one turn; a turn carrying more keeps the first ones.
MAX_IMAGES_PER_TURN: Final = 16
IMAGE_PART_TYPES: Final = frozenset({"image_url", "image", "input_image"})
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w.+-]{0,63}/[A-Za-z0-9][\w.+-]{0,63}")
_SPACE = re.compile(rb"\s+")

# A kept image, as stored (JSON) and answered: {"kind": "url", "url": …} or
# {"kind": "data", "media_type": … or None, "size_bytes": …}.
Image = dict[str, Any]


def _url_of(part: Mapping[str, Any]) -> Any:
    """The URL an image part names: `image_url` as an object with `url`, or as the URL itself."""
    value = part.get("image_url")
    if isinstance(value, Mapping):
        return value.get("url")
    return value if value is not None else part.get("url")


def data_image(url: str) -> Image | None:
    """A `data:` URL's media type and decoded size; None when it is not one."""
    header, comma, payload = url[5:].partition(",")
    if not comma:
        return None
    params = header.split(";")
    media = params[0].strip().lower()
    raw = payload.encode("utf-8", "surrogatepass")
    if any(param.strip().lower() == "base64" for param in params[1:]):
        body = _SPACE.sub(b"", raw)
        # Decoded size without decoding: three bytes per four characters, less the padding.
        size = max(len(body) * 3 // 4 - (len(body) - len(body.rstrip(b"="))), 0)
    else:
        size = len(unquote_to_bytes(raw))
    return {
        "kind": "data",
        "media_type": media if _MEDIA_TYPE.fullmatch(media) else None,
        "size_bytes": size,
    }


def kept_image(url: Any) -> tuple[Image | None, str | None]:
    """What is kept of an image URL, or None and why it is not (a reason without the URL)."""
    if not isinstance(url, str) or not url.strip():
        return None, "no URL"
    url = url.strip()
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        image = data_image(url)
        return (image, None) if image is not None else (None, "malformed data: URL")
    if scheme not in ("http", "https"):
        return None, f"scheme {scheme[:16]!r} not kept" if scheme else "not a URL"
    try:
        size = len(url.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: not a URL anyone can fetch
        return None, "URL is not valid UTF-8"
    if size > MAX_URL_BYTES:
        return None, f"URL over {MAX_URL_BYTES} bytes"
    return {"kind": "url", "url": url}, None


def images_of(parts: Sequence[Any]) -> tuple[list[Image], list[str]]:
    """The images kept of a content parts list, and why each other image part was dropped."""
    kept: list[Image] = []
    dropped: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping) or part.get("type") not in IMAGE_PART_TYPES:
            continue
        image, why = kept_image(_url_of(part))
        if image is None:
            dropped.append(why or "unreadable")
        elif len(kept) >= MAX_IMAGES_PER_TURN:
            dropped.append(f"more than {MAX_IMAGES_PER_TURN} images in one turn")
        else:
            kept.append(image)
    return kept, dropped
