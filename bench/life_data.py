"""Lives told at length: many details over many calls, by both speakers, asked about later.

    from life_data import generate
    data = generate(en=8, zh=4, seed=21)

Synthetic and deterministic (seeded `random.Random`; written for this project, not taken from
any benchmark). Where `recall_hard_data` plants some fifteen facts of a life among small talk,
which a start-of-call context of 1,500 tokens can hold whole, here each user talks with one
character over `sessions` calls (default 18-24, some eight months) of `exchanges` exchanges
(default 14-20), and nearly every call tells several details: a book finished, a course
started, a concert on a date, a present given, a purchase, a project launched, a dish cooked, a
painting, a prize, a relative's or a friend's news, a fear or an intolerance. Both speakers tell
their own (the character as a companion with a life of its own, as in a call between two
people), some kinds twice, each value once. Turns are long, as people talk: a reaction, the
detail, a remark about it. About 80 details and as many questions per user: far more than a
1,500-token start context can quote whole, so it measures what a memory keeps of a life, not
whether it keeps everything.

Questions (`recall_hard_data.Question`, the same held-out hit rule), worded apart from their
statement, are of the same types: `single`, `multi` (a kind told twice, in different calls),
`temporal` (the date, resolved from the day it was said), `other_person` (a named relative's or
friend's news) and `inference` (a judgement a fear or an intolerance supports). A question about
what the character told of itself says "you" (`Question.teller` is "character").
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass
from typing import Any

from recall_data import SMALL_TALK, Turn
from recall_hard_data import CHARACTERS, PAST, Question, User, render_date, session_payload, varied_line

EPOCH = dt.date(2025, 1, 13)


@dataclass(frozen=True)
class Kind:
    """A kind of detail: the pool its answer comes from, how it is told, how it is asked."""

    pool: str
    says: tuple[str, ...]
    asks: tuple[str, ...]
    type: str = "single"  # or "temporal" (the answer is the date), "other_person", "inference"
    multi: str = ""  # the question when told twice ("Which two books did I finish?")
    gold: str = ""  # inference: the gold answer


# {x}: the answer; {when}: a day said relatively; {rel}, {relname}, {friend}: the people.
KINDS: dict[str, dict[str, Kind]] = {
    "en": {
        "book": Kind("book", ("I finally finished {x}, the ending completely wrecked me.",
                              "I stayed up until two reading {x}, I just couldn't put it down."),
                     ("What's the novel I told you I'd been reading?", "Which book did I get through recently?"),
                     multi="Which two books did I tell you I read?"),
        "course": Kind("course", ("I signed up for a {x} course on Thursday nights at the community centre.",
                                  "Week three of my {x} lessons and I'm completely hooked."),
                       ("What have I been learning in the evenings?", "Which class did I enrol in?"),
                       multi="Name the two classes I took up."),
        "concert": Kind("band", ("We saw {x} live {when}, my ears are still ringing.",
                                 "I finally got to see {x} in concert {when}, front row too."),
                        ("When did I see {x} play?", "On what date was the {x} gig I went to?"), type="temporal"),
        "gift": Kind("gift", ("I got my {giftee} {x} for her birthday and she actually cried.",
                              "For my {giftee}'s birthday I went with {x}, she loved it."),
                     ("What present did I give my {giftee}?", "What did I buy my {giftee} for her birthday?")),
        "purchase": Kind("purchase", ("After months of saving I finally bought {x}.",
                                      "So I did something impulsive and bought {x} off a neighbour."),
                         ("What big thing did I buy?", "What was my big purchase?")),
        "project": Kind("project", ("My team finally launched {x} at work, months of late nights.",
                                    "We shipped {x} today, the whole office went out to celebrate."),
                        ("What did my team at work release?", "Which work project did we get out the door?")),
        "volunteer": Kind("volunteer", ("I've started volunteering at {x} on Sunday mornings.",
                                        "Spent the morning helping out at {x} again, I love the people there."),
                          ("Where do I give my time for free?", "Where do I volunteer?")),
        "cook": Kind("dish", ("I made {x} from scratch for the first time, and it actually worked.",
                              "Attempted {x} tonight, the kitchen is a disaster but it tasted amazing."),
                     ("What did I try cooking for the first time?", "Which dish did I attempt at home?"),
                     multi="What two dishes did I try making?"),
        "paint": Kind("painting", ("I painted {x} this weekend, I think it's the best thing I've made.",
                                   "My new canvas is {x}, it's drying by the window."),
                      ("What was the subject of my latest painting?", "What did I paint?")),
        "prize": Kind("prize", ("Our team won the pub quiz and the prize was {x}.",
                                "I won the raffle at the school fair, {x} of all things."),
                      ("What did I win?", "What prize did I come home with?")),
        "film": Kind("film", ("Watched {x} last night and I cried at the end, no shame.",
                              "{x} is the best thing I've seen at the cinema in years."),
                     ("Which film got to me?", "What movie did I rave about?"),
                     multi="Which two films did I tell you about?"),
        "injury": Kind("part", ("I twisted my {x} at the climbing wall {when}, it's twice the size.",
                                "Hurt my {x} falling off my bike {when}, all strapped up now."),
                       ("When did I hurt my {x}?", "What day did I injure my {x}?"), type="temporal"),
        "hike": Kind("peak", ("We made it up {x} {when}, six hours there and back.",
                              "I climbed {x} {when}, the view from the top was unreal."),
                     ("When did I hike up {x}?", "What day did I reach the top of {x}?"), type="temporal"),
        "exhibit": Kind("exhibition", ("I went to the {x} exhibition at the museum, I could have stayed all day.",
                                       "The {x} show at the gallery blew me away."),
                        ("Which exhibition did I visit?", "What show did I see at the museum?")),
        "grow": Kind("crop", ("My allotment finally gave me {x}, a whole basket of them.",
                              "I've been growing {x} on the balcony and they're finally ripe."),
                     ("What have I been growing?", "What came up in my garden?")),
        "relschool": Kind("school", ("My {rel} {relname} just got into {x}, we're all so proud of her.",
                                     "Big news, {relname} got her offer from {x} this morning."),
                          ("Where is {relname} going to study?", "Which place accepted my {rel}?"),
                          type="other_person"),
        "friendbiz": Kind("business", ("{friend} quit his office job to open {x}, brave man.",
                                       "{friend} signed the lease on {x}, he opens in spring."),
                          ("What is {friend} starting up?", "What's {friend}'s new venture?"), type="other_person"),
        "friendpet": Kind("petname", ("{friend} adopted a puppy and called it {x}, the silliest name.",
                                      "{friend} came round with his new kitten, {x}."),
                          ("What did {friend} name his new pet?", "What's {friend}'s animal called?"),
                          type="other_person"),
        "wedding": Kind("", ("My {rel} {relname} got married {when}, I did a reading and cried.",),
                        ("When was {relname}'s wedding?", "What day did my {rel} get married?"), type="temporal"),
        "seasick": Kind("", ("I get horribly seasick, even the ferry to the island wipes me out.",),
                        ("Would a sailing holiday be a nice surprise for me?",), type="inference",
                        gold="no, I get seasick"),
        "heights": Kind("", ("I'm terrified of heights, I couldn't even stand on the glass floor at the tower.",),
                        ("Should my friends book me a skydive?",), type="inference", gold="no, I'm afraid of heights"),
        "lactose": Kind("", ("Turns out I'm lactose intolerant, so no more cheese boards for me.",),
                        ("Is a cheese-tasting evening a good treat for me?",), type="inference",
                        gold="no, I'm lactose intolerant"),
    },
    "zh": {
        "book": Kind("book", ("我终于读完了{x}，结尾把我看哭了。", "昨晚熬到两点读{x}，根本停不下来。"),
                     ("我跟你说过我在读的那本小说叫什么？", "我最近读完了哪本书？"), multi="我读过的那两本书分别是什么？"),
        "course": Kind("course", ("我报了社区中心周四晚上的{x}课。", "{x}课上到第三周了，我彻底迷上了。"),
                       ("我晚上在学什么？", "我报了什么班？"), multi="我报的那两门课分别是什么？"),
        "concert": Kind("band", ("我们{when}去看了{x}的现场，耳朵现在还在响。", "{when}终于看到了{x}的演唱会，还是第一排。"),
                        ("我是哪天去看{x}演出的？", "{x}那场演出是什么日期？"), type="temporal"),
        "gift": Kind("gift", ("我给{giftee}买了{x}当生日礼物，她都感动哭了。", "{giftee}生日我送了{x}，她特别喜欢。"),
                     ("我送了{giftee}什么礼物？", "{giftee}过生日我买了什么？")),
        "purchase": Kind("purchase", ("攒了好几个月的钱，终于买了{x}。", "我冲动了一把，从邻居那儿买了{x}。"),
                         ("我买了什么大件？", "我那次大手笔买的是什么？")),
        "project": Kind("project", ("我们团队终于上线了{x}，熬了好几个月的夜。", "今天{x}发布了，整个办公室出去庆祝。"),
                        ("我们团队上线了什么？", "我们单位完成的是哪个项目？")),
        "volunteer": Kind("volunteer", ("我开始每周日上午去{x}做志愿者了。", "今天上午又去{x}帮忙了，那里的人特别好。"),
                          ("我在哪里做义工？", "我周末去哪儿帮忙？")),
        "cook": Kind("dish", ("我第一次从头做了{x}，居然成功了。", "今晚挑战了{x}，厨房一片狼藉但是超好吃。"),
                     ("我第一次尝试做的是什么菜？", "我在家挑战了哪道菜？"), multi="我尝试做过的两道菜是什么？"),
        "paint": Kind("painting", ("这周末我画了{x}，感觉是我画得最好的一幅。", "我的新画是{x}，正晾在窗边。"),
                      ("我最近那幅画画的是什么？", "我画了什么？")),
        "prize": Kind("prize", ("我们队赢了酒吧知识竞赛，奖品是{x}。", "我在学校义卖会上抽中了奖，居然是{x}。"),
                      ("我赢了什么？", "我抽中的奖品是什么？")),
        "film": Kind("film", ("昨晚看了{x}，最后哭得稀里哗啦。", "{x}是我这几年在电影院看过最好的片子。"),
                     ("哪部电影把我看哭了？", "我大力推荐的是哪部电影？"), multi="我跟你说过的两部电影是哪两部？"),
        "injury": Kind("part", ("我{when}在攀岩馆扭伤了{x}，肿了一倍。", "我{when}骑车摔了，伤了{x}，现在缠着绷带。"),
                       ("我是哪天伤到{x}的？", "我什么时候弄伤了{x}？"), type="temporal"),
        "hike": Kind("peak", ("我们{when}爬上了{x}，来回走了六个小时。", "我{when}登上了{x}，山顶的风景美呆了。"),
                     ("我是哪天爬{x}的？", "我登上{x}是哪一天？"), type="temporal"),
        "exhibit": Kind("exhibition", ("我去博物馆看了{x}展，待一整天都不嫌多。", "美术馆的{x}展把我震撼到了。"),
                        ("我去看了什么展？", "我在博物馆看的是哪个展览？")),
        "grow": Kind("crop", ("我的小菜园终于结出了{x}，摘了满满一篮。", "我在阳台种的{x}终于熟了。"),
                     ("我一直在种什么？", "我的菜园里长出了什么？")),
        "relschool": Kind("school", ("我{rel}{relname}考上了{x}，全家都为她骄傲。", "好消息，{relname}今天早上收到了{x}的录取。"),
                          ("{relname}要去哪里读书？", "我{rel}被哪所学校录取了？"), type="other_person"),
        "friendbiz": Kind("business", ("{friend}辞了工作，要开{x}，真有勇气。", "{friend}签了{x}的租约，春天开业。"),
                          ("{friend}要开什么店？", "{friend}的新事业是什么？"), type="other_person"),
        "friendpet": Kind("petname", ("{friend}领养了一只小狗，取名叫{x}，太好笑了。", "{friend}带着他的新小猫{x}来我家了。"),
                          ("{friend}给新宠物取了什么名字？", "{friend}的小动物叫什么？"), type="other_person"),
        "wedding": Kind("", ("我{rel}{relname}{when}结婚了，我上台致辞还哭了。",),
                        ("{relname}是哪天结婚的？", "我{rel}哪天办的婚礼？"), type="temporal"),
        "seasick": Kind("", ("我晕船特别严重，连去岛上的轮渡都受不了。",), ("送我一次帆船旅行当惊喜好吗？",),
                        type="inference", gold="不好，我晕船"),
        "heights": Kind("", ("我特别恐高，连塔上的玻璃地板都不敢站。",), ("朋友们给我订一次跳伞合适吗？",),
                        type="inference", gold="不合适，我恐高"),
        "lactose": Kind("", ("原来我乳糖不耐受，奶酪拼盘跟我无缘了。",), ("请我去品鉴奶酪的晚会好吗？",),
                        type="inference", gold="不好，我乳糖不耐受"),
    },
}  # fmt: skip

POOLS: dict[str, dict[str, list[str]]] = {
    "en": {
        "book": ["The Salt Orchard", "Glass Harbour", "A Map of Small Rooms", "The Ninth Lantern",
                 "Winter of the Finches", "Copper Moon", "The Quiet Engineers", "Seven Borrowed Summers",
                 "The Long Marigold", "Paper Tigers"],
        "course": ["pottery", "salsa", "woodcarving", "watercolour", "ukulele", "calligraphy", "beekeeping",
                   "improv", "sign language", "glassblowing"],
        "band": ["The Velvet Foxes", "Moonlit Radio", "Harbour Lights", "The Amber Owls", "Static Orchard",
                 "Lola and the Tides", "The Brass Meridian", "Nightjar Parade"],
        "gift": ["a pasta machine", "a record player", "a bonsai tree", "a leather satchel", "a fountain pen",
                 "a hand-knitted scarf", "a chess set", "a karaoke machine"],
        "purchase": ["a second-hand campervan", "a cargo bike", "an upright piano", "a sea kayak",
                     "a sewing machine", "a 3D printer", "an electric scooter", "a rowing machine"],
        "project": ["the Bluebird booking app", "the river flood map", "the Nimbus payroll system",
                    "the Kestrel delivery tracker", "the Orchard loyalty card", "the Lantern help desk"],
        "volunteer": ["the food bank on Elm Street", "the hedgehog rescue", "the community garden",
                      "the children's hospital library", "the night shelter", "the repair café"],
        "dish": ["beef wellington", "croissants", "ramen broth", "baklava", "bao buns", "tamales",
                 "a lemon meringue pie", "gnocchi"],
        "painting": ["a lighthouse at dusk", "a fox in the snow", "my grandmother's garden", "a heron on the river",
                     "a bowl of lemons", "a self-portrait in blue"],
        "prize": ["a weekend in a lighthouse", "a year of free coffee", "a signed cricket bat",
                  "a hot-air balloon ride", "a giant teddy bear", "a cookbook signed by the chef"],
        "film": ["The Last Ferry", "Ocean of Clocks", "Nine Winters", "The Glass Violin", "Paper Moons",
                 "Little Thunder", "The Cartographer's Daughter"],
        "peak": ["Ben Nevis", "Snowdon", "Scafell Pike", "Mount Olympus", "Pen y Fan", "the Matterhorn's base camp"],
        "exhibition": ["Hokusai", "Frida Kahlo", "ancient Egyptian jewellery", "Viking ships", "Bauhaus posters",
                       "medieval maps"],
        "crop": ["purple carrots", "cherry tomatoes", "runner beans", "courgettes", "strawberries", "chillies"],
        "part": ["wrist", "ankle", "knee", "shoulder", "thumb", "elbow"],
        "school": ["the Glasgow School of Art", "the Royal Veterinary College", "the Leeds Conservatoire",
                   "Trinity College Dublin", "the Sorbonne", "the Bristol dental school"],
        "business": ["a bike repair shop", "a vegan bakery", "a board game café", "a tattoo studio",
                     "a surf school", "a bookshop on the harbour"],
        "petname": ["Biscuit", "Admiral", "Tofu", "Pancake", "Sherlock", "Meatball", "Duchess"],
        "giftee": ["mum", "grandma", "aunt", "sister"],
        "rel": ["sister", "cousin", "niece"],
        "relname": ["Priya", "Ingrid", "Clara", "Greta", "Maya", "Sofia"],
        "friend": ["Marcus", "Oskar", "Lionel", "Hugo", "Tariq", "Ben"],
    },
    "zh": {
        "book": ["《盐的果园》", "《玻璃港》", "《小房间的地图》", "《第九盏灯》", "《雀鸟之冬》", "《铜月亮》",
                 "《安静的工程师》", "《借来的七个夏天》"],
        "course": ["陶艺", "萨尔萨舞", "木雕", "水彩", "尤克里里", "书法", "养蜂", "手语"],
        "band": ["丝绒狐狸乐队", "月光电台乐队", "港口灯火乐队", "琥珀猫头鹰乐队", "夜鹰游行乐队", "铜色子午线乐队"],
        "gift": ["一台意面机", "一台黑胶唱机", "一盆盆景", "一个皮质挎包", "一支钢笔", "一副象棋"],
        "purchase": ["一辆二手房车", "一辆货运自行车", "一架立式钢琴", "一艘皮划艇", "一台缝纫机", "一台3D打印机"],
        "project": ["青鸟订票小程序", "河道防汛地图", "云朵薪资系统", "红隼物流追踪平台", "果园会员卡系统"],
        "volunteer": ["榆树街食物银行", "刺猬救助站", "社区菜园", "儿童医院图书角", "夜间庇护所", "修理咖啡馆"],
        "dish": ["惠灵顿牛排", "可颂", "豚骨拉面汤", "果仁蜜饼", "生煎包", "粽子", "柠檬挞"],
        "painting": ["黄昏的灯塔", "雪地里的狐狸", "外婆的花园", "河边的白鹭", "一碗柠檬", "蓝色自画像"],
        "prize": ["灯塔民宿周末游", "一年免费咖啡", "签名板球拍", "热气球体验", "一只巨型泰迪熊", "主厨签名菜谱"],
        "film": ["《最后一班渡轮》", "《钟表之海》", "《九个冬天》", "《玻璃小提琴》", "《纸月亮》", "《小雷声》"],
        "peak": ["泰山", "华山", "峨眉山", "武功山", "玉龙雪山大本营", "庐山"],
        "exhibition": ["敦煌壁画", "莫奈", "青铜器", "宋代山水画", "古埃及珠宝", "故宫钟表"],
        "crop": ["紫色胡萝卜", "樱桃番茄", "四季豆", "西葫芦", "草莓", "小米椒"],
        "part": ["手腕", "脚踝", "膝盖", "肩膀", "大拇指", "手肘"],
        "school": ["中央美术学院", "南京农业大学兽医学院", "上海音乐学院", "厦门大学", "浙江大学医学院"],
        "business": ["自行车修理铺", "素食烘焙坊", "桌游咖啡馆", "纹身工作室", "冲浪学校", "海边书店"],
        "petname": ["饼干", "将军", "豆腐", "松饼", "福尔摩斯", "肉丸"],
        "giftee": ["妈妈", "外婆", "姑姑", "姐姐"],
        "rel": ["表姐", "妹妹", "堂姐"],
        "relname": ["思思", "佳怡", "晓琳", "若曦"],
        "friend": ["老周", "阿杰", "大伟", "小刚"],
    },
}  # fmt: skip

# What goes around a detail in a long turn, as in people's talk: a reaction to the last thing
# said before it; after it, a feeling, a question back or a stock phrase, which tell nothing new.
OPENERS = {
    "en": ["Oh, that's lovely to hear!", "Ha, I know what you mean.", "Anyway, guess what?", "Okay, news time.",
           "Right, before I forget.", "Honestly, this week has been a lot.", "Mm, fair enough.",
           "Oh wow, okay.", "So, random update.", "You'll laugh at this one."],
    "zh": ["哈哈，我懂你的意思。", "对了，差点忘了。", "跟你说个事。", "哇，真好。", "嗯，有道理。", "这周真是够忙的。",
           "你猜怎么着？", "说个好玩的。"],
}  # fmt: skip
CODAS = {
    "en": ["It was so much fun.", "I'm honestly so happy about it.", "Have you ever tried something like that?",
           "What about you, anything new?", "It really made my week.", "I can't wait to do it again.",
           "How has your week been, by the way?", "Sorry, I'm rambling again.", "Anyway, that's my news.",
           "Life is funny like that.", "It took forever but it was worth it.", "I'll show you pictures sometime.",
           "Honestly, what a week.", "I'm still smiling about it."],
    "zh": ["太好玩了。", "我真的超开心。", "你试过类似的事吗？", "你呢，最近有什么新鲜事？", "这周因为这个特别开心。",
           "真想再来一次。", "对了，你这周过得怎么样？", "不好意思，我又唠叨了。", "就这些，我的近况。", "生活就是这么奇妙。",
           "折腾了好久，但是很值。", "下次给你看照片。", "这一周啊，真是。", "我现在想起来还在笑。"],
}  # fmt: skip
# Share words with the details without holding an answer.
DISTRACT = {
    "en": ["I keep meaning to read more, but my phone always wins.", "The community centre has a new timetable up.",
           "Someone at work keeps talking about their concert tickets.", "My neighbour bought another car, his third.",
           "I walked past the cinema and the queue went round the block.", "The pub quiz was cancelled this week.",
           "I should paint the hallway at some point.", "Everyone at the office seems to be on holiday."],
    "zh": ["我总想多读点书，可手机总是赢。", "社区中心贴了新的课程表。", "单位有人一直在聊演唱会门票。",
           "邻居又买了一辆车，第三辆了。", "路过电影院，排队排到了街角。", "这周的知识竞赛取消了。"],
}  # fmt: skip
TELLERS = ("user", "character")


def second_person(text: str, language: str) -> str:
    """A first-person question about what the character told of itself, asked of "you" (and
    "you" in it becomes "me": "the novel I told you about" -> "the novel you told me about")."""
    if language == "zh":
        return re.sub("[我你]", lambda m: "你" if m.group() == "我" else "我", text)
    swaps = {"I": "you", "my": "your", "me": "you", "I'd": "you'd", "I'm": "you're", "I've": "you've",
             "we": "you", "our": "your", "you": "me", "your": "my"}  # fmt: skip
    return re.sub(r"\b(?:I'd|I'm|I've|I|my|me|we|our|you|your)\b", lambda m: swaps[m.group()], text)


# Before these words a "you" is an object ("a treat for you", "book you a skydive", "got to you").
OBJECT_AFTER = frozenset({"for", "to", "book", "suit", "with", "at", "about", "from"})


def first_person(text: str, language: str) -> str:
    """`second_person` undone: a question asked of "you" as the one who told the answer asks it
    ("we" and "our" come back as "I" and "my")."""
    if language == "zh":
        return second_person(text, language)
    swaps = {"you'd": "I'd", "you're": "I'm", "you've": "I've", "your": "my", "me": "you", "my": "your"}

    def swapped(found: re.Match[str]) -> str:
        word = found.group()
        if word != "you":
            return swaps[word]
        before = text[: found.start()].split()
        return "me" if before and before[-1].lower() in OBJECT_AFTER else "I"

    return re.sub(r"\b(?:you'd|you're|you've|your|you|me|my)\b", swapped, text)


def article_free(value: str) -> str:
    """The gold answer of a value ("a telescope" -> "telescope"; 一台… kept)."""
    return re.sub(r"^(?:a|an|the) ", "", value)


def generate_user(index: int, lang: str, rng: random.Random, sessions: tuple[int, int],
                  exchanges: tuple[int, int], details: int = 1) -> User:  # fmt: skip
    """One user's calls, the details both speakers tell, and the questions about them."""
    kinds, pools = life_kinds(lang, details)
    people = {key: rng.choice(pools[key]) for key in ("rel", "relname", "friend")}
    character = CHARACTERS[lang][index % 2]
    name = ["Sam", "Jo", "Alex", "Robin"][index % 4] if lang == "en" else ["小林", "阿俊"][index % 2]
    user = User(f"l-{lang}-{index:02d}", character.lower() if lang == "en" else f"c{index % 2}", lang, name)
    # What is told: each kind by each speaker, some twice, every value once per user.
    unused = {key: rng.sample(values, len(values)) for key, values in pools.items()}
    told: list[tuple[str, str, str]] = []  # (kind, teller, value)
    for key, kind in kinds.items():
        tellers = ["user"] if kind.type in ("other_person", "inference") or not kind.pool else list(TELLERS)
        for teller in tellers:
            times = 2 if kind.multi and rng.random() < 0.5 else 1
            for _ in range(times if len(unused.get(kind.pool, [])) >= times or not kind.pool else 0):
                told.append((key, teller, unused[kind.pool].pop() if kind.pool else ""))
    rng.shuffle(told)
    n = rng.randint(*sessions)
    start = EPOCH + dt.timedelta(days=rng.randrange(14))
    days = [start + dt.timedelta(days=o) for o in sorted([0, *rng.sample(range(2, 240), n - 1)])]
    # A kind told twice by one speaker is told in two different calls.
    at_session: dict[int, list[int]] = {s: [] for s in range(n)}
    seen: dict[tuple[str, str], int] = {}
    for number, (key, teller, _) in enumerate(told):
        choices = [s for s in range(n) if s != seen.get((key, teller))]
        session = rng.choice(choices)
        seen[(key, teller)] = session
        at_session[session].append(number)
    small = SMALL_TALK[lang]
    placed: dict[int, Turn] = {}
    meant: dict[int, dt.date] = {}
    for number, day in enumerate(days):
        agent_id = f"life-{user.user_id}-{number:02d}-{rng.getrandbits(32):08x}"
        plants = at_session[number]
        count = max(rng.randint(*exchanges), len(plants) + 2)
        where = dict(zip(sorted(rng.sample(range(count), len(plants))), plants, strict=True))
        at = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
        at += rng.randint(9 * 3600, 15 * 3600) * 1000
        start_ms = at
        contents: list[dict[str, Any]] = []
        for turn in range(count):
            said = {"user": chat(lang, rng, small, "user"), "character": chat(lang, rng, small, "assistant")}
            plant = where.get(turn)
            if plant is not None:
                key, teller, value = told[plant]
                kind = kinds[key]
                template = rng.choice(kind.says)
                when = ""
                if "{when}" in template:
                    phrase, offset = rng.choice(PAST[lang])
                    if offset is None:  # "on Saturday": the most recent Saturday before the day said
                        offset = -((day.weekday() - 5) % 7 or 7)
                    when, meant[plant] = phrase, day + dt.timedelta(days=offset)
                giftee = rng.choice(pools["giftee"])
                detail = template.format(x=value, when=when, giftee=giftee, **people)
                told[plant] = (key, teller, value if key != "gift" else f"{value}|{giftee}")
                # As people tell news: a reaction, the detail, a remark or two about it.
                remarks = " ".join(rng.sample(CODAS[lang], 2))
                said[teller] = f"{rng.choice(OPENERS[lang])} {detail} {remarks}"
                if lang == "zh":
                    said[teller] = said[teller].replace(" ", "")
            at += rng.randint(3000, 20000)
            for role, teller in (("user", "user"), ("assistant", "character")):
                if plant is not None and told[plant][1] == teller:
                    placed[plant] = Turn(agent_id, len(contents), said[teller])
                contents.append({"role": role, "content": said[teller], "turn_id": turn + 1, "timestamp": at,
                                 "metadata": {"source": "asr" if role == "user" else "llm"}})  # fmt: skip
                at += rng.randint(1500, 8000)
        user.sessions.append(session_payload(user, number, agent_id, start_ms, at, contents))
    user.questions.extend(questions(user, kinds, told, placed, meant, people, rng))
    return user


