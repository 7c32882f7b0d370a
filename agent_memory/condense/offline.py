"""The offline condenser: a deterministic memory update when no LLM is configured.

It does not pretend to understand the conversation. The summary is labelled as an
automatic offline summary and says when the conversation happened, how many exchanges
it had and quotes the user's most informative statements, with the previous summary
carried forward (oldest part dropped first) so the whole stays under ~1200 characters.
Facts come only from explicit requests ("remember that …", "记住…", "기억해 줘") and
self-introductions ("my name is …", "我叫…"); facts are never updated or removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from agent_memory.condense.base import (
    CondenseInput,
    CondenseOutput,
    CondenseResult,
    FactAdd,
    Scope,
    sanitize,
    unchanged,
)
from agent_memory.core.clock import format_day, format_minute
from agent_memory.core.domain import Message
from agent_memory.core.facts import MAX_FACT_CHARS, fact_key
from agent_memory.core.tokens import count_tokens

Language = Literal["en", "zh", "ja", "ko"]

MODEL_NAME = "offline"
LABEL = "(offline summary)"
SUMMARY_MAX_CHARS = 1200
# The new section may take most of the budget; whatever is left carries the past forward.
SECTION_MAX_CHARS = 700
STATEMENT_MAX_CHARS = 160
MAX_STATEMENTS = 4
# Below this a line is filler ("ok", "Thanks!") and not worth quoting even when it is all there is.
MIN_SALIENCE = 4
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


def message_at(message: Message) -> int:
    """When the message was said, as render.py dates it."""
    return message.ts_ms or message.at_ms


def spoken(messages: Iterable[Message]) -> Iterator[tuple[Message, str]]:
    """Messages with something said, and their stripped text; empty ASR results are skipped."""
    for message in messages:
        text = " ".join(message.content.split())
        if text:
            yield message, text


# After CJK punctuation, after Latin punctuation and a space, or after Latin punctuation
# directly followed by CJK text ("好!我想"), but not inside "3.5" or "St.Mary".
SENTENCE_END = re.compile(r"(?<=[。！？])\s*|(?<=[.!?])(?:\s+|(?=[^\x00-\x7f]))|\n+")


def sentences(text: str) -> list[str]:
    """`text` split after sentence-ending punctuation (Latin and CJK)."""
    return [part.strip() for part in SENTENCE_END.split(text) if part and part.strip()]


# -- salient statements --------------------------------------------------------------------
FIRST_PERSON = re.compile(
    r"\b(?:i am|i'm|i have|i've|i like|i love|i hate|i want|i need|i work|i live|i'll|my|mine)\b"
    r"|我(?:叫|是|的|喜欢|爱|住|在|有|要|想|不)|(?:제가|저는|제|내가|나는|내)\s|좋아|싫어"
    r"|(?:私|僕|俺)(?:は|の|が)|好き",
    re.IGNORECASE,
)
DATE_WORDS = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d"
    r"|\b\d{1,2}(?:st|nd|rd|th)\b|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|tomorrow|tonight|weekend|next week|next month|birthday|anniversary)\b"
    r"|\d+\s*[号日月년월일]|星期|周[一二三四五六日末]|明天|后天|下周|生日|요일|내일|다음\s?주|생일"
    r"|曜日|明日|来週|誕生日",
    re.IGNORECASE,
)
DIGITS = re.compile(r"\d")
# A capitalised word after a lower-case word or comma is likely a name (not a sentence start).
NAME_LIKE = re.compile(r"(?<=[a-z,;]\s)[A-Z][a-z]+")
QUESTION = re.compile(r"(?:[?？]|吗|么|까)\W*$")


def salience(text: str) -> int:
    """How informative a user statement looks: length, numbers, dates, names, "I/my …"."""
    score = min(count_tokens(text), 60)
    if DIGITS.search(text):
        score += 15
    if DATE_WORDS.search(text):
        score += 15
    if FIRST_PERSON.search(text):
        score += 20
    if NAME_LIKE.search(text):
        score += 10
    if remember_requests(text) or introductions(text):
        score += 40  # the user asked us to keep it, or said who they are
    if QUESTION.search(text):
        score -= 10  # a question asks; a statement tells us about the user
    return score


def salient_statements(texts: Sequence[str], limit: int = MAX_STATEMENTS) -> list[str]:
    """The `limit` most informative distinct statements, in the order they were said."""
    seen: set[str] = set()
    ranked: list[tuple[int, int, str]] = []
    for index, text in enumerate(texts):
        key = fact_key(text)
        if not key or key in seen:
            continue
        seen.add(key)
        score = salience(text)
        if score >= MIN_SALIENCE:
            ranked.append((-score, index, text))
    best = sorted(ranked)[:limit]  # ties go to the earlier statement: deterministic
    return [text for _, _, text in sorted(best, key=lambda item: item[1])]


# -- facts from explicit requests ------------------------------------------------------------
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
    "not", "a", "an", "the", "kind", "actually", "just", "really", "so", "very", "back",
    "later", "when", "tomorrow", "tonight", "if", "at", "after", "before", "anytime",
    "maybe", "please", "now", "sometime", "again", "up", "on", "in",
}  # fmt: skip
# Verbs whose third-person form we fix after "I" becomes "the user"; others are left alone.
EN_AGREEMENT = {
    "have": "has", "do": "does", "don't": "doesn't", "haven't": "hasn't", "go": "goes",
    "study": "studies", "watch": "watches", "teach": "teaches", "miss": "misses",
    "finish": "finishes", "wish": "wishes", "try": "tries", "fly": "flies",
}  # fmt: skip
EN_REGULAR_VERBS = {
    "like", "love", "want", "need", "hate", "live", "work", "prefer", "play", "get", "feel",
    "think", "know", "take", "make", "say", "start", "run", "drive", "own", "speak", "eat",
    "drink", "plan", "hope", "train", "use", "write", "read", "sleep", "visit", "move",
}  # fmt: skip
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


def _en_third_person(text: str, *, capitalize: bool = False) -> str:
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
        text = f"The user asked to be reminded to {_en_third_person(rest[3:])}"
    elif lowered.startswith(("about ", "of ")):
        text = f"The user asked to be reminded about {_en_third_person(rest.split(' ', 1)[1])}"
    else:
        clause = re.sub(r"^that\s+", "", rest, flags=re.I)
        if clause != rest or EN_VERBISH.search(clause):
            text = _en_third_person(clause, capitalize=True)
        else:  # "remember my birthday": no statement to restate, so say what was asked
            text = f"The user asked to remember: {_en_third_person(clause)}"
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


def remember_requests(text: str) -> list[tuple[str, Scope]]:
    """Facts the user explicitly asked to be remembered in `text`, in order."""
    found: list[tuple[str, Scope]] = []
    for sentence in sentences(text):
        for extract in (_en_request, _zh_request, _ko_request, _ja_request):
            fact = extract(sentence)
            if fact is not None:
                found.append(fact)
                break
    return found


def introductions(text: str) -> list[tuple[str, Scope]]:
    """Facts from self-introductions: "my name is X", "call me X", "我叫X", "제 이름은 X"."""
    found: list[tuple[str, Scope]] = []
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


def extract_facts(texts: Iterable[str], existing: Iterable[str] = ()) -> list[FactAdd]:
    """New facts from the user's statements, none equal to an existing one."""
    known = {fact_key(text) for text in existing}
    added: list[FactAdd] = []
    for text in texts:
        for fact_text, scope in [*introductions(text), *remember_requests(text)]:
            fact_text = clip(fact_text, MAX_FACT_CHARS)
            key = fact_key(fact_text)
            if key and key not in known:
                known.add(key)
                added.append(FactAdd(text=fact_text, scope=scope))
    return added


