"""Korean self-statements: the patterns that find them and the facts they state."""

from __future__ import annotations

import re

KO_START = r"^(?:(?:네|음|아|그리고|근데|참|사실)[,，]?\s*)*"
KO_SUBJECT = r"(?:(?:저는|나는|전|난)\s*)"
KO_JOBS = (
    "간호사|의사|선생님|교사|학생|대학생|대학원생|회사원|개발자|프로그래머|디자이너|엔지니어|요리사|변호사|약사"
    "|기자|경찰|소방관|공무원|회계사|바리스타|작가|배우|가수|주부|은행원|연구원|교수|수의사|치과의사|미용사|군인"
    "|사업가|프리랜서|마케터"
)
KO_NOT_PLACES = {"여기", "거기", "저기", "어디", "이곳", "그곳", "혼자", "같이", "함께"}
# Laid out by hand (the formatter is told so where the table ends): one (kind, pattern) a row, as
# the pattern reads; ruff format would break every row over four lines.
KO_STATEMENTS: list[tuple[str, re.Pattern[str]]] = [
    ("job", re.compile(rf"{KO_START}{KO_SUBJECT}(?P<rest>(?P<job>{KO_JOBS})(?:이에요|예요|입니다|이야|야))(?=[\s.!,~]|$)")),
    ("lives", re.compile(
        rf"{KO_START}{KO_SUBJECT}?(?:(?:지금|요즘|현재)\s*)?(?P<rest>(?P<place>[가-힣A-Za-z]{{2,10}})에(?:서)?\s*"
        rf"(?:살아요|살고 있어요|살고 있습니다|삽니다|살아))(?=[\s.!,~]|$)")),
    ("works", re.compile(
        rf"{KO_START}{KO_SUBJECT}?(?:(?:지금|요즘|현재)\s*)?(?P<rest>(?P<place>[가-힣A-Za-z]{{2,10}})에서\s*"
        rf"(?:일해요|일하고 있어요|근무해요|일합니다|근무합니다))(?=[\s.!,~]|$)")),
    ("pet", re.compile(
        r"(?:제|내|우리)\s*(?P<species>고양이|강아지|개|토끼|햄스터|앵무새|거북이)\s*이름은\s*"
        r"(?P<name>[가-힣A-Za-z]{1,6}?)\s*(?:이에요|예요|에요|입니다|이야|야)")),
]  # fmt: skip
KO_HYPOTHETICAL = re.compile(r"만약|면\s|싶어|싶어요|지도\s?몰라|까\?|나요|래요")


def ko_statement(kind: str, match: re.Match[str], day: str) -> str | None:
    """The fact a Korean self-statement match says, or None when it is not one after all."""
    if kind == "pet":
        return f"사용자의 {match.group('species')} 이름은 {match.group('name')}"
    if kind in {"lives", "works"} and match.group("place") in KO_NOT_PLACES:
        return None
    return f"사용자는 {match.group('rest')} ({day} 기준)"
