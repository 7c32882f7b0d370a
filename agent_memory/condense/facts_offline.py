"""Offline fact extraction: requests to remember, introductions and self-statements, as new facts."""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent_memory.condense.base import FactAdd, Scope
from agent_memory.condense.statements import sentence_facts
from agent_memory.condense.statements.english import en_third_person, pet_followup
from agent_memory.condense.text import EN_HELLO, NAME_WORD, QUESTION, ZH_HELLO, clip, fold_ascii, sentences
from agent_memory.core.dates import annotate
from agent_memory.core.facts import MAX_FACT_CHARS, undated_key
from agent_memory.core.people import speaker_names

# -- facts from explicit requests and introductions -------------------------------------------
EN_REMEMBER = re.compile(
    r"\b(?P<verb>remember|don'?t forget|do not forget|never forget|remind (?:me|us))\b"
    r"[\s,:;-]*(?P<rest>.*)$",
    re.IGNORECASE,
)
# What may stand before "remember" in a request: fillers, a vocative, "can you (please)".
EN_PREFIX_OK = re.compile(
    r"^(?:[\w'-]+\s*,\s*)?"
    r"(?:(?:oh|and|also|so|ok|okay|well|but|hey|please|pls|just|one more thing|by the way|btw)"
    r"\b[\s,]*)*"
    r"(?:(?:can|could|would|will) you\s+(?:please\s+)?"
    r"|(?:i want|i need|i'd like|i would like) you to\s+|make sure (?:to|you)\s+|try to\s+)?"
    r"(?:please\s+)?$",
    re.IGNORECASE,
)
EN_REMINISCING = re.compile(r"^(?:when|how|what|who|where|why|if|me|him|her|them|it)\b", re.I)
# A clause with one of these is a statement to restate ("my exam is on the 22nd"), not
# a bare noun phrase ("my birthday").
EN_VERBISH = re.compile(
    r"\b(?:is|are|was|were|am|will|would|has|have|had|can|could|must|do|does|did|don't"
    r"|doesn't|didn't|like|likes|love|loves|hate|hates|want|wants|need|needs|live|lives"
    r"|work|works|i)\b|\b\w+(?:'m|'re|'ll|'ve|'d)\b",
    re.IGNORECASE,
)
EN_NAME = re.compile(
    r"\b(?i:my name is)\s+(?P<name>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)"
    r"|\b(?i:call me)\s+(?P<nick>[A-Z][\w'-]*)"
)
EN_NOT_NAMES = {
    "not",
    "a",
    "an",
    "the",
    "kind",
    "actually",
    "just",
    "really",
    "so",
    "very",
    "back",
    "later",
    "when",
    "tomorrow",
    "tonight",
    "if",
    "at",
    "after",
    "before",
    "anytime",
    "maybe",
    "please",
    "now",
    "sometime",
    "again",
    "up",
    "on",
    "in",
}

ZH_REMEMBER = re.compile(r"(?P<verb>记住|记得|别忘了|别忘记|不要忘了|不要忘记)(?P<rest>.*)$")
ZH_NAME = re.compile(
    r"我(?:叫|的名字(?:是|叫)|名字叫)\s*(?P<name>[\u4e00-\u9fff]{1,4}|[A-Za-z][A-Za-z'-]*)"
    r"(?=[,，。.!！?？、\s]|$)"
)
KO_REMEMBER = re.compile(
    r"(?P<verb>기억해\s*(?:줘|주세요|줄래|둬|두세요|놔|놓아\s*줘)"
    r"|기억하세요|기억해(?=\s*[,:，：])|잊지\s*(?:마세요|말아\s*(?:줘|주세요)|마))"
)
KO_NAME = re.compile(
    r"(?:제|내)\s*이름은\s*(?P<name>[가-힣A-Za-z]{1,10}?)\s*(?:이에요|예요|에요|입니다|이야|야|이라고|라고)"
)
JA_REMEMBER = re.compile(
    r"(?P<verb>覚えて(?:おいて|ておいて|といて|て)(?:ください|ね|よ)?|忘れないで(?:ください|ね|よ)?)"
)
JA_NAME = re.compile(r"私の名前は\s*(?P<name>[^\s、。!?！？]{1,10}?)\s*(?:です|だ|と申します)")
CJK_TRIM = " ,，、:：;；-—"


