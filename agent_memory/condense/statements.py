"""The user's self-statements read without a language model: script, sentences, and the facts they state."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from agent_memory.core.clock import format_day
from agent_memory.core.dates import annotate, resolve
from agent_memory.core.textcache import text_cache

Language = Literal["en", "zh", "ja", "ko"]

ELLIPSIS = "…"

# -- language ------------------------------------------------------------------------------
HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
KANA = re.compile("[\u3040-\u30ff]")
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile("[A-Za-z\u00c0-\u024f]")


def detect_language(texts: Iterable[str]) -> Language:
    """The conversation's script: Chinese, Japanese or Korean when mostly CJK, else "en"."""
    text = "".join(texts)
    hangul, kana, han = len(HANGUL.findall(text)), len(KANA.findall(text)), len(HAN.findall(text))
    cjk = hangul + kana + han
    # One CJK character carries about as much as a short Latin word (~3 letters).
    if cjk == 0 or cjk * 3 < len(LATIN.findall(text)):
        return "en"
    if hangul >= kana + han:
        return "ko"
    if kana:  # Chinese is written without kana; a fair share of it means Japanese
        return "ja" if kana * 5 >= han else "zh"
    return "zh"


# -- small text helpers --------------------------------------------------------------------
def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a word boundary when there is one."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:  # only Latin text has spaces worth cutting at
        cut = cut[:space]
    return cut.rstrip(" ,;:，、") + ELLIPSIS


# After CJK punctuation, after Latin punctuation and a space, or after Latin punctuation
# directly followed by CJK text ("好!我想"), but not inside "3.5" or "St.Mary".
SENTENCE_END = re.compile(r"(?<=[。！？])\s*|(?<=[.!?])(?:\s+|(?=[^\x00-\x7f]))|\n+")


def sentences(text: str) -> list[str]:
    """`text` split after sentence-ending punctuation (Latin and CJK)."""
    return [part.strip() for part in SENTENCE_END.split(text) if part and part.strip()]


# A sentence ending in a question mark or particle (吗, 么, 까) asks rather than states.
QUESTION = re.compile(r"(?:[?？]|吗|么|까)\W*$")


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
_JOB_WORDS = [
    w for job in EN_JOBS.split("|") for w in ({"counsell?or": ("counselor", "counsellor")}.get(job) or (job,))
]
assert all(re.fullmatch(r"[a-z ]+", word) for word in _JOB_WORDS), "EN_JOBS holds literals (but counsell?or)"
EN_JOB = re.compile(rf"(?<!\w){literal_trie(_JOB_WORDS)}\b", re.IGNORECASE)
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
# A clause about the user's own dated event: "my sister's wedding is this Saturday",
# "I have a job interview tomorrow", "I ran my first half marathon yesterday".
EN_EVENT_CLAUSE = re.compile(
    rf"{EN_START}(?P<clause>(?:[Mm]y (?:[\w'-]+ ){{0,3}}?(?:{EN_EVENTS})\b[^,;!?]*?|I(?:'m| am) going\b[^,;!?]*?"
    rf"|I (?:[\w'-]+ ){{0,1}}?(?:have|had|got|ran|went|saw|passed|won|took|did|finished|booked|attended"
    rf"|visited|flew|start|started|will have|gave|played|sang|danced|completed)\b[^,;!?]*?))"
    r"(?=\s*(?:[,;!?.]|$|\b(?:and I|but|so|because|which|and it|and my)\b))"
)
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

