"""The offline condenser: a deterministic memory update when no LLM is configured.

It does not pretend to understand the conversation; the summary is labelled as made
without a language model. Per session it keeps a dated digest: a header with the
session's day, then bullets quoting the most informative statements (`salience`:
events, plans, people, places, numbers, preferences, feelings; the user's first, the other
speaker's too), each with its relative dates resolved (`core.dates`), in the order said.
Previous digests are carried forward under one budget (~600 tokens): when it is
exceeded, the digest with the most bullets loses its least informative one, and once
every digest is down to two, the oldest digest goes.

Facts come from the user's own words (`facts_offline`, on the patterns of `statements`):
explicit requests ("remember that …", "记住…", "기억해 줘"), self-introductions ("my name
is …", "我叫…") and common self-statements ("I'm a nurse", "my cat Miso", "my sister's
wedding is this Saturday", 我住在杭州, 저는 간호사예요), dated where a date matters;
questions, hypotheticals and negations never make one. Facts are never updated or removed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from agent_memory.condense.base import (
    CondenseInput,
    CondenseOutput,
    CondenseResult,
    sanitize,
    unchanged,
)
from agent_memory.condense.facts_offline import extract_facts, known_names
from agent_memory.condense.gist import NO_HISTORY, Call, History, gist
from agent_memory.condense.life import (
    DATE_NOTE,
    DATED_BULLET,
    MAX_THREADS,
    PROFILE_HEADING,
    THREADS_HEADING,
    dated,
    followed_up,
    is_life_event,
    is_profile,
    is_thread,
    speaks_of_self,
    stale,
    tells_own_life,
)
from agent_memory.condense.salience import salience
from agent_memory.condense.tally import Tally
from agent_memory.condense.text import ELLIPSIS, sentences
from agent_memory.condense.worker import WORKERS
from agent_memory.core.clock import format_day
from agent_memory.core.dates import annotate
from agent_memory.core.domain import Message
from agent_memory.core.facts import fact_key
from agent_memory.core.render import has_several_speakers, speaker_label
from agent_memory.core.textcache import text_cache
from agent_memory.core.tokens import count_tokens

MODEL_NAME = "offline"
LABEL = "(offline summary)"
# The whole summary, label, profile, threads and carried digests included: ~1,400 tokens, and as
# many characters as that takes in English (4,000 left a fifth of it unused: the life set's
# start context 36.4 -> 38.3 %). Most of a 1,500-token start context, which gives the rest to the
# latest turns (`core.context.RECENT_SHARE`; split measured with bench/recall_hard.py: 1,300
# tokens beside a tenth for the turns held 1.6-3.6 points fewer questions of the life sets,
# plain and --details 2, and of the hard set, than 1,400 beside a twentieth).
SUMMARY_MAX_CHARS = 5600
SUMMARY_MAX_TOKENS = 1400
# The profile may take this share of the summary; the timeline of digests has the rest.
PROFILE_SHARE = 0.4
# One new digest may take this much; the rest of the budget carries the past forward.
SECTION_MAX_TOKENS = 360
MAX_BULLETS = 12
# Trimming takes digests down to this many bullets before it drops the oldest digest.
MIN_BULLETS = 2
STATEMENT_MAX_CHARS = 280
# Below this a line is filler ("ok", "Thanks!") and not worth quoting even when it is all there is.
MIN_SALIENCE = 4
# The other speaker's lines count, but the user's say more about the user; a line of theirs about
# themselves (`speaks_of_self`) counts as the user's would.
OTHER_SPEAKER_PENALTY = 15
# What the user says about their life (people, pets, work, places, likes, health) outlasts chat.
PROFILE_BONUS = 15
# A statement that tells this much against the pair's history (`Call.told`: some six words said
# nowhere else in it) is life the profile keeps, whatever its topic: a course, a concert, a present
# have no cue word (bench/recall_hard.py --set life, seeds 21 / 22 / 31 / 32: 41.7 / 44.3 / 40.0 /
# 40.3 -> 51.1 / 54.0 / 50.6 / 48.7 %; the hard set 92.8 / 88.9 -> 92.8 / 90.6 %). At 30 the
# profile took in more of the day-to-day and lost older life to it (tests/test_start_context.py).
PROFILE_TOLD = 35


# -- messages ------------------------------------------------------------------------------
def message_at(message: Message) -> int:
    """When the message was said, as render.py dates it."""
    return message.ts_ms or message.at_ms


def spoken(messages: Iterable[Message]) -> Iterator[tuple[Message, str]]:
    """Messages with something said, and their stripped text; empty ASR results are skipped."""
    for message in messages:
        text = " ".join(message.content.split())
        if text:
            yield message, text


def openings(messages: Iterable[Message]) -> list[tuple[str, str]]:
    """Each call's first turn of each speaker (role, text), of the calls that start among `messages`."""
    first: dict[tuple[str, str], str] = {}
    for message in messages:
        if message.seq <= OPENING_SEQ and message.kind == "turn" and message.content.strip():
            first.setdefault((message.agent_id, message.role), message.content.strip())
    return [(role, text) for (_, role), text in first.items()]


