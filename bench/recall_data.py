"""Generated long-term conversations with planted memories, and questions that name their answers.

    from recall_data import generate
    data = generate(users=20, seed=7)          # 20 English + 20 Chinese users by default

Deterministic for a seed, pure Python. Each user talks with one character over 8-15 sessions
(of 15-30 exchanges each, by default) spread across several months (each session an Agora 103 payload: `labels`, `contents` with
role/content/turn_id/timestamp in ms, `start_ts`/`stop_ts`). The sessions are mostly small
talk (a quarter of it near misses: a neighbour's dog, a colleague's move, a friend's wedding);
planted among it are facts (pets, a sibling and their job, the user's job, hobby,
favourite food, the city they live in), dated events said relative to the day they were said
("my sister's wedding is this Saturday"), and facts that change later ("I just moved to
Berlin" ... "we moved again, to Lisbon"; some users change jobs too).

Questions, of four kinds, each name the turns that answer them (agent_id, index in
`contents`, content) and the answer string a memory could carry instead:

- `single`  one planted fact ("What is my cat's name?");
- `two`     two facts from different turns, both needed ("What are my cat's and dog's names?");
- `when`    a dated event, answered by an absolute date (2025-03-15) resolved from the turn's day;
- `changed` a fact that changed later, answered by its latest value and the turn that said it.

`Evidence.found_in(text)` is the hit test: the answering turn's content, or one of the answer's
renderings, appears in `text` (whitespace collapsed, case folded). A question is answered when
every one of its evidence items is found.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

LANGUAGES = ("en", "zh")
KINDS = ("single", "two", "when", "changed")
CHARACTERS = ("luna", "atlas", "mira")
CONFUSERS = 0.25  # share of small-talk turns that are near misses
EPOCH = dt.date(2025, 1, 6)  # a Monday; each user starts within the following month

# -- what gets planted -------------------------------------------------------------------------

POOLS: dict[str, dict[str, list[Any]]] = {
    "en": {
        "species": ["cat", "dog", "rabbit", "parrot", "hamster", "tortoise"],
        "pet_name": ["Miso", "Pumpkin", "Noodle", "Juniper", "Waffles", "Pickle", "Clementine", "Ziggy",
                     "Marble", "Sprocket", "Hazel", "Nimbus", "Pretzel", "Gizmo", "Paprika"],
        "sibling": [("sister", "she", ["Anna", "Clara", "Priya", "Sofia", "Ingrid", "Maya", "Greta"]),
                    ("brother", "he", ["Tomas", "Marco", "Rahul", "Jonas", "Felix", "Diego", "Callum"])],
        "sibling_job": ["architect", "paramedic", "pastry chef", "marine biologist", "lawyer", "pilot",
                        "veterinarian", "firefighter"],
        "job": ["nurse", "teacher", "accountant", "graphic designer", "electrician", "pharmacist",
                "journalist", "barista", "data analyst", "librarian", "physiotherapist", "carpenter"],
        "city": ["Berlin", "Lisbon", "Toronto", "Osaka", "Melbourne", "Edinburgh", "Denver", "Prague",
                 "Auckland", "Montreal", "Seattle", "Copenhagen"],
        "food": ["ramen", "lasagna", "bibimbap", "paella", "dumplings", "falafel", "tiramisu", "shakshuka",
                 "risotto", "tacos al pastor"],
        "hobby": ["pottery", "bouldering", "birdwatching", "chess", "salsa dancing", "woodworking",
                  "knitting", "kayaking", "archery", "beekeeping"],
    },
    "zh": {
        "species": ["猫", "狗", "兔子", "鹦鹉", "仓鼠", "乌龟"],
        "pet_name": ["团子", "年糕", "可乐", "花卷", "布丁", "芝麻", "汤圆", "球球", "馒头", "雪碧",
                     "饭团", "麻薯", "毛毛", "阿福", "糖糖"],
        "sibling": [("姐姐", "她", ["小雨", "晓琳", "思思", "佳怡", "婉清", "若曦", "梦瑶"]),
                    ("哥哥", "他", ["子轩", "浩然", "俊杰", "明宇", "天佑", "志远", "博文"])],
        "sibling_job": ["建筑师", "急救员", "甜点师", "海洋生物学家", "律师", "飞行员", "兽医", "消防员"],
        "job": ["护士", "小学老师", "会计", "平面设计师", "电工", "药剂师", "记者", "咖啡师", "数据分析师",
                "图书管理员", "康复治疗师", "木匠"],
        "city": ["成都", "杭州", "深圳", "厦门", "西安", "青岛", "大理", "苏州", "南京", "昆明", "哈尔滨",
                 "长沙"],
        "food": ["火锅", "小笼包", "麻辣烫", "北京烤鸭", "酸菜鱼", "煎饼果子", "肠粉", "兰州拉面", "螺蛳粉",
                 "生煎包"],
        "hobby": ["陶艺", "攀岩", "观鸟", "围棋", "萨尔萨舞", "木工", "织毛衣", "皮划艇", "射箭", "养蜂"],
    },
}  # fmt: skip

# Statement templates (the user's turn) and the question asked about each.
SAY = {
    "en": {
        "pet1": "By the way, I finally adopted a {species}, {pron2} name is {name}.",
        "pet2": "We have a second pet now! A little {species} called {name}.",
        "sibling": "My {rel} {name} is coming to stay with me for a few days.",
        "sibling_job": "{name} just told me {pron} got a job as {a_job}, {pron} is thrilled.",
        "job": "Work was long today, being {a_job} is tiring sometimes.",
        "job2": "Big news: I quit my old job, I'm working as {a_job} now.",
        "city": "I just moved to {city}, the flat is still full of boxes.",
        "city2": "We moved again, to {city} this time, and I hope it's for good.",
        "food": "Honestly, my favourite food in the whole world is {food}.",
        "hobby": "I've taken up {hobby} on weekends and I absolutely love it.",
    },
    "zh": {
        "pet1": "跟你说，我终于领养了一只{species}，名字叫{name}。",
        "pet2": "我们家又多了一只{species}，叫{name}，特别可爱。",
        "sibling": "我{rel}{name}这几天要来我这儿住。",
        "sibling_job": "{name}刚告诉我{pron}找到了一份{job}的工作，高兴坏了。",
        "job": "今天上班好累，当{job}有时候真的很辛苦。",
        "job2": "告诉你个大消息：我辞职了，现在在做{job}。",
        "city": "我刚搬到{city}，家里还堆满了箱子。",
        "city2": "我们又搬家了，这次搬到了{city}，希望不用再搬了。",
        "food": "说真的，我最喜欢吃的就是{food}。",
        "hobby": "我最近周末开始学{hobby}，特别喜欢。",
    },
}
ASK = {
    "en": {
        "pet1": "What is my {species}'s name?",
        "sibling": "What is my {rel}'s name?",
        "job": "What do I do for a living?",
        "food": "What is my favourite food?",
        "hobby": "Which hobby did I take up on weekends?",
        "pets": "What are the names of my {species1} and my {species2}?",
        "sibling_job": "What is my {rel}'s name, and what job did {pron} get?",
        "city": "Which city do I live in now?",
        "job2": "What is my job now?",
    },
    "zh": {
        "pet1": "我的{species}叫什么名字？",
        "sibling": "我{rel}叫什么名字？",
        "job": "我是做什么工作的？",
        "food": "我最喜欢吃什么？",
        "hobby": "我周末开始学的爱好是什么？",
        "pets": "我的{species1}和{species2}分别叫什么名字？",
        "sibling_job": "我{rel}叫什么名字，{pron}找到了什么工作？",
        "city": "我现在住在哪个城市？",
        "job2": "我现在做什么工作？",
    },
}
# Dated events: (statement with {when}, question, future?). {rel} is the user's sibling.
EVENTS = {
    "en": [
        ("My {rel}'s wedding is {when}, and I still haven't bought a present.", "When is my {rel}'s wedding?", True),
        ("I have a job interview at a bank {when} and I'm nervous.", "When is my job interview at the bank?", True),
        ("I booked a dentist appointment for {when}, finally.", "When is my dentist appointment?", True),
        ("I ran my first half marathon {when}, my legs still hurt.", "When did I run my first half marathon?", False),
        ("I saw my favourite band live {when}, it was amazing.", "When did I see my favourite band live?", False),
        ("I passed my driving test {when}!", "When did I pass my driving test?", False),
    ],
    "zh": [
        ("我{rel}的婚礼定在{when}，我还没买礼物呢。", "我{rel}的婚礼是哪天？", True),
        ("我{when}要去一家银行面试，有点紧张。", "我去银行面试是哪天？", True),
        ("我约了{when}去看牙医，终于下决心了。", "我哪天去看牙医？", True),
        ("我{when}跑了人生第一个半程马拉松，腿到现在还疼。", "我是哪天跑的第一个半程马拉松？", False),
        ("我{when}去看了最喜欢的乐队的演唱会，太棒了。", "我是哪天去看的乐队演唱会？", False),
        ("我{when}通过了驾照考试！", "我是哪天通过驾照考试的？", False),
    ],
}  # fmt: skip
# Relative expressions: (text, days) or (text, ("weekday", n)) resolved against the day said.
FUTURE = {
    "en": [("tomorrow", 1), ("the day after tomorrow", 2), ("in ten days", 10), ("in two weeks", 14),
           ("this Saturday", ("this", 5)), ("next Friday", ("next_week", 4))],
    "zh": [("明天", 1), ("后天", 2), ("十天后", 10), ("两周后", 14), ("下周六", ("next_week", 5)),
           ("下周三", ("next_week", 2))],
}  # fmt: skip
PAST = {
    "en": [("yesterday", -1), ("the day before yesterday", -2), ("three days ago", -3), ("a week ago", -7),
           ("two weeks ago", -14), ("last Sunday", ("last", 6))],
    "zh": [("昨天", -1), ("前天", -2), ("三天前", -3), ("一周前", -7), ("两周前", -14),
           ("上周五", ("last_week", 4))],
}  # fmt: skip

# -- small talk ---------------------------------------------------------------------------------

SMALL_TALK = {
    "en": {
        "user": [
            "The weather has been {weather} all week.",
            "I watched a documentary about {topic} last night.",
            "Can you tell me a fun fact about {topic}?",
            "What should I make for dinner? I have {ingredients}.",
            "I'm so tired today, I barely slept.",
            "Recommend me a podcast about {topic}, please.",
            "Traffic was terrible this morning.",
            "I think I'll go for a walk after this.",
            "Do you know any good jokes?",
            "How do I get better at waking up early?",
            "A coworker brought cake to the office today.",
            "I'm trying to drink more water these days.",
            "What's the difference between {thing_a} and {thing_b}?",
            "My phone battery dies so fast lately.",
            "I need a gift idea for a colleague who is leaving.",
            "Should I repaint the kitchen {colour}?",
            "I keep forgetting to water the plants.",
            "Tell me something cheerful, it's been a {weather} day.",
            "Haha, okay.",
            "Thanks, that helps.",
            "Hmm, let me think about it.",
            "Yes, exactly!",
            "Not really, no.",
            "Anyway, what were we talking about?",
        ],
        "assistant": [
            "That sounds like quite a day. Want to tell me more?",
            "Here's one: {topic} are more interesting than most people think.",
            "You could make a quick stir-fry with {ingredients}; it takes fifteen minutes.",
            "A short walk is a great idea, fresh air helps.",
            "Why did the scarecrow win an award? Because he was outstanding in his field.",
            "Try going to bed fifteen minutes earlier each week, and keep the phone out of reach.",
            "Small habits add up, you're doing well.",
            "Good question! The main difference between {thing_a} and {thing_b} is how they are made.",
            "That's frustrating. Maybe check which apps run in the background.",
            "A nice notebook and a handwritten card are always appreciated.",
            "{colour} would make the kitchen feel brighter, I think.",
            "A reminder on your phone twice a week might do the trick.",
            "I'm glad. Anything else on your mind?",
            "Of course. Take your time.",
            "I hear you. Let's take it one step at a time.",
            "Ha, I like that.",
        ],
        # Near misses: other people's pets, jobs, cities and dates, in the planted statements' words.
        "confuser": [
            "My neighbour's {species} {other_pet} kept me up half the night.",
            "My colleague {person} is moving to {other_city} next month.",
            "My friend {person} just started working as {other_job}.",
            "We had {other_food} at a new place near the station, it was okay.",
            "My cousin {person} has a {species} called {other_pet}.",
            "{person}'s birthday party is on Friday, I might go.",
            "I used to live in {other_city} when I was a kid.",
            "I tried {other_hobby} once, but it wasn't for me.",
            "My boss flew to {other_city} for a conference yesterday.",
            "My friend {person}'s wedding was lovely, we danced all night.",
        ],
        "species": POOLS["en"]["species"],
        "person": ["Ben", "Olivia", "Hugo", "Nadia", "Victor", "Leah", "Oscar", "Ruth"],
        "other_pet": ["Rocky", "Bella", "Charlie", "Daisy", "Oreo", "Buster"],
        "other_city": ["Vienna", "Madrid", "Dublin", "Chicago", "Oslo", "Nairobi", "Hanoi"],
        "other_job": ["a dentist", "an optician", "a plumber", "a chemist", "a tour guide"],
        "other_food": ["sushi", "curry", "burgers", "pizza"],
        "other_hobby": ["surfing", "golf", "oil painting", "yoga"],
        "weather": ["rainy", "grey", "surprisingly warm", "windy", "freezing", "sunny"],
        "topic": ["octopuses", "the moon", "volcanoes", "honeybees", "the Roman empire", "jazz",
                  "deep sea fish", "glaciers", "old lighthouses", "comets"],
        "ingredients": ["eggs and spinach", "some rice and peppers", "potatoes and onions",
                        "chickpeas and tomatoes", "leftover chicken"],
        "thing_a": ["baking soda", "a latte", "a violin", "weather", "a crocodile"],
        "thing_b": ["baking powder", "a cappuccino", "a viola", "climate", "an alligator"],
        "colour": ["yellow", "sage green", "light blue", "white"],
    },
    "zh": {
        "user": [
            "这一周天气都{weather}。",
            "我昨晚看了一部关于{topic}的纪录片。",
            "给我讲一个关于{topic}的冷知识吧。",
            "今晚吃什么好呢？家里有{ingredients}。",
            "今天好困，昨晚几乎没睡。",
            "推荐一个讲{topic}的播客吧。",
            "早上堵车堵得厉害。",
            "聊完我想出去散散步。",
            "你会讲笑话吗？",
            "怎么才能早点起床啊？",
            "同事今天带了蛋糕到办公室。",
            "我最近在努力多喝水。",
            "{thing_a}和{thing_b}有什么区别？",
            "我的手机最近特别耗电。",
            "有个同事要离职了，送什么礼物好？",
            "厨房要不要刷成{colour}？",
            "我老是忘记给植物浇水。",
            "说点开心的吧，今天天气{weather}。",
            "哈哈，好吧。",
            "谢谢，这个有用。",
            "嗯，让我想想。",
            "对，就是这样！",
            "也不算吧。",
            "对了，我们刚才聊到哪儿了？",
        ],
        "assistant": [
            "听起来今天挺不容易的，想多聊聊吗？",
            "说一个吧：{topic}其实比大多数人想的更有意思。",
            "可以用{ingredients}做个快手小炒，十五分钟就好。",
            "出去走走是个好主意，呼吸点新鲜空气。",
            "为什么稻草人得奖了？因为它在田里很出众。",
            "每周提早十五分钟睡觉，把手机放远一点。",
            "小习惯会慢慢积累起来的，你做得很好。",
            "好问题！{thing_a}和{thing_b}主要是做法不一样。",
            "真烦人。可以看看哪些应用在后台运行。",
            "一本好看的笔记本加一张手写卡片，总是很受欢迎。",
            "刷成{colour}会让厨房更明亮。",
            "在手机上设个一周两次的提醒也许有用。",
            "太好了。还有什么想聊的吗？",
            "当然，不着急。",
            "我明白，我们一步一步来。",
            "哈，我喜欢。",
        ],
        "confuser": [
            "邻居家的{species}{other_pet}昨晚吵了我半夜。",
            "我同事{person}下个月要搬去{other_city}。",
            "我朋友{person}刚开始当{other_job}。",
            "我们在车站附近一家新店吃了{other_food}，还行吧。",
            "我表妹{person}养了一只{species}，叫{other_pet}。",
            "{person}周五过生日，我可能会去。",
            "我小时候在{other_city}住过。",
            "我试过一次{other_hobby}，不太适合我。",
            "老板昨天飞去{other_city}开会了。",
            "我朋友{person}的婚礼特别温馨，我们跳了一晚上舞。",
        ],
        "species": POOLS["zh"]["species"],
        "person": ["阿杰", "丽丽", "老王", "小周", "美玲", "大伟"],
        "other_pet": ["旺财", "小黑", "咪咪", "豆包", "大黄"],
        "other_city": ["上海", "广州", "武汉", "重庆", "天津", "沈阳"],
        "other_job": ["牙医", "水管工", "化学老师", "导游"],
        "other_food": ["寿司", "咖喱饭", "汉堡", "披萨"],
        "other_hobby": ["冲浪", "高尔夫", "画油画", "瑜伽"],
        "weather": ["阴沉沉的", "在下雨", "出奇地暖和", "风很大", "特别冷", "很晴朗"],
        "topic": ["章鱼", "月亮", "火山", "蜜蜂", "罗马帝国", "爵士乐", "深海鱼", "冰川", "老灯塔", "彗星"],
        "ingredients": ["鸡蛋和菠菜", "米饭和青椒", "土豆和洋葱", "鹰嘴豆和西红柿", "剩下的鸡肉"],
        "thing_a": ["小苏打", "拿铁", "小提琴", "天气", "鳄鱼"],
        "thing_b": ["泡打粉", "卡布奇诺", "中提琴", "气候", "短吻鳄"],
        "colour": ["黄色", "灰绿色", "浅蓝色", "白色"],
    },
}  # fmt: skip
ACKNOWLEDGE = {
    "en": ["Oh, that's lovely to hear!", "Wow, that's big news. How do you feel about it?",
           "I'll remember that.", "That sounds wonderful.", "Good luck, I'm sure it will go well!",
           "Tell me more about it sometime."],
    "zh": ["真好，听到这个很开心！", "哇，这可是大新闻，你感觉怎么样？", "我记住了。", "听起来很棒。",
           "祝你顺利，一定没问题的！", "有空多跟我讲讲。"],
}  # fmt: skip


# -- the data set --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """A turn by its session (`agent_id`), its index in that session's `contents`, and its text."""

    agent_id: str
    index: int
    content: str


