"""A digest quotes what a statement tells, judged against the pair's history (condense.gist)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from conftest import said, seed

from agent_memory.condense.base import CondenseInput, CondenseOutput, CondenseResult
from agent_memory.condense.gist import NO_HISTORY, Call, History, gist
from agent_memory.condense.life import speaks_of_self
from agent_memory.condense.offline import (
    LABEL,
    OTHER_SPEAKER_PENALTY,
    Digest,
    bullet_score,
    fit_digests,
    lines_tokens,
)
from agent_memory.condense.salience import salience
from agent_memory.condense.text import sentences
from agent_memory.core.terms import cached_terms
from agent_memory.memory.jobs import CondenseJobs

DAY_MS = 86_400_000
FIRST_DAY_MS = 1_763_690_000_000  # 2025-11-21 01:53 UTC
NEIGHBOURS = ["Gus", "Wendy", "Ravi", "Elena", "Tom", "Irene"]
ACTS = ["walked my dog", "fed my cat", "took my dog to the park", "brushed my cat", "walked my puppy",
        "bathed my dog", "played with my kitten"]  # fmt: skip
NEWS = [
    f"I finished the novel {title} and I love it."
    for title in ("Glass Harbour", "Copper Moon", "Paper Tigers", "The Long Marigold", "Winter Finches",
                  "Salt Orchard", "Nine Winters", "Little Thunder", "Quiet Engineers", "Borrowed Summers",
                  "Amber Owls", "Static Orchard", "Brass Meridian", "Nightjar Parade", "Harbour Lights",
                  "Velvet Foxes", "Moonlit Radio", "Lantern Tales", "Heron River", "Dusk Lighthouse")
]  # fmt: skip


def test_the_gist_leaves_out_the_reaction_and_the_question_back() -> None:
    call = Call.of(["Oh wow, okay!", "How are you?", "Ha, that's great!"])
    text = (
        "Oh wow, okay! I went to a bereavement support group yesterday and it was so powerful. How are you?"
    )

    assert gist(text, call, 280) == "I went to a bereavement support group yesterday and it was so powerful."


@pytest.mark.parametrize(
    ("text", "told"),
    [
        (
            "Hey Luna, good to hear from you. I signed up for a beekeeping course.",
            "I signed up for a beekeeping course.",
        ),
        ("Sam! Hello again. Our roof leaked all night.", "Our roof leaked all night."),
        ("I signed up for a beekeeping course. Talk soon, Luna.", "I signed up for a beekeeping course."),
        ("小林你好！我报了一个养蜂课。", "我报了一个养蜂课。"),
        ("我报了一个养蜂课。拜拜，小月！", "我报了一个养蜂课。"),
    ],
)
def test_a_greeting_or_a_goodbye_by_name_tells_nothing(text: str, told: str) -> None:
    # Said once a call, their words are rare enough in a pair's history to look like news.
    goodbye = [word for sentence in sentences(text) if sentence != told for word in cached_terms(sentence)]
    history = History(Counter(goodbye * 20 + list(cached_terms(told)) * 30), 600)
    call = Call.of([text], history)

    assert gist(text, call, 280) == told
    assert call.told(text) == call.told(told) > 0


def test_a_name_keeps_its_short_sentence_beside_a_longer_one() -> None:
    text = "Back from Lapland! Sunburnt, broke and completely happy."

    assert gist(text, Call.of([text]), 280) == text


def test_an_abbreviation_ends_no_sentence() -> None:
    said_ = "It's the ICU at St. Mary's, seven p.m. to seven a.m., all month. Dr. Lee runs it."

    assert sentences(said_) == (
        "It's the ICU at St. Mary's, seven p.m. to seven a.m., all month.",
        "Dr. Lee runs it.",
    )


def test_words_the_history_says_often_tell_less() -> None:
    routine = "My neighbour Gus got a new hedgehog feeder."
    news = "I signed up for a beekeeping course."
    alone = Call.of([routine, news])
    history = Call.of([routine, news], History(Counter(cached_terms(routine) * 40), 60))

    assert alone.told(routine) == alone.told(news) == 0  # a call alone ranks nothing
    assert history.told(news) > history.told(routine) > 0


def profile_kept(history: History) -> int:
    """How many of the user's news a full profile keeps beside the neighbours' routine, which
    salience alone ranks higher (a day, "my", a name, "always")."""
    routine = [
        f"- [2025-11-{10 + i}] My neighbour {who} and I {ACTS[i % len(ACTS)]} on Saturday after work, "
        "as we always do."
        for i, who in enumerate(NEIGHBOURS * 2)
    ]
    news = [f"- [2025-11-{10 + i}] {said_}" for i, said_ in enumerate(NEWS[:12])]
    profile = sorted(routine + news)
    fit_digests([Digest("2025-12-01:", ["- a call"])], [LABEL], (), profile, max_tokens=600, history=history)
    return sum(line in profile for line in news)


def test_with_the_history_a_full_profile_keeps_the_users_news_over_the_routine() -> None:
    counts: Counter[str] = Counter()
    for number in range(5):  # five calls of the same routine, and the news said once
        for i, who in enumerate(NEIGHBOURS * 2):
            counts.update(set(cached_terms(f"My neighbour {who} and I {ACTS[(i + number) % len(ACTS)]}")))
            counts.update(set(cached_terms("on Saturday after work, as we always do.")))
    for said_ in NEWS[:12]:
        counts.update(set(cached_terms(said_)))

    assert profile_kept(History(dict(counts), 200)) > profile_kept(NO_HISTORY)


class Recording:
    """A condenser that keeps the jobs it is given."""

    def __init__(self, reads_history: bool = True) -> None:
        self.jobs: list[CondenseInput] = []
        self.reads_history = reads_history

    async def condense(self, job: CondenseInput) -> CondenseResult:
        self.jobs.append(job)
        return CondenseResult(output=CondenseOutput(summary="condensed"), method="offline", model="stub")

    async def close(self) -> None:
        """Nothing to release."""


@pytest.mark.postgres
async def test_a_condensing_job_is_given_the_pairs_counts_from_the_recall_index(start_service: Any) -> None:
    service = await start_service(summary_delay_s=3600, job_sweep_s=3600)
    for number in range(3):
        lines = ["My neighbour Gus got a new hedgehog feeder.", f"News number {number}: I adopted a cat."]
        await seed(
            service, "u-h", "luna", f"RUN-{number}", said(*lines, start_ms=FIRST_DAY_MS + number * DAY_MS)
        )
    while await service.store.catch_up_search():
        pass
    condenser = Recording()
    await service.api("POST", "/v1/users/u-h/characters/luna/condense")

    await CondenseJobs(service.settings, service.store, condenser).run_due_now()

    (job,) = condenser.jobs
    assert job.indexed_turns == 6 and len(job.messages) == 6
    hedgehog, adopted = cached_terms("hedgehog adopted")
    assert job.term_turns[hedgehog] == 3 and job.term_turns[adopted] == 3
    assert job.term_turns[cached_terms("number")[0]] == 3


def test_the_characters_news_of_itself_counts_as_the_users_its_advice_less() -> None:
    """In a call between two people each one's news is asked about; advice to the user is not news."""
    own, to_user = (
        "I finished the novel Glass Harbour last week.",
        "You finished the novel Glass Harbour last week.",
    )

    assert speaks_of_self(own) and not speaks_of_self(to_user)
    assert not speaks_of_self("Tell me more.") and not speaks_of_self(
        "You could try a walk before bed tonight."
    )
    assert bullet_score(f"- Assistant: {own}") == salience(own)
    assert bullet_score(f"- Assistant: {to_user}") == salience(to_user) - OTHER_SPEAKER_PENALTY


