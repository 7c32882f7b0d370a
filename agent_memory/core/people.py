"""People by relation and by name: "my sister Maya" links the words a question may use for her.

A user says "my sister Maya is training as a midwife" once, and later only "Maya's cat …" or
"my sister's cat …". A question about "my sister" then shares no word with the turns that name
her only, and a question about Maya none with the turns that say "my sister". Recall reads the
links from the turns it found for the question (`linked_terms`) and asks again with the other
word for the same person: the name for a relation asked, the relation (weighed as a related
word) for a name asked. No list of names: a name is what stands where the pattern puts one
(capitalised in English; in Chinese, two characters that are not function words).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from agent_memory.core.terms import STOP_WORDS, terms
from agent_memory.core.textcache import text_cache

# The relations a person is named by, English (a word each) and Chinese (kin and the people of a life).
EN_RELATIONS: Final = """
    mum mom mother dad father sister brother cousin aunt uncle niece nephew grandma grandmother grandpa
    grandfather granny grandson granddaughter wife husband partner boyfriend girlfriend fiance fiancee
    son daughter stepmom stepdad stepson stepdaughter boss manager colleague coworker friend bestie
    neighbour neighbor roommate flatmate housemate landlord landlady teacher coach therapist
    """.split()  # noqa: SIM905
ZH_RELATIONS: Final = """
    姐姐 妹妹 哥哥 弟弟 表姐 表妹 表哥 表弟 堂姐 堂妹 堂哥 堂弟 妈妈 爸爸 老公 老婆 丈夫 妻子
    男朋友 女朋友 对象 儿子 女儿 老板 领导 同事 朋友 闺蜜 室友 舍友 邻居 老师 教练
    """.split()  # noqa: SIM905
_EN = "|".join(EN_RELATIONS)
_ZH = "|".join(sorted(ZH_RELATIONS, key=len, reverse=True))
# "my little sister", "my best friend", "my ex-boyfriend": a word before the relation is allowed.
_EN_BEFORE = r"(?:(?:little|big|older|younger|elder|baby|twin|best|old|new|ex)[- ])?"
_NAME = r"([A-Z][a-z]+(?:-[A-Z][a-z]+)?)"
# The relation asked of the speaker ("my sister's cat", 我姐姐养的猫).
_ASKED_EN = re.compile(rf"\bmy {_EN_BEFORE}({_EN})(?:'s|’s)?\b", re.IGNORECASE)
_ASKED_ZH = re.compile(f"我(?:的)?({_ZH})")
# Someone else's relation asked ("What does Gina's sister do?"): what they said of "my sister Tess".
_ASKED_OTHER = re.compile(rf"\b([A-Z][a-z]+)(?:'s|’s) {_EN_BEFORE}({_EN})\b")
# ...and in Chinese (佳怡的姐姐做什么工作？): a name of two characters, 的, a relation.
_ASKED_OTHER_ZH = re.compile(f"([\u4e00-\u9fff]{{2}})的({_ZH})")
# A person named by a relation: "my sister Maya", "my sister, Maya,", "my sister's name is Maya",
# "my sister is called Maya"; the speaker's own ("my") or, said to them, theirs ("your").
_LINK_EN = re.compile(
    rf"\b(my|your) {_EN_BEFORE}({_EN})(?:,? |'s name is |’s name is | is called | is named |, called |, named ){_NAME}",
    re.IGNORECASE,
)
_LINK_ZH = re.compile(f"(我|你)(?:的)?({_ZH})([\u4e00-\u9fff]{{2}})")
# Characters a Chinese name (two characters after a relation) does not hold: the function words
# and common verbs that follow a relation in a sentence (我姐姐说她…, 我姐姐养的猫, 我妹妹现在…).
_NOT_IN_NAME: Final = frozenset(
    "的了是在说她他它们也又就都要会把被给跟和对现还很刚已不没有这那一个去来到上下里想觉得真太好最今明昨天每"
    "养做当让叫从过着呢吗吧啊呀嘛么什怎为因所但如果可以能该得地之与及或而且并最近正再才只"
)
# Capitalised words that stand after a relation without being a name ("my sister Monday", "my boss Mr").
_NOT_NAMES: Final = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december mr mrs ms dr
    """.split()  # noqa: SIM905
)
# How many turns found for a question are read for links; and how many names one relation may
# bring in (a user with several friends names many: "my friend" then says which of them no more).
LINK_TURNS = 40
MAX_NAMES = 2


