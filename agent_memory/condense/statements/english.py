"""English self-statements: the patterns that find them, the facts they state, first person made third."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from agent_memory.condense.text import clause_so_far, fold_ascii
from agent_memory.core.dates import annotate, resolve
from agent_memory.core.textcache import text_cache

# -- English first person made third person ------------------------------------------------
# Verbs whose third-person form we fix after "I" becomes "the user"; others are left alone.
EN_AGREEMENT = {
    "have": "has",
    "do": "does",
    "don't": "doesn't",
    "haven't": "hasn't",
    "go": "goes",
    "study": "studies",
    "watch": "watches",
    "teach": "teaches",
    "miss": "misses",
    "finish": "finishes",
    "wish": "wishes",
    "try": "tries",
    "fly": "flies",
}
EN_REGULAR_VERBS = {
    "like",
    "love",
    "want",
    "need",
    "hate",
    "live",
    "work",
    "prefer",
    "play",
    "get",
    "feel",
    "think",
    "know",
    "take",
    "make",
    "say",
    "start",
    "run",
    "drive",
    "own",
    "speak",
    "eat",
    "drink",
    "plan",
    "hope",
    "train",
    "use",
    "write",
    "read",
    "sleep",
    "visit",
    "move",
}
EN_PRONOUNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bI'm\b|\bI am\b", re.I), "the user is"),
    (re.compile(r"\bI've\b", re.I), "the user has"),
    (re.compile(r"\bI'll\b", re.I), "the user will"),
    (re.compile(r"\bI'd\b", re.I), "the user would"),
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\b(?:my|mine)\b", re.I), "the user's"),
    (re.compile(r"\bme\b", re.I), "the user"),
]
EN_SUBJECT_I = re.compile(r"\b[Ii]\b(?P<space>\s+)(?P<verb>[A-Za-z']+)?")


def en_third_person(text: str, *, capitalize: bool = False) -> str:
    """English first person made third person where it is cheap: "my" -> "the user's"."""
    text = text.replace("\u2019", "'")
    for pattern, replacement in EN_PRONOUNS:
        text = pattern.sub(replacement, text)

    def subject(match: re.Match[str]) -> str:
        verb = match.group("verb") or ""
        lower = verb.lower()
        if lower in EN_AGREEMENT:
            verb = EN_AGREEMENT[lower]
        elif lower in EN_REGULAR_VERBS:
            verb = verb + "s"
        return f"the user{match.group('space')}{verb}"

    text = EN_SUBJECT_I.sub(subject, text)
    return text[:1].upper() + text[1:] if capitalize else text


# -- facts from self-statements ----------------------------------------------------------------
# Precision over recall: each pattern is anchored to the user speaking about themselves at
# the start of a clause, in a declarative sentence; questions, hypotheticals and negations
# are left to the summary.
EN_FILLER = (
    r"(?i:(?:oh|well|so|and|but|also|actually|honestly|anyway|yeah|yes|btw|by the way|big news|guess what"
    r"|fun fact|now|um|uh|ok|okay|still)\b[\s,:!-]*)*"
)
EN_START = rf"(?:^|[,;:!]\s*|\b(?:and|but|so|because|since|now)\s+){EN_FILLER}"
EN_HYPOTHETICAL = re.compile(
    r"\b(?:if|would|could|might|maybe|perhaps|wish|imagine|suppose|pretend|someday|dream(?:ed|t)?|unless"
    r"|whether|hope|hopefully|probably|planning|thinking)\b|\b\w+'d\b",
    re.IGNORECASE,
)
EN_ASKING = re.compile(
    r"^(?:do|does|did|are|is|am|can|could|would|will|should|have|has|what|where|who|when|why|how|which)\b",
    re.IGNORECASE,
)
EN_SELF = re.compile(r"\b(?:i|we|my)\b", re.IGNORECASE)
EN_NEGATION = re.compile(r"\b(?:not|never|no longer|no)\b|n't\b", re.IGNORECASE)
EN_CLAUSE_END = (
    r"(?=\s*(?:[,.;:!]|$|\b(?:and|but|so|because|since|now|too|though|these days|originally|actually)\b))"
)
# Where a job title ends: "I work as a barista at Blue Bottle / for two years".
EN_JOB_END = r"(?=\s*(?:[,.;:!]|$|\b(?:and|but|so|because|since|now|too|though|for|at|in|with|these days)\b))"
# A list may continue after "and": "I'm allergic to peanuts and shellfish".
EN_LIST_END = r"(?=\s*(?:[,.;:!]|$|\b(?:but|so|because|since|though)\b))"
EN_NAME_WORD = r"[A-Z][a-z]+(?:-[A-Z][a-z]+)?"
EN_NOT_NAME_WORDS = {
    "I",
    "Is",
    "Im",
    "The",
    "A",
    "An",
    "And",
    "But",
    "So",
    "He",
    "She",
    "It",
    "We",
    "They",
    "You",
    "My",
    "Our",
    "His",
    "Her",
    "Their",
    "Your",
    "This",
    "That",
    "Then",
    "There",
    "Who",
    "What",
    "Today",
    "Tomorrow",
    "Yesterday",
    "Tonight",
    "Last",
    "Next",
    "Mr",
    "Mrs",
    "Ms",
    "Dr",
    "Oh",
    "Yes",
}
EN_PLACE = r"(?:the\s+)?[A-Z][\w'.-]*(?:[ -](?:[A-Z][\w'.-]*|de|del|do|da|upon|on|am))*"
EN_SPECIES = (
    r"cat|dog|puppy|kitten|rabbit|bunny|hamster|parrot|budgie|cockatiel|canary|bird|goldfish|fish|turtle"
    r"|tortoise|snake|lizard|gecko|guinea pig|horse|pony|ferret|chinchilla|hedgehog|rat|pig|goat"
)
EN_SPECIES_PLURAL = rf"(?:{EN_SPECIES})s?|puppies|bunnies|fish"
EN_KIN_NAMED = (
    r"(?:(?:little|big|older|younger|baby|twin|eldest|oldest|youngest|step|half)[ -]?)?"
    r"(?:sister|brother|son|daughter|grandson|granddaughter)"
)
EN_KIN_ONE = (
    r"mom|mum|mother|dad|father|wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|grandma|grandmother"
    r"|grandpa|grandfather|best friend|stepmom|stepdad"
)
EN_KIN_COUNT = (
    r"kids?|children|child|sons?|daughters?|brothers?|sisters?|siblings?|grandchildren|grandkids|twins"
    r"|stepsons?|stepdaughters?"
)
EN_JOBS = (
    r"nurse|teacher|doctor|physician|surgeon|dentist|pharmacist|paramedic|midwife|therapist|psychologist"
    r"|counsell?or|social worker|physiotherapist|physical therapist|veterinarian|vet|lawyer|attorney|judge"
    r"|accountant|banker|economist|analyst|consultant|manager|engineer|developer|programmer|designer"
    r"|architect|scientist|researcher|professor|lecturer|librarian|journalist|reporter|editor|writer"
    r"|author|translator|interpreter|photographer|artist|painter|musician|singer|dancer|actor|actress"
    r"|chef|cook|baker|barista|bartender|waiter|waitress|cashier|electrician|plumber|carpenter|mechanic"
    r"|firefighter|police officer|officer|soldier|pilot|flight attendant|driver|farmer|gardener"
    r"|hairdresser|barber|tailor|optician|caregiver|nanny|babysitter|student|intern|tutor|coach|trainer"
    r"|secretary|receptionist|cleaner|janitor|realtor|real estate agent|entrepreneur|freelancer|retiree"
    r"|biologist|chemist|physicist|mathematician|statistician|data scientist|paralegal|clerk|salesperson"
)
EN_JOB_MODIFIER = (
    r"registered|senior|junior|head|chief|lead|assistant|freelance|full-time|part-time|qualified|certified"
    r"|licensed|trainee|student|retired|professional|school|primary|elementary|middle|high|university"
    r"|college|kindergarten|preschool|music|math|maths|english|science|art|history|piano|yoga|dance"
    r"|software|web|data|graphic|interior|fashion|civil|mechanical|electrical|chemical|research|icu|er"
    r"|pediatric|paediatric|night|dental|veterinary|pastry|sous|marine|flight|tour|financial|sales"
    r"|marketing|project|product|ux|ui|game|staff|nursing|medical|law|phd|grad|graduate|undergraduate"
)
EN_EVENTS = (
    r"wedding|birthday|anniversary|exams?|test|interview|appointment|surgery|operation|graduation|party"
    r"|trip|flight|vacation|holiday|concert|gig|band|marathon|race|tournament|competition|recital"
    r"|performance|presentation|conference|funeral|ceremony|festival|deadline|check-?up|audition"
    r"|premiere|due date|support group|class|workshop|course|match|game|show|exhibition|parade"
)


def literal_trie(words: Iterable[str]) -> str:
    """A regular expression matching exactly `words` (literals), as a trie: `re` tries an
    alternation's branches one by one at every position, a trie only those sharing a prefix."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        if "" in node:
            return "(?:" + "|".join(branches) + ")?"
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return build(root)


