"""A hard, synthetic memory data set: long lives told over many calls, asked about in other words.

    from recall_hard_data import generate
    data = generate(en=8, zh=4, seed=11)

Synthetic and deterministic: every user is drawn by a seeded `random.Random` from the pools
and templates below (no outside data; written for this project, not taken from any benchmark).
Each user talks with one character over `sessions` calls (default 10-13) on different dates
spread over about five months, `exchanges` user/assistant exchanges each (default 22-30): some
500-700 turns per user, mostly chit-chat (bench/recall_data.py's small talk plus the fillers
below). Planted among it, in one of several phrasings each, are the facts of a life: a pet
adopted, a second pet later, the workplace, a hometown, a comfort food, a sport, two trips, a
dated race and a dated move, a relative's job and pet, a friend's move, a diet and an allergy.
Distractors share words with the answers without holding them (the sister's cat beside my cat,
a friend's workplace beside mine, someone else's race).

Questions, tagged by type, are worded apart from their evidence (a question never quotes its
statement; several wordings each):

- `single`       one fact, paraphrased ("What did I name the animal I adopted?");
- `multi`        two turns from different sessions ("Name both of my pets.");
- `temporal`     "when" / "how long ago": the gold is the date (or weeks) resolved from the day
                 the turn was said ("yesterday" said on 16 March 2025 -> "15 March 2025");
- `other_person` what the user said about a named relative or friend;
- `inference`    a judgement the user's statement supports ("Would a steakhouse suit me?").

`Question.answered_by(text)` is the held-out rule: the gold answer, or the first 60 characters of
every evidence turn, appears in `text` (both lowercased, punctuation folded to spaces).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from recall_data import SMALL_TALK, Turn

TYPES = ("single", "multi", "temporal", "other_person", "inference")
LANGUAGES = ("en", "zh")
CHARACTERS = {"en": ("Luna", "Atlas"), "zh": ("小月", "阿树")}
EPOCH = dt.date(2025, 2, 3)

POOLS: dict[str, dict[str, list[str]]] = {
    "en": {
        "me": ["Sam", "Jordan", "Alex", "Robin", "Casey", "Morgan", "Jamie", "Taylor"],
        "species": ["cat", "dog", "rabbit"],
        "pet": ["Miso", "Pumpkin", "Noodle", "Juniper", "Waffles", "Pickle", "Ziggy", "Sprocket", "Paprika"],
        "rel": ["sister", "cousin"],
        "relname": ["Priya", "Ingrid", "Clara", "Greta", "Maya", "Sofia"],
        "friend": ["Marcus", "Oskar", "Lionel", "Hugo", "Tariq", "Ben"],
        "work": ["Harbour Street Bakery", "Riverside Clinic", "Kestrel Logistics", "the Quayside Library",
                 "Northgate Pharmacy", "Brightwater Studios"],
        "relwork": ["marine biologist", "air traffic controller", "sommelier", "locksmith", "midwife",
                    "cartographer"],
        "hometown": ["Galway", "Bruges", "Tromso", "Valparaiso", "Hobart", "Timisoara"],
        "fcity": ["Reykjavik", "Montevideo", "Ljubljana", "Tallinn", "Cusco"],
        "food": ["laksa", "moussaka", "pierogi", "jambalaya", "okonomiyaki", "goulash"],
        "sport": ["bouldering", "fencing", "rowing", "handball", "squash"],
        "trip": ["the Dolomites", "Marrakesh", "Kyoto", "the Azores", "Patagonia", "Sicily", "Lapland"],
        "diet": ["vegetarian"],
    },
    "zh": {
        "me": ["小林", "阿俊", "晓雯", "子涵"],
        "species": ["猫", "狗", "兔子"],
        "pet": ["团子", "年糕", "花卷", "布丁", "芝麻", "汤圆", "麻薯"],
        "rel": ["姐姐", "表姐", "妹妹"],
        "relname": ["思思", "佳怡", "晓琳", "若曦"],
        "friend": ["老周", "阿杰", "大伟", "小刚"],
        "work": ["云帆物流", "青禾书店", "南山社区医院", "明湖设计工作室"],
        "relwork": ["飞行员", "调酒师", "兽医", "口译员", "钢琴调音师"],
        "hometown": ["大理", "泉州", "景德镇", "喀什", "丹东"],
        "fcity": ["拉萨", "伊宁", "北海", "敦煌"],
        "food": ["螺蛳粉", "羊肉泡馍", "过桥米线", "肠粉", "热干面"],
        "sport": ["羽毛球", "击剑", "攀岩", "游泳"],
        "trip": ["稻城亚丁", "黄山", "西双版纳", "喀纳斯", "张家界", "鼓浪屿"],
        "diet": ["素食"],
    },
}  # fmt: skip

# Each fact: statements (the user's turn) in several phrasings. {…} slots come from the user.
STATE: dict[str, dict[str, list[str]]] = {
    "en": {
        "pet": ["We finally brought a little {species} home from the shelter, she's called {pet} and she's tiny.",
                "Guess who has a new flatmate? A rescue {species}, {pet}, asleep on my feet as we speak.",
                "So the adoption papers went through, {pet} the {species} is officially mine now."],
        "pet2": ["Well, the household grew again, meet {pet2}, a very loud young {species2}.",
                 "I caved and got a second animal, a {species2} named {pet2}, chaos ever since."],
        "work": ["Another double shift at {work} today, my feet are killing me.",
                 "They put me on the early rota at {work} again, so I was up at five."],
        "hometown": ["It's funny, back in {hometown} where I grew up nobody locked their doors.",
                     "My mum still lives in the house in {hometown} where I was born."],
        "food": ["Honestly when I'm sad the only thing that fixes it is a big bowl of {food}.",
                 "Made {food} from scratch tonight, it's the taste of being looked after."],
        "sport": ["Spent the whole Saturday at the {sport} club, my arms are jelly.",
                  "Coach says my {sport} is improving, I might enter the autumn league."],
        "trip1": ["Back from {trip1}! Sunburnt, broke and completely happy.",
                  "The week in {trip1} was the best holiday I've had in years."],
        "trip2": ["Just landed after ten days in {trip2}, still on holiday time.",
                  "Showing everyone my photos from {trip2}, I took about two thousand."],
        "race": ["My legs are dead, I ran the city half marathon {when} and finished in under two hours.",
                 "I did it, half marathon done {when}, medal is hanging on the fridge."],
        "move": ["We got the keys to the new flat {when}, it's all boxes and takeaway.",
                 "Moving day was {when}, the van was late but everything fits."],
        "relwork": ["{relname} got the job, she's going to be a {relwork}, we're all so proud.",
                    "Did I tell you my {rel} {relname} is training as a {relwork} now?"],
        "relpet": ["{relname}'s {species} {relpet} knocked her whole plant off the shelf again.",
                   "My {rel}'s {species}, {relpet}, is the laziest animal alive, she sleeps all day."],
        "friend": ["{friend} called, he's packing up and relocating to {fcity} for a research post.",
                   "Big farewell drinks for {friend} tonight, he leaves for {fcity} on Monday."],
        "diet": ["It's been a year since I gave up meat completely and I feel so much lighter.",
                 "I haven't eaten meat or fish since last spring, it's just not me anymore."],
        "allergy": ["Went to a friend's and my eyes swelled shut, turns out I'm badly allergic to horses.",
                    "Doctor confirmed it, a serious allergy to horses, even the stables set me off."],
    },
    "zh": {
        "pet": ["我们终于从救助站接回来一只小{species}，叫{pet}，特别小。",
                "跟你说，我家新来了一位室友：一只救助站的{species}，{pet}，现在正趴在我脚上睡觉。"],
        "pet2": ["家里又添了一口：{pet2}，一只特别吵的{species2}。",
                 "我还是没忍住，又养了一只{species2}，叫{pet2}，从此家里鸡飞狗跳。"],
        "work": ["今天在{work}又连上了两个班，脚都要断了。",
                 "{work}又把我排到早班了，五点就得起床。"],
        "hometown": ["说来好笑，在{hometown}我长大的地方，家家户户都不锁门。",
                     "我妈还住在{hometown}我出生的那栋老房子里。"],
        "food": ["说真的，心情不好的时候只有一大碗{food}能救我。",
                 "今晚自己从头做了{food}，就是被照顾的味道。"],
        "sport": ["整个周六都泡在{sport}馆里，胳膊已经抬不起来了。",
                  "教练说我的{sport}进步了，秋天可能去参加联赛。"],
        "trip1": ["从{trip1}回来了！晒黑了，钱包空了，但是超开心。",
                  "在{trip1}的那一周是我这几年最棒的假期。"],
        "trip2": ["刚从{trip2}玩了十天回来，人还在度假状态。",
                  "在给大家看{trip2}的照片，我拍了差不多两千张。"],
        "race": ["腿已经废了，我{when}跑了城市半程马拉松，两小时内完赛。",
                 "我做到了，{when}跑完了半马，奖牌挂在冰箱上。"],
        "move": ["我们{when}拿到了新房子的钥匙，家里全是箱子和外卖盒。",
                 "{when}搬的家，货车来晚了，不过东西都放得下。"],
        "relwork": ["{relname}拿到录用了，要去当{relwork}，全家都为她骄傲。",
                    "我跟你说过吗，我{rel}{relname}现在在培训当{relwork}。"],
        "relpet": ["{relname}家的{species}{relpet}又把她的花盆从架子上推下去了。",
                   "我{rel}养的{species}{relpet}是世界上最懒的动物，整天睡觉。"],
        "friend": ["{friend}打电话来，说他在收拾行李，要搬去{fcity}做研究了。",
                   "今晚给{friend}送行，他周一就去{fcity}了。"],
        "diet": ["我彻底不吃肉已经一年了，感觉整个人轻松多了。",
                 "从去年春天起我就没再吃过肉和鱼，真的不想吃了。"],
        "allergy": ["去朋友家玩，眼睛肿得睁不开，原来我对马严重过敏。",
                    "医生确诊了，对马严重过敏，连马厩都不能靠近。"],
    },
}  # fmt: skip

# Distractors: they share the answers' words (pet, shelter, shift, race, moving...) but not the answers.
DISTRACT: dict[str, list[str]] = {
    "en": [
        "My neighbour's {species} got out again and I chased it around the car park.",
        "The shelter posted pictures of a {species} nobody wants, it broke my heart.",
        "My friend {friend} hates his shifts at the warehouse, he wants to quit.",
        "{relname} ran a 10k last month and keeps telling everyone about it.",
        "My colleague is moving flats too, everyone seems to be moving this spring.",
        "I watched a show about people who travel for a whole year, imagine that.",
        "Someone at work keeps bringing fish curry and the whole office smells of it.",
        "{friend} grew up by the sea too, we compared childhood stories for hours.",
        "My {rel} says her job interview went well, fingers crossed for her.",
        "I walked past a riding school today, the kids on ponies looked so proud.",
        "The gym is offering a free trial class this weekend, might try something new.",
        "My boss asked if anyone wants to swap to the early rota next month.",
    ],
    "zh": [
        "邻居家的{species}又跑出来了，我在停车场追了它半天。",
        "救助站发了一只没人要的{species}的照片，看得我好难受。",
        "我朋友{friend}特别讨厌他在仓库的班，想辞职。",
        "{relname}上个月跑了个十公里，逢人就讲。",
        "我同事也在搬家，这个春天好像大家都在搬家。",
        "我看了个节目，讲一群人花一整年去旅行，真想象不到。",
        "单位有人天天带酸菜鱼，整个办公室都是那个味道。",
        "{friend}也是在海边长大的，我们聊了好几个小时小时候的事。",
        "我{rel}说她的面试挺顺利的，替她祈祷一下。",
        "今天路过一个马术学校，骑小马的孩子们好神气。",
        "健身房这周末有免费体验课，也许试试新东西。",
        "老板问下个月有没有人愿意换到早班。",
    ],
}
FILLER_EXTRA: dict[str, list[str]] = {
    "en": ["Sorry, I got distracted, what did you say?", "I spent ages choosing a new shower curtain today.",
           "Do you think it's weird to eat cereal for dinner?", "The bus driver wished everyone a good day, it was nice.",
           "I can't decide whether to cut my hair short.", "It's so quiet tonight, I like it."],
    "zh": ["不好意思刚走神了，你说什么？", "今天挑浴帘挑了好久。", "晚饭吃麦片是不是很奇怪？",
           "公交司机祝大家今天愉快，挺暖的。", "我在纠结要不要剪短发。", "今晚好安静，我喜欢。"],
}  # fmt: skip

# `filler="varied"`: everyday news of the user's own and of people around them, drawn from parts
# (thousands of combinations), so a line is seldom said twice. With the templates alone a user
# says ~90 distinct lines over ~300 turns and the planted statements are among the few said
# once: "the lines said once" answers every question within 1,500 tokens without reading it.
# In a real life nearly every line is new, and many sound as telling as the answers.
VARIED: dict[str, dict[str, list[str]]] = {
    "en": {
        "line": ["{who} {did} {when}, {feel}.", "I {act} {when}, {feel}.", "{who} and I {act2} {when}.",
                 "Did I mention {who} {did}?", "So {who} {did}, {feel}."],
        "who": ["Nadia from upstairs", "my neighbour Gus", "Ravi at the corner shop", "Elena from the choir",
                "my landlord", "Tom from the allotment", "the new barista", "Wendy next door", "my old teacher",
                "Kofi from the book swap", "Lena at the post office", "my dentist", "Pablo the plumber",
                "Irene from the running group", "our postman"],
        "did": ["brought round a lemon cake", "lost their keys again", "started learning the harp",
                "repainted the front door green", "won a raffle at the fete", "fixed the wobbly gate",
                "had a birthday picnic in the rain", "found a wallet on the tram", "got a new hedgehog feeder",
                "planted forty tulip bulbs", "signed up for a charity swim", "complained about the bins",
                "bought an enormous telescope", "passed a driving test", "sprained an ankle on the stairs"],
        "act": ["repotted the basil", "finally cleaned the oven", "tried a new ramen bar by the canal",
                "finished a jigsaw of a lighthouse", "sorted the recycling for an hour", "fixed a dripping tap",
                "watched the whole trilogy again", "baked far too many scones", "walked along the river path",
                "reorganised the bookshelf by colour", "wrote three postcards", "ironed every shirt I own",
                "went to a quiz night at the pub", "sewed a button back on my coat", "returned a parcel"],
        "act2": ["shared a taxi", "split a pizza", "argued about a crossword", "watched the match",
                 "walked the long way home", "queued for concert tickets", "fixed a puncture"],
        "when": ["this morning", "at lunch", "tonight", "after work", "earlier", "before the rain",
                 "on the way home", "around noon"],
        "feel": ["which made me laugh", "typical", "what a day", "I was impressed", "no idea why",
                 "it was oddly calming", "I'm still thinking about it", "never a dull moment"],
    },
    "zh": {
        "line": ["{who}{when}{did}，{feel}。", "我{when}{act}，{feel}。", "{when}我和{who}{act2}。",
                 "我说过吗，{who}{did}。"],
        "who": ["楼上的王阿姨", "邻居老李", "小卖部的阿强", "合唱团的陈姐", "房东", "菜园的刘叔",
                "新来的咖啡师", "隔壁的张奶奶", "以前的数学老师", "读书会的小吴", "邮局的李姐", "牙医",
                "修水管的师傅", "跑团的阿梅", "送快递的小哥"],
        "did": ["送来一块柠檬蛋糕", "又把钥匙弄丢了", "开始学竖琴", "把大门漆成了绿色", "在庙会抽中了奖",
                "修好了摇晃的院门", "在雨里办了生日野餐", "在电车上捡到一个钱包", "种了四十个郁金香球",
                "报名了慈善徒步", "抱怨垃圾桶太满", "买了一架巨大的望远镜", "考过了驾照", "下楼梯扭了脚"],
        "act": ["给罗勒换了盆", "终于把烤箱擦干净了", "试了河边新开的面馆", "拼完了一幅灯塔拼图",
                "整理了一小时垃圾分类", "修好了滴水的龙头", "又把三部曲看了一遍", "烤了太多司康",
                "沿着河边走了一圈", "按颜色重新排了书架", "写了三张明信片", "把衬衫全熨了一遍",
                "去酒吧参加了知识竞赛", "把外套扣子缝回去了", "退了一个快递"],
        "act2": ["拼了一辆出租车", "分了一个披萨", "为填字游戏争了半天", "一起看了球赛", "绕远路走回家",
                 "排队买演唱会门票", "一起补了个车胎"],
        "when": ["今天早上", "中午", "今晚", "下班后", "刚才", "下雨前", "回家路上"],
        "feel": ["把我笑坏了", "真是典型", "这一天啊", "我挺佩服的", "不知道为什么", "莫名很治愈",
                 "我现在还在想", "生活从不无聊"],
    },
}  # fmt: skip
VARIED_SHARE = 0.8  # of the small-talk lines the user says (the rest: the short templates, "Haha, okay.")


def varied_line(lang: str, rng: random.Random) -> str:
    """One everyday line drawn from `VARIED`'s parts."""
    parts = VARIED[lang]
    return re.sub(r"\{(\w+)\}", lambda m: rng.choice(parts[m.group(1)]), rng.choice(parts["line"]))