@text_cache(1024)
def asked_relations(q: str) -> Mapping[str, bool]:
    """The relations a question asks about, as index terms, each with whether it is the
    speaker's own ("my sister", 我姐姐: True) or someone else's ("Gina's sister": False)."""
    found = {term: True for match in _ASKED_EN.finditer(q) for term in _terms(match.group(1).casefold())}
    found |= {term: True for match in _ASKED_ZH.finditer(q) for term in _terms(match.group(1))}
    for match in _ASKED_OTHER.finditer(q):
        if match.group(1).casefold() not in STOP_WORDS:
            for term in _terms(match.group(2).casefold()):
                found.setdefault(term, False)
    for match in _ASKED_OTHER_ZH.finditer(q):
        if not _NOT_IN_NAME.intersection(match.group(1)):  # 我的, 我们的, 今天的: no one's name
            for term in _terms(match.group(2)):
                found.setdefault(term, False)
    return found


@text_cache(8192)
def links(text: str) -> tuple[tuple[bool, str, str], ...]:
    """The people a turn names by relation: (said as the speaker's own, relation term, name
    term) for "my sister Maya" (True) or "your sister Maya" (False)."""
    found: list[tuple[bool, str, str]] = []
    for whose, relation, name in _LINK_EN.findall(text):
        if not name[:1].isupper() or name.casefold() in STOP_WORDS or name.casefold() in _NOT_NAMES:
            continue
        own = whose.casefold() == "my"
        found += [(own, rel, term) for rel in _terms(relation.casefold()) for term in _terms(name.casefold())]
    for whose, relation, name in _LINK_ZH.findall(text):
        if not _NOT_IN_NAME.intersection(name):
            found += [(whose == "我", rel, name) for rel in _terms(relation)]
    return tuple(found)


def linked_terms(q: str, asked: Iterable[str], turns: Sequence[tuple[str, bool]]) -> list[tuple[str, float]]:
    """Terms to add to a question for the people it names one way and the turns `turns` (their
    text, and whether the user said it) name another: the name linked to a relation asked (the
    user's own as the user says it, "my sister Maya", or as said to them, "your sister Maya";
    another's as anyone says it of their own), at `NAME_LINK_WEIGHT`; the relation linked to a
    name asked, at `RELATION_LINK_WEIGHT`. None new: []."""
    relations = asked_relations(q)
    have = frozenset(asked)
    every: dict[str, list[str]] = {}
    users: dict[str, list[str]] = {}
    anyones: dict[str, list[str]] = {}
    for text, by_user in turns[:LINK_TURNS]:
        for own, relation, name in links(text):
            _add(every, relation, name)
            if own == by_user:
                _add(users, relation, name)
            if own:
                _add(anyones, relation, name)
    added: dict[str, float] = {}
    for relation, users_own in relations.items():
        held = (users if users_own else anyones).get(relation, [])
        if len(held) <= MAX_NAMES:
            added.update((name, NAME_LINK_WEIGHT) for name in held if name not in have)
    for relation, held in every.items():
        if relation not in have and not have.isdisjoint(held):
            added.setdefault(relation, RELATION_LINK_WEIGHT)
    return list(added.items())


def _add(names: dict[str, list[str]], relation: str, name: str) -> None:
    held = names.setdefault(relation, [])
    if name not in held:
        held.append(name)


# A name linked to a relation asked is the person asked about: it weighs as a word asked. A
# relation linked to a name asked is weaker (the user may have more than one friend): as a related word.
NAME_LINK_WEIGHT = 1.0
RELATION_LINK_WEIGHT = 0.6


def _terms(word: str) -> list[str]:
    # A Chinese relation (姐姐) is one bigram; its characters are not what links it.
    return [term for term in terms(word) if len(term) > 1]


