"""The parts of the offline summary that span a user's whole history: profile and open threads.

Per-session digests (`offline`) are a dated timeline; when the summary outgrows its budget
their least informative bullets go, then the oldest digests. A bullet in which the user says
something stable about their life (people and relations, pets, work, places, likes, diet and
health: `is_profile`) or tells of a dated event (`is_life_event`) is not lost with them: it
moves to the profile section, dated with the day it was said, where it stays until the profile
itself is full (then its weakest goes). What another speaker (the character, a second caller)
tells of their own life (`tells_own_life`: a life cue and "I/my/we") is kept the same way, under
their name.

An open thread is a plan the user told of with a date still ahead when said, or a promise to
tell how something went ("my interview is next Tuesday, I'll let you know"). It is listed
apart until a later call's user turn speaks of the same event again (it was followed up) or
`THREAD_DAYS` after its date (it went stale).
"""

from __future__ import annotations

import re
from datetime import date

from agent_memory.condense.salience import FIRST_PERSON
from agent_memory.condense.statements.chinese import ZH_EVENTS
from agent_memory.condense.statements.english import EN_EVENT, EN_JOBS, EN_SPECIES
from agent_memory.condense.text import QUESTION, Caseless, fold_ascii
from agent_memory.core.clock import format_day
from agent_memory.core.dates import resolve
from agent_memory.core.textcache import text_cache
from agent_memory.core.tokens import count_tokens
from agent_memory.core.worded import days_in

PROFILE_HEADING = "About the user's life, kept from all earlier calls (the day it was said):"
THREADS_HEADING = "Open threads (plans the user told of and has not followed up yet):"
# A profile or thread bullet starts with the day it was said: `- [2025-03-16] …`.
DATED_BULLET = re.compile(r"^- \[(\d{4}-\d{2}-\d{2})\] ")
# The date note `core.dates.annotate` appends: "(yesterday = 7 May 2023; next month = June 2023)".
DATE_NOTE = re.compile(r" \([^()]+ = [^()]+\)$")
ISO_PREFIX = re.compile(r"\d{4}(?:-\d{2}){0,2}")
# After its date (or the day said, when it has none) a thread is kept this many days.
THREAD_DAYS = 30
MAX_THREADS = 5

# What a life is made of, in the user's words: people and relations, pets, work, places,
# likes and habits, diet and health. Precision matters less than in facts: a cue only keeps
# a statement (quoted whole) longer.
EN_PROFILE = re.compile(
    r"\b(?:mum|mom|mother|dad|father|parents?|sister|brother|cousin|aunt|uncle|niece|nephew|grandma"
    r"|grandmother|grandpa|grandfather|wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|son|daughter"
    r"|kids?|children|baby|family|best friend|friend"
    rf"|pets?|{EN_SPECIES}|adopt(?:ed|ion)?|rescue[d]?|shelter|vet"
    # An occupation said of someone ("to be a nurse", "works as a chef"), not a person named by it
    # ("my dentist", "the plumber"); "after work" is a time of day, the post office a place.
    r"|(?<!after )(?<!before )work(?:s|ed|ing)?|jobs?|shifts?|(?<!post )office|boss|colleagues?|career|hired"
    rf"|promot(?:ed|ion)|retired|(?:a|an|as) (?:\w+ )?(?:{EN_JOBS})"
    r"|grew up|born|hometown|home town|live[sd]?|moved|moving|flat|apartment|house|neighbourhood|neighborhood"
    r"|love|loves|favou?rite|prefer|hate|can't stand|comfort|always|whenever|every (?:day|week|morning)"
    r"|club|team|league|coach|training|practi[cs]e|hobby|learning"
    # Trips and moves, the user's or a friend's ("Back from Lapland!", "relocating to Tallinn"):
    # life events that seldom carry a date to resolve, so `is_life_event` misses them.
    r"|holidays?|vacation|trip|travel(?:l?ed|l?ing)?|landed|back from|relocat(?:e|ed|ing)|leaves? for|moving to"
    r"|allerg(?:y|ies|ic)|doctor|diagnos(?:ed|is)|vegetarian|vegan|meat|diet|gluten|lactose|asthma"
    r"|diabet(?:es|ic)|medication|pregnant|therapy|injur(?:y|ed))\b",
    re.IGNORECASE,
)
ZH_PROFILE = re.compile(
    # Kin said as kin (我姐, 姐姐, 表姐), not as the courtesy title of a neighbour (陈姐, 刘叔, 张奶奶).
    "我(?:的)?(?:妈|爸|姐|哥|弟|妹|叔|姨|舅|奶奶|爷爷|外婆|外公)|妈妈|爸爸|姐姐|哥哥|弟弟|妹妹|父母|表|堂"
    "|老公|老婆|丈夫|妻子|对象|男朋友|女朋友|孩子|儿子|女儿|家人|朋友"
    "|宠物|猫|狗|兔|鸟|鱼|领养|收养|救助站"
    "|上班|工作|(?<!下)班|公司|单位|同事|老板|职业|入职|升职|退休"
    "|老家|长大|出生|住在|搬家|搬到|搬去|房子|旅行|旅游|度假|假期|回来了"
    "|喜欢|最爱|讨厌|治愈|安慰|每天|每周|总是"
    "|俱乐部|教练|训练|练|联赛|爱好"
    "|过敏|医生|确诊|素食|吃素|不吃肉|饮食|怀孕|受伤|生病"
)
# The speaker as the subject or owner: "I went", "my sister", "we saw", "our flat" (not "tell me").
_SUBJECT_OR_OWNER = r"i|i'm|i've|i'd|i'll|my|we|we're|we've|our"
SELF_SUBJECT = re.compile(rf"\b(?:{_SUBJECT_OR_OWNER})\b|我", re.IGNORECASE)
# ... or the object too ("me", "us"): with a life cue, a line of another speaker (the character, a
# second caller) tells of their own life.
SPEAKER_SELF = re.compile(rf"\b(?:{_SUBJECT_OR_OWNER}|me|mine|myself|ours|us)\b|我", re.IGNORECASE)
# Shorter than this, a line of another speaker is a reaction ("Ha, I love that."), not a life told.
MIN_LIFE_TOKENS = 8
# A promise to tell how something went.
PROMISE = re.compile(
    r"\bI(?:'ll| will) (?:tell you|let you know|keep you posted|report back|update you)\b"
    r"|(?:回头|到时候|之后|下次)(?:再)?(?:告诉|跟|和)你",
    re.IGNORECASE,
)


