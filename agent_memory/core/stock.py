"""Stock sentences: what people say over and over ("Of course. Take your time.", "It took forever
but it was worth it.", 真想再来一次。) matches a question's words without saying anything about it.

Recall ranks a pair's turns by the question's words (`core.recall`). A word matched only inside
a sentence said word for word in several of the candidate turns found (a greeting, a stock
reply, a catchphrase a speaker closes their news with) does not tell which turn answers: the
turn's news is in its other sentences. So a memory keeps the share of its score that its
other sentences match (`stock_shares`), and a turn whose only match is a stock phrase falls
below those whose own news matches.

Counted among the candidates of one question, not over the whole history: no index is needed,
and a sentence repeated only elsewhere in the history does not count. Measured with
`bench/recall_hard.py` (the life and hard sets): see `core.recall.RANKED`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import TypeVar

from agent_memory.core.terms import cached_terms
from agent_memory.core.textcache import text_cache

# A sentence said word for word (case and spacing aside) in this many different candidate turns
# is stock. Two is not enough: a turn and its speaker's retelling, or two tellings of one piece
# of news; and a turn said again whole counts once (a line repeated is one telling, not stock).
STOCK_TIMES = 3
S = TypeVar("S")
SENTENCE = re.compile(r"[^.!?。！？]+(?:[.!?。！？]+[\"')”’]*\s*|$)")


@text_cache(8192)
def sentence_keys(text: str) -> tuple[str, ...]:
    """The sentences of `text`, each folded (case and spacing aside): the text whole if it has none."""
    found = tuple(" ".join(part.casefold().split()) for part in SENTENCE.findall(text) if part.strip())
    return found or (" ".join(text.casefold().split()),)


def stock_shares(turns: Sequence[str], texts: Sequence[str], idfs: Mapping[str, float]) -> list[float]:
    """For each of `texts`, the share of its matched idfs (`idfs`: the question's weighted terms)
    that its sentences other than stock ones hold: stock sentences are those said in at least
    `STOCK_TIMES` different texts of `turns` (the candidate turns). 1.0 for a text that matches nothing."""
    said = Counter(chain.from_iterable(map(frozenset, set(map(sentence_keys, turns)))))
    stock = {key for key, times in said.items() if times >= STOCK_TIMES}
    shares: list[float] = []
    for text in texts:
        keys = sentence_keys(text)
        if stock.isdisjoint(keys):  # most texts: nothing to weigh
            shares.append(1.0)
            continue
        found: set[str] = set()
        fresh: set[str] = set()
        for key in keys:
            words = idfs.keys() & cached_terms(key)
            found |= words
            if key not in stock:
                fresh |= words
        matched = sum(idfs[term] for term in found)
        shares.append(sum(idfs[term] for term in fresh) / matched if matched else 1.0)
    return shares


def without_stock(
    scored: Sequence[tuple[float, int, str, S]], is_turn: Callable[[S], bool], idfs: Mapping[str, float]
) -> list[tuple[float, int, str, S]]:
    """Recall's scored memories (score, when, text, source), each score times its `stock_shares`
    share; the stock sentences are counted in the texts whose source `is_turn`."""
    turns = [text for _, _, text, source in scored if is_turn(source)]
    shares = stock_shares(turns, [text for _, _, text, _ in scored], idfs)
    return [
        (score * share, at_ms, text, source)
        for (score, at_ms, text, source), share in zip(scored, shares, strict=True)
    ]