# Every event and job begins with a word character, so `(?<!\w)` is the `\b` before it; unlike
# `\b`, it lets `re` skip ahead to a possible first letter (~2x faster on a long text).
EN_EVENT = re.compile(rf"(?<!\w)(?:{EN_EVENTS})\b", re.IGNORECASE)
# The job words as a trie (`counsell?or` spelled out): salience asks this of every statement.
JOB_WORDS = [
    w for job in EN_JOBS.split("|") for w in ({"counsell?or": ("counselor", "counsellor")}.get(job) or (job,))
]
assert all(re.fullmatch(r"[a-z ]+", word) for word in JOB_WORDS), "EN_JOBS holds literals (but counsell?or)"
EN_JOB = re.compile(rf"(?<!\w){literal_trie(JOB_WORDS)}\b", re.IGNORECASE)
EN_HAS_DATE = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b(?:\s+of\s+[a-z]+)?",
    re.IGNORECASE,
)

# Laid out by hand (the formatter is told so where the table ends): one (kind, pattern) a row, as
# the pattern reads; ruff format would break every row over four lines.
EN_STATEMENTS: list[tuple[str, re.Pattern[str]]] = [
    ("job", re.compile(
        rf"{EN_START}I(?:'m| am)(?: currently| now)? (?P<art>an?) (?P<job>(?:(?:{EN_JOB_MODIFIER}) ){{0,2}}"
        rf"(?:{EN_JOBS}))(?P<tail> (?:at|in|for) {EN_PLACE})?{EN_CLAUSE_END}")),
    ("works_as", re.compile(
        rf"{EN_START}I(?:'m working| work| am working|'ve been working| have been working)(?: now)? as "
        rf"(?P<art>an?) (?P<job>[a-z][a-z-]*(?: [a-z][a-z-]*){{0,2}}?)(?:(?P<tail> (?:at|in|for) {EN_PLACE}){EN_CLAUSE_END}"
        rf"|{EN_JOB_END})")),
    ("works_at", re.compile(rf"{EN_START}I (?:work|am working|'m working) (?P<prep>at|for) (?P<org>{EN_PLACE}){EN_CLAUSE_END}")),
    ("lives", re.compile(
        rf"{EN_START}(?:I|[Ww]e) (?:currently |still |now )?(?:live|am living|'m living|are living|'re living) "
        rf"in (?P<place>{EN_PLACE})(?=\s*(?:[,.;:!]|$|\b(?:with|and|now|since|for|near|but|these days)\b))")),
    ("from", re.compile(rf"{EN_START}I(?:'m| am) (?:originally )?from (?P<place>{EN_PLACE}){EN_CLAUSE_END}")),
    ("moved", re.compile(
        rf"{EN_START}(?:I|[Ww]e)(?:'ve| have)? (?:just |recently |finally |also )?(?:moved|relocated)"
        rf"(?: again| back| house)?,? (?:to|into) (?P<place>{EN_PLACE})")),
    ("pet", re.compile(
        rf"\b[Mm]y (?:(?:little|new|old|baby|sweet|rescue) )?(?P<species>{EN_SPECIES}),? (?P<name>{EN_NAME_WORD})\b")),
    ("pet", re.compile(
        rf"\b[Mm]y (?P<species>{EN_SPECIES})(?:'s name is| is (?:called|named)) (?P<name>{EN_NAME_WORD})\b")),
    ("pet", re.compile(
        rf"{EN_START}(?:I|[Ww]e)(?:'ve| have)? (?:just |finally |recently |also )?(?:have|got|adopted|rescued|own"
        rf"|bought|took in) (?:a|an|another|one) (?:[a-z-]+ ){{0,2}}?(?P<species>{EN_SPECIES}),? "
        rf"(?:(?:called|named) (?P<name>{EN_NAME_WORD})|(?:her|his|its|their) name is (?P<name2>{EN_NAME_WORD}))\b")),
    ("kin", re.compile(rf"\b[Mm]y (?P<kin>{EN_KIN_NAMED}|{EN_KIN_ONE}),? (?P<name>{EN_NAME_WORD})\b")),
    ("kin", re.compile(
        rf"\b[Mm]y (?P<kin>{EN_KIN_NAMED}|{EN_KIN_ONE})(?:'s name is| is (?:called|named)) (?P<name>{EN_NAME_WORD})\b")),
    ("has", re.compile(
        rf"{EN_START}(?:I|[Ww]e) (?:have|'ve got|have got|own) (?P<count>an?|one|two|three|four|five|six|\d) "
        rf"(?P<what>(?:(?:little|young|small|big|grown-up|adult|teenage|lovely|wonderful|beautiful|old) )?"
        rf"(?:{EN_SPECIES_PLURAL}|{EN_KIN_COUNT}))"
        r"(?=\s*(?:[,.;:!]|$|\b(?:and|who|at home|now|too|but)\b))", re.IGNORECASE)),
    ("favourite", re.compile(
        r"\b[Mm]y (?:all-time |absolute )?(?P<fav>favou?rite) (?P<what>[a-z][\w' -]{1,40}?) (?P<verb>is|are) "
        rf"(?P<value>[^,.;!?]{{1,60}}?){EN_CLAUSE_END}")),
    ("allergic", re.compile(
        rf"{EN_START}I(?:'m| am) (?:(?:very|really|super|severely|deathly|so|mildly|a bit|a little|also) )?"
        rf"allergic to (?P<what>[^,.;!?]{{1,50}}?){EN_LIST_END}", re.IGNORECASE)),
    ("allergy", re.compile(
        rf"{EN_START}I have (?P<art>an?) (?P<what>(?:[\w-]+ ){{1,2}})allerg(?P<y>y|ies){EN_CLAUSE_END}", re.IGNORECASE)),
    ("hobby", re.compile(
        rf"{EN_START}(?P<clause>I(?:'ve| have)? (?:just |recently |finally |also )?(?:taken up|took up|picked up"
        r"|started (?:learning|taking|playing|practising|practicing)) [^,.;!?]{2,60}?)"
        rf"{EN_CLAUSE_END}")),
]  # fmt: skip
# What each of EN_STATEMENTS needs the sentence to hold, in its order (None: nothing beyond
# EN_SELF): its subject, a whole word as EN_START leaves it ("I" and "We" before a space or an
# apostrophe, "My" before a space). A sentence is tried only against the patterns it can match.
EN_MY = re.compile(r"\b[Mm]y\b")
EN_I = re.compile(r"\bI\b")
EN_I_OR_WE = re.compile(r"\b(?:I|[Ww]e)\b")
EN_NEEDS: dict[str, re.Pattern[str] | None] = {
    "job": EN_I,
    "works_as": EN_I,
    "works_at": EN_I,
    "lives": EN_I_OR_WE,
    "from": EN_I,
    "moved": EN_I_OR_WE,
    "pet": None,
    "kin": EN_MY,
    "has": None,
    "favourite": EN_MY,
    "allergic": None,
    "allergy": None,
    "hobby": EN_I,
}
# The three pet patterns differ: two need "my", the third "I" or "we".
EN_STATEMENT_NEEDS = [
    EN_NEEDS[kind] if kind != "pet" else (EN_I_OR_WE if "adopted" in pattern.pattern else EN_MY)
    for kind, pattern in EN_STATEMENTS
]
Finder = Callable[[str], Iterator[re.Match[str]]]
# Where EN_START can begin (a superset): a sentence's start, at , ; : ! and at its linking words.
# `re` finds no first character in EN_START to skip ahead by, so a pattern beginning with it is
# tried at every position of a sentence (~30 us each); only these positions can begin a match.
_CLAUSE_MARK_OR_WORD = re.compile(r"[,;:!]|(?:and|but|so|because|since|now)\s")
_BOUNDARY = re.compile(r"\b")