ZH_FILLER = r"(?:跟你说|告诉你(?:个|一个)?(?:大|好)?消息|对了|其实|说真的|哈哈+|嗯|哦|啊|而且|然后|所以|不过|但是|现在)[，,：:！!]?\s*"
ZH_START = rf"(?:^|[，,：:；;]\s*)(?:{ZH_FILLER})*"
ZH_ADVERBS = r"(?:现在|目前|最近|刚刚|刚|终于|已经|又|也|还|今天|昨天|前天|上周|上个月|去年|今年|这次)*"
ZH_SUBJECT = rf"(?P<subject>我们家|我家|我们|我){ZH_ADVERBS}"
ZH_HYPOTHETICAL = re.compile(
    r"如果|要是|假如|假设|万一|的话|希望|想要|梦想|可能|也许|或许|大概|打算|准备|是不是"
)
ZH_NEGATION = re.compile(r"不|没|别|未")
ZH_JOBS = (
    "护士|医生|小学老师|中学老师|大学老师|老师|教师|教授|会计|平面设计师|设计师|工程师|程序员|电工|药剂师|记者"
    "|咖啡师|数据分析师|分析师|图书管理员|康复治疗师|治疗师|木匠|律师|厨师|大学生|研究生|博士生|学生|司机|警察"
    "|建筑师|兽医|飞行员|消防员|甜点师|翻译|编辑|演员|歌手|画家|作家|公务员|银行职员|快递员|外卖员|保安|农民"
    "|摄影师|理发师|健身教练|教练|护工|保姆|服务员|收银员|牙医|心理咨询师|销售|产品经理|经理|会计师"
)
ZH_PLACE_SUFFIX = "公司|医院|学校|银行|大学|中学|小学|工厂|餐厅|饭店|咖啡馆|咖啡店|书店|店|局|所|院|中心|厂|馆|社|台|站|集团|幼儿园|诊所"
ZH_SPECIES = "小猫|小狗|猫咪|猫|狗狗|狗|兔子|鹦鹉|仓鼠|乌龟|金鱼|鱼|鸟|小鸟|龙猫|刺猬|蜥蜴|蛇"
ZH_PET_NAME = r"(?P<name>[\u4e00-\u9fff]{1,4}|[A-Za-z][A-Za-z'-]*)(?=[，。！？,.!?、\s]|$)"
ZH_NOT_NAME_START = set("了得着起声个不来去什么啥很真太")
ZH_NOT_PLACES = {"这里", "那里", "哪里", "哪儿", "这儿", "那儿", "附近", "这边", "那边", "家里", "一起"}
ZH_CLAUSE_END = r"(?=[，,。！!；;]|$)"
ZH_KIN = "哥哥|姐姐|弟弟|妹妹|儿子|女儿|老公|老婆|丈夫|妻子|男朋友|女朋友|未婚夫|未婚妻|爸爸|妈妈|爷爷|奶奶|外公|外婆"
# Without "叫", a two-character name ends where one of these starts ("我姐姐佳怡这几天要来").
ZH_AFTER_NAME = "这那要说刚也又来去和跟今明昨最下上还就，。！,.!、"
ZH_NOT_NAMES = {
    "今天",
    "明天",
    "昨天",
    "最近",
    "现在",
    "已经",
    "刚刚",
    "刚才",
    "一直",
    "也是",
    "还是",
    "工作",
    "结婚",
    "生日",
    "说过",
    "告诉",
    "觉得",
    "喜欢",
    "一起",
    "经常",
    "总是",
    "平时",
    "马上",
    "突然",
    "终于",
    "真的",
    "特别",
    "非常",
    "每天",
    "后来",
    "以前",
    "周末",
    "今年",
    "去年",
    "明年",
    "也要",
    "要来",
    "又要",
    "和我",
    "跟我",
    "家里",
    "这边",
    "那边",
    "下周",
    "上周",
    "下个",
    "上个",
    "住在",
    "在家",
    "他们",
    "她们",
    "自己",
}
# Laid out by hand (the formatter is told so where the table ends): one (kind, pattern) a row, as
# the pattern reads; ruff format would break every row over four lines.
ZH_STATEMENTS: list[tuple[str, re.Pattern[str]]] = [
    ("kin", re.compile(rf"我的?(?P<kin>{ZH_KIN})(?:的名字)?(?:叫|名字叫){ZH_PET_NAME}")),
    ("kin", re.compile(rf"我的?(?P<kin>{ZH_KIN})(?P<name>[\u4e00-\u9fff]{{2}})(?=[{ZH_AFTER_NAME}])")),
    ("job", re.compile(rf"{ZH_START}{ZH_SUBJECT}(?P<rest>是(?:一名|一个|一位|个)?(?P<job>{ZH_JOBS})){ZH_CLAUSE_END}")),
    ("job", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:辞职了[，,])?(?:现在)?在?(?:做|当)(?:一名|一个|一位)?(?P<job>{ZH_JOBS})了?)"
        rf"{ZH_CLAUSE_END}")),
    ("job", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>在(?P<place>[^\s，。！？,.!?]{{1,12}}?(?:{ZH_PLACE_SUFFIX}))"
        rf"(?:上班|工作|当(?P<job>{ZH_JOBS})))(?:了)?{ZH_CLAUSE_END}")),
    ("lives", re.compile(rf"{ZH_START}{ZH_SUBJECT}(?P<rest>住在(?P<place>[^\s，。！？,.!?了的呢啊吧]{{2,10}}))")),
    ("moved", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:搬家了[，,]?(?:这次)?)?搬(?:到|去|来)了?(?P<place>[^\s，。！？,.!?了的呢啊吧]{{2,8}}))")),
    ("pet", re.compile(rf"{ZH_START}(?P<subject>我们家的?|我家的?|我的)(?P<rest>(?P<species>{ZH_SPECIES})(?:的名字)?(?:叫|名字叫|是){ZH_PET_NAME})")),
    ("pet", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:养了|领养了|收养了|买了|有|多了|捡了)(?:一只|只|一条|条)(?:小|新)?(?P<species>{ZH_SPECIES})"
        rf"[，,]?(?:名字)?叫{ZH_PET_NAME})")),
    ("likes", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:最|很|特别|非常|超)?(?:喜欢|爱)(?:吃|喝|看|听|玩)?的(?:就)?是(?P<object>[^，。！？,.!?]{{1,10}})){ZH_CLAUSE_END}")),
    ("likes", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:很|特别|非常|超|最)?喜欢(?P<object>[^，。！？,.!?的]{{2,12}})){ZH_CLAUSE_END}")),
    ("hobby", re.compile(
        rf"{ZH_START}{ZH_SUBJECT}(?P<rest>(?:周末|每周末|每周)?开始学(?:习)?(?P<object>[^，。！？,.!?]{{1,8}})){ZH_CLAUSE_END}")),
]  # fmt: skip
ZH_EVENTS = re.compile(
    "婚礼|生日|考试|面试|预约|手术|毕业典礼|毕业|聚会|派对|旅行|旅游|航班|假期|度假|演唱会|音乐会|马拉松|比赛|演出"
    "|演讲|会议|葬礼|典礼|节日|截止|体检|看牙医|牙医|看医生|约会|课|婚宴|订婚|出差"
)
ZH_EVENT_CLAUSE = re.compile(rf"{ZH_START}{ZH_SUBJECT}(?P<rest>[^，。！？,.!?；;]{{2,30}})")
ZH_NOT_MINE = re.compile("^(?:的)?(?:同事|朋友|邻居|老板|同学|室友|表妹|表弟|表姐|表哥)")
ZH_NO_LONGER = re.compile("去世|死了|走了|以前|曾经")

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


