"""How informative a statement looks, as the offline condenser ranks what to quote and what to trim.

Length, numbers, dates (written or resolved by `core.dates`), names, events, jobs, feelings
and "I/my …" count for a statement; a question, or news of an acquaintance, against it. A
request to remember, a self-introduction or a self-statement (`statements`) counts most.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from agent_memory.condense.facts_offline import introductions, remember_requests
from agent_memory.condense.statements import statement_facts
from agent_memory.condense.statements.chinese import ZH_EVENTS, ZH_JOBS
from agent_memory.condense.statements.english import EN_EVENT, EN_EVENTS, EN_JOB, JOB_WORDS
from agent_memory.condense.text import QUESTION, Caseless, fold_ascii
from agent_memory.core.clock import format_day
from agent_memory.core.dates import resolve
from agent_memory.core.textcache import text_cache
from agent_memory.core.tokens import count_tokens

FIRST_PERSON = re.compile(
    r"\b(?:i am|i'm|i have|i've|i like|i love|i hate|i want|i need|i work|i live|i'll|my|mine)\b"
    r"|我(?:叫|是|的|喜欢|爱|住|在|有|要|想|不)|(?:제가|저는|제|내가|나는|내)\s|좋아|싫어"
    r"|(?:私|僕|俺)(?:は|の|が)|好き",
    re.IGNORECASE,
)
DATE_WORDS = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|tomorrow|tonight|weekend|next week|next month|birthday|anniversary)\b"
    r"|\d+\s*[号日月년월일]|星期|周[一二三四五六日末]|明天|后天|下周|生日|요일|내일|다음\s?주|생일"
    r"|曜日|明日|来週|誕生日",
    re.IGNORECASE,
)
FEELINGS = re.compile(
    r"\b(?:love[ds]?|hate[ds]?|favou?rite|prefer|enjoy(?:ed)?|excited|nervous|scared|afraid|proud|happy"
    r"|sad|worried|anxious|thrilled|grateful|miss(?:ed)?|passionate|amazing|terrible)\b"
    r"|喜欢|最爱|讨厌|紧张|开心|难过|担心|害怕|激动|骄傲|좋아|싫어|행복|긴장|슬퍼|好き|嫌い",
    re.IGNORECASE,
)
DIGITS = re.compile(r"\d")
# A statement about an acquaintance ("My boss flew to …", "我同事…") says less about the user.
OTHERS_NEWS = re.compile(
    r"(?:[\w\s,]*?\b)?[Mm]y (?:friend|colleague|coworker|co-worker|boss|neighbou?r|cousin|roommate|classmate)"
    r"|.{0,6}?我?(?:同事|朋友|邻居|老板|表妹|表弟|表姐|表哥|同学|室友)"
)
# A capitalised word after a lower-case word or comma is likely a name (not a sentence start).
NAME_LIKE = re.compile(r"(?<=[a-z,;]\s)[A-Z][a-z]+")
# Salience's case-insensitive patterns, matched on the text lower-cased once (`Caseless`).
# DATE_WORDS has no common beginning for `re` to skip ahead by: its alternatives begin with
# these (a month, a weekday or a word, a digit, or one of the CJK words).
_DATE_WORDS = Caseless(DATE_WORDS, first=r"[jfmasondtwb\d星周明后下生요내다생曜来誕]")
_FIRST_PERSON, _EN_EVENT, _EN_JOB, _FEELINGS = map(Caseless, (FIRST_PERSON, EN_EVENT, EN_JOB, FEELINGS))
_ZH_JOBS = re.compile(ZH_JOBS)
# The words (`\w+` runs of the text lower-cased) that the English part of each of these patterns
# must find one of, its `\b` or `(?<!\w)` at a word's start and `\b` at a word's end: in an
# ASCII text holding none of them (most texts, for most patterns) the pattern is not scanned for.
# DATE_WORDS's months and ordinals need a digit besides; their other parts are not ASCII.
_WORD = re.compile(r"\w+")
_FIRST_PERSON_WORDS = frozenset({"i", "my", "mine"})
_DATE_WORDS_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday tomorrow tonight weekend next birthday anniversary".split()  # noqa: SIM905
)
_FEELINGS_SPELLED = (
    "love loved loves hate hated hates favourite favorite prefer enjoy enjoyed excited nervous scared afraid "
    "proud happy sad worried anxious thrilled grateful miss missed passionate amazing terrible"
)
_FEELINGS_WORDS = frozenset(_FEELINGS_SPELLED.split())
# EN_EVENTS's words, "exams?" and "check-?up" spelled out; "due date" and "support group" by their first word.
_EVENT_WORDS = frozenset(
    _WORD.match(spelled).group()  # type: ignore[union-attr]
    for event in EN_EVENTS.split("|")
    for spelled in (
        {"exams?": ("exam", "exams"), "check-?up": ("check-up", "checkup")}.get(event) or (event,)
    )
)
_JOB_FIRST_WORDS = frozenset(job.split()[0] for job in JOB_WORDS)
assert all(re.fullmatch(r"[a-z ]+", event) for event in EN_EVENTS.split("|") if "?" not in event)


def _may(words: set[str] | None, cues: frozenset[str]) -> bool:
    """Whether a text whose words are `words` (None: not told) may hold one of `cues`."""
    return words is None or not words.isdisjoint(cues)


def salience(text: str, at_ms: int = 0, names: Collection[str] = ()) -> int:
    """How informative a statement looks: length, numbers, dates, names, events, jobs, feelings,
    "I/my …"; people the user's facts name (`names`) count more, other people's news less."""
    score = _salience(text, at_ms)
    if any(name in text for name in names):
        score += 20
    return score


# A job scores each statement twice or more (its digest, a long one's sentences, the summary's
# trimming), and the bullets carried in a pair's summary again at every job (at_ms 0): ~0.1 ms
# of regular expressions each time. Emptied with the other text caches by a forget.
@text_cache(16384)
def _salience(text: str, at_ms: int) -> int:
    """`salience` without the bonus for names the user's facts give."""
    score = min(count_tokens(text), 60)
    folded = fold_ascii(text)
    # The Chinese words are not ASCII: an ASCII text (most) is not scanned for them, and its
    # English words are looked up (`_may`) before a pattern is.
    cjk = not text.isascii()
    words = None if cjk or folded is None else set(_WORD.findall(folded))
    digits = DIGITS.search(text) is not None
    if digits:
        score += 15
    today = format_day(at_ms)
    dated = (digits or _may(words, _DATE_WORDS_WORDS)) and _DATE_WORDS.search(text, folded)
    if dated or any(m.label != today for m in resolve(text, at_ms)):
        score += 15
    if _may(words, _FIRST_PERSON_WORDS) and _FIRST_PERSON.search(text, folded):
        score += 20
    if NAME_LIKE.search(text):
        score += 10
    if (_may(words, _EVENT_WORDS) and _EN_EVENT.search(text, folded)) or (cjk and ZH_EVENTS.search(text)):
        score += 10
    if (_may(words, _JOB_FIRST_WORDS) and _EN_JOB.search(text, folded)) or (cjk and _ZH_JOBS.search(text)):
        score += 10
    if _may(words, _FEELINGS_WORDS) and _FEELINGS.search(text, folded):
        score += 10
    if (cjk or "y " in text) and OTHERS_NEWS.match(text):  # "My friend", or Chinese
        score -= 15
    if remember_requests(text) or introductions(text):
        score += 40  # the user asked us to keep it, or said who they are
    elif statement_facts(text, at_ms):
        score += 25  # the user said something about themselves
    if QUESTION.search(text):
        score -= 10  # a question asks; a statement tells us about the user
    return score