@text_cache(8)  # asked by each of EN_STATEMENTS in turn of the same sentence
def clause_starts(sentence: str, any_case: bool) -> tuple[int, ...] | None:
    """Where EN_START can begin in `sentence`, in order (its linking words in any case when
    `any_case`); None when that cannot be told from the text lower-cased (`fold_ascii`)."""
    text = fold_ascii(sentence) if any_case else sentence
    if text is None:
        return None
    starts = [0]
    for found in _CLAUSE_MARK_OR_WORD.finditer(text):
        start = found.start()
        # A linking word begins a word (EN_START's \b): "and" inside "sand" is none.
        if text[start] in ",;:!" or _BOUNDARY.match(text, start):
            starts.append(start)
    return tuple(starts)


def clause_matches(
    pattern: re.Pattern[str], sentence: str, any_case: bool = False
) -> Iterator[re.Match[str]]:
    """`pattern.finditer(sentence)` (the same matches) for a pattern beginning with EN_START;
    `any_case`: the pattern is IGNORECASE."""
    starts = clause_starts(sentence, any_case)
    if starts is None:
        yield from pattern.finditer(sentence)
        return
    end = 0
    for start in starts:
        if start < end:
            continue  # inside the last match (or tried already), as finditer goes on after it
        match = pattern.match(sentence, start)
        if match is not None:
            end = max(match.end(), start + 1)
            yield match