CLAUSE_BREAK = re.compile(r"[,;.!?，。！？；]")


def _clause_so_far(sentence: str, match: re.Match[str]) -> str:
    """The sentence up to the end of the clause the match ends in: what may qualify it."""
    after = CLAUSE_BREAK.search(sentence, match.end())
    return sentence[: after.start() if after else len(sentence)]


def _is_name(word: str | None) -> bool:
    return word is not None and word not in EN_NOT_NAME_WORDS


def _place(match: re.Match[str], group: str) -> str:
    """A place as matched, without a full stop it took; "" when a sentence break cut it ("at St.")."""
    place = (match.group(group) or "").rstrip(".")
    return "" if re.search(r"\b(?:St|Mt|Dr|Ft)$", place) else place


def _when(sentence: str, match: re.Match[str], at_ms: int) -> str:
    """When the clause of `match` says something happened: its resolved date, else the day said."""
    mentions = resolve(_clause_so_far(sentence, match), at_ms)
    return mentions[0].label if mentions else format_day(at_ms)


def _en_statement(kind: str, match: re.Match[str], day: str) -> str | None:
    """The fact an English self-statement match says, or None when it is not one after all."""
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
    if kind == "pet":
        name = match.groupdict().get("name") or match.groupdict().get("name2")
        if not _is_name(name) or EN_NO_LONGER.search(match.string):
            return None
        return f"The user has a {match.group('species').lower()} named {name}"
    if kind == "kin":
        name, kin = match.group("name"), match.group("kin").lower()
        if not _is_name(name) or EN_NO_LONGER.search(match.string):
            return None
        if re.fullmatch(EN_KIN_ONE, kin):
            return f"The user's {kin} is called {name}"
        return f"The user has a {kin} named {name}"
    if kind == "has":
        if EN_NO_LONGER.search(match.string):
            return None
        return f"The user has {match.group('count').lower()} {match.group('what').lower()}"
    if kind == "favourite":
        value = en_third_person(match.group("value").strip())
        return f"The user's {match.group('fav').lower()} {match.group('what')} {match.group('verb')} {value}"
    if kind == "allergic":
        return f"The user is allergic to {en_third_person(match.group('what').strip())}"
    if kind == "allergy":
        what = match.group("what").strip().lower()
        return f"The user has {match.group('art').lower()} {what} allerg{match.group('y')}"
    return en_third_person(match.group("clause"), capitalize=True)  # hobby