def test_a_statement_that_tells_much_outlasts_its_call_in_the_profile_whatever_its_topic() -> None:
    """No profile cue in "a beekeeping course": kept for what it tells once its call's digest goes."""
    course = "I signed up for a beekeeping course on Thursday nights at the community centre."
    calls = [
        Digest(f"2025-12-{day:02d}:", [f"- Call {day} was quiet, as calls go.", "- It rained."])
        for day in range(1, 29)
    ]
    digests = [Digest("2025-11-30:", [f"- {course}", "- It rained."]), *calls]
    counts = Counter(
        {term: 28 for text in ("Call was quiet, as calls go.", "It rained.") for term in cached_terms(text)}
    )

    for history, kept in ((NO_HISTORY, False), (History(dict(counts), 60), True)):
        profile: list[str] = []
        fit_digests(digests, [LABEL], (), profile, max_tokens=300, history=history)
        assert (f"- [2025-11-30] {course}" in profile) is kept, profile


@pytest.mark.postgres
async def test_a_condenser_that_reads_no_history_costs_its_job_no_read_of_the_index(
    start_service: Any,
) -> None:
    service = await start_service(summary_delay_s=3600, job_sweep_s=3600)
    await seed(service, "u-h", "luna", "RUN-0", said("I adopted a cat.", "Lovely!", start_ms=FIRST_DAY_MS))
    while await service.store.catch_up_search():
        pass
    condenser = Recording(reads_history=False)
    await service.api("POST", "/v1/users/u-h/characters/luna/condense")

    await CondenseJobs(service.settings, service.store, condenser).run_due_now()

    (job,) = condenser.jobs
    assert len(job.messages) == 2 and job.term_turns == {} and job.indexed_turns == 0


def test_a_statement_with_no_word_said_seldom_retells_the_round_and_tells_less() -> None:
    """Small talk said of one acquaintance after another uses no word the pair said only once or
    twice: however many words it has, it tells less than news with a word said once."""
    round_ = "So Elena from the choir had a birthday picnic in the rain."
    news = "I passed my bartending exam, first try!"
    counts = Counter({term: 15 for text in (round_, news) for term in cached_terms(text)})
    counts["bartend"] = 1
    call = Call.of([], History(counts, 700))
    assert call.specificity(round_) > call.specificity(news)

    assert call.told(news) > call.told(round_) > 0
    assert call.news(news) and not call.news(round_)


def test_a_line_that_retells_the_round_goes_before_an_older_calls_news() -> None:
    """Once every digest is down to MIN_BULLETS, a bullet with no word said seldom (small talk
    about an acquaintance) leaves its digest before the oldest digest, news and all, goes."""
    older = Digest("2025-03-01:", ["- I passed my bartending exam, first try!",
                                   "- My sister Clara got her offer from the Sorbonne."])  # fmt: skip
    newer = Digest("2025-03-09:", ["- So Elena from the choir had a birthday picnic in the rain.",
                                   "- We climbed Snowdon in the fog."])  # fmt: skip
    lines = [LABEL, *older.lines(), *newer.lines()]
    counts = Counter({term: 15 for line in lines for term in cached_terms(line)})
    counts.update({"bartend": -14, "sorbonn": -14, "snowdon": -14})
    assert {"bartend", "sorbonn", "snowdon"} <= set(counts)
    room = lines_tokens(lines) - 2  # one line has to go

    kept = fit_digests([older, newer], [LABEL], max_tokens=room, history=History(counts, 700))

    assert [d.lines() for d in kept] == [older.lines(), ["2025-03-09:", "- We climbed Snowdon in the fog."]]