@dataclass(frozen=True)
class Evidence:
    """One thing a question needs: the turn that says it, or the answer in any of its renderings."""

    turn: Turn
    answers: tuple[str, ...]

    def found_in(self, normalized_text: str) -> bool:
        """`normalized_text` (from `normalize`) holds the turn's content or one of the answers."""
        if normalize(self.turn.content) in normalized_text:
            return True
        return any(normalize(answer) in normalized_text for answer in self.answers)


@dataclass(frozen=True)
class Question:
    user_id: str
    character_id: str
    language: str
    kind: str
    text: str
    answer: str
    evidence: tuple[Evidence, ...]

    def answered_by(self, text: str) -> bool:
        """Every evidence item is in `text` (a turn's content or the answer)."""
        normalized = normalize(text)
        return all(item.found_in(normalized) for item in self.evidence)


@dataclass
class User:
    user_id: str
    character_id: str
    language: str
    sessions: list[dict[str, Any]] = field(default_factory=list)  # Agora 103 payloads, oldest first
    questions: list[Question] = field(default_factory=list)


def normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def date_renderings(day: dt.date, language: str) -> tuple[str, ...]:
    """The ways a memory might write an absolute date."""
    iso = day.isoformat()
    if language == "zh":
        return (iso, f"{day.year}年{day.month}月{day.day}日")
    return (iso, f"{day.strftime('%B')} {day.day}, {day.year}", f"{day.day} {day.strftime('%B')} {day.year}")


