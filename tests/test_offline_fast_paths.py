"""The offline condenser's fast paths find what their plain forms find (issue 28: cheaper, same output)."""

from __future__ import annotations

import random
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from functools import partial

from agent_memory.condense import salience
from agent_memory.condense.facts_offline import (
    EN_NAME,
    INTRODUCTION_WORDS,
    JA_NAME,
    KO_NAME,
    REQUEST_EXTRACTORS,
    REQUEST_WORDS,
    ZH_NAME,
    may_hold,
)
from agent_memory.condense.life import EN_PROFILE, ZH_PROFILE, event_words, is_profile
from agent_memory.condense.statements.chinese import ZH_EVENTS, ZH_JOBS
from agent_memory.condense.statements.english import (
    EN_EVENT,
    EN_EVENT_CLAUSE,
    EN_FINDERS,
    EN_JOB,
    EN_MATCHERS,
    EN_START,
    EN_STATEMENTS,
    clause_matches,
    en_candidates,
)
from agent_memory.condense.text import Caseless, fold_ascii, sentences
from agent_memory.core import dates
from agent_memory.core.clock import format_day
from agent_memory.core.dates import resolve
from agent_memory.core.facts import fact_key
from agent_memory.core.tokens import count_tokens

# Words the patterns look for, words that only look like them, and the characters re's
# IGNORECASE matches to ASCII letters (İ ı ſ K) or that the patterns must see past.
_WORDS = (
    "I I'm I've am a an my My MY we We and And AND but so So because since now Now nurse teacher "
    "senior engineer at in for from live living moved to Paris New York cat dog Miso named called "
    "name is call me remember Remember don't forget remind REMIND us that about allergic allergy to "
    "peanuts have got two kids sister Anna favourite food pizza taken up started learning yoga "
    "wedding birthday interview tomorrow next week monday Jan 3 1st 12 love hate excited sand "
    "oh well yeah actually mine i'll going ran went my name is call me "
    "我 叫 小明 记住 记得 别忘了 明天 生日 喜欢 이름은 민수 예요 기억해 줘 잊지 마 私の名前は 覚えておいて "
    "İ ı ſ K é , ; : ! . ? - 'm"
)
PHRASES = (
    "my name is",
    "My name is",
    "call me",
    "我叫",
    "我的名字是",
    "제 이름은",
    "私の名前は",
    "don't forget",
)
WORDS = [*_WORDS.split(" "), *PHRASES]
# Clauses the statement patterns restate, and what may join or begin them.
CLAUSES = (
    "I'm a senior engineer at Google",
    "I work at Google",
    "I'm working for Acme",
    "I work as a nurse in Boston",
    "I live in Paris",
    "we moved to New York",
    "I'm originally from Lyon",
    "I have two kids",
    "I'm allergic to peanuts",
    "I have a nut allergy",
    "I've taken up yoga",
    "my sister's wedding is tomorrow",
    "I have an interview next week",
    "we have a dog",
    "I adopted a cat named Miso",
    "I am going to Rome on monday",
    "I ran a marathon yesterday",
)
JOINS = (
    ", ",
    "; ",
    " and ",
    " but ",
    " so ",
    " because ",
    " since ",
    " now ",
    "! ",
    " AND ",
    ", and ",
    ": ",
    " sand ",
)
FILLERS = ("", "", "Oh, ", "well ", "Actually, ", "So ", "yeah and ", "and ")


def random_text(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 14))]
    if rng.random() < 0.2:
        words = [word.upper() if rng.random() < 0.3 else word for word in words]
    if rng.random() < 0.3:
        return "".join(words)  # CJK is written without spaces
    text = ""
    for word in words:
        text += word if word in ",;:!.?" or not text else " " + word
    return text


def random_statement(rng: random.Random) -> str:
    text = rng.choice(FILLERS) + rng.choice(CLAUSES)
    for _ in range(rng.randint(0, 2)):
        text += rng.choice(JOINS) + rng.choice(CLAUSES)
    if rng.random() < 0.2:
        text = text.upper() if rng.random() < 0.5 else text.lower()
    return text + rng.choice(("", ".", "!", " now"))


def test_caseless_patterns_answer_as_their_ignorecase_patterns(rounds: Callable[[int], int]) -> None:
    rng = random.Random(28)
    patterns = [
        salience.DATE_WORDS,
        salience.FIRST_PERSON,
        salience.FEELINGS,
        EN_EVENT,
        EN_JOB,
    ]
    caseless = [Caseless(pattern) for pattern in patterns]
    found = 0
    for _ in range(rounds(6_000)):
        text = random_text(rng) if rng.random() < 0.7 else random_statement(rng)
        folded = fold_ascii(text)
        for pattern, fast in zip(patterns, caseless, strict=True):
            assert fast.search(text, folded) == (pattern.search(text) is not None), (pattern.pattern, text)
            found += fast.search(text, folded)
    assert found > rounds(5_000)


