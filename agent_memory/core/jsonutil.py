"""The one JSON encoding the service writes (compact, UTF-8 text kept as is), and how it is read back.

`read_json` is the one reader of JSON that comes from outside (webhook, /v1 bodies, the
custom-LLM endpoint, Agora's REST answers): whatever it is given, it returns a value every
store can keep, or raises InvalidJSON saying what to fix — never another exception.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from itertools import accumulate
from typing import Any

import orjson

from agent_memory.errors import InvalidJSON

_SEPARATORS = (",", ":")

# How deeply arrays and objects may nest. Agora's callbacks nest about 6 levels and a
# custom-LLM request with tool schemas a few more; Python's parser itself fails near 1,000
# (RecursionError), at a depth that depends on the stack it runs on.
MAX_JSON_DEPTH = 128
# JSON numbers must fit a 64-bit float (RFC 7493 I-JSON); Python would also read an integer of
# up to 4,300 digits (and fail beyond), which no field of ours can use.
_FLOAT_MAX = sys.float_info.max
_FLOAT_MAX_DIGITS = len(str(int(_FLOAT_MAX)))
# Only a number with this many digits, or an exponent, can be past the float range: bodies
# without either are read by the C parser alone, with no Python call per number. (Found on a
# copy with every digit made "0" and "E" made "e": a plain search, many times faster than a regex.)
_DIGITS = bytes.maketrans(b"0123456789E", b"0000000000e")
_LONG_NUMBER = b"0" * _FLOAT_MAX_DIGITS
# orjson reads an integer past 64 bits as a float: a run of this many digits is left to the
# standard library, which keeps it an integer.
_LONG_INTEGER = b"0" * 19
_TOO_LARGE = (
    "the body holds a number too large to read (JSON numbers must fit a 64-bit float, "
    f"at most about {_FLOAT_MAX:.1e})"
)
# A lone UTF-16 surrogate ("\ud800", a reply cut in the middle of an emoji) is valid JSON but
# no store can keep it (UTF-8 cannot encode it; PostgreSQL refuses it): it becomes U+FFFD.
# Strict UTF-8 decoding lets surrogates in only through `\u` escapes (or text handed in as str).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# Strings removed, brackets kept (as +1 / -1 steps), to measure the nesting without parsing.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class _Refused(Exception):
    """A value the parser met that the body may not hold."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"the body holds {name}, which JSON does not allow: send a number or null")


def _checked_int(digits: str) -> int:
    if len(digits.lstrip("-")) > _FLOAT_MAX_DIGITS:
        raise _Refused(_TOO_LARGE)
    value = int(digits)
    if abs(value) > _FLOAT_MAX:
        raise _Refused(_TOO_LARGE)
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(_TOO_LARGE)
    return value


_PLAIN = json.JSONDecoder(parse_constant=_refuse_constant)
_CHECKED = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_int=_checked_int, parse_float=_checked_float
)
# Integers below _FLOAT_MAX_DIGITS digits all fit, so only floats need checking when the one
# sign is a digit before an "e" (an exponent, or as often a hex id's "3e"): integers stay in C.
_FLOATS = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_checked_float)


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


def read_json(body: bytes | str) -> Any:
    """A JSON body from outside as a value every store can keep; InvalidJSON saying what is wrong.

    UTF-8 only; at most MAX_JSON_DEPTH levels of nesting; numbers within a 64-bit float's range;
    no NaN or Infinity; a lone surrogate in a string or key becomes U+FFFD.
    """
    if isinstance(body, str):
        text, raw = body, body.encode("utf-8", "surrogatepass")
        surrogates = _SURROGATE.search(text) is not None
    else:
        raw = body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidJSON(f"the body is not valid JSON: it is not UTF-8 ({exc})") from None
        surrogates = False
    surrogates = surrogates or (b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None)
    refuse_deep(raw)
    numbers = raw.translate(_DIGITS)
    if not surrogates and _LONG_INTEGER not in numbers:
        # The common body (no long number, no surrogate to replace) in orjson's C parser, ~4x the
        # standard library's; it refuses a float past the range, and what it refuses is read
        # below, which says what is wrong.
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    decoder = _CHECKED if _LONG_NUMBER in numbers else _FLOATS if b"0e" in numbers else _PLAIN
    try:
        value = decoder.decode(text)
    except _Refused as exc:
        raise InvalidJSON(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"the body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # defence in depth: the checks above prevent both
        raise InvalidJSON(f"the body cannot be read as JSON: {type(exc).__name__}") from None
    return _without_surrogates(value) if surrogates else value


def refuse_deep(raw: bytes, what: str = "the body") -> None:
    """InvalidJSON when `raw` nests arrays and objects deeper than MAX_JSON_DEPTH (counted cheaply first)."""
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and nesting(raw) > MAX_JSON_DEPTH:
        raise InvalidJSON(
            f"{what} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels, the most accepted"
        )


def nesting(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings not counted)."""
    # Without escaped quotes, every other piece between quotes is outside the strings.
    outside = _STRING.sub(b"", raw) if b'\\"' in raw else b"".join(raw.split(b'"')[::2])
    steps = outside.translate(None, _NOT_BRACKETS).translate(_STEPS)
    return max(accumulate(array("b", steps)), default=0)


def _without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate of its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    return value