def resolve(said: dt.date, offset: int | tuple[str, int]) -> dt.date | None:
    """The day a relative expression means when said on `said` (None: ambiguous that day)."""
    if isinstance(offset, int):
        return said + dt.timedelta(days=offset)
    how, weekday = offset
    monday = said - dt.timedelta(days=said.weekday())
    if how == "this":  # "this Saturday": later the same Monday-week; only said before that day
        return monday + dt.timedelta(days=weekday) if said.weekday() < weekday else None
    if how == "next_week":  # "next Friday", 下周X: that day of the following Monday-week
        return monday + dt.timedelta(days=7 + weekday)
    if how == "last":  # "last Sunday": the most recent one before today, within the past week
        back = (said.weekday() - weekday) % 7 or 7
        return said - dt.timedelta(days=back)
    if how == "last_week":  # 上周X: that day of the previous Monday-week
        return monday - dt.timedelta(days=7 - weekday)
    raise ValueError(how)


def article(noun: str) -> str:
    """'an architect', 'a pilot' (English; other languages ignore the slot)."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def fill(template: str, rng: random.Random, pools: dict[str, list[Any]]) -> str:
    """Replace each {slot} with a random choice from the pool of that name."""
    return re.sub(r"\{(\w+)\}", lambda m: str(rng.choice(pools[m.group(1)])), template)


def plan_user(rng: random.Random, language: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The user's persona and the statements to plant: dicts with a key, text slots and ordering."""
    pools = POOLS[language]
    species1, species2 = rng.sample(pools["species"], 2)
    name1, name2 = rng.sample(pools["pet_name"], 2)
    rel, pron, names = rng.choice(pools["sibling"])
    sibling = rng.choice(names)
    job1, job2 = rng.sample(pools["job"], 2)
    city1, city2 = rng.sample(pools["city"], 2)
    persona = {
        "species1": species1, "name1": name1, "species2": species2, "name2": name2,
        "rel": rel, "pron": pron, "sibling": sibling, "sibling_job": rng.choice(pools["sibling_job"]),
        "job1": job1, "job2": job2 if rng.random() < 0.5 else None, "city1": city1, "city2": city2,
        "food": rng.choice(pools["food"]), "hobby": rng.choice(pools["hobby"]),
    }  # fmt: skip
    future = [e for e in EVENTS[language] if e[2]]
    past = [e for e in EVENTS[language] if not e[2]]
    events = [rng.choice(future), rng.choice(past)]
    return persona, events