def _their(text: str) -> str:
    """ "The user ran the user's first race" reads "The user ran their first race"."""
    head, sep, rest = text.partition("The user")
    return head + sep + rest.replace("the user's", "their") if sep else text


def _en_event(sentence: str, at_ms: int) -> tuple[int, str] | None:
    """A dated event the user states about themselves, restated with its date resolved."""
    for match in EN_EVENT_CLAUSE.finditer(sentence):
        clause = match.group("clause").strip()
        words = clause.split()
        if not 3 <= len(words) <= 18 or EN_NEGATION.search(clause) or not EN_EVENT.search(clause):
            continue
        if EN_NOT_MINE.match(clause) or EN_HYPOTHETICAL.search(_clause_so_far(sentence, match)):
            continue
        if clause.startswith("I") and EN_SUBJECT_ANYWHERE.search(" ".join(words[1:3])):
            continue  # "I saw her …": about someone else
        if not (resolve(clause, at_ms) or EN_HAS_DATE.search(clause)):
            continue
        return match.start("clause"), annotate(_their(en_third_person(clause, capitalize=True)), at_ms)
    return None


def _zh_statement(kind: str, match: re.Match[str], day: str) -> str | None:
    """The fact a Chinese self-statement match says, or None when it is not one after all."""
    if kind == "kin":
        name = match.group("name")
        if name in ZH_NOT_NAMES or name[0] in ZH_NOT_NAME_START or ZH_NO_LONGER.search(match.string):
            return None
        return f"用户的{match.group('kin')}叫{name}"
    rest = match.group("rest")
    if kind in {"lives", "moved"} and match.group("place") in ZH_NOT_PLACES:
        return None
    if kind == "pet" and (match.group("name")[0] in ZH_NOT_NAME_START or ZH_NO_LONGER.search(match.string)):
        return None
    if kind == "likes" and re.search(r"你|您|他|她|这|那|什么|吗|上了", match.group("object")):
        return None
    subject = match.group("subject")
    text = ("用户家" if "家" in subject else "用户") + ("的" if subject.endswith("的") else "") + rest
    text = text.replace("我", "用户")
    if kind == "moved":
        return f"{text} ({day})"
    if kind in {"job", "lives"}:
        return f"{text} (截至 {day})"
    return text


def _zh_event(sentence: str, at_ms: int) -> tuple[int, str] | None:
    """A dated event the user states about themselves (我…明天…面试), with its date resolved."""
    for match in ZH_EVENT_CLAUSE.finditer(sentence):
        after = sentence[match.end("subject") : match.end()]
        if not ZH_EVENTS.search(after) or ZH_NEGATION.search(after) or ZH_NOT_MINE.match(after):
            continue
        if ZH_HYPOTHETICAL.search(_clause_so_far(sentence, match)) or not resolve(after, at_ms):
            continue
        subject = "用户家" if "家" in match.group("subject") else "用户"
        return match.start("subject"), annotate(subject + after.replace("我", "用户"), at_ms)
    return None


