"""Relative time expressions resolved against the moment they were said.

"yesterday", "last Friday", "two weeks ago", "next month", 昨天, 上周五, 下个月, 어제, 지난주,
先週 … mean nothing once the day they were said is gone. `resolve` finds them in a text
and gives each its absolute date in UTC: a day `2023-05-07`, a week `week of 2023-05-01`
(its Monday), a weekend `weekend of 2023-05-06` (its Saturday), a month `2023-06` or a
year `2024`. `annotate` appends them to the text as one note, so the text itself stays
intact, its dates written as people write them (`in_words`): `"… yesterday. (yesterday = 7 May
2023)"`, in Chinese `(昨天 = 2023年5月7日)`.

Conventions, where speech is ambiguous: weeks run Monday to Sunday; "this Friday" is the
Friday of the current week, "next Friday" (下周五) the Friday of the following week, "last
Friday" the most recent Friday before today (said on a Friday: a week earlier), 上周五 the
Friday of the previous week. "On Friday" is the last Friday in a clause told in the past, the
next in one told of what is ahead; a bare "Friday" (or "on Friday" told neither way), "a few
days ago" or "the other day" is not resolved: a wrong date is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache

from agent_memory.core.date_words import (
    EN_NUMBERS,
    FIXED_DAYS,
    FIXED_YEARS,
    KO_NUMBERS,
    UNITS,
    WEEK_SHIFT,
    WEEKDAYS,
    ZH_DIGITS,
)
from agent_memory.core.textcache import text_cache
from agent_memory.core.worded import HAN, in_words


@dataclass(frozen=True, slots=True)
class DateMention:
    """One resolved expression: as written, where it is in the text, and its absolute date."""

    expression: str
    start: int
    end: int
    label: str


# -- labels ----------------------------------------------------------------------------------
def _day(day: date) -> str:
    return day.isoformat()


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _week(day: date) -> str:
    return f"week of {_monday(day).isoformat()}"


def _weekend(day: date) -> str:
    return f"weekend of {(_monday(day) + timedelta(days=5)).isoformat()}"


def _month(day: date, delta: int) -> str:
    index = day.year * 12 + day.month - 1 + delta
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _year(day: date, delta: int) -> str:
    return f"{day.year + delta:04d}"


def _last_weekday(day: date, weekday: int) -> date:
    """The most recent `weekday` strictly before `day`."""
    return day - timedelta(days=(day.weekday() - weekday) % 7 or 7)


def _next_weekday(day: date, weekday: int) -> date:
    """The first `weekday` strictly after `day`."""
    return day + timedelta(days=(weekday - day.weekday()) % 7 or 7)


def _in_week(day: date, weeks: int, weekday: int) -> date:
    """`weekday` of the week `weeks` away from the one `day` is in (0: this week)."""
    return _monday(day) + timedelta(days=7 * weeks + weekday)


def _span(day: date, unit: str, amount: int) -> str:
    """`amount` units from `day`: days and weeks give a day, months a month, years a year."""
    if unit == "day":
        return _day(day + timedelta(days=amount))
    if unit == "week":
        return _day(day + timedelta(days=7 * amount))
    if unit == "month":
        return _month(day, amount)
    return _year(day, amount)


# -- numbers -----------------------------------------------------------------------------------
def _number(text: str) -> int | None:
    """An amount written in digits, English words, Chinese numerals up to 99, or Korean."""
    text = text.lower()
    if text.isdigit():
        return int(text)
    if text in EN_NUMBERS:
        return EN_NUMBERS[text]
    if text in KO_NUMBERS:
        return KO_NUMBERS[text]
    if "十" in text:
        tens, _, ones = text.partition("十")
        if (tens and tens not in ZH_DIGITS) or (ones and ones not in ZH_DIGITS):
            return None
        return (ZH_DIGITS[tens] if tens else 1) * 10 + (ZH_DIGITS[ones] if ones else 0)
    return ZH_DIGITS.get(text)


# -- the expressions -----------------------------------------------------------------------------
Resolver = Callable[[re.Match[str], date], str | None]

EN_NUMBER = (
    r"\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
)
EN_WEEKDAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
# A finished span of time ("I finished it in two days") is a duration, not a date ahead.
EN_DURATION_BEFORE = re.compile(
    r"\b(?:did|done|took|finished|completed|managed|learned|learnt|built|wrote|lost|gained|times|once|twice)\b"
    r"[^.!?;]*$",
    re.IGNORECASE,
)
# Before 上/下, these make a place word ("晚上", "楼下"), not "last"/"next".
ZH_NOT_SHIFT = "晚早马身路桌楼天网线班墙手世山车床街加算爱跟赶遇碰看头脸面心台场会地海岸门以底乡剩留放坐躺写记停私眼当如一"
# After 周, these make another word ("周围", "周期", "周年").
ZH_NOT_WEEK = "围边到全年岁期游转"
# After 周一…周六, these make another word ("下周一起去" is "go together next week").
ZH_NOT_WEEKDAY = "个天次位年名本份件点"
ZH_NOT_AFTER_ONE = "起直样定切些般下边共会同块致阵旦再向路口句"
ZH_NUMBER = r"\d{1,3}|[一二两三四五六七八九]?十[一二三四五六七八九]?|[一二两三四五六七八九]"
KO_PARTICLE = r"(?=에|는|엔|도|부터|까지|의|쯤|내내|말|초|중|[\s.,!?~]|$)"


def _fixed_day(match: re.Match[str], day: date) -> str:
    key = " ".join(match.group(0).lower().split())
    return _day(day + timedelta(days=FIXED_DAYS[key]))


def _fixed_year(match: re.Match[str], day: date) -> str:
    return _year(day, FIXED_YEARS[match.group(0)])


def _en_weekday(match: re.Match[str], day: date) -> str:
    how = " ".join(match.group("en_wd_how").lower().split())
    weekday = WEEKDAYS[match.group("en_wd_day").lower()]
    if how in {"last", "this past"}:
        return _day(_last_weekday(day, weekday))
    if how == "this coming":
        return _day(_next_weekday(day, weekday))
    return _day(_in_week(day, WEEK_SHIFT[how], weekday))


# What a clause told of the past, or of what is ahead, says besides a bare "on Saturday": a past
# form ("went", "hiked"; not "need"), or "will", "going to", "can't wait", "I'm seeing".
EN_TOLD_PAST = re.compile(
    r"\b(?:was|were|went|did|had|got|made|saw|took|came|met|won|ran|spent|bought|told|left|lost|found"
    r"|\w+[^e\W]ed)\b"
)
EN_TOLD_AHEAD = re.compile(
    r"\b(?:will|won't|gonna|going\s+to|plan(?:ning)?\s+to|hop(?:e|ing)\s+to|can't\s+wait|shall)\b|'ll\b"
    r"|\b(?:i'm|we're|you're|he's|she's|they're|i\s+am|we\s+are)\s+\w+ing\b"
)
_CLAUSE_END = re.compile(r"[.!?;]")


def _en_on_weekday(match: re.Match[str], day: date) -> str | None:
    """A bare "on Saturday": the last one in a clause told in the past ("we went hiking on
    Saturday"), the next in one told of what is ahead ("I'm seeing her on Saturday"); else (or
    both) too vague to date."""
    text = match.string
    start = max((found.end() for found in _CLAUSE_END.finditer(text, 0, match.start())), default=0)
    end = _CLAUSE_END.search(text, match.end())
    clause = text[start : end.start() if end else len(text)]
    past, ahead = EN_TOLD_PAST.search(clause) is not None, EN_TOLD_AHEAD.search(clause) is not None
    if past == ahead:
        return None
    weekday = WEEKDAYS[match.group("en_on_day")]
    return _day(_last_weekday(day, weekday) if past else _next_weekday(day, weekday))


def _en_period(match: re.Match[str], day: date) -> str:
    shift, unit = WEEK_SHIFT[match.group("en_p_how").lower()], match.group("en_p_unit").lower()
    if unit == "week":
        return _week(day + timedelta(days=7 * shift))
    if unit == "weekend":
        return _weekend(day + timedelta(days=7 * shift))
    return _month(day, shift) if unit == "month" else _year(day, shift)


def _en_ago(match: re.Match[str], day: date) -> str | None:
    amount = _number(match.group("en_ago_n"))
    return None if amount is None else _span(day, UNITS[match.group("en_ago_unit").lower()], -amount)


def _en_ahead(match: re.Match[str], day: date) -> str | None:
    amount = _number(match.group("en_in_n") or match.group("en_from_n"))
    unit = UNITS[(match.group("en_in_unit") or match.group("en_from_unit")).lower()]
    if amount is None or (
        match.group("en_in_n") and EN_DURATION_BEFORE.search(match.string[: match.start()])
    ):
        return None
    return _span(day, unit, amount)


def _zh_weekday(match: re.Match[str], day: date) -> str:
    weekday = WEEKDAYS[match.group("zh_wd_a") or match.group("zh_wd_b")]
    return _day(_in_week(day, WEEK_SHIFT[match.group("zh_wd_how")], weekday))


def _cjk_week(match: re.Match[str], day: date) -> str:
    shift = WEEK_SHIFT[match.group(0)[0]]
    if match.group(0).endswith("末"):
        return _weekend(day + timedelta(days=7 * shift))
    return _week(day + timedelta(days=7 * shift))


def _cjk_month(match: re.Match[str], day: date) -> str:
    return _month(day, WEEK_SHIFT[match.group(0)[0]])


def _cjk_count(match: re.Match[str], day: date) -> str | None:
    amount = _number(match.group("zh_n_n"))
    if amount is None:
        return None
    sign = -1 if match.group("zh_n_dir") == "前" else 1
    return _span(day, UNITS[match.group("zh_n_unit")], sign * amount)


def _ja_weekday(match: re.Match[str], day: date) -> str:
    weekday = WEEKDAYS[match.group("ja_wd_day")]
    return _day(_in_week(day, WEEK_SHIFT[match.group("ja_wd_how")], weekday))


def _ko_weekday(match: re.Match[str], day: date) -> str:
    weekday = WEEKDAYS[match.group("ko_wd_day")]
    return _day(_in_week(day, WEEK_SHIFT[match.group("ko_wd_how")], weekday))


def _ko_period(match: re.Match[str], day: date) -> str:
    shift, unit = WEEK_SHIFT[match.group("ko_p_how")], match.group("ko_p_unit")
    if unit == "주말":
        return _weekend(day + timedelta(days=7 * shift))
    if unit == "주":
        return _week(day + timedelta(days=7 * shift))
    return _month(day, shift)


def _ko_count(match: re.Match[str], day: date) -> str | None:
    if match.group("ko_n_week"):
        amount, unit = 1, "week"
    else:
        number = _number(match.group("ko_n_d") or match.group("ko_n_k"))
        if number is None:
            return None
        amount, unit = number, UNITS[match.group("ko_n_du") or match.group("ko_n_ku")]
    return _span(day, unit, -amount if match.group("ko_n_dir") == "전" else amount)


def _unresolved(match: re.Match[str], day: date) -> None:
    """Matched so that a shorter expression inside it is not taken, but too vague to date."""
    return None


# (name, pattern, resolver); at one position the first that matches wins, so longer first.
# English: whole words, case-insensitive; each pattern starts where a word does.
EN_RULES: list[tuple[str, str, Resolver]] = [
    (
        "en_day",
        r"(?:the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|today|tonight"
        r"|this\s+(?:morning|afternoon|evening)|yesterday|last\s+night|tomorrow)\b",
        _fixed_day,
    ),
    (
        "en_wd",
        rf"(?P<en_wd_how>this\s+past|this\s+coming|last|this|next)\s+(?P<en_wd_day>{EN_WEEKDAY})\b",
        _en_weekday,
    ),
    # Not "on Sunday mornings": every Sunday's.
    (
        "en_on_wd",
        rf"on\s+(?P<en_on_day>{EN_WEEKDAY})\b(?!\s+(?:mornings|afternoons|evenings|nights)\b)",
        _en_on_weekday,
    ),
    (
        "en_p",
        r"(?<!\bthe\s)(?P<en_p_how>last|this|next)\s+(?P<en_p_unit>weekend|week|month|year)\b",
        _en_period,
    ),
    (
        "en_ago",
        rf"(?<!\bor\s)(?<!\bto\s)(?<!-)(?P<en_ago_n>{EN_NUMBER})\s+"
        r"(?P<en_ago_unit>days?|weeks?|months?|years?)\s+ago\b",
        _en_ago,
    ),
    (
        "en_in",
        rf"in\s+(?P<en_in_n>{EN_NUMBER})\s+(?P<en_in_unit>days?|weeks?|months?|years?)\b"
        rf"|(?P<en_from_n>{EN_NUMBER})\s+(?P<en_from_unit>days?|weeks?|months?|years?)\s+from\s+"
        r"(?:now|today)\b",
        _en_ahead,
    ),
]
# Chinese, Japanese (shared characters mean the same days) and Korean, whose particles
# follow the word; guards keep a word inside a longer one ("然后天气", "晚上周末", "오늘날") out.
CJK_RULES: list[tuple[str, str, Resolver]] = [
    ("zh_vague", r"几天[前后]|大大前天|大大后天", _unresolved),
    (
        "zh_day",
        r"大前天|大后天|(?<![以之从提当面眼目])前天(?!天)|(?<![然最之以随落背先])后天(?![气空性])"
        r"|今天|今晚|今早|昨天|昨晚|明天|明晚|一昨日|明後日|おととい|今日|昨日|明日|今夜|昨夜|今朝",
        _fixed_day,
    ),
    (
        "zh_wd",
        rf"(?<![{ZH_NOT_SHIFT}])(?P<zh_wd_how>[上下这本])个?"
        rf"(?:周(?P<zh_wd_a>[二三四五六日](?![{ZH_NOT_WEEKDAY}])|一(?![{ZH_NOT_WEEKDAY}{ZH_NOT_AFTER_ONE}]))"
        rf"|(?:星期|礼拜)(?P<zh_wd_b>[一二三四五六日天](?![{ZH_NOT_WEEKDAY}])))",
        _zh_weekday,
    ),
    ("ja_wd", r"(?P<ja_wd_how>[先今来])週の?(?P<ja_wd_day>[月火水木金土日])曜日?", _ja_weekday),
    (
        "zh_week",
        rf"(?<![{ZH_NOT_SHIFT}])[上下这本]个?(?:周(?![{ZH_NOT_WEEK}])|星期|礼拜)末?|[先今来]週末?",
        _cjk_week,
    ),
    (
        "zh_month",
        rf"(?<![{ZH_NOT_SHIFT}])(?:[上下这]个月|[上下本]月)(?![亮光饼球台票薪经])"
        r"|[先今来]月(?![曜日])",
        _cjk_month,
    ),
    (
        "zh_year",
        r"(?:(?<![过回出进离失除])去年|今年|明年|(?<![以之从提当])前年|(?<![然最之以随落背先])后年"
        r"|(?<![未将原本])来年|昨年|再来年|一昨年)(?![轻纪代级龄华会])",
        _fixed_year,
    ),
    (
        "zh_n",
        rf"(?<![\d一二两三四五六七八九十几第])(?P<zh_n_n>{ZH_NUMBER})\s*"
        r"(?P<zh_n_unit>天|周|週間|週|个?星期|个?礼拜|个月|ヶ月|か月|カ月|年)[以之]?(?P<zh_n_dir>前|后|後)",
        _cjk_count,
    ),
    ("ko_vague", r"내일\s?모레", _unresolved),
    ("ko_day", r"(?:오늘밤|오늘(?!날)|어젯밤|어제|그저께|그제(?!서야|야)|내일|모레)", _fixed_day),
    ("ko_wd", r"(?P<ko_wd_how>지난|저번|이번|다음)\s?주\s?(?P<ko_wd_day>[월화수목금토일])요일", _ko_weekday),
    ("ko_p", rf"(?P<ko_p_how>지난|저번|이번|다음)\s?(?P<ko_p_unit>주말|주|달){KO_PARTICLE}", _ko_period),
    ("ko_year", r"(?:재작년|작년|올해|내년|후년)", _fixed_year),
    (
        "ko_n",
        r"(?:(?P<ko_n_week>일주일)|(?P<ko_n_d>\d{1,3})\s?(?P<ko_n_du>일|주|개월|달|년)"
        r"|(?P<ko_n_k>한|두|세|네|다섯|여섯|일곱|여덟|아홉|열)\s?(?P<ko_n_ku>달|주))"
        r"\s?(?P<ko_n_dir>전|후|뒤)(?![가-힣])",
        _ko_count,
    ),
]
KO_RULES = {"ko_vague", "ko_day", "ko_wd", "ko_p", "ko_year", "ko_n"}
# English rules that need a count and a unit; the others start with a keyword.
EN_COUNT_RULES = {"en_ago", "en_in"}
EN_UNITS = ("day", "week", "month", "year")

_RESOLVERS: dict[str, Resolver] = {name: resolver for name, _, resolver in EN_RULES + CJK_RULES}


def _alternatives(rules: list[tuple[str, str, Resolver]], names: set[str] | None = None) -> str:
    parts = []
    for name, pattern, _ in rules:
        if names is None or name in names:
            parts.append(f"(?P<{name}>{pattern})")
    return "|".join(parts)


# Each scan first tests a word boundary and the letters an expression can start with (or,
# for CJK, the characters): that fails fast at almost every position, so the alternatives
# and their guards are tried only where they might match. English is matched on the text
# with ASCII letters lower-cased (same length, same offsets): case-insensitive matching
# would cost three times as much.
_EN_WORDS = re.compile(
    rf"\b(?=[tlnyo])(?:{_alternatives(EN_RULES, {'en_day', 'en_wd', 'en_on_wd', 'en_p'})})"
)
_EN_COUNTS = re.compile(rf"\b(?=[iaofstne\d])(?:{_alternatives(EN_RULES, EN_COUNT_RULES)})")
_ZH = re.compile(
    rf"(?=[几大前后今昨明一お上下这本先来去再\d二两三四五六七八九十])(?:{_alternatives(CJK_RULES, set(_RESOLVERS) - KO_RULES)})"
)
_KO = re.compile(
    rf"(?<![가-힣\d])(?=[오어그내모지저이다작재올후일한두세네여열\d])(?:{_alternatives(CJK_RULES, KO_RULES)})"
)
_HAN_OR_KANA = re.compile("[\u3040-\u30ff\u3400-\u9fff]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# Every match of _EN_WORDS holds one of these words (en_day's, or en_wd's and en_p's "last",
# "this", "next", or en_on_wd's weekday), every match of _EN_COUNTS one of EN_UNITS.
_EN_WORDS_CUE = re.compile(r"today|tonight|tomorrow|yesterday|this|last|next|on\s+\w+day\b")
_EN_UNITS_CUE = re.compile("|".join(EN_UNITS))


def _matches(text: str) -> list[re.Match[str]]:
    """Every candidate match in `text`, by position, overlaps not yet removed."""
    found: list[re.Match[str]] = []
    ascii = text.isascii()
    lower = text.lower() if ascii else text.translate(_ASCII_LOWER)
    # A word each expression must hold, found in one search: most texts hold none, and are
    # not scanned expression by expression at every word.
    if _EN_WORDS_CUE.search(lower):
        found += _EN_WORDS.finditer(lower)
    if _EN_UNITS_CUE.search(lower):
        found += _EN_COUNTS.finditer(lower)
    if not ascii and _HAN_OR_KANA.search(text):
        found += _ZH.finditer(text)
    if not ascii and _HANGUL.search(text):
        found += _KO.finditer(text)
    return sorted(found, key=lambda match: (match.start(), -match.end()))


def day_of(at_ms: int) -> date:
    """The UTC day of epoch milliseconds."""
    return _day_number(at_ms // 86_400_000)


@lru_cache(maxsize=4096)
def _day_number(days: int) -> date:
    # Asked of every text dated (the offline condenser dates each statement twice or more):
    # made once per day, not per text.
    return datetime.fromtimestamp(days * 86_400, UTC).date()


def resolve(text: str, at_ms: int) -> list[DateMention]:
    """The relative time expressions in `text` with their dates, said at `at_ms` (UTC), in order."""
    return list(_resolve(text, at_ms))


# The offline condenser dates a statement as it scores it and again as it quotes it, at the
# same time: kept until then (a job's statements are each said at their own time).
@text_cache(1024)
def _resolve(text: str, at_ms: int) -> tuple[DateMention, ...]:
    day = day_of(at_ms)
    mentions: list[DateMention] = []
    end = 0
    for match in _matches(text):
        name = match.lastgroup
        if name is None or match.start() < end:
            continue  # inside a longer expression ("two days from today" holds "today")
        end = match.end()
        label = _RESOLVERS[name](match, day)
        if label is not None:
            mentions.append(DateMention(text[match.start() : end], match.start(), end, label))
    return tuple(mentions)


@text_cache(8192)  # recall dates the same turns again at every question
def annotate(text: str, at_ms: int, *, same_day: bool = True) -> str:
    """`text` unchanged, followed by the dates of its relative expressions: `… (yesterday = 7 May 2023)`.

    With `same_day=False`, expressions meaning the day it was said ("today", "tonight") are
    left out: for a caller that shows that day next to the text anyway.
    """
    said = day_of(at_ms).isoformat()
    chinese = HAN.search(text) is not None
    notes: dict[str, str] = {}  # one note per expression and date, whatever its case
    for mention in resolve(text, at_ms):
        if not same_day and mention.label == said:
            continue
        note = f"{' '.join(mention.expression.split())} = {in_words(mention.label, chinese)}"
        notes.setdefault(note.casefold(), note)
    return f"{text} ({'; '.join(notes.values())})" if notes else text