# Who a question is about. Recall reads a question as the user says it to the character (at
# /recall, the custom-LLM endpoint, a live call's turns): "you" is the character, "I" the user
# (你 and 我). The pronouns of the asking are not who it is about: "do you remember", "tell me",
# "I told you" (the one told; the teller is kept: "the book I told you about" is the user's).
_FIRST_EN: Final = frozenset("i my me mine myself i've i'd i'm i'll we our ours us ourselves".split())  # noqa: SIM905
_SECOND_EN: Final = frozenset("you your yours yourself yourselves you've you'd you're you'll".split())  # noqa: SIM905
_ASKING_EN = re.compile(
    r"\b(?:do|does|did|don't|didn't)\s+you\s+(?:still\s+|ever\s+|even\s+)?(?:remember|recall|know|think|guess)\b"
    r"|\b(?:can|could|would|will|can't|won't)\s+you\s+(?:please\s+)?(?:remember|recall|tell|remind|show|say|guess)"
    r"(?:\s+(?:me|us))?\b"
    r"|\b(?:tell|told|telling|remind|reminded|show|showed|ask|asked|mentioned\s+to|said\s+to|say\s+to)"
    r"\s+(?:me|you|us)\b"
    r"|\bI\s+(?:wonder|forget|forgot|can't\s+remember|don't\s+remember|want\s+to\s+know)\b",
    re.IGNORECASE,
)
_ASKING_ZH = re.compile(
    r"(?:跟|和|给|对|告诉|问|提醒)(?:你|我)|你(?:还)?(?:记得|知道|觉得)|我(?:想知道|忘了)"
)
_PRONOUN_EN = re.compile(r"\b[a-z]+(?:['’][a-z]+)?\b", re.IGNORECASE)


@text_cache(1024)
def asked_about(q: str) -> str | None:
    """Whose life a question asks about: "user" (I, my, 我), "assistant" (you, your, 你), or
    None when it says neither more than the other."""
    plain = _ASKING_ZH.sub(" ", _ASKING_EN.sub(" ", q))
    words = [word.casefold().replace("’", "'") for word in _PRONOUN_EN.findall(plain)]
    first = sum(word in _FIRST_EN for word in words) + plain.count("我")
    second = sum(word in _SECOND_EN for word in words) + plain.count("你")
    if first == second:
        return None
    return "user" if first > second else "assistant"


# The speakers' names as the facts give them ("The user's name is Sam", "The user's name for you
# is Luna", 用户叫小林, 用户叫你小月): condense/facts_offline.py writes them, an LLM may too.
_SPEAKER_NAME = re.compile(
    r"^(?:The )?[Uu]ser(?:(?P<you>'s name for you is| calls you)|'s name is| is called| is named| goes by"
    r"| likes to be called)\s+(?P<name>[A-Z][\w'-]*)|^用户叫(?P<zh_you>你)?(?P<zh>[\u4e00-\u9fff]{2,3})$"
)


def speaker_names(facts: Iterable[str]) -> dict[str, str]:
    """Each speaker's name (casefolded) in `facts`, and whose it is: "user" or "assistant"."""
    names: dict[str, str] = {}
    for text in facts:
        match = _SPEAKER_NAME.match(text.strip().rstrip("."))
        if match is None:
            continue
        role = "assistant" if match["you"] or match["zh_you"] else "user"
        names.setdefault((match["name"] or match["zh"]).casefold(), role)
    return names


def named_speaker(q: str, names: Mapping[str, str]) -> str | None:
    """Whose life a question asks about by naming them ("What did Sam win?" asks the user's when
    the user is Sam), or None when it names neither speaker, or both."""
    found = {role for _, role in _named(q, names)}
    return found.pop() if len(found) == 1 else None


def named_terms(q: str, names: Mapping[str, str], weighed: Collection[str]) -> set[str]:
    """The terms of the speakers' names the question says, of those that weigh in it."""
    return {term for word, _ in _named(q, names) for term in terms(word) if term in weighed}


# A greeting's short name and the question's full one: "Mel" is Melanie, "Sam" Samantha.
_NICKNAME_MIN = 3
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")


def _named(q: str, names: Mapping[str, str]) -> list[tuple[str, str]]:
    """The words of `q` that name a speaker (capitalised, the name or a longer form of it; in
    Chinese, the name anywhere), with whose name it is."""
    if not names:
        return []
    found = [(name, role) for name, role in names.items() if not name.isascii() and name in q]
    for word in _CAPITALISED.findall(q):
        folded = word.casefold()
        role = names.get(folded) or next(
            (role for name, role in names.items() if len(name) >= _NICKNAME_MIN and folded.startswith(name)),
            None,
        )
        if role is not None:
            found.append((word, role))
    return found
