"""The words recall matches on: one function for what is indexed and what is asked.

Latin-script words are case-folded, stripped of possessives, filtered against a stop list and
stemmed (Snowball's English stemmer, so "classes" and "class", "researching" and "research"
meet). Chinese and Japanese, written without spaces, become overlapping character bigrams
(考试 in 我明天考试 and in 考试怎么样), the classic way to index them without a dictionary, and
each Chinese character (a Han ideograph) is a term too: a one-character word (马 in 我对马过敏)
or a word said apart (搬家 and 搬的家) shares no bigram with a question, only characters, which
weigh less than a bigram when asked (`CHARACTER_WEIGHT`; a bigram matched brings its
characters along). The usual unigram-and-bigram index of CJK retrieval; kana are not
characters of meaning and get no unigrams. Korean words carry their particles (학교에, 학교는), so Hangul is
split into syllable bigrams too. Numbers are kept whole ("2023", "3pm" -> "3", "pm").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import snowballstemmer  # type: ignore[import-untyped]

from agent_memory.core.textcache import text_cache

# Runs of one script: Latin-ish words (letters, digits, inner apostrophes), Han/kana, Hangul.
_HAN_CHARS = r"\u3005\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HANGUL_CHARS = r"\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
# A word's letters are not Han or Hangul: "HSK五级考试" is the word "hsk" and the run 五级考试
# (Han and Hangul are letters to `\w`, so a Latin word would run on into them).
_LETTER = rf"[^\W\d_{_HAN_CHARS}{_HANGUL_CHARS}]"
_TOKEN = re.compile(
    rf"(?P<han>[{_HAN_CHARS}]+)"
    rf"|(?P<hangul>[{_HANGUL_CHARS}]+)"
    r"|(?P<number>\d+(?:[.,]\d+)*)"
    rf"|(?P<word>{_LETTER}+(?:['’]{_LETTER}+)*)"
)
# `_TOKEN` on an ASCII text (case folded): its numbers, then its words (letters are a-z there).
_ASCII_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[a-z]+(?:'[a-z]+)*")
# Han ideographs: each is also indexed and asked alone (kana, 々 and 〇 are not).
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# `_TOKEN`'s han runs (ideographs and kana).
_HAN_RUN = re.compile(f"[{_HAN_CHARS}]+")
# A text with any of these is indexed otherwise since characters became terms (m022 / m012).
CJK = re.compile(f"[{_HAN_CHARS}{_HANGUL_CHARS}]")
MAX_WORD_CHARS = 40  # longer "words" are noise (URLs, IDs run together) and bloat the index

STOP_WORDS: Final = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
    each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
    hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's
    me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves out over
    own same shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs
    them themselves then there there's these they they'd they'll they're they've this those through to too
    under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're you've
    your yours yourself yourselves also just really yeah yes oh ok okay hey hi hello um uh like well so get
    got gonna wanna thing things much many lot lots one ever still even sure though thanks thank kind sort
    maybe actually pretty tell told say said know think going go goes way something anything everything
    """.split()  # noqa: SIM905
)
# Bigrams of Chinese function words and question scaffolding: they match everywhere.
CJK_STOP: Final = frozenset(
    """
    什么 时候 怎么 为什么 我们 你们 他们 她们 一个 这个 那个 这样 那样 是不 不是 没有 可以 就是 还是 因为 所以 但是 然后 如果 已经 现在 自己 知道 觉得 的话 一下 一些 有点 真的
    哪里 哪个 多少 吗？ 了吗 的是 是什 么时 候的
    """.split()  # noqa: SIM905
)

_stemmer = snowballstemmer.stemmer("english")


@text_cache(65536)
def stem(word: str) -> str:
    """The Snowball stem of a case-folded word (cached: the stemmer is pure Python)."""
    return str(_stemmer.stemWord(word))


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str) -> list[str]:
    """The index terms of `text`, in order, repeats kept (a term's count is its frequency)."""
    folded = text.casefold()
    if folded.isascii():
        # Most turns: `_TOKEN` can only find numbers and words in them, so a plain pattern of
        # those two reads the same tokens (twice as fast as the Unicode classes), and each is
        # looked up as a whole (`_ascii_term`), the loop in C.
        return [term for term in map(_ascii_term, _ASCII_TOKEN.findall(folded)) if term]
    return _folded_terms(folded)


def _folded_terms(folded: str) -> list[str]:
    """`terms` of a case-folded text, any script (`_TOKEN`)."""
    found: list[str] = []
    # findall's tuples (one group set each) cost less than a match object per token; a word's
    # term is looked up: every turn indexed goes through here, ~a dozen words each.
    for han, hangul, number, word in _TOKEN.findall(folded):
        if word:
            term = _word_term(word)
            if term:
                found.append(term)
        elif number:
            found.append(number.replace(",", ""))
        else:
            run = han or hangul
            found.extend(gram for gram in _bigrams(run) if gram not in CJK_STOP)
            if han and len(run) > 1:  # a lone character is its own (and only) term already
                found.extend(HAN.findall(run))
    return found


def is_character(term: str) -> bool:
    """Whether `term` is one Chinese character."""
    return len(term) == 1 and HAN.match(term) is not None


def text_length(text: str, found: Sequence[str]) -> int:
    """A text's length for BM25: its `terms` (`found`) less the characters added beside its
    bigrams (a second reading of the same words, not more of them: a long turn is not made
    to weigh less than a short one by its characters)."""
    if text.isascii():
        return len(found)
    added = sum(len(HAN.findall(run)) for run in _HAN_RUN.findall(text) if len(run) > 1)
    return len(found) - added


@text_cache(1024)
def character_parts(text: str) -> frozenset[str]:
    """The Chinese characters `terms` adds for runs of two or more (weighed as `CHARACTER_WEIGHT`
    when asked); a character said alone (号 in 22号) is a word, and weighs as one."""
    return frozenset(found for run in _HAN_RUN.findall(text) if len(run) > 1 for found in HAN.findall(run))


@text_cache(65536)
def _word_term(token: str) -> str:
    """The term of a case-folded word token; "" for none (a stop word, a contraction, too short or long)."""
    word = token.replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    if word in STOP_WORDS or len(word) > MAX_WORD_CHARS or len(word) == 1:
        return ""
    if "'" in word:
        return ""  # contractions not in the stop list ("y'all") carry no content
    return stem(word)


@text_cache(65536)
def _ascii_term(token: str) -> str:
    """The term of an ASCII token `_ASCII_TOKEN` found: a number without its commas, or a word's."""
    return token.replace(",", "") if token[0].isdigit() else _word_term(token)


@text_cache(8192)
def cached_terms(text: str) -> tuple[str, ...]:
    """`terms` of a text read again and again (facts, summary lines), computed once."""
    return tuple(terms(text))


def query_terms(text: str) -> list[str]:
    """The distinct terms of a question, first occurrence first."""
    return list(dict.fromkeys(cached_terms(text)))


# A Chinese character asked weighs this much (a bigram 1): it says less than a word, and a
# character in more than `core.recall.RELATED_SHARE` of the turns is left out of the question as a related
# word is (的, 我, 了 are in most). Measured on bench/recall_hard.py's dev seeds (11, 12): 0.3,
# 0.5 and 1.0 gave 72.8/76.7, 74.4/77.2 and 73.9/80.0 % at 500 tokens; 0.5 was chosen before
# (between the two: a matched bigram already counts its characters), not tuned further.
CHARACTER_WEIGHT = 0.5
