"""Chinese self-statements: the patterns that find them and the facts they state."""

from __future__ import annotations

import re

from agent_memory.condense.text import clause_so_far
from agent_memory.core.dates import annotate, resolve

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


def zh_statement(kind: str, match: re.Match[str], day: str) -> str | None:
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


def zh_event(sentence: str, at_ms: int) -> tuple[int, str] | None:
    """A dated event the user states about themselves (我…明天…面试), with its date resolved."""
    for match in ZH_EVENT_CLAUSE.finditer(sentence):
        after = sentence[match.end("subject") : match.end()]
        if not ZH_EVENTS.search(after) or ZH_NEGATION.search(after) or ZH_NOT_MINE.match(after):
            continue
        if ZH_HYPOTHETICAL.search(clause_so_far(sentence, match)) or not resolve(after, at_ms):
            continue
        subject = "用户家" if "家" in match.group("subject") else "用户"
        return match.start("subject"), annotate(subject + after.replace("我", "用户"), at_ms)
    return None