def life_kinds(lang: str, details: int) -> tuple[dict[str, Kind], dict[str, list[str]]]:
    """The kinds of detail told and their pools: `KINDS` alone (`details` 1, the default), or with
    `life_more`'s sixteen more (2), appended so that the default draws stay as they were."""
    if details == 1:
        return KINDS[lang], POOLS[lang]
    if details != 2:
        raise ValueError(f"details is 1 or 2, not {details}")
    from life_more import EXTRA_KINDS, EXTRA_POOLS  # it imports Kind from here

    return {**KINDS[lang], **EXTRA_KINDS[lang]}, {**POOLS[lang], **EXTRA_POOLS[lang]}


def chat(lang: str, rng: random.Random, small: dict[str, Any], role: str) -> str:
    """A long turn of chat: everyday news (or a line sharing a detail's words) and a remark."""
    if role == "user" and rng.random() < 0.12:
        line = rng.choice(DISTRACT[lang])
    elif role == "user" or rng.random() < 0.5:
        line = varied_line(lang, rng)
    else:
        line = re.sub(r"\{(\w+)\}", lambda m: str(rng.choice(small[m.group(1)])), rng.choice(small[role]))
    joined = f"{rng.choice(OPENERS[lang])} {line} {rng.choice(CODAS[lang])}" if rng.random() < 0.5 else line
    return joined.replace(" ", "") if lang == "zh" else joined