# A call's first turns are among its first few messages (a greeting, or a system message before it).
OPENING_SEQ = 3


# -- the digest ------------------------------------------------------------------------------
HEADER = re.compile(r"^\d{4}-\d{2}-\d{2}\b.*[:：]$")
BULLET = "- "
OTHER_PREFIX = re.compile(r"^(?:Assistant|User \S+): ")


@dataclass
class Digest:
    """One session's part of the summary: its header line and bullets, or a paragraph of an
    earlier summary in another form (`bullets` empty), which is cut by sentences instead."""

    header: str
    bullets: list[str] = field(default_factory=list)
    paragraph: bool = False

    def lines(self) -> list[str]:
        return [self.header, *self.bullets]


def day_span(first_ms: int, last_ms: int) -> str:
    """The day it was said, or a range of days (UTC)."""
    first_day, last_day = format_day(first_ms), format_day(last_ms)
    return first_day if first_day == last_day else f"{first_day} – {last_day}"


def header_line(span: str) -> str:
    """A digest's first line: its day, `2023-05-08:`. The time of day and the number of exchanges
    it once gave cost ~15 tokens a call and answered nothing: a start context spends them on
    another statement (measured with bench/recall_hard.py, see bench/README.md)."""
    return f"{span}:"


def bullet_body(bullet: str) -> str:
    """What a digest or profile bullet quotes: its text without the day, the "- " or the date note."""
    return DATE_NOTE.sub("", DATED_BULLET.sub("", bullet).removeprefix(BULLET))


def bullet_score(bullet: str, names: Collection[str] = ()) -> int:
    """How informative a digest bullet is, read back from its text (for trimming)."""
    body = bullet_body(bullet)
    other = OTHER_PREFIX.match(body)
    score = salience(OTHER_PREFIX.sub("", body), names=names)
    if other is None and is_profile(body):
        score += PROFILE_BONUS
    if other and tells_own_life(body[other.end() :]):
        score += PROFILE_BONUS
    elif other and body.startswith("Assistant") and not speaks_of_self(body[other.end() :]):
        score -= OTHER_SPEAKER_PENALTY
    return score


def bullet_key(bullet: str) -> str:
    """What makes two bullets the same statement: their text without date notes or day."""
    return fact_key(OTHER_PREFIX.sub("", bullet_body(bullet)))


def lines_tokens(lines: Iterable[str]) -> int:
    """Tokens of lines joined by newlines, counted line by line (never fewer than joined)."""
    return sum(count_tokens(line) + 1 for line in lines)


def new_digest(
    said: Sequence[tuple[Message, str]],
    several: bool,
    names: Collection[str] = (),
    seen: set[str] | None = None,
    history: History = NO_HISTORY,
) -> tuple[Digest, list[str]]:
    """The digest of one session's messages (header, then its most informative statements) and
    the threads it opens; a statement whose key is in `seen` (said before) is not quoted again."""
    times = [message_at(message) for message, _ in said]
    header = header_line(day_span(min(times), max(times)))
    seen = set() if seen is None else seen
    call = Call.of((text for _, text in said), history)
    ranked: list[tuple[int, int, str]] = []
    threads: list[str] = []
    for index, (message, text) in enumerate(said):
        key = fact_key(text)
        if not key or key in seen:
            continue
        seen.add(key)
        said_at = message_at(message)
        told = gist(text, call, STATEMENT_MAX_CHARS)
        score = statement_score(message, text, told, call, names)
        if score < MIN_SALIENCE:
            continue
        prefix = (
            ""
            if message.role == "user" and not several
            else f"{speaker_label(message.role, message.speaker, several)}: "
        )
        # The header gives the session's day, so "today" needs no note.
        body = prefix + annotate(told, said_at, same_day=False)
        if message.role == "user" and is_thread(text, said_at):
            # Listed apart while open, and kept in the timeline where it was said.
            threads.append(dated(format_day(said_at), body))
        ranked.append((-score, index, BULLET + body))
    return Digest(header, chosen(header, ranked)), threads