# -- the summary ---------------------------------------------------------------------------
def time_span(first_ms: int, last_ms: int) -> str:
    """When it was said: one minute, a range within a day, or a range of days (UTC)."""
    first_day, last_day = format_day(first_ms), format_day(last_ms)
    first_minute, last_minute = format_minute(first_ms), format_minute(last_ms)
    if first_day != last_day:
        return f"{first_day} {first_minute} – {last_day} {last_minute} UTC"
    if first_minute != last_minute:
        return f"{first_day} {first_minute}–{last_minute} UTC"
    return f"{first_day} {first_minute} UTC"


def new_section(language: Language, span: str, exchanges: int, statements: Sequence[str]) -> str:
    """One paragraph about the new messages, in the conversation's language."""
    quoted = [clip(text, STATEMENT_MAX_CHARS) for text in statements]
    if language == "zh":
        said = "；".join(f"“{q}”" for q in quoted)
        return f"{span}：共{exchanges}轮对话。" + (f"用户说：{said}" if said else "")
    if language == "ja":
        said = "".join(f"「{q}」" for q in quoted)
        return f"{span}：やり取り{exchanges}回。" + (f"ユーザーの発言：{said}" if said else "")
    if language == "ko":
        said = " / ".join(f'"{q}"' for q in quoted)
        return f"{span}: 대화 {exchanges}회." + (f" 사용자의 말: {said}" if said else "")
    said = "; ".join(f'"{q}"' for q in quoted)
    plural = "" if exchanges == 1 else "s"
    return f"{span}: {exchanges} exchange{plural}." + (f" The user said: {said}" if said else "")