# EN_PROFILE matched case-sensitively on the text lower-cased (`fold_ascii`), four times cheaper:
# its one cased letter beyond a-z is é (fiancée), which IGNORECASE also finds as É; and every
# alternative begins with a letter where a word does, which `re` tests before trying them.
_EN_PROFILE_FOLDED = re.compile(r"(?=\b[a-z])" + EN_PROFILE.pattern.replace("[ée]", "[éÉe]"))
assert EN_PROFILE.pattern.count("[ée]") == 1 and not any(
    char.lower() != char.upper() and not "a" <= char <= "z" for char in EN_PROFILE.pattern.replace("[ée]", "")
), "EN_PROFILE's cased letters are a-z and the é of fianc[ée]"


@text_cache(16384)  # asked of a statement, then of its bullet at every later job of the pair
def is_profile(text: str) -> bool:
    """Whether a user's statement says something stable about their life (see the module doc)."""
    folded = fold_ascii(text)
    english = EN_PROFILE.search(text) if folded is None else _EN_PROFILE_FOLDED.search(folded)
    # Every ZH_PROFILE alternative begins with a Chinese character.
    return bool(english or (not text.isascii() and ZH_PROFILE.search(text)))


@text_cache(16384)  # asked of every line of the character's, then of its bullets at each later job
def tells_own_life(text: str) -> bool:
    """Whether a statement tells of its speaker's own life ("my daughter starts school", 我在练攀岩):
    said by the character or another speaker, it is kept as a user's would be (a persona's story
    stays consistent, and in a call between two people each one's life is asked about)."""
    if count_tokens(text) < MIN_LIFE_TOKENS or not is_profile(text):
        return False
    return SPEAKER_SELF.search(text) is not None or FIRST_PERSON.search(text) is not None


@text_cache(16384)  # asked of every line of the character's, then of its bullets at each later job
def speaks_of_self(text: str) -> bool:
    """Whether another speaker's statement is about themselves ("I finished The Salt Orchard")
    rather than to the user (advice, a question back): in a call between two people each one's
    news is asked about, and a persona's stories stay consistent."""
    return count_tokens(text) >= MIN_LIFE_TOKENS and SELF_SUBJECT.search(text) is not None


def is_life_event(bullet: str) -> bool:
    """Whether a digest bullet tells of an event with its date resolved ("… (yesterday = 15 March 2025)")."""
    return bool(event_words(bullet)) and DATE_NOTE.search(bullet) is not None


# Matched on the text lower-cased (`Caseless`): what it finds there is each word lower-cased.
_EN_EVENT = Caseless(EN_EVENT)
assert EN_EVENT.groups == 0, "findall gives whole matches"


def event_words(text: str) -> set[str]:
    """The events a text speaks of ("interview", 面试), lowercased."""
    folded = fold_ascii(text)
    english = (
        (m.lower() for m in EN_EVENT.findall(text)) if folded is None else _EN_EVENT.folded.findall(folded)
    )
    return {*english, *ZH_EVENTS.findall(text)}


def future_date(text: str, at_ms: int) -> str | None:
    """The first date the text resolves to that is still ahead of the day it was said (ISO)."""
    said = format_day(at_ms)
    for mention in resolve(text, at_ms):
        found = ISO_PREFIX.search(mention.label)
        if found and found.group() > said[: len(found.group())]:
            return found.group()
    return None


def is_thread(text: str, at_ms: int) -> bool:
    """Whether a user's statement opens a thread: a dated plan ahead, or a promise to tell."""
    if QUESTION.search(text):
        return False
    if PROMISE.search(text):
        return True
    return bool(event_words(text)) and future_date(text, at_ms) is not None


def followed_up(thread: str, later: str) -> bool:
    """Whether a later user statement speaks of the thread's event again."""
    return bool(event_words(DATED_BULLET.sub("", thread)) & event_words(later))


def stale(thread: str, newest_day: str) -> bool:
    """A thread whose date (or the day it was said) is over `THREAD_DAYS` before `newest_day`."""
    days = days_in(thread)  # the day it was said, and the event's date in its note
    if not days:
        return False
    newest = date.fromisoformat(newest_day)
    return (newest - max(days)).days > THREAD_DAYS


def dated(day: str, body: str) -> str:
    """A profile or thread bullet: `- [day] body`."""
    return f"- [{day}] {body}"
