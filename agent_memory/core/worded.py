"""Dates as people write them: `7 May 2023`, `2023年5月7日`, and found again in a text."""

from __future__ import annotations

import re
from datetime import date

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")  # fmt: skip
HAN = re.compile("[\u4e00-\u9fff]")
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_ISO_MONTH = re.compile(r"\b(\d{4})-(\d{2})\b")
_WORDED_DAY = re.compile(
    rf"\b(\d{{1,2}}) ({'|'.join(MONTHS)}) (\d{{4}})\b|(\d{{4}})年(\d{{1,2}})月(\d{{1,2}})日"
)
_ZH_SPAN = {"week of ": "那周", "weekend of ": "那个周末"}


def in_words(label: str, chinese: bool = False) -> str:
    """A label's dates as people write them, which a reader (a model, a person) takes in at a
    glance and which cost no more tokens: `2023-05-07` -> `7 May 2023`, `week of 2023-05-01` ->
    `week of 1 May 2023`, `2023-06` -> `June 2023`; in Chinese `2023年5月7日`, `2023年5月1日那周`,
    `2023年6月`. A year stays as it is."""
    if chinese:
        span = next((kind for kind in _ZH_SPAN if label.startswith(kind)), "")
        label = label.removeprefix(span)
        worded = _ISO_DAY.sub(lambda m: f"{m[1]}年{int(m[2])}月{int(m[3])}日", label)
        return _ISO_MONTH.sub(lambda m: f"{m[1]}年{int(m[2])}月", worded) + _ZH_SPAN.get(span, "")
    worded = _ISO_DAY.sub(lambda m: f"{int(m[3])} {MONTHS[int(m[2]) - 1]} {m[1]}", label)
    return _ISO_MONTH.sub(lambda m: f"{MONTHS[int(m[2]) - 1]} {m[1]}", worded)


def days_in(text: str) -> list[date]:
    """The days written in `text`, as ISO dates (`2023-05-07`) or in words (`7 May 2023`, `2023年5月7日`)."""
    found = [date(int(y), int(m), int(d)) for y, m, d in _ISO_DAY.findall(text)]
    for match in _WORDED_DAY.finditer(text):
        day, month, year, zh_year, zh_month, zh_day = match.groups()
        try:
            if zh_year:
                found.append(date(int(zh_year), int(zh_month), int(zh_day)))
            else:
                found.append(date(int(year), MONTHS.index(month) + 1, int(day)))
        except ValueError:  # "31 February 2024" said is no day
            continue
    return found
