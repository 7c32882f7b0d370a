"""A statement's gist: the sentences of it that tell what is seldom said.

People wrap what they tell in what they say to everyone ("Oh wow, okay. I finally finished
The Salt Orchard, the ending wrecked me. Anyway, that's my news."). A digest that quotes whole
turns spends much of its budget on the wrapping (on bench/recall_hard.py's life set a summary
held 23 statements a user where 43 fit). A sentence's specificity is the inverse document
frequency of the words it uses, over the pair's whole history where the condensing job read it
from the recall index (`History`), else over its call: a reaction, a stock phrase, a question
back or the everyday round uses words said again and again; news uses words said once. The gist
keeps the most specific sentence and those nearly as specific, in the order said; and a
statement's specificity counts toward quoting it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from agent_memory.condense.text import ELLIPSIS, QUESTION, clip, salutation, sentences
from agent_memory.core.terms import cached_terms

# A gist's sentences together, at most (a single sentence may be longer, up to the caller's limit).
GIST_MAX_CHARS = 200
# A further sentence is kept when it is at least this share as specific as the most specific.
GIST_SHARE = 0.6
# A question asks rather than tells: it counts this share of its specificity.
QUESTION_SHARE = 0.5
# A name (a capitalised word past a sentence's first) is what a statement is most about: its
# terms count this many times ("Back from Lapland!" beside "Sunburnt, broke and happy.").
NAME_WEIGHT = 2.0
NAME = re.compile(r"(?<=\S\s)[A-Z][\w'-]*")
# A statement none of whose words the pair said in this few turns or fewer retells the everyday
# round, however many words it has ("So Elena had a birthday picnic in the rain", said of one
# acquaintance after another): what it tells counts this share.
NEWS_TURNS = 2
ROUND_SHARE = 0.5


@dataclass(frozen=True)
class History:
    """How many of a pair's indexed turns use each term (of those asked), and how many there are."""

    term_turns: Mapping[str, int]
    turns: int


NO_HISTORY = History({}, 0)


@dataclass(frozen=True)
class Call:
    """How many statements use each term, in a call and in its pair's history: what is common talk."""

    using: Counter[str]
    statements: int
    history: History

    @classmethod
    def of(cls, texts: Iterable[str], history: History = NO_HISTORY) -> Call:
        """The counts of the statements `texts`, beside their pair's `history`."""
        using: Counter[str] = Counter()
        statements = 0
        for text in texts:
            using.update(set(cached_terms(text)))
            statements += 1
        return cls(using, statements, history)

    def specificity(self, sentence: str) -> float:
        """The inverse document frequencies of the terms `sentence` uses (a question's count less;
        a greeting or a goodbye's nothing)."""
        return self.weigh(sentence)[0]

    def weigh(self, sentence: str) -> tuple[float, int]:
        """`sentence`'s specificity, and the fewest statements or turns any of its terms is said
        in (of the call's and of its pair's history; a greeting or a goodbye's: 0.0 and 0)."""
        if salutation(sentence):
            return 0.0, 0
        # The history may not hold the call yet (the index catches up after the turns are
        # stored): a term counts as often as the more of the two saw it.
        history, using = self.history, self.using
        term_turns = history.term_turns
        total = max(self.statements, history.turns) + 1
        names = {term for name in NAME.findall(sentence) for term in cached_terms(name)}
        told, fewest = 0.0, total
        for term in set(cached_terms(sentence)):
            said = max(using[term], term_turns.get(term, 0))
            fewest = min(fewest, said)
            told += math.log(total / (said + 0.5)) * (NAME_WEIGHT if term in names else 1.0)
        return (told * QUESTION_SHARE if QUESTION.search(sentence) else told), fewest

    def told(self, text: str) -> int:
        """What quoting `text` tells, on salience's scale: its specificity, where the pair's
        history gives one (a call's own counts alone say too little to rank its statements); a
        share of it when no word of it is news (`news`)."""
        return self.telling(text)[0]

    def telling(self, text: str) -> tuple[int, bool]:
        """`told`, and whether `text` is news (`news`): (0, True) without a pair's history."""
        if not self.history.turns:
            return 0, True
        told, fewest = self.weigh(" ".join(part for part in sentences(text) if not salutation(part)))
        news = fewest <= NEWS_TURNS
        return round(told if news else told * ROUND_SHARE), news

    def news(self, text: str) -> bool:
        """Whether `text` uses a word said in at most `NEWS_TURNS` of the call's statements and of
        its pair's turns (what is said once or twice in a life is news; the rest is its round)."""
        return self.telling(text)[1]


def gist(text: str, call: Call, limit: int) -> str:
    """The sentences of `text` that tell most (in order, "…" where some between were left out),
    at most `limit` characters."""
    parts = sentences(text)
    if len(parts) <= 1:
        return clip(text, limit)
    scores = [call.specificity(part) for part in parts]
    ranked = sorted(range(len(parts)), key=lambda i: (-scores[i], i))
    kept = [ranked[0]]
    used = len(parts[ranked[0]])
    for index in ranked[1:]:
        if scores[index] < GIST_SHARE * scores[ranked[0]]:
            break
        if used + len(parts[index]) + len(ELLIPSIS) + 2 <= GIST_MAX_CHARS:
            kept.append(index)
            used += len(parts[index]) + len(ELLIPSIS) + 2
    kept.sort()
    out = parts[kept[0]]
    for before, index in pairwise(kept):
        out += (" " if index == before + 1 else f" {ELLIPSIS} ") + parts[index]
    return clip(out, limit)