def statement_score(message: Message, text: str, told: str, call: Call, names: Collection[str]) -> int:
    """How much a session's statement deserves quoting (its gist `told`): salience, what it tells
    against the pair's history, more for the user's life, less for another speaker's words to the user."""
    score = salience(text, message_at(message), names) + call.told(told)
    if message.role != "user" and tells_own_life(text):
        return score + PROFILE_BONUS
    if message.role != "user" and not speaks_of_self(told):
        return score - OTHER_SPEAKER_PENALTY
    return score + PROFILE_BONUS if is_profile(text) else score


def chosen(header: str, ranked: list[tuple[int, int, str]]) -> list[str]:
    """The best ranked bullets (score negated, index, bullet) that fit a digest, in the order said."""
    kept: list[tuple[int, str]] = []
    used = lines_tokens([header])
    for _, index, bullet in sorted(ranked):  # ties go to the earlier statement: deterministic
        cost = lines_tokens([bullet])
        if len(kept) < MAX_BULLETS and used + cost <= SECTION_MAX_TOKENS:
            kept.append((index, bullet))
            used += cost
    return [bullet for _, bullet in sorted(kept)]


def strip_label(summary: str) -> str:
    """A previous offline summary without its label, so labels do not pile up."""
    summary = summary.strip()
    return summary[len(LABEL) :].strip() if summary.startswith(LABEL) else summary


@dataclass
class Life:
    """A summary read back: its profile, its open threads and its digests (paragraphs included)."""

    profile: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    digests: list[Digest] = field(default_factory=list)


def parse_summary(previous: str) -> Life:
    """A previous summary read back; lines in another form become paragraphs."""
    life = Life()
    section: list[str] | None = None
    for raw in strip_label(previous).splitlines():
        line = raw.strip()
        if not line:
            continue
        if line in (PROFILE_HEADING, THREADS_HEADING):
            section = life.profile if line == PROFILE_HEADING else life.threads
            continue
        if section is not None and DATED_BULLET.match(line):
            section.append(line)
            continue
        section = None
        if HEADER.match(line):
            life.digests.append(Digest(line))
        elif line.startswith(BULLET) and life.digests and not life.digests[-1].paragraph:
            life.digests[-1].bullets.append(line)
        else:
            life.digests.append(Digest(line, paragraph=True))
    return life


def parse_digests(previous: str) -> list[Digest]:
    """A previous summary's digests (and paragraphs in another form)."""
    return parse_summary(previous).digests


def section_lines(heading: str, bullets: Sequence[str]) -> list[str]:
    """A section's heading and bullets; nothing when it has none."""
    return [heading, *bullets] if bullets else []


def carry_forward(previous: str, room: int) -> str:
    """The newest part of `previous` that fits in `room` characters; oldest dropped first."""
    if room <= len(ELLIPSIS) + 10:
        return ""
    paragraphs = [p.strip() for p in previous.splitlines() if p.strip()]
    while len(paragraphs) > 1 and len("\n".join(paragraphs)) > room:
        paragraphs.pop(0)
    if not paragraphs or len(paragraphs[0]) <= room:
        return "\n".join(paragraphs)
    parts = list(sentences(paragraphs[0]))
    while len(parts) > 1 and len(" ".join(parts)) + len(ELLIPSIS) > room:
        parts.pop(0)
    text = " ".join(parts)
    if len(text) + len(ELLIPSIS) > room:
        text = text[-(room - len(ELLIPSIS)) :].lstrip()
    return ELLIPSIS + text