def _en_request(sentence: str) -> tuple[str, Scope] | None:
    """The fact an English "remember …" / "remind me to …" sentence asks to keep, if any."""
    match = EN_REMEMBER.search(sentence)
    if match is None or not EN_PREFIX_OK.match(sentence[: match.start()]):
        return None
    verb = match.group("verb").lower()
    rest = match.group("rest").strip().rstrip(".!?…").strip()
    asking = re.search(r"\byou\b", sentence[: match.start()], re.I) is not None
    if sentence.rstrip().endswith("?") and not asking:
        return None  # "Remember that night?" reminisces; "Can you remember …?" asks
    if not rest or EN_REMINISCING.match(rest):
        return None
    scope: Scope = "character" if re.search(r"\byou(?:r|rs|rself)?\b", rest, re.I) else "user"
    lowered = rest.lower()
    if verb.startswith("remind"):
        rest = re.sub(r"^(?:of|about)\s+", "about ", rest, flags=re.I)
    if lowered.startswith("to "):
        text = f"The user asked to be reminded to {en_third_person(rest[3:])}"
    elif lowered.startswith(("about ", "of ")):
        text = f"The user asked to be reminded about {en_third_person(rest.split(' ', 1)[1])}"
    else:
        clause = re.sub(r"^that\s+", "", rest, flags=re.I)
        if clause != rest or EN_VERBISH.search(clause):
            text = en_third_person(clause, capitalize=True)
        else:  # "remember my birthday": no statement to restate, so say what was asked
            text = f"The user asked to remember: {en_third_person(clause)}"
    return text, scope


def _zh_request(sentence: str) -> tuple[str, Scope] | None:
    """The fact a Chinese "记住…" / "别忘了…" sentence asks to keep, if any."""
    if QUESTION.search(sentence):
        return None  # "你还记得…吗?" asks whether something is remembered
    for match in ZH_REMEMBER.finditer(sentence):
        # "我记得/还记得/不记得" recall rather than ask.
        if re.search(r"(?:我|还|不|没|也)$", sentence[: match.start()]):
            continue
        rest = match.group("rest").strip(CJK_TRIM).rstrip("。.!！")
        if rest.startswith("了") or len(rest) < 2:
            continue  # "记住了" acknowledges
        scope: Scope = "character" if "你" in rest else "user"
        return f"用户说：{rest}", scope
    return None


def _ko_request(sentence: str) -> tuple[str, Scope] | None:
    """The fact a Korean "… 기억해 줘" / "잊지 마" sentence asks to keep, if any."""
    match = KO_REMEMBER.search(sentence)
    if match is None or QUESTION.search(sentence):
        return None
    after = sentence[match.end() :].strip(CJK_TRIM + ".!")
    before = sentence[: match.start()].strip(CJK_TRIM)
    content = after if len(after) >= 2 else before  # Korean usually puts it before the verb
    if len(content) < 2:
        return None
    scope: Scope = "character" if re.search(r"너|당신", content) else "user"
    return f"사용자가 기억해 달라고 한 것: {content}", scope


def _ja_request(sentence: str) -> tuple[str, Scope] | None:
    """The fact a Japanese "…覚えておいて" / "忘れないで" sentence asks to keep, if any."""
    match = JA_REMEMBER.search(sentence)
    if match is None or QUESTION.search(sentence):
        return None
    after = sentence[match.end() :].strip(CJK_TRIM + "。.!！")
    before = re.sub(r"(?:ということ|こと|って|と)?を?[、,\s]*$", "", sentence[: match.start()])
    content = after if len(after) >= 2 else before.strip(CJK_TRIM)
    if len(content) < 2:
        return None
    scope: Scope = "character" if re.search(r"あなた|君", content) else "user"
    return f"ユーザーが覚えてほしいこと：{content}", scope


REQUEST_EXTRACTORS = (_en_request, _zh_request, _ko_request, _ja_request)
# What every request and every introduction holds (the verb of each *_REMEMBER; the words of
# each *_NAME), in text lower-cased: a text with none of them is passed by without trying their
# patterns sentence by sentence (most are; salience asks this of every statement).
REQUEST_WORDS = ("remember", "forget", "remind", "记", "忘", "기억", "잊지", "覚えて")
INTRODUCTION_WORDS = ("my name is", "call me", "我", "이름은", "私の名前は")


# Each list of words as one search (a generator of `in` tests cost ~2 us a text).
_CUES: dict[tuple[str, ...], re.Pattern[str]] = {
    words: re.compile("|".join(map(re.escape, words))) for words in (REQUEST_WORDS, INTRODUCTION_WORDS)
}


def may_hold(text: str, words: tuple[str, ...]) -> bool:
    """Whether `text` may hold one of `words`, in any case (`fold_ascii`)."""
    folded = fold_ascii(text)
    if folded is None:
        return True
    cue = _CUES.get(words)
    return any(word in folded for word in words) if cue is None else cue.search(folded) is not None


def remember_requests(text: str) -> list[tuple[str, Scope]]:
    """Facts the user explicitly asked to be remembered in `text`, in order."""
    found: list[tuple[str, Scope]] = []
    if not may_hold(text, REQUEST_WORDS):
        return found
    for sentence in sentences(text):
        for extract in REQUEST_EXTRACTORS:
            fact = extract(sentence)
            if fact is not None:
                found.append(fact)
                break
    return found


