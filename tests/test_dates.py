"""Relative time expressions resolve against the moment they were said, in UTC, and annotate appends them."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from agent_memory.condense.life import stale
from agent_memory.core.dates import DateMention, annotate, resolve
from agent_memory.core.worded import days_in, in_words


def at(iso: str) -> int:
    """Epoch milliseconds of a UTC time."""
    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp() * 1000)


MONDAY = at("2023-05-08T13:56")  # Monday 8 May 2023
FRIDAY = at("2023-05-12T09:00")
SUNDAY = at("2023-05-14T18:00")
NEW_YEAR = at("2024-01-02T08:00")  # a Tuesday


def labels(text: str, said: int = MONDAY) -> list[tuple[str, str]]:
    return [(mention.expression, mention.label) for mention in resolve(text, said)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went to a support group yesterday.", [("yesterday", "2023-05-07")]),
        ("Today was long, and tonight I rest.", [("Today", "2023-05-08"), ("tonight", "2023-05-08")]),
        ("this morning, this afternoon, this evening", [
            ("this morning", "2023-05-08"), ("this afternoon", "2023-05-08"), ("this evening", "2023-05-08")]),
        ("I slept badly last night", [("last night", "2023-05-07")]),
        ("the day before yesterday", [("the day before yesterday", "2023-05-06")]),
        ("See you tomorrow or the day after tomorrow", [
            ("tomorrow", "2023-05-09"), ("the day after tomorrow", "2023-05-10")]),
        ("last Friday", [("last Friday", "2023-05-05")]),
        ("THIS FRIDAY", [("THIS FRIDAY", "2023-05-12")]),
        ("next Friday", [("next Friday", "2023-05-19")]),
        ("this past Sunday and this coming Sunday", [
            ("this past Sunday", "2023-05-07"), ("this coming Sunday", "2023-05-14")]),
        ("last week, this week, next week", [
            ("last week", "week of 2023-05-01"), ("this week", "week of 2023-05-08"),
            ("next week", "week of 2023-05-15")]),
        ("last weekend, this weekend, next weekend", [
            ("last weekend", "weekend of 2023-05-06"), ("this weekend", "weekend of 2023-05-13"),
            ("next weekend", "weekend of 2023-05-20")]),
        ("last month, this month, next month", [
            ("last month", "2023-04"), ("this month", "2023-05"), ("next month", "2023-06")]),
        ("last year, this year, next year", [("last year", "2022"), ("this year", "2023"), ("next year", "2024")]),
        ("three days ago", [("three days ago", "2023-05-05")]),
        ("a week ago", [("a week ago", "2023-05-01")]),
        ("2 weeks ago", [("2 weeks ago", "2023-04-24")]),
        ("twelve months ago", [("twelve months ago", "2022-05")]),
        ("one year ago", [("one year ago", "2022")]),
        ("in ten days", [("in ten days", "2023-05-18")]),
        ("in two weeks", [("in two weeks", "2023-05-22")]),
        ("in 3 months", [("in 3 months", "2023-08")]),
        ("two days from today", [("two days from today", "2023-05-10")]),
    ],
)  # fmt: skip
def test_english(text: str, expected: list[tuple[str, str]]) -> None:
    assert labels(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我昨天去了超市。", [("昨天", "2023-05-07")]),
        ("今天 今晚 前天 明天 后天", [
            ("今天", "2023-05-08"), ("今晚", "2023-05-08"), ("前天", "2023-05-06"), ("明天", "2023-05-09"),
            ("后天", "2023-05-10")]),
        ("昨晚没睡好", [("昨晚", "2023-05-07")]),
        ("上周五 上星期五 上礼拜五", [("上周五", "2023-05-05"), ("上星期五", "2023-05-05"), ("上礼拜五", "2023-05-05")]),
        ("这周三 本周日 下周六 下星期天", [
            ("这周三", "2023-05-10"), ("本周日", "2023-05-14"), ("下周六", "2023-05-20"), ("下星期天", "2023-05-21")]),
        ("上周 本周 下周", [("上周", "week of 2023-05-01"), ("本周", "week of 2023-05-08"), ("下周", "week of 2023-05-15")]),
        ("上周末我们去爬山了", [("上周末", "weekend of 2023-05-06")]),
        ("上个月 下个月 这个月", [("上个月", "2023-04"), ("下个月", "2023-06"), ("这个月", "2023-05")]),
        ("去年 今年 明年", [("去年", "2022"), ("今年", "2023"), ("明年", "2024")]),
        ("三天前 两周前 一个月前 十年前", [
            ("三天前", "2023-05-05"), ("两周前", "2023-04-24"), ("一个月前", "2023-04"), ("十年前", "2013")]),
        ("两个星期前 十二天前 3天前", [("两个星期前", "2023-04-24"), ("十二天前", "2023-04-26"), ("3天前", "2023-05-05")]),
        ("十天后 两周后", [("十天后", "2023-05-18"), ("两周后", "2023-05-22")]),
        ("어제 학교에 갔어요.", [("어제", "2023-05-07")]),
        ("오늘 그저께 내일, 모레", [
            ("오늘", "2023-05-08"), ("그저께", "2023-05-06"), ("내일", "2023-05-09"), ("모레", "2023-05-10")]),
        ("지난주에 이번 주는 다음 주에", [
            ("지난주", "week of 2023-05-01"), ("이번 주", "week of 2023-05-08"), ("다음 주", "week of 2023-05-15")]),
        ("지난주 금요일", [("지난주 금요일", "2023-05-05")]),
        ("지난달 다음달 작년 내년", [("지난달", "2023-04"), ("다음달", "2023-06"), ("작년", "2022"), ("내년", "2024")]),
        ("3일 전 한 달 전 일주일 전", [("3일 전", "2023-05-05"), ("한 달 전", "2023-04"), ("일주일 전", "2023-05-01")]),
        ("昨日 明日 先週 来週 先月 来月 去年 来年", [
            ("昨日", "2023-05-07"), ("明日", "2023-05-09"), ("先週", "week of 2023-05-01"),
            ("来週", "week of 2023-05-15"), ("先月", "2023-04"), ("来月", "2023-06"), ("去年", "2022"),
            ("来年", "2024")]),
        ("先週の金曜日に会った", [("先週の金曜日", "2023-05-05")]),
    ],
)  # fmt: skip
def test_chinese_korean_japanese(text: str, expected: list[tuple[str, str]]) -> None:
    assert labels(text) == expected


def test_last_friday_said_on_a_friday_is_a_week_earlier() -> None:
    assert labels("last Friday", FRIDAY) == [("last Friday", "2023-05-05")]
    assert labels("this Friday", FRIDAY) == [("this Friday", "2023-05-12")]
    assert labels("next Friday", FRIDAY) == [("next Friday", "2023-05-19")]
    assert labels("this past Friday", FRIDAY) == [("this past Friday", "2023-05-05")]


def test_this_weekday_is_in_the_current_monday_week() -> None:
    # Said on a Sunday, "this Saturday" is the day before; "next Monday" is the next day.
    assert labels("this Saturday", SUNDAY) == [("this Saturday", "2023-05-13")]
    assert labels("next Monday", SUNDAY) == [("next Monday", "2023-05-15")]
    assert labels("last Sunday", SUNDAY) == [("last Sunday", "2023-05-07")]


def test_weekdays_and_months_across_the_end_of_a_year() -> None:
    assert labels("last Friday", NEW_YEAR) == [("last Friday", "2023-12-29")]
    assert labels("上周五", NEW_YEAR) == [("上周五", "2023-12-29")]
    assert labels("this Sunday", NEW_YEAR) == [("this Sunday", "2024-01-07")]
    assert labels("last week", NEW_YEAR) == [("last week", "week of 2023-12-25")]
    assert labels("last month and 3 months ago", NEW_YEAR) == [
        ("last month", "2023-12"),
        ("3 months ago", "2023-10"),
    ]
    assert labels("last year", NEW_YEAR) == [("last year", "2023")]
    assert labels("the day before yesterday", NEW_YEAR) == [("the day before yesterday", "2023-12-31")]
    assert labels("next week", at("2023-12-28T12:00")) == [("next week", "week of 2024-01-01")]
    assert labels("yesterday", at("2024-03-01T00:10")) == [("yesterday", "2024-02-29")]  # a leap day


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Said on Monday 8 May 2023: a bare weekday in a clause told in the past is the last one,
        # in a clause told of what is ahead the next one.
        ("We went hiking on Saturday, it was lovely.", [("on Saturday", "2023-05-06")]),
        ("I twisted my knee at the climbing wall on Friday.", [("on Friday", "2023-05-05")]),
        ("I'll see her on Friday.", [("on Friday", "2023-05-12")]),
        (
            "I'm seeing Gus on Monday. It rained on Sunday, we stayed in.",
            [("on Monday", "2023-05-15"), ("on Sunday", "2023-05-07")],
        ),
        ("We are going to the lake on Sunday!", [("on Sunday", "2023-05-14")]),
    ],
)
def test_a_bare_weekday_is_dated_by_the_tense_it_is_told_in(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert labels(text) == expected


def test_resolved_in_utc() -> None:
    assert labels("yesterday", at("2023-05-08T23:59")) == [("yesterday", "2023-05-07")]
    assert labels("yesterday", at("2023-05-09T00:00")) == [("yesterday", "2023-05-08")]


@pytest.mark.parametrize(
    "text",
    [
        "She plays on Friday.",  # a bare weekday in a clause told neither in the past nor ahead
        "See you on Friday.",
        "I played on Monday and I'll play on Friday.",  # told both ways: which is which is not read
        "I need to go on Friday.",  # "need" is no past form
        "We swim on Saturdays.",  # every Saturday
        "I started volunteering at the garden on Sunday mornings.",
        "a few days ago",
        "a couple of weeks ago",
        "several months ago",
        "two or three days ago",
        "the other day",
        "in the last week",
        "May I come in?",  # "May" the verb; month names are not resolved anyway
        "I finished the book in two days.",  # a duration, not a date ahead
        "Thisday lasts; nexting; todays",
        "几天前",
        "然后天气变好了",  # 然后 + 天气, not 后天
        "晚上周末有空吗",  # 晚上 + 周末, not 上周末
        "这周围很安静",  # 周围 (surroundings)
        "他很聪明年轻",  # 聪明 + 年轻, not 明年
        "오늘날 사람들은",  # 오늘날 (nowadays)
        "내일 모레",  # "in a day or two"
        "세일 전에 샀어요",  # 세일 (a sale), not "three days"
        "",
    ],
)
def test_not_resolved(text: str) -> None:
    assert resolve(text, MONDAY) == []


def test_chinese_weekday_guard_keeps_the_week() -> None:
    # 下周一起去 is "go together next week": the week, not its Monday.
    assert labels("我们下周一起去吃饭") == [("下周", "week of 2023-05-15")]


def test_mentions_carry_their_offsets() -> None:
    text = "Hi! Last Friday and 上周五 and 어제."
    mentions = resolve(text, MONDAY)
    assert [text[m.start : m.end] for m in mentions] == ["Last Friday", "上周五", "어제"]
    assert mentions[0] == DateMention("Last Friday", 4, 15, "2023-05-05")


def test_a_longer_expression_is_not_split() -> None:
    assert labels("two days from today") == [("two days from today", "2023-05-10")]
    assert labels("大前天") == [("大前天", "2023-05-05")]


def test_annotate_appends_one_note_and_keeps_the_text() -> None:
    text = "I went to a support group yesterday."
    assert annotate(text, MONDAY) == "I went to a support group yesterday. (yesterday = 7 May 2023)"
    several = annotate("Yesterday was fun; next month we go again, yesterday!", MONDAY)
    assert several == (
        "Yesterday was fun; next month we go again, yesterday! (Yesterday = 7 May 2023; next month = June 2023)"
    )
    chinese = annotate("我昨天去了超市，下个月去北京。", MONDAY)
    assert chinese == "我昨天去了超市，下个月去北京。 (昨天 = 2023年5月7日; 下个月 = 2023年6月)"
    for original in (text, "我昨天去了超市", "last\n  Friday"):
        assert annotate(original, MONDAY).startswith(original)
    assert annotate("last\n  Friday", MONDAY) == "last\n  Friday (last Friday = 5 May 2023)"


def test_annotate_leaves_text_without_expressions_alone() -> None:
    assert annotate("How are you?", MONDAY) == "How are you?"
    assert annotate("", MONDAY) == ""


def test_dates_are_noted_in_words_as_people_write_them() -> None:
    """A day, a week, a weekend, a month: in English and in Chinese; a year as it is."""
    assert in_words("2023-05-07") == "7 May 2023" and in_words("2023-05-07", chinese=True) == "2023年5月7日"
    assert in_words("week of 2023-05-01") == "week of 1 May 2023"
    assert in_words("weekend of 2023-05-06", chinese=True) == "2023年5月6日那个周末"
    assert in_words("2023-06") == "June 2023" and in_words("2023-06", chinese=True) == "2023年6月"
    assert in_words("2024") == "2024"
    assert days_in("said [2023-05-08] (next Tuesday = 16 May 2023; 下周二 = 2023年5月16日)") == [
        date(2023, 5, 8), date(2023, 5, 16), date(2023, 5, 16),
    ]  # fmt: skip
    assert days_in("31 February 2024, 2024年2月30日") == []


def test_a_thread_goes_stale_by_the_date_its_note_gives_in_words() -> None:
    """The event's date in the note, not only the day it was said, dates a plan (life.stale)."""
    thread = "- [2025-03-01] My exam is next Tuesday. (next Tuesday = 11 March 2025)"

    assert not stale(thread, "2025-04-05") and stale(thread, "2025-04-20")