def test_caseless_refuses_a_pattern_it_would_get_wrong() -> None:
    for pattern in (
        EN_PROFILE,  # "fiancée"
        re.compile("abc"),  # not IGNORECASE
        re.compile("Abc", re.IGNORECASE),  # an upper-case letter
        re.compile("café", re.IGNORECASE),  # a cased letter beyond ASCII
        re.compile("(?-i:abc)", re.IGNORECASE),  # an inline flag
    ):
        try:
            Caseless(pattern)
        except AssertionError:
            continue
        raise AssertionError(f"Caseless took {pattern.pattern!r}")


def test_fold_ascii_keeps_offsets_and_leaves_the_slow_path_to_case_equivalents() -> None:
    assert fold_ascii("My Cat 我") == "my cat 我"
    for odd in ("\u0130", "\u0131", "\u017f", "\u212a"):
        assert fold_ascii(f"Kelvin {odd}") is None


def spans(matches: object) -> list[tuple[object, ...]]:
    return [(match.span(), match.groupdict()) for match in matches]  # type: ignore[attr-defined]


def test_statement_finders_find_what_finditer_finds(rounds: Callable[[int], int]) -> None:
    rng = random.Random(11)
    finders = [*EN_FINDERS, partial(clause_matches, EN_EVENT_CLAUSE)]
    patterns = [*(pattern for _, pattern in EN_STATEMENTS), EN_EVENT_CLAUSE]
    assert sum(pattern.pattern.startswith(EN_START) for pattern in patterns) >= 10
    found: Counter[str] = Counter()
    for _ in range(rounds(4_000)):
        sentence = random_text(rng) if rng.random() < 0.5 else random_statement(rng)
        for pattern, find in zip(patterns, finders, strict=True):
            expected = spans(pattern.finditer(sentence))
            assert spans(find(sentence)) == expected, (pattern.pattern[:60], sentence)
            found[pattern.pattern] += bool(expected)
    # Every pattern beginning with EN_START was seen to match, its literals and starts kept.
    assert all(found[p.pattern] > rounds(20) for p in patterns if p.pattern.startswith(EN_START)), (
        found.values()
    )


def test_requests_and_introductions_hold_the_words_their_prefilter_asks_for(
    rounds: Callable[[int], int],
) -> None:
    rng = random.Random(5)
    requests = introductions = 0
    for _ in range(rounds(20_000)):
        text = random_text(rng)
        if any(extract(sentence) for sentence in sentences(text) for extract in REQUEST_EXTRACTORS):
            requests += 1
            assert may_hold(text, REQUEST_WORDS), text
        if any(pattern.search(text) for pattern in (EN_NAME, ZH_NAME, KO_NAME, JA_NAME)):
            introductions += 1
            assert may_hold(text, INTRODUCTION_WORDS), text
    assert requests > rounds(200) and introductions > rounds(200)


def test_resolve_gives_a_list_of_its_own_each_time() -> None:
    first = resolve("see you tomorrow", 1_763_000_000_000)
    first.clear()
    assert [m.expression for m in resolve("see you tomorrow", 1_763_000_000_000)] == ["tomorrow"]


def test_event_words_are_the_plain_findalls(rounds: Callable[[int], int]) -> None:
    rng = random.Random(7)
    seen = 0
    for _ in range(rounds(6_000)):
        text = random_text(rng) if rng.random() < 0.6 else random_statement(rng)
        plain = {m.lower() for m in EN_EVENT.findall(text)} | set(ZH_EVENTS.findall(text))
        assert event_words(text) == plain, text
        seen += bool(plain)
    assert seen > rounds(1_000)