def fits(
    lines: Sequence[str], max_tokens: int = SUMMARY_MAX_TOKENS, max_chars: int = SUMMARY_MAX_CHARS
) -> bool:
    """Whether the summary made of `lines` (its label included) is within both budgets."""
    return lines_tokens(lines) <= max_tokens and len("\n".join(lines)) <= max_chars


@dataclass
class _Trim:
    """`fit_digests` under way: the digests and profile left, and what they count."""

    digests: list[Digest]
    profile: list[str] | None
    names: Collection[str]
    max_tokens: int
    max_chars: int
    # The pair's history, for what each bullet tells (`Call.told`) beside its salience.
    history: Call
    # What `fits` would count of the summary's lines (reserved, profile, digests) and what
    # `lines_tokens(profile)` gives, kept as lines come and go: counting every line again after
    # each bullet dropped made trimming a long summary quadratic.
    whole: Tally = field(default_factory=Tally)
    profile_tally: Tally = field(default_factory=Tally)
    keys: set[str] = field(default_factory=set)  # the profile's bullets' keys
    scores: dict[str, int] = field(default_factory=dict)
    fresh: dict[str, bool] = field(default_factory=dict)  # whether each bullet scored is news

    def count(self, reserved: Sequence[str]) -> None:
        """Count in the lines there are to begin with."""
        self.keys = {bullet_key(bullet) for bullet in self.profile or ()}
        for line in [*reserved, *section_lines(PROFILE_HEADING, self.profile or ())]:
            self.whole.add(line)
        for line in self.profile or ():
            self.profile_tally.add(line)
        for digest in self.digests:
            for line in digest.lines():
                self.whole.add(line)

    def score(self, bullet: str) -> int:
        """`bullet_score` and what it tells, once per bullet."""
        if bullet not in self.scores:
            told, self.fresh[bullet] = self.history.telling(OTHER_PREFIX.sub("", bullet_body(bullet)))
            self.scores[bullet] = bullet_score(bullet, self.names) + told
        return self.scores[bullet]

    def news(self, bullet: str) -> bool:
        """Whether a bullet tells news (`Call.news`; its speaker's name aside), once per bullet."""
        self.score(bullet)
        return self.fresh[bullet]

    def profile_over(self) -> bool:
        """Whether the profile takes more than its share of the budget."""
        return bool(self.profile) and self.profile_tally.tokens > int(self.max_tokens * PROFILE_SHARE)

    def over(self) -> bool:
        """Whether the summary, or its profile, is over budget."""
        return not self.whole.fits(self.max_tokens, self.max_chars) or self.profile_over()

    def step(self) -> bool:
        """Drop one line: the profile's weakest while it is over its share (or all that is
        left), else a digest's; False when nothing is left to drop."""
        if self.profile and (self.profile_over() or not self.digests):
            self.drop_weakest_of_profile()
        elif self.digests:
            self.drop_from_digests()
        else:
            return False
        return True

    def drop_from_digests(self) -> None:
        """The fullest digest's weakest bullet; once each has MIN_BULLETS, the newest one that
        retells the everyday round (`Call.news`) of a digest with another; then the oldest digest."""
        digests = self.digests
        fullest = max(range(len(digests)), key=lambda i: (len(digests[i].bullets), -i))
        bullets = digests[fullest].bullets
        rounds = (
            []
            if len(bullets) > MIN_BULLETS or len(digests) == 1
            else [
                i for i, d in enumerate(digests) if len(d.bullets) > 1 and not all(map(self.news, d.bullets))
            ]
        )
        if rounds:
            fullest, bullets = rounds[-1], digests[rounds[-1]].bullets
        if len(bullets) > MIN_BULLETS or (len(digests) == 1 and bullets) or rounds:
            weakest = min(
                range(len(bullets)), key=lambda i: (self.news(bullets[i]), self.score(bullets[i]), -i)
            )
            bullet = bullets.pop(weakest)
            self.whole.add(bullet, -1)
            self.keep(bullet, digests[fullest])
            return
        gone = digests.pop(0)
        for line in gone.lines():
            self.whole.add(line, -1)
        for bullet in gone.bullets:
            self.keep(bullet, gone)

    def keep(self, bullet: str, digest: Digest) -> None:
        """A user's bullet about their life (or another speaker's about their own) that leaves
        `digest` moves to the profile, dated: one the profile's cues match, a dated event, or one
        that tells much against the pair's history, whatever its topic (`PROFILE_TOLD`)."""
        profile, body, key = self.profile, bullet.removeprefix(BULLET), bullet_key(bullet)
        other = OTHER_PREFIX.match(body)
        said = body[other.end() :] if other else body
        if (
            profile is None
            or key in self.keys
            or (other and not (tells_own_life(said) or speaks_of_self(said)))
        ):
            return
        if not (is_profile(body) or is_life_event(body) or self.history.told(said) >= PROFILE_TOLD):
            return
        self.keys.add(key)
        if not profile:
            self.whole.add(PROFILE_HEADING)
        line = dated(digest.header[: len("2025-01-01")], body)
        self.whole.add(line)
        self.profile_tally.add(line)
        profile.append(line)
        profile.sort(key=lambda line: line[: len("- [2025-01-01]")])  # stable: in the order said

    def drop_weakest_of_profile(self) -> None:
        """The profile's least informative bullet goes (the earliest of equals)."""
        profile = self.profile
        assert profile
        weakest = min(range(len(profile)), key=lambda i: (self.score(profile[i]), i))
        line = profile.pop(weakest)
        self.keys.discard(bullet_key(line))
        self.whole.add(line, -1)
        self.profile_tally.add(line, -1)
        if not profile:
            self.whole.add(PROFILE_HEADING, -1)