# Relative days said in a turn: (phrase, days from the day it was said).
PAST = {
    "en": [("yesterday", -1), ("two days ago", -2), ("three days ago", -3), ("a week ago", -7),
           ("on Saturday", None)],
    "zh": [("昨天", -1), ("前天", -2), ("三天前", -3), ("一周前", -7), ("上周六", None)],
}  # fmt: skip


@dataclass(frozen=True)
class Question:
    user_id: str
    character_id: str
    language: str
    type: str
    text: str
    answer: str
    evidence: tuple[Turn, ...]
    teller: str = "user"  # who told the answer: the user, or the character of itself

    def answered_by(self, text: str) -> bool:
        """The gold answer, or the first 60 characters of every evidence turn, is in `text`."""
        folded = fold(text)
        if fold(self.answer) and fold(self.answer) in folded:
            return True
        return all(fold(turn.content[:60]) in folded for turn in self.evidence)


@dataclass
class User:
    user_id: str
    character_id: str
    language: str
    name: str
    sessions: list[dict[str, Any]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def fold(text: str) -> str:
    """Lowercased, punctuation (anything not a letter or digit) folded to single spaces."""
    return " ".join(re.sub(r"[\W_]+", " ", text.lower()).split())


def render_date(day: dt.date, language: str) -> str:
    return f"{day.year}年{day.month}月{day.day}日" if language == "zh" else f"{day.day} {day:%B} {day.year}"


def weeks(days: int, language: str) -> str:
    n = max(1, round(days / 7))
    if language == "zh":
        return f"{n}周"
    return "1 week" if n == 1 else f"{n} weeks"


def questions_for(lang: str, p: dict[str, Any], rng: random.Random) -> dict[str, tuple[str, list[str]]]:
    """Per question key: its type and its wordings (none quotes the statement)."""
    if lang == "en":
        return {
            "pet": ("single", ["What did I name the animal I adopted?", "Remind me what my rescue pet is called?",
                               "What's the name of the creature I took in?"]),
            "work": ("single", ["Where am I employed these days?", "Which place do I work for?"]),
            "hometown": ("single", ["Which town am I originally from?", "Where did I spend my childhood?"]),
            "food": ("single", ["What dish cheers me up when I'm low?", "What's my comfort meal?"]),
            "sport": ("single", ["Which sport have I been training in?", "What do I practise at my club?"]),
            "pets": ("multi", ["Name both of the animals living with me.", "What names do my pets go by?"]),
            "trips": ("multi", ["Which places have I been on vacation to this year?",
                                "Where did my two vacations take me?"]),
            "race": ("temporal", ["On what date did I do my long-distance run?", "When did I do that 21-kilometre race?"]),
            "move": ("temporal", ["When did I move house?", "What day did we move into our new home?"]),
            "move_ago": ("temporal", ["How long ago did I move, counting back from our last chat?"]),
            "relwork": ("other_person", [f"What is {p['relname']} going to do for a living?",
                                         f"What career is my {p['rel']} heading into?"]),
            "relpet": ("other_person", [f"What is {p['relname']}'s animal called?",
                                        f"What's the name of my {p['rel']}'s pet?"]),
            "friend": ("other_person", [f"Where is {p['friend']} going to live?", f"Which city did {p['friend']} leave for?"]),
            "diet": ("inference", ["Would a steakhouse be a good pick for my birthday dinner?",
                                   "Should my friends plan a barbecue with burgers for me?"]),
            "allergy": ("inference", ["Would a pony-trekking weekend be a good gift for me?",
                                      "Is a horse-riding lesson a safe surprise for me?"]),
        }  # fmt: skip
    return {
        "pet": ("single", ["我收养的那只小动物叫什么？", "提醒我一下，我领回家的宠物名字是？"]),
        "work": ("single", ["我现在在哪里上班？", "我是在哪个单位工作的？"]),
        "hometown": ("single", ["我老家是哪里的？", "我小时候在哪儿长大？"]),
        "food": ("single", ["我难过的时候吃什么最治愈？", "我的安慰食物是什么？"]),
        "sport": ("single", ["我最近在练哪项运动？", "我在俱乐部练的是什么？"]),
        "pets": ("multi", ["跟我一起生活的两只动物分别叫什么？", "我家的宠物都叫什么名字？"]),
        "trips": ("multi", ["我今年去哪些地方度过假？", "我的两次旅行分别去了哪里？"]),
        "race": ("temporal", ["我的半马是哪天跑的？", "我是什么日期参加长跑比赛的？"]),
        "move": ("temporal", ["我是哪天搬家的？", "我们哪天住进新家的？"]),
        "move_ago": ("temporal", ["从我们最近一次聊天算起，我搬家是多久以前？"]),
        "relwork": ("other_person", [f"{p['relname']}以后要做什么工作？", f"我{p['rel']}要进入哪个行业？"]),
        "relpet": ("other_person", [f"{p['relname']}的宠物叫什么？", f"我{p['rel']}养的动物叫什么名字？"]),
        "friend": ("other_person", [f"{p['friend']}要去哪里生活？", f"{p['friend']}离开去了哪座城市？"]),
        "diet": ("inference", ["我过生日去牛排馆吃合适吗？", "朋友给我办烧烤派对，准备汉堡和烤肉合适吗？"]),
        "allergy": ("inference", ["送我一个骑马周末当礼物好吗？", "给我报个骑马体验课当惊喜安全吗？"]),
    }  # fmt: skip


def generate_user(index: int, lang: str, rng: random.Random, sessions: tuple[int, int],
                  exchanges: tuple[int, int], varied: random.Random | None = None) -> User:  # fmt: skip
    """One user's calls, planted facts and questions; with `varied` (its own generator, so the
    calls, plants and questions stay those of the templates) most small talk is `varied_line`s."""
    pools = POOLS[lang]
    species, species2 = rng.sample(pools["species"], 2)
    pets = rng.sample(pools["pet"], 3)
    trips = rng.sample(pools["trip"], 2)
    p: dict[str, Any] = {
        "species": species, "species2": species2, "pet": pets[0], "pet2": pets[1], "relpet": pets[2],
        "work": rng.choice(pools["work"]), "hometown": rng.choice(pools["hometown"]),
        "food": rng.choice(pools["food"]), "sport": rng.choice(pools["sport"]),
        "trip1": trips[0], "trip2": trips[1], "rel": rng.choice(pools["rel"]),
        "relname": rng.choice(pools["relname"]), "relwork": rng.choice(pools["relwork"]),
        "friend": rng.choice(pools["friend"]), "fcity": rng.choice(pools["fcity"]),
    }  # fmt: skip
    character = CHARACTERS[lang][index % 2]
    user = User(f"h-{lang}-{index:02d}", character.lower() if lang == "en" else f"c{index % 2}", lang,
                rng.choice(pools["me"]))  # fmt: skip
    n = rng.randint(*sessions)
    start = EPOCH + dt.timedelta(days=rng.randrange(20))
    days = [start + dt.timedelta(days=o) for o in sorted([0, *rng.sample(range(3, 150), n - 1)])]
    # Which session says what: the pair facts of `multi` questions in different sessions.
    slot = {key: rng.randrange(n) for key in STATE[lang]}
    slot["pet"] = rng.randrange(n // 2)
    slot["pet2"] = rng.randrange(n // 2 + 1, n)
    slot["trip1"] = rng.randrange(n // 2)
    slot["trip2"] = rng.randrange(n // 2 + 1, n)
    slot["move"] = rng.randrange(1, n - 1)  # not the last: "how long ago" counts from the last call
    said: dict[str, str] = {}
    meant: dict[str, dt.date] = {}
    for key in STATE[lang]:
        template = rng.choice(STATE[lang][key])
        when = ""
        if "{when}" in template:
            phrase, offset = rng.choice(PAST[lang])
            day = days[slot[key]]
            if offset is None:  # "on Saturday": the most recent Saturday before the day said
                offset = -((day.weekday() - 5) % 7 or 7)
            when, meant[key] = phrase, day + dt.timedelta(days=offset)
        said[key] = template.format(**p, when=when)
    small = SMALL_TALK[lang]
    users_lines = small["user"] + FILLER_EXTRA[lang]
    placed: dict[str, Turn] = {}
    for number, day in enumerate(days):
        agent_id = f"hard-{user.user_id}-{number:02d}-{rng.getrandbits(32):08x}"
        mine = [key for key, s in slot.items() if s == number]
        count = max(rng.randint(*exchanges), len(mine) + 2)
        at_plant = dict(zip(sorted(rng.sample(range(1, count), len(mine))), mine, strict=True))
        at = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
        at += rng.randint(9 * 3600, 15 * 3600) * 1000
        start_ms = at
        contents: list[dict[str, Any]] = []
        for turn in range(count):
            key = at_plant.get(turn)
            if key is not None:
                text = said[key]
            elif rng.random() < 0.15:
                text = rng.choice(DISTRACT[lang]).format(**p)
            else:
                text = re.sub(
                    r"\{(\w+)\}", lambda m: str(rng.choice(small[m.group(1)])), rng.choice(users_lines)
                )
                if varied is not None and varied.random() < VARIED_SHARE:
                    text = varied_line(lang, varied)
            reply = re.sub(
                r"\{(\w+)\}", lambda m: str(rng.choice(small[m.group(1)])), rng.choice(small["assistant"])
            )
            at += rng.randint(3000, 20000)
            if key is not None:
                placed[key] = Turn(agent_id, len(contents), text)
            contents.append({"role": "user", "content": text, "turn_id": turn + 1, "timestamp": at,
                             "metadata": {"source": "asr"}})  # fmt: skip
            at += rng.randint(1500, 8000)
            contents.append({"role": "assistant", "content": reply, "turn_id": turn + 1, "timestamp": at,
                             "metadata": {"source": "llm"}})  # fmt: skip
        user.sessions.append(session_payload(user, number, agent_id, start_ms, at, contents))
    sep = "、" if lang == "zh" else " and "
    gold = {
        "pet": (p["pet"], ("pet",)), "work": (p["work"], ("work",)), "hometown": (p["hometown"], ("hometown",)),
        "food": (p["food"], ("food",)), "sport": (p["sport"], ("sport",)),
        "pets": (f"{p['pet']}{sep}{p['pet2']}", ("pet", "pet2")),
        "trips": (f"{p['trip1']}{sep}{p['trip2']}", ("trip1", "trip2")),
        "race": (render_date(meant["race"], lang), ("race",)),
        "move": (render_date(meant["move"], lang), ("move",)),
        "move_ago": (weeks((days[-1] - meant["move"]).days, lang), ("move",)),
        "relwork": (p["relwork"], ("relwork",)), "relpet": (p["relpet"], ("relpet",)),
        "friend": (p["fcity"], ("friend",)),
        "diet": ("不合适，我不吃肉" if lang == "zh" else "no, I don't eat meat", ("diet",)),
        "allergy": ("不好，我对马过敏" if lang == "zh" else "no, I'm allergic to horses", ("allergy",)),
    }  # fmt: skip
    for key, (kind, wordings) in questions_for(lang, p, rng).items():
        answer, keys = gold[key]
        user.questions.append(Question(user.user_id, user.character_id, lang, kind, rng.choice(wordings),
                                       answer, tuple(placed[k] for k in keys)))  # fmt: skip
    return user


def session_payload(user: User, number: int, agent_id: str, start_ms: int, last_ms: int,
                    contents: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """One call of `user`'s as an Agora 103 payload (its number, run id, first and last moments)."""
    return {
        "agent_id": agent_id, "name": f"agent-{user.user_id}-{number}",
        "channel": f"room-{user.user_id}-{number}", "start_ts": start_ms // 1000,
        "stop_ts": last_ms // 1000 + 2, "contents": contents,
        "labels": {"user_id": user.user_id, "character_id": user.character_id},
    }  # fmt: skip


def generate(en: int = 8, zh: int = 4, *, seed: int = 11, sessions: tuple[int, int] = (10, 13),
             exchanges: tuple[int, int] = (22, 30), filler: str = "templates") -> list[User]:  # fmt: skip
    """`en` English and `zh` Chinese users, each with their calls (oldest first) and questions;
    `filler` "varied" draws most small talk from `VARIED` (see there), "templates" does not."""
    out: list[User] = []
    for lang, count in (("en", en), ("zh", zh)):
        rng = random.Random(f"hard:{seed}:{lang}")
        varied = random.Random(f"varied:{seed}:{lang}") if filler == "varied" else None
        out.extend(generate_user(i, lang, rng, sessions, exchanges, varied) for i in range(count))
    return out


def leaks(users: list[User]) -> list[str]:
    """Gold answers also said in a turn that is not their evidence (a free hit for any text)."""
    problems = []
    for user in users:
        turns = [(m["content"], fold(m["content"])) for s in user.sessions for m in s["contents"]]
        for q in user.questions:
            gold, evidence = fold(q.answer), {t.content for t in q.evidence}
            problems += [f"{user.user_id}: {q.answer!r} in {text[:60]!r}" for text, folded in turns
                         if gold in folded and text not in evidence]  # fmt: skip
    return problems


def as_json(users: list[User]) -> list[dict[str, Any]]:
    return [asdict(user) for user in users]


if __name__ == "__main__":
    import json
    import sys

    json.dump(as_json(generate(*(int(a) for a in sys.argv[1:3]))), sys.stdout, ensure_ascii=False, indent=1)