def _ko_statement(kind: str, match: re.Match[str], day: str) -> str | None:
    """The fact a Korean self-statement match says, or None when it is not one after all."""
    if kind == "pet":
        return f"사용자의 {match.group('species')} 이름은 {match.group('name')}"
    if kind in {"lives", "works"} and match.group("place") in KO_NOT_PLACES:
        return None
    return f"사용자는 {match.group('rest')} ({day} 기준)"


def _restated(
    sentence: str,
    at_ms: int,
    patterns: Sequence[tuple[str, re.Pattern[str]]],
    restate: Callable[[str, re.Match[str], str], str | None],
    qualifier: re.Pattern[str] | None = None,
    negation: re.Pattern[str] | None = None,
    needs: Sequence[re.Pattern[str] | None] = (),
) -> list[tuple[int, str]]:
    """Each match of `patterns` restated as a fact, with where it starts; a match `negation`
    finds in, or whose clause `qualifier` finds in (a hypothetical), is none. `needs[i]`: what
    the sentence must hold for `patterns[i]` to be tried (a cheap search that fails fast)."""
    day = format_day(at_ms)
    found: list[tuple[int, str]] = []
    passed: dict[re.Pattern[str], bool] = {}
    for index, (kind, pattern) in enumerate(patterns):
        need = needs[index] if needs else None
        if need is not None:
            if need not in passed:
                passed[need] = need.search(sentence) is not None
            if not passed[need]:
                continue
        for match in pattern.finditer(sentence):
            if negation and negation.search(match.group(0)):
                continue
            if qualifier and qualifier.search(_clause_so_far(sentence, match)):
                continue
            # A move is dated by when it happened; a state by the day it was said.
            fact = restate(kind, match, _when(sentence, match, at_ms) if kind == "moved" else day)
            if fact:
                found.append((match.start(), fact))
    return found


def sentence_facts(sentence: str, at_ms: int) -> list[str]:
    """Facts from what the user says about themselves in one sentence, said at `at_ms`."""
    return list(_sentence_facts(sentence, at_ms))


# A job asks this of each user sentence twice (its facts, then its salience): ~50 us of
# regular expressions each. Emptied with the other text caches by a forget.
@text_cache(16384)
def _sentence_facts(sentence: str, at_ms: int) -> tuple[str, ...]:
    stripped = sentence.strip()
    if QUESTION.search(stripped):
        return ()
    found: list[tuple[int, str]] = []
    # Each English pattern (and event clause) has the user speak of themselves: "I", "we" or "my",
    # a whole word; a sentence with none of them (most of the other speaker's) is passed by.
    if LATIN.search(stripped) and not EN_ASKING.match(stripped) and EN_SELF.search(stripped):
        found += _restated(
            stripped, at_ms, EN_STATEMENTS, _en_statement, EN_HYPOTHETICAL, EN_NEGATION, EN_STATEMENT_NEEDS
        )
        # The clause must hold an event word, so the sentence must.
        event = _en_event(stripped, at_ms) if EN_EVENT.search(stripped) else None
        if event:
            found.append(event)
    if HAN.search(stripped):
        found += _restated(stripped, at_ms, ZH_STATEMENTS, _zh_statement, ZH_HYPOTHETICAL)
        event = _zh_event(stripped, at_ms)
        if event:
            found.append(event)
    if HANGUL.search(stripped) and not KO_HYPOTHETICAL.search(stripped):
        found += _restated(stripped, at_ms, KO_STATEMENTS, _ko_statement)
    return tuple(fact for _, fact in sorted(found, key=lambda item: item[0]))


def statement_facts(text: str, at_ms: int) -> list[str]:
    """Facts from the user's self-statements in `text`, said at `at_ms`, in order."""
    return [fact for sentence in sentences(text) for fact in sentence_facts(sentence, at_ms)]


def pet_followup(previous: str, sentence: str) -> list[str]:
    """ "A puppy named Rex." right after "We got a new pet!": the user's pet."""
    match = EN_PET_FOLLOWUP.match(sentence.strip())
    if match is None or not EN_NEW_PET.search(previous) or EN_NEGATION.search(previous):
        return []
    if not _is_name(match.group("name")) or EN_HYPOTHETICAL.search(previous):
        return []
    return [f"The user has a {match.group('species').lower()} named {match.group('name')}"]
