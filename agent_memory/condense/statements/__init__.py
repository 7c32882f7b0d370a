"""The user's self-statements read without a language model: the facts each sentence states, per language."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from agent_memory.condense.statements.chinese import ZH_HYPOTHETICAL, ZH_STATEMENTS, zh_event, zh_statement
from agent_memory.condense.statements.english import (
    EN_ASKING,
    EN_EVENT,
    EN_HYPOTHETICAL,
    EN_MATCHERS,
    EN_NEGATION,
    EN_SELF,
    EN_STATEMENTS,
    en_candidates,
    en_event,
    en_statement,
)
from agent_memory.condense.statements.korean import KO_HYPOTHETICAL, KO_STATEMENTS, ko_statement
from agent_memory.condense.text import (
    HAN,
    HANGUL,
    LATIN,
    QUESTION,
    Caseless,
    clause_so_far,
    fold_ascii,
    sentences,
)
from agent_memory.core.clock import format_day
from agent_memory.core.dates import resolve
from agent_memory.core.textcache import text_cache

# Asked of every sentence, matched on it lower-cased (`Caseless`).
_EN_SELF, _EN_EVENT = Caseless(EN_SELF), Caseless(EN_EVENT)


def _when(sentence: str, match: re.Match[str], at_ms: int) -> str:
    """When the clause of `match` says something happened: its resolved date, else the day said."""
    mentions = resolve(clause_so_far(sentence, match), at_ms)
    return mentions[0].label if mentions else format_day(at_ms)


def _restated(
    sentence: str,
    at_ms: int,
    patterns: Sequence[tuple[str, re.Pattern[str]]],
    restate: Callable[[str, re.Match[str], str], str | None],
    qualifier: re.Pattern[str] | None = None,
    negation: re.Pattern[str] | None = None,
    needs: Sequence[re.Pattern[str] | None] = (),
    finders: Sequence[Callable[[str], Iterator[re.Match[str]]]] = (),
    candidates: Sequence[int] | None = None,
) -> list[tuple[int, str]]:
    """Each match of `patterns` restated as a fact, with where it starts; a match `negation`
    finds in, or whose clause `qualifier` finds in (a hypothetical), is none. `needs[i]`: what
    the sentence must hold for `patterns[i]` to be tried (a cheap search that fails fast);
    `finders[i]`: how its matches are found, when not by `finditer`; `candidates`: the indexes
    of the only patterns that can match (their needs met), in order."""
    day = format_day(at_ms)
    found: list[tuple[int, str]] = []
    passed: dict[re.Pattern[str], bool] = {}
    tried = range(len(patterns)) if candidates is None else candidates
    for index in tried:
        kind, pattern = patterns[index]
        need = needs[index] if needs and candidates is None else None
        if need is not None:
            if need not in passed:
                passed[need] = need.search(sentence) is not None
            if not passed[need]:
                continue
        for match in (finders[index] if finders else pattern.finditer)(sentence):
            if negation and negation.search(match.group(0)):
                continue
            if qualifier and qualifier.search(clause_so_far(sentence, match)):
                continue
            # A move is dated by when it happened; a state by the day it was said.
            fact = restate(kind, match, _when(sentence, match, at_ms) if kind == "moved" else day)
            if fact:
                found.append((match.start(), fact))
    return found


def sentence_facts(sentence: str, at_ms: int) -> list[str]:
    """Facts from what the user says about themselves in one sentence, said at `at_ms`."""
    return list(_sentence_facts(sentence, at_ms))


# A job asks this of each user sentence twice (its facts, then its salience): ~50 us of
# regular expressions each. Emptied with the other text caches by a forget.
@text_cache(16384)
def _sentence_facts(sentence: str, at_ms: int) -> tuple[str, ...]:
    stripped = sentence.strip()
    if QUESTION.search(stripped):
        return ()
    found: list[tuple[int, str]] = []
    # Each English pattern (and event clause) has the user speak of themselves: "I", "we" or "my",
    # a whole word; a sentence with none of them (most of the other speaker's) is passed by.
    folded = fold_ascii(stripped)
    if LATIN.search(stripped) and not EN_ASKING.match(stripped) and _EN_SELF.search(stripped, folded):
        found += _restated(
            stripped,
            at_ms,
            EN_STATEMENTS,
            en_statement,
            EN_HYPOTHETICAL,
            EN_NEGATION,
            finders=EN_MATCHERS,
            candidates=en_candidates(stripped),
        )
        # The clause must hold an event word, so the sentence must.
        event = en_event(stripped, at_ms) if _EN_EVENT.search(stripped, folded) else None
        if event:
            found.append(event)
    if HAN.search(stripped):
        found += _restated(stripped, at_ms, ZH_STATEMENTS, zh_statement, ZH_HYPOTHETICAL)
        event = zh_event(stripped, at_ms)
        if event:
            found.append(event)
    if HANGUL.search(stripped) and not KO_HYPOTHETICAL.search(stripped):
        found += _restated(stripped, at_ms, KO_STATEMENTS, ko_statement)
    return tuple(fact for _, fact in sorted(found, key=lambda item: item[0]))


def statement_facts(text: str, at_ms: int) -> list[str]:
    """Facts from the user's self-statements in `text`, said at `at_ms`, in order."""
    return [fact for sentence in sentences(text) for fact in sentence_facts(sentence, at_ms)]
