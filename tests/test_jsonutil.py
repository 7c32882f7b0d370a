"""read_json: orjson reads the common body, and gives what the standard library's reading gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_memory.core.jsonutil import MAX_JSON_DEPTH, read_json
from agent_memory.errors import InvalidJSON

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.json"))
BODIES = [
    b'{"a": 1, "a": 2}',  # the last of a repeated key
    b"[0, -0, -0.0, 1.5, 3.141592653589793, 0.1, 100000000000000000, 999999999999999999]",
    b"[9223372036854775807, -9223372036854775808, 18446744073709551615, 18446744073709551616]",
    b"123456789012345678901234567890",  # past 64 bits: an integer, not a float
    b'"caf\\u00e9 \\ud83d\\ude00 \\n\\t\\"\\\\/"',
    '{"名字": "小月", "emoji": "😀"}'.encode(),
    b' \n\t{ "nested" : [ [ [ { } ] ] , [ ] ] } \n',
    b'[1e308, -2.5E-3, 1.7976931348623157e308, 5e-324, 3e0, "3e0"]',  # exponents within range
    b"true",
    b"null",
    b'""',
]


def standard(body: bytes) -> object:
    return json.loads(body.decode("utf-8"))


@pytest.mark.parametrize("body", BODIES + [path.read_bytes() for path in FIXTURES])
def test_a_body_reads_as_the_standard_library_reads_it(body: bytes) -> None:
    found = read_json(body)
    assert found == standard(body)
    assert json.dumps(found) == json.dumps(standard(body))  # the same types: ints stay ints, -0.0 stays


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"a": NaN}', "NaN"),
        (b"\xff{}", "not UTF-8"),
        (b'{"a": ', "not valid JSON"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),  # a byte-order mark
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "deeper than"),
        (b"1e400", "too large"),
        (b'{"a": 1} x', "not valid JSON"),
    ],
)
def test_a_body_it_refuses_is_refused_saying_why(body: bytes, says: str) -> None:
    with pytest.raises(InvalidJSON, match=says):
        read_json(body)


def test_a_lone_surrogate_becomes_a_replacement_character() -> None:
    assert read_json(b'{"t": "cut \\ud83d"}') == {"t": "cut \ufffd"}