def generate_user(
    index: int,
    language: str,
    rng: random.Random,
    *,
    sessions: tuple[int, int] = (8, 15),
    exchanges: tuple[int, int] = (15, 30),
) -> User:
    user = User(f"r-{language}-{index:03d}", CHARACTERS[index % len(CHARACTERS)], language)
    say, ask = SAY[language], ASK[language]
    persona, events = plan_user(rng, language)
    pron2 = rng.choice(("her", "his"))
    n_sessions = max(rng.randint(*sessions), 4)

    # Session days, spread over four to six months.
    span = rng.randint(120, 180)
    start = EPOCH + dt.timedelta(days=rng.randrange(30))
    offsets = sorted(rng.sample(range(1, span), n_sessions - 1))
    days = [start, *(start + dt.timedelta(days=o) for o in offsets)]

    # Which session each statement goes into (orderings: city1 < city2, sibling < sibling_job...).
    def pick(lo: int, hi: int) -> int:
        return rng.randint(lo, max(lo, hi))

    last = n_sessions - 1
    slot: dict[str, int] = {}
    slot["city"] = pick(0, last // 3)
    slot["city2"] = pick(slot["city"] + 2, last)
    slot["sibling"] = pick(0, last - 2)
    slot["sibling_job"] = pick(slot["sibling"] + 1, last)
    slot["pet1"] = pick(0, last - 1)
    slot["pet2"] = pick(slot["pet1"] + 1, last)
    slot["job"] = pick(0, last // 2)
    if persona["job2"]:
        slot["job2"] = pick(slot["job"] + 2, last)
    slot["food"] = pick(0, last)
    slot["hobby"] = pick(0, last)
    statements: dict[str, str] = {
        "pet1": say["pet1"].format(species=persona["species1"], name=persona["name1"], pron2=pron2),
        "pet2": say["pet2"].format(species=persona["species2"], name=persona["name2"]),
        "sibling": say["sibling"].format(rel=persona["rel"], name=persona["sibling"]),
        "sibling_job": say["sibling_job"].format(name=persona["sibling"], pron=persona["pron"],
                                                 job=persona["sibling_job"], a_job=article(persona["sibling_job"])),
        "job": say["job"].format(job=persona["job1"], a_job=article(persona["job1"])),
        "city": say["city"].format(city=persona["city1"]),
        "city2": say["city2"].format(city=persona["city2"]),
        "food": say["food"].format(food=persona["food"]),
        "hobby": say["hobby"].format(hobby=persona["hobby"]),
    }  # fmt: skip
    if persona["job2"]:
        statements["job2"] = say["job2"].format(job=persona["job2"], a_job=article(persona["job2"]))
    # Dated events: a session on whose day the expression is unambiguous.
    dated: list[tuple[str, str, dt.date]] = []  # (key, question, the day meant)
    for number, (template, question, is_future) in enumerate(events):
        key = f"event{number}"
        for _ in range(50):
            session = rng.randrange(n_sessions)
            phrase, offset = rng.choice((FUTURE if is_future else PAST)[language])
            meant = resolve(days[session], offset)
            if meant is not None:
                break
        assert meant is not None
        slot[key] = session
        statements[key] = template.format(rel=persona["rel"], when=phrase)
        dated.append((key, question.format(rel=persona["rel"]), meant))

    # Build the sessions: small talk with the statements at random user turns.
    small = SMALL_TALK[language]
    placed: dict[str, Turn] = {}
    for number, day in enumerate(days):
        agent_id = f"recall-{user.user_id}-{number:02d}-{rng.getrandbits(32):08x}"
        mine = [key for key, s in slot.items() if s == number]
        rng.shuffle(mine)
        count = max(rng.randint(*exchanges), len(mine) + 2)
        positions = sorted(rng.sample(range(1, count), len(mine)))
        at_plant = dict(zip(positions, mine, strict=False))
        at = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
        at += rng.randint(9 * 3600, 15 * 3600) * 1000  # 09:00-15:00 UTC: the same day anywhere near
        start_ms = at
        contents: list[dict[str, Any]] = []
        for turn in range(count):
            key = at_plant.get(turn)
            if key is not None:
                user_text = statements[key]
                reply = rng.choice(ACKNOWLEDGE[language])
            else:
                lines = small["confuser"] if rng.random() < CONFUSERS else small["user"]
                user_text = fill(rng.choice(lines), rng, small)
                reply = fill(rng.choice(small["assistant"]), rng, small)
            at += rng.randint(3000, 20000)
            if key is not None:
                placed[key] = Turn(agent_id, len(contents), user_text)
            contents.append({"role": "user", "content": user_text, "turn_id": turn + 1, "timestamp": at,
                             "metadata": {"source": "asr"}})  # fmt: skip
            at += rng.randint(1500, 8000)
            contents.append({"role": "assistant", "content": reply, "turn_id": turn + 1, "timestamp": at,
                             "metadata": {"source": "llm"}})  # fmt: skip
        user.sessions.append(
            {
                "agent_id": agent_id,
                "name": f"agent-{user.user_id}-{number}",
                "channel": f"room-{user.user_id}-{number}",
                "start_ts": start_ms // 1000,
                "stop_ts": at // 1000 + 2,
                "contents": contents,
                "labels": {"user_id": user.user_id, "character_id": user.character_id},
            }
        )
    missing = set(slot) - set(placed)
    assert not missing, f"statements not placed: {missing}"

    def question(kind: str, text: str, *items: tuple[str, tuple[str, ...]]) -> Question:
        evidence = tuple(Evidence(placed[key], answers) for key, answers in items)
        answer = " / ".join(answers[0] for _, answers in items)
        return Question(user.user_id, user.character_id, language, kind, text, answer, evidence)

    p = persona
    qs = [
        question("single", ask["pet1"].format(species=p["species1"]), ("pet1", (p["name1"],))),
        question("single", ask["sibling"].format(rel=p["rel"]), ("sibling", (p["sibling"],))),
        question("single", ask["food"], ("food", (p["food"],))),
        question("single", ask["hobby"], ("hobby", (p["hobby"],))),
        question("two", ask["pets"].format(species1=p["species1"], species2=p["species2"]),
                 ("pet1", (p["name1"],)), ("pet2", (p["name2"],))),
        question("two", ask["sibling_job"].format(rel=p["rel"], pron=p["pron"]),
                 ("sibling", (p["sibling"],)), ("sibling_job", (p["sibling_job"],))),
        *(question("when", text, (key, date_renderings(meant, language))) for key, text, meant in dated),
        question("changed", ask["city"], ("city2", (p["city2"],))),
    ]  # fmt: skip
    if p["job2"]:
        qs.append(question("changed", ask["job2"], ("job2", (p["job2"],))))
    else:
        qs.append(question("single", ask["job"], ("job", (p["job1"],))))
    user.questions = qs
    return user


def generate(
    users: int = 20,
    *,
    languages: tuple[str, ...] = LANGUAGES,
    seed: int = 7,
    sessions: tuple[int, int] = (8, 15),
    exchanges: tuple[int, int] = (15, 30),
) -> list[User]:
    """`users` users per language, each with `sessions` (a range) sessions of `exchanges` (a range)
    user/assistant exchanges, oldest first, and their questions."""
    out = []
    for language in languages:
        rng = random.Random(f"{seed}:{language}")
        out.extend(
            generate_user(index, language, rng, sessions=sessions, exchanges=exchanges)
            for index in range(users)
        )
    return out


def collisions(users: list[User]) -> list[str]:
    """Answers that also appear in a turn other than the ones naming them (a false hit risk)."""
    problems = []
    for user in users:
        answering = {item.turn.content for q in user.questions for item in q.evidence}
        others = [
            normalize(m["content"])
            for s in user.sessions
            for m in s["contents"]
            if m["content"] not in answering
        ]
        for q in user.questions:
            for item in q.evidence:
                for answer in item.answers:
                    if any(normalize(answer) in text for text in others):
                        problems.append(f"{user.user_id}: {answer!r} ({q.text})")
    return problems


def as_json(users: list[User]) -> list[dict[str, Any]]:
    """The data set as plain JSON (sessions and questions per user)."""
    return [asdict(user) for user in users]


if __name__ == "__main__":
    import json
    import sys

    data = generate(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
    json.dump(as_json(data), sys.stdout, ensure_ascii=False, indent=1)