# Words each pattern of EN_STATEMENTS beginning with EN_START spells out (one of each group),
# in its case (lower-cased for an IGNORECASE pattern): a plain `in` rules out most sentences
# before any pattern is tried. By kind; the pet pattern that begins with EN_START names the pet.
EN_LITERALS: dict[str, tuple[tuple[str, ...], ...]] = {
    "job": (("I'm", "I am"),),
    "works_as": (("work",), (" as ",)),
    "works_at": (("work",), (" at ", " for ")),
    "lives": (("liv",), (" in ",)),
    "from": (("I'm", "I am"), ("from ",)),
    "moved": (("moved", "relocated"),),
    "pet": (("called ", "named ", "name is "),),
    "has": (("have", "'ve got", "own"),),
    "allergic": (("allergic to ",),),
    "allergy": (("allerg",),),
    "hobby": (("taken up", "took up", "picked up", "started "),),
}


def finder(pattern: re.Pattern[str], literals: tuple[tuple[str, ...], ...] = ()) -> Finder:
    """How to find `pattern`'s matches in a sentence: none when it lacks one of a group of
    `literals`; by its clause starts when it begins with EN_START."""
    if not pattern.pattern.startswith(EN_START):
        assert not literals
        return pattern.finditer
    any_case = bool(pattern.flags & re.IGNORECASE)

    def find(sentence: str) -> Iterator[re.Match[str]]:
        text = fold_ascii(sentence) if any_case else sentence
        if text is not None and not all(any(word in text for word in group) for group in literals):
            return iter(())
        return clause_matches(pattern, sentence, any_case)

    return find