def fit_digests(
    digests: list[Digest],
    reserved: Sequence[str],
    names: Collection[str] = (),
    profile: list[str] | None = None,
    max_tokens: int = SUMMARY_MAX_TOKENS,
    max_chars: int = SUMMARY_MAX_CHARS,
    history: History = NO_HISTORY,
) -> list[Digest]:
    """The digests trimmed to fit beside `reserved` lines: the fullest digest loses its least
    informative bullet until each has MIN_BULLETS, then the oldest digest goes. With a
    `profile` (updated in place), a user's bullet about their life that goes moves there, dated;
    the profile keeps at most `PROFILE_SHARE` of the budget, its weakest bullet going first."""
    copies = [Digest(d.header, list(d.bullets)) for d in digests]
    trim = _Trim(copies, profile, names, max_tokens, max_chars, Call.of((), history))
    trim.count(reserved)
    while trim.over() and trim.step():
        pass
    return trim.digests


def summarize(
    previous: str | None,
    said: Sequence[tuple[Message, str]],
    names: Collection[str] = (),
    history: History = NO_HISTORY,
) -> str:
    """The labelled offline summary: the profile and open threads, then earlier digests carried
    forward and one per new session; `names` (of the people and pets the user's facts name)
    make a statement count more."""
    carried = parse_summary(previous or "")
    threads, new = new_digests(carried, said, names, history)
    paragraphs = "\n".join(d.header for d in carried.digests if d.paragraph)
    profile = list(carried.profile)
    reserved = [LABEL, *section_lines(THREADS_HEADING, threads)]
    kept = [*(d for d in carried.digests if not d.paragraph), *new]
    digests = fit_digests(kept, reserved, names, profile, history=history)
    lines = summary_lines(profile, threads, digests)
    past = carried_paragraphs(paragraphs, lines) if paragraphs else ""
    return "\n".join(part for part in (LABEL, past, *lines[1:]) if part)


def new_digests(
    carried: Life, said: Sequence[tuple[Message, str]], names: Collection[str], history: History = NO_HISTORY
) -> tuple[list[str], list[Digest]]:
    """The open threads, the carried ones not followed up or stale and those opened since, and a
    digest per new session."""
    several = has_several_speakers(message for message, _ in said)
    # A statement the summary already quotes is not quoted again (small talk repeats).
    seen = {bullet_key(b) for d in carried.digests if not d.paragraph for b in d.bullets}
    seen |= {bullet_key(b) for b in (*carried.profile, *carried.threads)}
    threads = list(carried.threads)
    new: list[Digest] = []
    for session in sessions(said):
        user_texts = [text for message, text in session if message.role == "user"]
        # A thread from an earlier call is closed once the user speaks of its event again.
        threads = [t for t in threads if not any(followed_up(t, text) for text in user_texts)]
        digest, opened = new_digest(session, several, names, seen, history)
        new.append(digest)
        threads.extend(opened)
    if said:
        newest = format_day(message_at(said[-1][0]))
        threads = [thread for thread in threads if not stale(thread, newest)]
    return threads[-MAX_THREADS:], new