def plain_fact_key(text: str) -> str:
    """`fact_key` as it was written first: NFKC, casefold, every separator through the Unicode database."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    spaced = "".join(ch if unicodedata.category(ch)[0] in "LMNS" else " " for ch in folded)
    return " ".join(spaced.split())


def test_fact_key_is_the_plain_key(rounds: Callable[[int], int]) -> None:
    rng = random.Random(13)
    alphabet = [chr(code) for code in range(128)] + list("ＣＡＴé İıſK我的猫。，！ \u00a0\u3000ﬁ")
    for _ in range(rounds(20_000)):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert fact_key(text) == plain_fact_key(text), repr(text)
    for _ in range(rounds(5_000)):
        text = random_text(rng)
        assert fact_key(text) == plain_fact_key(text), repr(text)


def test_is_profile_answers_as_its_ignorecase_patterns(rounds: Callable[[int], int]) -> None:
    rng = random.Random(17)
    extra = ("fiancée", "FIANCÉE", "Fiancé", "after work", "After Work", "post office", "我妈妈", "工作")
    found = 0
    for _ in range(rounds(6_000)):
        text = random_text(rng) if rng.random() < 0.6 else random_statement(rng)
        if rng.random() < 0.3:
            text += " " + rng.choice(extra)
        plain = bool(EN_PROFILE.search(text) or ZH_PROFILE.search(text))
        assert is_profile.__wrapped__(text) == plain, text
        found += plain
    assert found > rounds(1_000)


def test_resolve_finds_what_every_expression_tried_finds(rounds: Callable[[int], int]) -> None:
    rng = random.Random(19)
    times = ("today", "Tonight", "last Friday", "next week", "THIS weekend", "two days ago", "in 3 weeks",
             "昨天", "下周五", "어제", "다음 주", "先週", "the day before yesterday")  # fmt: skip
    found = 0
    for _ in range(rounds(4_000)):
        text = random_text(rng)
        if rng.random() < 0.5:
            text += " " + rng.choice(times)
        lower = text.translate(str.maketrans(string.ascii_uppercase, string.ascii_lowercase))
        plain = sorted(
            [
                *dates._EN_WORDS.finditer(lower),
                *dates._EN_COUNTS.finditer(lower),
                *dates._ZH.finditer(text),
                *dates._KO.finditer(text),
            ],
            key=lambda match: (match.start(), -match.end()),
        )
        assert spans(dates._matches(text)) == spans(plain), text
        found += bool(plain)
    assert found > rounds(1_000)


def test_salience_is_what_its_plain_patterns_give(rounds: Callable[[int], int]) -> None:
    rng = random.Random(23)
    said = 1_763_000_000_000
    extra = ("My friend got married", "my colleague Anna", "我同事结婚了", "我是护士", "婚礼", "A nurse",
             "social worker", "Real estate agent", "check-up", "checkup", "due date", "support group", "exams",
             "lovee", "LOVED", "favorite", "enjoyed", "missed", "mine", "MY", "i'm", "Sept. 3", "3rd", "nurse_1",
             "next month", "Sunday", "İ love", "Ｉ am", "my_self", "Exams2")  # fmt: skip
    for _ in range(rounds(3_000)):
        text = random_text(rng) if rng.random() < 0.6 else random_statement(rng)
        for _ in range(rng.choice((0, 0, 1, 2))):
            text = rng.choice(extra) + rng.choice((" ", ", ", "")) + text
        assert salience._salience.__wrapped__(text, said) == plain_salience(text, said), text


def plain_salience(text: str, at_ms: int) -> int:
    """`salience._salience` with every pattern asked as written (IGNORECASE, no gates)."""
    score = min(count_tokens(text), 60)
    if salience.DIGITS.search(text):
        score += 15
    today = format_day(at_ms)
    if salience.DATE_WORDS.search(text) or any(m.label != today for m in resolve(text, at_ms)):
        score += 15
    if salience.FIRST_PERSON.search(text):
        score += 20
    if salience.NAME_LIKE.search(text):
        score += 10
    if EN_EVENT.search(text) or ZH_EVENTS.search(text):
        score += 10
    if EN_JOB.search(text) or re.search(ZH_JOBS, text):
        score += 10
    if salience.FEELINGS.search(text):
        score += 10
    if salience.OTHERS_NEWS.match(text):
        score -= 15
    if salience.remember_requests(text) or salience.introductions(text):
        score += 40
    elif salience.statement_facts(text, at_ms):
        score += 25
    if salience.QUESTION.search(text):
        score -= 10
    return score


def test_statement_candidates_leave_out_only_patterns_that_cannot_match(rounds: Callable[[int], int]) -> None:
    rng = random.Random(29)
    tried = Counter[int]()
    for _ in range(rounds(6_000)):
        sentence = random_text(rng) if rng.random() < 0.5 else random_statement(rng)
        candidates = en_candidates(sentence)
        for index, (_, pattern) in enumerate(EN_STATEMENTS):
            if index not in candidates:
                assert pattern.search(sentence) is None, (pattern.pattern[:60], sentence)
            else:
                tried[index] += 1
                assert spans(EN_MATCHERS[index](sentence)) == spans(pattern.finditer(sentence)), sentence
    # Every pattern was tried, and each was left out of some sentences.
    assert len(tried) == len(EN_STATEMENTS) and all(count < rounds(6_000) for count in tried.values())