# A clause about the user's own dated event: "my sister's wedding is this Saturday",
# "I have a job interview tomorrow", "I ran my first half marathon yesterday".
EN_EVENT_CLAUSE = re.compile(
    rf"{EN_START}(?P<clause>(?:[Mm]y (?:[\w'-]+ ){{0,3}}?(?:{EN_EVENTS})\b[^,;!?]*?|I(?:'m| am) going\b[^,;!?]*?"
    rf"|I (?:[\w'-]+ ){{0,1}}?(?:have|had|got|ran|went|saw|passed|won|took|did|finished|booked|attended"
    rf"|visited|flew|start|started|will have|gave|played|sang|danced|completed)\b[^,;!?]*?))"
    r"(?=\s*(?:[,;!?.]|$|\b(?:and I|but|so|because|which|and it|and my)\b))"
)
assert EN_EVENT_CLAUSE.pattern.startswith(EN_START)
# How each of EN_STATEMENTS is found in a sentence, in its order.
EN_FINDERS = [
    finder(pattern, EN_LITERALS[kind] if pattern.pattern.startswith(EN_START) else ())
    for kind, pattern in EN_STATEMENTS
]


# Which of EN_STATEMENTS a sentence can match, told at once (`en_candidates`): each pattern's
# need and literals (as its finder asks them), each literal looked for once per sentence rather
# than once per pattern. Asking pattern by pattern (`EN_FINDERS`) cost ~1 us of Python each, on
# every sentence of the user's (and the character's) with an "I", "we" or "my": most.
_GROUPS = [
    EN_LITERALS[kind] if pattern.pattern.startswith(EN_START) else () for kind, pattern in EN_STATEMENTS
]
_ANY_CASE = [bool(pattern.flags & re.IGNORECASE) for _, pattern in EN_STATEMENTS]
_CASED_WORDS = tuple(
    dict.fromkeys(
        w for gs, any_case in zip(_GROUPS, _ANY_CASE, strict=True) if not any_case for g in gs for w in g
    )
)
_FOLDED_WORDS = tuple(
    dict.fromkeys(
        w for gs, any_case in zip(_GROUPS, _ANY_CASE, strict=True) if any_case for g in gs for w in g
    )
)
_SUBJECT_WORDS = ("I", "We", "we", "My", "my")
# What each need asks for, among _SUBJECT_WORDS.
_NEEDED: dict[re.Pattern[str] | None, frozenset[str]] = {
    EN_I: frozenset({"I"}),
    EN_MY: frozenset({"My", "my"}),
    EN_I_OR_WE: frozenset({"I", "We", "we"}),
}
_PLAN = [
    (index, None if need is None else _NEEDED[need], groups, any_case)
    for index, (need, groups, any_case) in enumerate(zip(EN_STATEMENT_NEEDS, _GROUPS, _ANY_CASE, strict=True))
]
# How each of EN_STATEMENTS is found once its literals are known to be there.
EN_MATCHERS: list[Finder] = [
    partial(clause_matches, pattern, any_case=any_case)
    if pattern.pattern.startswith(EN_START)
    else pattern.finditer
    for (_, pattern), any_case in zip(EN_STATEMENTS, _ANY_CASE, strict=True)
]