def introductions(text: str) -> list[tuple[str, Scope]]:
    """Facts from self-introductions: "my name is X", "call me X", "我叫X", "제 이름은 X"."""
    found: list[tuple[str, Scope]] = []
    if not may_hold(text, INTRODUCTION_WORDS):
        return found
    for match in EN_NAME.finditer(text):
        name = match.group("name") or match.group("nick")
        first = name.split()[0]
        if first.lower() in EN_NOT_NAMES:
            continue
        if match.group("name"):
            found.append((f"The user's name is {first[:1].upper()}{name[1:]}", "user"))
        else:
            found.append((f"The user likes to be called {name}", "user"))
    found += [(f"用户叫{m.group('name')}", "user") for m in ZH_NAME.finditer(text)]
    found += [(f"사용자 이름은 {m.group('name')}", "user") for m in KO_NAME.finditer(text)]
    found += [(f"ユーザーの名前は{m.group('name')}", "user") for m in JA_NAME.finditer(text)]
    return found


# -- names from greetings ---------------------------------------------------------------------
# How people who know each other open a call: "Hi Sam!", "Hey Sam, good to hear from you",
# "Sam! Hello again", 小林你好, 嗨，小林. The name greeted is the other speaker's.
EN_GREETED = re.compile(
    rf"^(?i:{EN_HELLO})[,!]?\s+(?P<a>{NAME_WORD})\b(?![' ][a-z])|^(?P<b>{NAME_WORD})[!,]\s+(?i:{EN_HELLO})\b"
)
ZH_GREETED = re.compile(
    # After a name only 你好 / 您好 greet ("玩得很嗨" greets no 玩得很).
    rf"^(?P<a>[\u4e00-\u9fff]{{2,3}}?)[，,]?(?:你好|您好)|^{ZH_HELLO}[，,]\s*(?P<b>[\u4e00-\u9fff]{{2,3}})[！!，,。]"
)


def greeted(text: str) -> str | None:
    """The name a turn opens by greeting (None: it greets no one by name)."""
    match = EN_GREETED.match(text) or ZH_GREETED.match(text)
    if match is None:
        return None
    name = match.group("a") or match.group("b")
    return None if name.casefold() in EN_NOT_NAMES or name.casefold() in _NOT_GREETED else name


# Words that stand where a greeted name does: "Hey there", "Hello everyone", 大家好.
_NOT_GREETED = {"there", "everyone", "everybody", "all", "guys", "folks", "again", "you", "大家"}


def greeting_facts(openings: Iterable[tuple[str, str]]) -> list[tuple[str, Scope]]:
    """Facts from how each call opens (role, its first turn): the name the character greets the
    user by is the user's; the one the user greets the character by, the character's."""
    found: list[tuple[str, Scope]] = []
    for role, text in openings:
        name = greeted(text)
        if name is None:
            continue
        zh = not name.isascii()
        if role == "assistant":
            found.append((f"用户叫{name}" if zh else f"The user's name is {name}", "user"))
        else:
            # Not "calls you": a question's "called" would find it ("What is my cat called?").
            found.append((f"用户叫你{name}" if zh else f"The user's name for you is {name}", "character"))
    return found


# -- facts -----------------------------------------------------------------------------------
def message_facts(text: str, at_ms: int) -> list[tuple[str, Scope]]:
    """The facts one user message states, with relative dates resolved against `at_ms`."""
    found = list(introductions(text))
    previous = ""
    requests = may_hold(text, REQUEST_WORDS)
    for sentence in sentences(text):
        request = (
            next((fact for extract in REQUEST_EXTRACTORS if (fact := extract(sentence))), None)
            if requests
            else None
        )
        if request is not None:
            found.append((annotate(request[0], at_ms), request[1]))
        else:  # a sentence asking to remember something is restated once, as asked
            found += [(fact, "user") for fact in sentence_facts(sentence, at_ms)]
            found += [(fact, "user") for fact in pet_followup(previous, sentence)]
        previous = sentence
    return found


def extract_facts(
    said: Iterable[tuple[str, int]], existing: Iterable[str] = (), openings: Iterable[tuple[str, str]] = ()
) -> list[FactAdd]:
    """New facts from the user's statements (text, said at ms) and from how calls open (role, first
    turn: `greeting_facts`), none equal to an existing one."""
    known = {undated_key(text) for text in existing}
    added: list[FactAdd] = []
    stated = (fact for text, at_ms in said for fact in message_facts(text, at_ms))
    for fact_text, scope in (*greeting_facts(openings), *stated):
        fact_text = clip(fact_text, MAX_FACT_CHARS)
        key = undated_key(fact_text)
        if key and key not in known:
            known.add(key)
            added.append(FactAdd(text=fact_text, scope=scope))
    return added


# The names a fact gives to people and pets: "… named Clara", "用户的哥哥叫子轩", "… 이름은 나비".
FACT_NAME = re.compile(
    r"\b(?:named|called|name is) (?P<en>[A-Z][\w'-]+)|叫(?P<zh>[\u4e00-\u9fff]{2,4})|이름은 (?P<ko>[가-힣A-Za-z]{2,})"
)


def known_names(facts: Iterable[str]) -> set[str]:
    """The names of people and pets in the user's facts (not the speakers' own: a greeting says
    theirs, and tells nothing)."""
    texts = list(facts)
    found = {name for text in texts for match in FACT_NAME.finditer(text) for name in match.groups() if name}
    speakers = speaker_names(texts)
    return {name for name in found if name.casefold() not in speakers}