def questions(user: User, kinds: dict[str, Kind], told: list[tuple[str, str, str]], placed: dict[int, Turn],
              meant: dict[int, dt.date], people: dict[str, str], rng: random.Random) -> list[Question]:  # fmt: skip
    """One question per detail told, and one per kind a speaker told twice."""
    lang = user.language
    out: list[Question] = []
    twice: dict[tuple[str, str], list[int]] = {}
    for number, (key, teller, value) in enumerate(told):
        kind = kinds[key]
        value, _, giftee = value.partition("|")
        twice.setdefault((key, teller), []).append(number)
        text = rng.choice(kind.asks).format(x=value, giftee=giftee, **people)
        if kind.type == "temporal":
            answer = render_date(meant[number], lang)
        elif kind.type == "inference":
            answer = kind.gold
        else:
            answer = article_free(value)
        out.append(question(user, kind.type, text, answer, (placed[number],), teller))
    sep = "、" if lang == "zh" else " and "
    for (key, teller), numbers in twice.items():
        if len(numbers) == 2 and kinds[key].multi:
            answer = sep.join(article_free(told[n][2]) for n in numbers)
            turns = tuple(placed[n] for n in numbers)
            out.append(question(user, "multi", kinds[key].multi, answer, turns, teller))
    return out


def question(
    user: User, type_: str, text: str, answer: str, evidence: tuple[Turn, ...], teller: str
) -> Question:
    if teller == "character":
        text = second_person(text, user.language)
    return Question(user.user_id, user.character_id, user.language, type_, text, answer, evidence, teller)


def generate(en: int = 8, zh: int = 4, *, seed: int = 21, sessions: tuple[int, int] = (18, 24),
             exchanges: tuple[int, int] = (14, 20), details: int = 1) -> list[User]:  # fmt: skip
    """`en` English and `zh` Chinese users, each with their calls (oldest first) and questions;
    `details` 2 tells about 60 % more details in as many calls (`life_more`)."""
    out: list[User] = []
    for lang, count in (("en", en), ("zh", zh)):
        rng = random.Random(f"life:{seed}:{lang}")
        out.extend(generate_user(i, lang, rng, sessions, exchanges, details) for i in range(count))
    return out