def en_candidates(sentence: str) -> list[int]:
    """The indexes of the EN_STATEMENTS that can match `sentence`, in order: those whose need
    (EN_STATEMENT_NEEDS) it meets and whose literals (EN_LITERALS) it holds."""
    # Each subject as a substring, not a word: a superset of what the needs find, one scan less
    # (a pattern tried in vain finds nothing: each spells out its subject).
    subjects = {word for word in _SUBJECT_WORDS if word in sentence}
    cased = {word for word in _CASED_WORDS if word in sentence}
    folded = fold_ascii(sentence)
    lowered = None if folded is None else {word for word in _FOLDED_WORDS if word in folded}
    found = []
    for index, needed, groups, any_case in _PLAN:
        if needed is not None and subjects.isdisjoint(needed):
            continue
        held = lowered if any_case else cased
        if held is not None:
            for group in groups:  # (no generator: this runs for every pattern of every sentence)
                if held.isdisjoint(group):
                    break
            else:
                found.append(index)
        else:
            found.append(index)
    return found


# "We got a new pet! A puppy named Rex.": the second sentence names the first one's pet.
EN_NEW_PET = re.compile(
    r"\b(?:I|[Ww]e) (?:have|'ve got|got|adopted|rescued|bought)\b[^.!?]*\b(?:pet|another|second|new)\b"
)
EN_PET_FOLLOWUP = re.compile(
    rf"^(?:A|An|Another) (?:[a-z-]+ ){{0,2}}?(?P<species>{EN_SPECIES}),? (?:called|named) (?P<name>{EN_NAME_WORD})[.!]*$"
)
EN_SUBJECT_ANYWHERE = re.compile(r"\b(?:he|she|they|you|we|it|his|her|their|your)\b", re.IGNORECASE)
# Someone else's news ("my friend's wedding") is small talk, not a fact about the user.
EN_NOT_MINE = re.compile(
    r"^[Mm]y (?:friend|colleague|coworker|co-worker|boss|neighbou?r|roommate|classmate)", re.I
)
# A pet or relative spoken of in the past ("my dog Rex died") is not one the user has.
EN_NO_LONGER = re.compile(
    r"\b(?:died|passed away|put down|used to|lost|late|miss(?:ed)? (?:him|her|them))\b", re.I
)
# The statements of whom or what the user has, which EN_NO_LONGER makes none.
EN_BELONGINGS = {"pet", "kin", "has"}


