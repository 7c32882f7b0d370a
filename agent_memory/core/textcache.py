"""Caches keyed by remembered text, and emptying them all when a memory is forgotten."""

from __future__ import annotations

from collections.abc import Callable
from functools import _lru_cache_wrapper, lru_cache
from typing import Any, TypeVar

T = TypeVar("T")

_CACHES: list[_lru_cache_wrapper[Any]] = []


def text_cache(maxsize: int) -> Callable[[Callable[..., T]], _lru_cache_wrapper[T]]:
    """`functools.lru_cache`, emptied by `forget_texts`: what it holds are words someone said."""

    def wrap(fn: Callable[..., T]) -> _lru_cache_wrapper[T]:
        cached = lru_cache(maxsize=maxsize)(fn)
        _CACHES.append(cached)
        return cached

    return wrap


def forget_texts() -> None:
    """Empty every text cache: after a forget, none of its words stay in this process's memory."""
    for cached in _CACHES:
        cached.cache_clear()


def held_texts() -> int:
    """How many entries the text caches hold."""
    return sum(cached.cache_info().currsize for cached in _CACHES)