def strip_label(summary: str) -> str:
    """A previous offline summary without its label, so labels do not pile up."""
    summary = summary.strip()
    return summary[len(LABEL) :].strip() if summary.startswith(LABEL) else summary


def carry_forward(previous: str, room: int) -> str:
    """The newest part of `previous` that fits in `room` characters; oldest dropped first."""
    if room <= len(ELLIPSIS) + 10:
        return ""
    paragraphs = [p.strip() for p in previous.splitlines() if p.strip()]
    while len(paragraphs) > 1 and len("\n".join(paragraphs)) > room:
        paragraphs.pop(0)
    if not paragraphs or len(paragraphs[0]) <= room:
        return "\n".join(paragraphs)
    parts = sentences(paragraphs[0])
    while len(parts) > 1 and len(" ".join(parts)) + len(ELLIPSIS) > room:
        parts.pop(0)
    text = " ".join(parts)
    if len(text) + len(ELLIPSIS) > room:
        text = text[-(room - len(ELLIPSIS)) :].lstrip()
    return ELLIPSIS + text


def summarize(previous: str | None, said: Sequence[tuple[Message, str]]) -> str:
    """The labelled offline summary: the bounded past plus a paragraph on what was `said`."""
    user_texts = [text for message, text in said if message.role == "user"]
    language = detect_language(user_texts or [text for _, text in said])
    times = [message_at(message) for message, _ in said]
    span = time_span(min(times), max(times))
    # Fewer quotes until the paragraph fits; each try keeps the most salient ones.
    for limit in range(MAX_STATEMENTS, -1, -1):
        section = new_section(language, span, len(user_texts), salient_statements(user_texts, limit))
        if len(section) <= SECTION_MAX_CHARS:
            break
    room = SUMMARY_MAX_CHARS - len(LABEL) - len(section) - 2  # two newlines
    past = carry_forward(strip_label(previous or ""), room)
    return "\n".join(part for part in (LABEL, past, section) if part)


def condense_offline(job: CondenseInput) -> CondenseOutput:
    """The whole offline update of `job`, a pure function of it."""
    said = list(spoken(job.messages))
    if not said:
        # Nothing new was said: the memory stays exactly as it is.
        return unchanged(job)
    user_texts = [text for message, text in said if message.role == "user"]
    facts = extract_facts(user_texts, existing=(fact.text for fact in job.facts))
    # The same gate as the LLM's answer: cleaned texts, one fact per key.
    output = CondenseOutput(summary=summarize(job.previous_summary, said), add_facts=facts)
    return sanitize(output, job.facts)


class OfflineCondenser:
    """Condenses without a language model: deterministic, labelled, never removes facts."""

    model = MODEL_NAME

    async def condense(self, job: CondenseInput) -> CondenseResult:
        """The offline update; nothing is sent anywhere, so no tokens are counted."""
        return CondenseResult(output=condense_offline(job), method="offline", model=MODEL_NAME)

    async def close(self) -> None:
        """Nothing to release."""