def _is_name(word: str | None) -> bool:
    return word is not None and word not in EN_NOT_NAME_WORDS


def _place(match: re.Match[str], group: str) -> str:
    """A place as matched, without a full stop it took; "" when a sentence break cut it ("at St.")."""
    place = (match.group(group) or "").rstrip(".")
    return "" if re.search(r"\b(?:St|Mt|Dr|Ft)$", place) else place


def en_statement(kind: str, match: re.Match[str], day: str) -> str | None:
    """The fact an English self-statement match says, or None when it is not one after all."""
    if kind in EN_BELONGINGS:
        return None if EN_NO_LONGER.search(match.string) else _en_belonging(kind, match)
    if kind == "job":
        tail = _place(match, "tail")
        return f"The user is {match.group('art').lower()} {match.group('job')}{tail} (as of {day})"
    if kind == "works_as":
        job = match.group("job")
        if len(job.split()) > 4:
            return None
        return f"The user works as {match.group('art').lower()} {job}{_place(match, 'tail')} (as of {day})"
    if kind == "works_at":
        return f"The user works {match.group('prep')} {_place(match, 'org')} (as of {day})"
    if kind == "lives":
        return f"The user lives in {_place(match, 'place')} (as of {day})"
    if kind == "from":
        return f"The user is from {_place(match, 'place')}"
    if kind == "moved":
        return f"The user moved to {_place(match, 'place')} ({day})"  # `day`: when it happened
    if kind == "favourite":
        value = en_third_person(match.group("value").strip())
        return f"The user's {match.group('fav').lower()} {match.group('what')} {match.group('verb')} {value}"
    if kind == "allergic":
        return f"The user is allergic to {en_third_person(match.group('what').strip())}"
    if kind == "allergy":
        what = match.group("what").strip().lower()
        return f"The user has {match.group('art').lower()} {what} allerg{match.group('y')}"
    return en_third_person(match.group("clause"), capitalize=True)  # hobby


def _en_belonging(kind: str, match: re.Match[str]) -> str | None:
    """Whom or what the user has, as a statement says it: a pet, a relative, a number of them."""
    if kind == "has":
        return f"The user has {match.group('count').lower()} {match.group('what').lower()}"
    name = match.groupdict().get("name") or match.groupdict().get("name2")
    if not _is_name(name):
        return None
    if kind == "pet":
        return f"The user has a {match.group('species').lower()} named {name}"
    kin = match.group("kin").lower()
    if re.fullmatch(EN_KIN_ONE, kin):
        return f"The user's {kin} is called {name}"
    return f"The user has a {kin} named {name}"


def _their(text: str) -> str:
    """ "The user ran the user's first race" reads "The user ran their first race"."""
    head, sep, rest = text.partition("The user")
    return head + sep + rest.replace("the user's", "their") if sep else text


def en_event(sentence: str, at_ms: int) -> tuple[int, str] | None:
    """A dated event the user states about themselves, restated with its date resolved."""
    for match in clause_matches(EN_EVENT_CLAUSE, sentence):
        clause = match.group("clause").strip()
        words = clause.split()
        if not 3 <= len(words) <= 18 or EN_NEGATION.search(clause) or not EN_EVENT.search(clause):
            continue
        if EN_NOT_MINE.match(clause) or EN_HYPOTHETICAL.search(clause_so_far(sentence, match)):
            continue
        if clause.startswith("I") and EN_SUBJECT_ANYWHERE.search(" ".join(words[1:3])):
            continue  # "I saw her …": about someone else
        if not (resolve(clause, at_ms) or EN_HAS_DATE.search(clause)):
            continue
        return match.start("clause"), annotate(_their(en_third_person(clause, capitalize=True)), at_ms)
    return None


def pet_followup(previous: str, sentence: str) -> list[str]:
    """ "A puppy named Rex." right after "We got a new pet!": the user's pet."""
    match = EN_PET_FOLLOWUP.match(sentence.strip())
    if match is None or not EN_NEW_PET.search(previous) or EN_NEGATION.search(previous):
        return []
    if not _is_name(match.group("name")) or EN_HYPOTHETICAL.search(previous):
        return []
    return [f"The user has a {match.group('species').lower()} named {match.group('name')}"]