def summary_lines(profile: Sequence[str], threads: Sequence[str], digests: Sequence[Digest]) -> list[str]:
    """A summary's lines: its label, profile and open threads, then its digests."""
    return [
        LABEL,
        *section_lines(PROFILE_HEADING, profile),
        *section_lines(THREADS_HEADING, threads),
        *(line for digest in digests for line in digest.lines()),
    ]


def carried_paragraphs(paragraphs: str, lines: Sequence[str]) -> str:
    """A summary in another form (an LLM's, an older offline one) is older than any digest:
    it keeps what room `lines` leave, up to a third of the budget, newest sentences first."""
    room = min(SUMMARY_MAX_CHARS - len("\n".join(lines)) - 1, SUMMARY_MAX_CHARS // 3)
    past = carry_forward(paragraphs, room)
    while past and not fits([LABEL, past, *lines[1:]]):
        room -= max(room // 10, 1)
        past = carry_forward(paragraphs, room)
    return past


# Scoring bullets takes milliseconds; a summary only changes when its pair is condensed, while
# its context is rebuilt at every new turn: so each summary is trimmed once per budget.
@text_cache(256)
def shorten_summary(text: str, max_tokens: int) -> str | None:
    """An offline summary within `max_tokens`, trimmed as the condenser trims it (the weakest
    bullets of the fullest digests, then the oldest digests, life statements kept in the
    profile); None for a summary in another form, or when even that does not fit."""
    if not text.startswith(LABEL):
        return None
    life = parse_summary(text)
    if any(digest.paragraph for digest in life.digests):
        return None
    profile, threads = list(life.profile), list(life.threads)
    reserved = [LABEL, *section_lines(THREADS_HEADING, threads)]
    digests = fit_digests(life.digests, reserved, (), profile, max_tokens=max_tokens, max_chars=len(text))
    lines = summary_lines(profile, threads, digests)
    return "\n".join(lines) if len(lines) > 1 and lines_tokens(lines) <= max_tokens else None


def sessions(said: Sequence[tuple[Message, str]]) -> Iterator[list[tuple[Message, str]]]:
    """`said` split into its sessions (agent runs), each in the order said."""
    current: list[tuple[Message, str]] = []
    for item in said:
        if current and item[0].agent_id != current[-1][0].agent_id:
            yield current
            current = []
        current.append(item)
    if current:
        yield current


def condense_offline(job: CondenseInput) -> CondenseOutput:
    """The whole offline update of `job`, a pure function of it."""
    said = list(spoken(job.messages))
    if not said:
        # Nothing new was said: the memory stays exactly as it is.
        return unchanged(job)
    user_said = [(text, message_at(message)) for message, text in said if message.role == "user"]
    facts = extract_facts(user_said, (fact.text for fact in job.facts), openings(job.messages))
    names = known_names([*(fact.text for fact in job.facts), *(fact.text for fact in facts)])
    # The same gate as the LLM's answer: cleaned texts, one fact per key.
    history = History(job.term_turns, job.indexed_turns)
    output = CondenseOutput(summary=summarize(job.previous_summary, said, names, history), add_facts=facts)
    return sanitize(output, job.facts)


class OfflineCondenser:
    """Condenses without a language model: deterministic, labelled, never removes facts."""

    model = MODEL_NAME
    reads_history = True  # what a statement tells is judged against them (condense.gist)

    async def condense(self, job: CondenseInput) -> CondenseResult:
        """The offline update; nothing is sent anywhere, so no tokens are counted."""
        # Milliseconds of pure Python per job: in the worker process, so the event loop keeps
        # serving callbacks and streams (the custom-LLM endpoint's first tokens) meanwhile.
        output = await WORKERS.run(condense_offline, job)
        return CondenseResult(output=output, method="offline", model=MODEL_NAME)

    async def close(self) -> None:
        """Nothing to release."""
