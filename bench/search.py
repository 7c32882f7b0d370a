"""Search benchmark: a user's full-text search in a database of a million messages.

    python bench/search.py [--total 1000000] [--users 5000] [--queries 150] [--http 300]

Builds (once; cached in bench/.cache/, keyed by the parameters and the schema) a database of
`--total` messages written with the store's own API: conversations in English (70 %),
Chinese (20 %) and Korean (10 %) from templates with per-user details (pets, cities, people),
in sessions of about 30 messages; users' activity is skewed (the busiest user holds a few
percent of all messages); every pair has a summary covering all but its last session, facts,
and each session's raw 103 callback in the inbox (spread over the last 180 days). The same
database is the input of bench/retention.py.

Then times `view.search.user(...)` (what GET /v1/users/{u}/search runs on a reader thread)
for query classes drawn from what each user actually said: one English word, two English
words, a Chinese phrase of 3-4 characters, a two-character Chinese word (substring scan),
a Korean word, a very common trigram ("the"), and a word nobody said; the busiest user
separately; the operator's mention query; and, with `--http`, the endpoint over HTTP
against the real server. The last line printed is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from _common import (
    Server,
    db_size_bytes,
    fmt_ms,
    latency_summary,
    machine_info,
    print_machine,
    print_summary,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from agent_memory.core.domain import InboxEntry, Session, Summary  # noqa: E402
from agent_memory.core.jsonutil import dumps  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import Store, Transaction, open_store  # noqa: E402
from agent_memory.store.sqlite import SQLiteView  # noqa: E402
from agent_memory.store.types import NewMessage  # noqa: E402

CACHE = Path(__file__).resolve().parent / ".cache"
BUILD_VERSION = 1  # bump when the generated data changes
SESSION_MESSAGES = 30
SESSIONS_PER_WRITE = 800
NOW_MS = int(time.time() // 86_400 * 86_400_000)  # today, midnight UTC: ages are realistic
DAY_MS = 86_400_000
TOKEN = "bench-api-token"
CHARACTERS = ("luna", "atlas", "mira", "xiaoyu", "minjun")

# Vocabulary: each user gets their own pet, city, sibling, hobby and food.
PET_NAMES = [f"{a}{b}" for a in ("Bis", "Mo", "Pix", "Lu", "Ta", "Ce", "Ri", "Zo", "Ka", "Fen")
             for b in ("cuit", "chi", "el", "na", "ro", "do", "ley", "mi", "ra", "ton")]  # fmt: skip
CITIES = ["Valencia", "Rotterdam", "Lisbon", "Kyoto", "Hangzhou", "Busan", "Porto", "Bergen",
          "Krakow", "Seville", "Tallinn", "Ghent", "Lyon", "Oaxaca", "Hobart", "Quebec"]  # fmt: skip
PEOPLE = ["Ana", "Tom", "Mei", "Jisoo", "Omar", "Lena", "Ravi", "Noor", "Pablo", "Ines", "Yuki"]
HOBBIES = ["running", "pottery", "chess", "climbing", "baking", "guitar", "gardening", "swimming",
           "painting", "cycling", "knitting", "photography"]  # fmt: skip
FOODS = ["fried rice", "lentil soup", "dumplings", "tacos", "ramen", "risotto", "bibimbap", "curry"]
MOODS = ["tired", "excited", "anxious", "happy", "stressed", "calm", "restless", "proud"]
EVENTS = ["interview", "exam", "wedding", "presentation", "race", "concert", "deadline", "trip"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
EN_USER = [
    "I went to {city} with {person} and we talked about {hobby} the whole way.",
    "Do you remember my {pet_kind} {pet}? {pet} has been {mood} all week.",
    "I'm a bit {mood} about the {event} on {day}.",
    "We made {food} tonight, it turned out better than last time.",
    "Can you help me plan a weekend in {city}?",
    "My manager moved the {event} again, I'm so {mood}.",
    "{person} says hi, by the way. We went {hobby} this morning.",
    "Tell me a short story about a lighthouse keeper in {city}.",
    "Okay.",
    "Yes, exactly, that's what I meant.",
    "I think I'll practise {hobby} before the {event}.",
]
EN_ASSISTANT = [
    "That sounds lovely! How was {city} this time of year?",
    "Of course I remember {pet}. How is your {pet_kind} doing?",
    "It's normal to feel {mood} before a {event}. Shall we prepare together on {day}?",
    "{food} is a great choice. Did you add anything new?",
    "Here's an idea for {city}: the old town in the morning, a long lunch, then the river.",
    "Say hi to {person} from me! {hobby} in the morning is a good way to start the day.",
    "Once upon a time, a keeper in {city} lit the lamp every evening and talked to the gulls.",
    "Mm-hm.",
    "Got it. I'll remember that.",
]
ZH_USER = [
    "我昨天和{person_zh}去了{city_zh},聊了很多关于{hobby_zh}的事。",
    "我的狗{pet}最近很{mood_zh}。",
    "下周{day_zh}我有{event_zh},有点紧张。",
    "你还记得我说的{hobby_zh}吗?",
    "今天工作很累,想早点睡。",
    "我们晚上吃了{food_zh},很好吃。",
]
ZH_ASSISTANT = [
    "{city_zh}很漂亮啊!你们玩得开心吗?",
    "{pet}真可爱!它今天怎么样?",
    "别担心,{event_zh}一定没问题。我们一起准备吧。",
    "好的,我记住了。早点休息,明天再聊。",
    "{food_zh}听起来很好吃!",
]
KO_USER = [
    "어제 {person_ko}랑 {city_ko}에 갔어요.",
    "{event_ko} 때문에 좀 {mood_ko}.",
    "오늘 저녁은 {food_ko} 먹으려고요.",
    "{pet} 요즘 너무 귀여워요.",
]
KO_ASSISTANT = [
    "와, {city_ko} 좋죠! 재미있었어요?",
    "{event_ko} 잘 될 거예요. 같이 준비해요.",
    "{food_ko} 맛있겠다! 맛있게 드세요.",
    "{pet} 보고 싶어요!",
]
ZH = {
    "city_zh": ["杭州", "上海", "成都", "西安", "苏州", "厦门", "青岛", "大理"],
    "person_zh": ["妈妈", "姐姐", "同事", "朋友", "男朋友", "室友"],
    "hobby_zh": ["游泳", "跑步", "书法", "摄影", "做饭", "弹吉他"],
    "mood_zh": ["累", "开心", "紧张", "无聊", "活泼"],
    "day_zh": ["一", "二", "三", "四", "五", "六"],
    "event_zh": ["考试", "面试", "婚礼", "比赛", "演讲"],
    "food_zh": ["火锅", "饺子", "小笼包", "面条", "烤鸭"],
}
KO = {
    "city_ko": ["부산", "제주도", "강릉", "전주", "경주", "서울"],
    "person_ko": ["엄마", "친구", "동생", "남자친구", "언니"],
    "mood_ko": ["긴장돼요", "피곤해요", "설레요", "걱정돼요"],
    "event_ko": ["발표", "시험", "면접", "결혼식"],
    "food_ko": ["떡볶이", "김치찌개", "비빔밥", "삼겹살"],
}
PET_KINDS = ["dog", "cat", "rabbit", "parrot"]


def cache_path(args: argparse.Namespace) -> Path:
    """The cached database for these parameters and this schema."""
    schema = (REPO / "agent_memory" / "store" / "sqlite" / "migrations.py").read_bytes()
    key = hashlib.sha1(
        f"{BUILD_VERSION}|{args.total}|{args.users}|{args.seed}|".encode() + schema
    ).hexdigest()[:10]
    return CACHE / f"search-{args.total}-{args.users}u-{key}.db"


class Person:
    """One user's recurring details, so that what they say comes back across sessions."""

    def __init__(self, rng: random.Random, index: int) -> None:
        self.user_id = f"u-{index:05d}"
        self.characters = rng.sample(CHARACTERS, rng.randint(1, 3))
        self.slots = {
            "pet": rng.choice(PET_NAMES), "pet_kind": rng.choice(PET_KINDS),
            "city": rng.choice(CITIES), "person": rng.choice(PEOPLE), "hobby": rng.choice(HOBBIES),
            "food": rng.choice(FOODS),
            **{name: rng.choice(values) for name, values in ZH.items()},
            **{name: rng.choice(values) for name, values in KO.items()},
        }  # fmt: skip

    def line(self, rng: random.Random, role: str) -> str:
        """One thing this person or their character might say."""
        language = rng.random()
        if language < 0.7:
            templates = EN_USER if role == "user" else EN_ASSISTANT
        elif language < 0.9:
            templates = ZH_USER if role == "user" else ZH_ASSISTANT
        else:
            templates = KO_USER if role == "user" else KO_ASSISTANT
        # Sometimes another mood or day, as people's weeks differ.
        slots = {
            **self.slots,
            "mood": rng.choice(MOODS),
            "day": rng.choice(DAYS),
            "event": rng.choice(EVENTS),
        }
        return rng.choice(templates).format(**slots)


def plan(args: argparse.Namespace) -> tuple[list[Person], list[tuple[int, str, int]]]:
    """The users, and (user index, character, message count) of every session in time order."""
    rng = random.Random(args.seed)
    people = [Person(rng, index) for index in range(args.users)]
    # Skewed activity: weight 1/rank^0.8 (the busiest user has a few percent of everything).
    weights = [1 / (rank + 1) ** 0.8 for rank in range(args.users)]
    sessions: list[tuple[int, str, int]] = []
    written = 0
    while written < args.total:
        index = rng.choices(range(args.users), weights=weights)[0]
        count = min(SESSION_MESSAGES + rng.randint(-10, 10), args.total - written)
        sessions.append((index, rng.choice(people[index].characters), count))
        written += count
    return people, sessions


async def build(path: Path, args: argparse.Namespace) -> None:
    """Write the database through the store's own writes, in large batches, showing progress."""
    people, sessions = plan(args)
    building = path.with_suffix(".building.db")
    for leftover in CACHE.glob(building.name + "*"):
        leftover.unlink()
    CACHE.mkdir(exist_ok=True)
    store = open_store(Settings(db_path=building))
    rng = random.Random(args.seed + 1)
    span = 180 * DAY_MS
    first_ms = NOW_MS - span
    started = time.perf_counter()
    written = 0
    last_session: dict[tuple[str, str], str] = {}
    print(f"building {path.name}: {args.total:,} messages in {len(sessions):,} sessions of "
          f"{args.users:,} users ...", flush=True)  # fmt: skip
    pending: asyncio.Future[Any] | None = None
    try:
        for first in range(0, len(sessions), SESSIONS_PER_WRITE):
            batch_sessions: list[Session] = []
            batch_messages: list[NewMessage] = []
            batch_inbox: list[InboxEntry] = []
            for number in range(first, min(first + SESSIONS_PER_WRITE, len(sessions))):
                index, character, count = sessions[number]
                person = people[index]
                agent_id = f"agent-{number:07d}"
                start_ms = first_ms + span * number // len(sessions)
                at = start_ms
                contents = []
                for seq in range(count):
                    role = "user" if seq % 2 == 0 else "assistant"
                    at += rng.randint(2000, 20000)
                    contents.append({"role": role, "content": person.line(rng, role), "turn_id": seq // 2 + 1,
                                     "timestamp": at, "metadata": {"source": "asr" if role == "user" else "llm"}})  # fmt: skip
                    batch_messages.append({
                        "agent_id": agent_id, "user_id": person.user_id, "character_id": character,
                        "seq": seq, "role": role, "content": contents[-1]["content"],
                        "turn_id": seq // 2 + 1, "ts_ms": at, "at_ms": at,
                        "source": contents[-1]["metadata"]["source"], "interrupted": 0,
                        "fp": f"{seq}", "gap_before": 0, "created_ms": at + 5000,
                    })  # fmt: skip
                labels = {"user_id": person.user_id, "character_id": character}
                batch_sessions.append(Session(
                    agent_id=agent_id, user_id=person.user_id, character_id=character,
                    identity_source="labels", channel=f"room-{agent_id}", status="stopped",
                    stop_reason="OK", start_ms=start_ms, stop_ms=at + 3000, labels=labels,
                    message_count=count, first_seen_ms=start_ms, updated_ms=at + 3000,
                ))  # fmt: skip
                body = {"noticeId": f"{agent_id}:103", "productId": 17, "eventType": 103, "notifyMs": at + 4000,
                        "payload": {"agent_id": agent_id, "channel": f"room-{agent_id}",
                                    "start_ts": start_ms // 1000, "stop_ts": (at + 3000) // 1000,
                                    "labels": labels, "contents": contents}}  # fmt: skip
                batch_inbox.append(InboxEntry(
                    event_id=body["noticeId"], event_type=103, product_id=17,
                    notify_ms=at + 4000, received_ms=at + 4000, agent_id=agent_id,
                    label_user=person.user_id, label_character=character,
                    body=dumps(body), status="done",
                ))  # fmt: skip
                last_session[(person.user_id, character)] = agent_id

            def insert(tx: Transaction, s: list[Session] = batch_sessions, m: list[NewMessage] = batch_messages,
                       raw: list[InboxEntry] = batch_inbox) -> None:  # fmt: skip
                for session in s:
                    tx.sessions.insert(session)
                tx.messages.insert(m)
                for entry in raw:
                    tx.inbox.insert(entry)

            if pending is not None:
                await pending
                rate = written / (time.perf_counter() - started)
                print(f"\r  {written:,}/{args.total:,} messages ({rate:,.0f}/s)", end="", flush=True)
            pending = asyncio.ensure_future(store.write(insert))
            written += len(batch_messages)
        if pending is not None:
            await pending
        print(
            f"\r  {written:,} messages in {time.perf_counter() - started:.1f} s; summaries and facts ...",
            flush=True,
        )
        await write_memory(store, people, last_session)
        # Messages are indexed after they commit (the idle writer, or a search catching up).
        indexing = time.perf_counter()
        indexed = 0
        while count := await store.catch_up_search():
            indexed += count
            print(f"\r  indexed {indexed:,} messages for search", end="", flush=True)
        print(f" in {time.perf_counter() - indexing:.1f} s", flush=True)
        await store.checkpoint()
    finally:
        store.close()
    elapsed = time.perf_counter() - started
    print(f"  built in {elapsed:.1f} s ({written / elapsed:,.0f} messages/s)")
    for suffix in ("-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    building.rename(path)


async def write_memory(store: Store, people: list[Person], last_session: dict[tuple[str, str], str]) -> None:
    """A summary per pair covering all but its last session, and a few facts per user."""

    def watermarks(view: SQLiteView) -> dict[tuple[str, str], tuple[int, int]]:
        marks = {}
        for (user, character), agent_id in last_session.items():
            row = view.conn.execute(
                "SELECT max(id), count(*) FROM messages WHERE user_id = ? AND character_id = ? AND agent_id != ?",
                (user, character, agent_id),
            ).fetchone()
            marks[(user, character)] = (row[0] or 0, row[1])
        return marks

    marks = await store.read(watermarks)
    by_id = {person.user_id: person for person in people}

    def memory(tx: Transaction) -> None:
        for (user, character), (watermark, covered) in marks.items():
            slots = by_id[user].slots
            text = (f"{user} often talks with {character} about {slots['hobby']} and their {slots['pet_kind']} "
                    f"{slots['pet']}. They visited {slots['city']} with {slots['person']} and like {slots['food']}. "
                    f"最近常聊{slots['city_zh']}和{slots['hobby_zh']}。")  # fmt: skip
            tx.summaries.put(Summary(user_id=user, character_id=character, text=text,
                                     watermark_id=watermark, covered_until_ms=NOW_MS, message_count=covered,
                                     method="llm", model="bench", created_ms=NOW_MS, updated_ms=NOW_MS))  # fmt: skip
        for person in people:
            s = person.slots
            for text in (
                f"Has a {s['pet_kind']} called {s['pet']}",
                f"Lives in {s['city']}",
                f"Enjoys {s['hobby']}",
            ):
                tx.facts.add(person.user_id, person.characters[0], text, scope="user", pinned=False,
                             origin="llm")  # fmt: skip

    await store.write(memory)


def ensure_database(args: argparse.Namespace) -> Path:
    """The cached database for `args`, built first if need be."""
    path = cache_path(args)
    if path.exists():
        print(f"using cached {path.relative_to(REPO)} ({db_size_bytes(path) / 1e6:,.0f} MB)")
    else:
        asyncio.run(build(path, args))
    return path


# queries


def query_plan(path: Path, args: argparse.Namespace) -> tuple[dict[str, list[tuple[str, str]]], str]:
    """(user, query) pairs per class, drawn from random users' own messages; and the busiest user."""
    rng = random.Random(args.seed + 2)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        top = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
        busiest = conn.execute(
            "SELECT user_id FROM sessions GROUP BY user_id ORDER BY sum(message_count) DESC LIMIT 1"
        ).fetchone()[0]
        classes: dict[str, list[tuple[str, str]]] = {
            name: [] for name in ("en_word", "en_two_words", "zh_phrase", "zh_two_chars", "ko_word", "common", "miss")
        }  # fmt: skip
        while any(len(v) < args.queries for v in classes.values()):
            user, content = conn.execute(
                "SELECT user_id, content FROM messages WHERE id >= ? LIMIT 1",
                (rng.randrange(1, top),),
            ).fetchone()
            words = [w.strip(".,!?'") for w in content.split() if len(w.strip(".,!?'")) >= 4]
            if content.isascii() and words:
                add(classes, "en_word", (user, rng.choice(words)), args.queries)
                if len(words) >= 2:
                    add(
                        classes,
                        "en_two_words",
                        (user, " ".join(rng.sample(words, 2))),
                        args.queries,
                    )
                add(classes, "common", (user, "the"), args.queries)
                add(classes, "miss", (user, f"zq{rng.randrange(10**6)}x"), args.queries)
            elif any("\u4e00" <= ch <= "\u9fff" for ch in content):
                han = [i for i, ch in enumerate(content) if "\u4e00" <= ch <= "\u9fff"]
                start = rng.choice(han[:-3] or han)
                add(
                    classes,
                    "zh_phrase",
                    (user, content[start : start + rng.randint(3, 4)]),
                    args.queries,
                )
                start = rng.choice(han[:-2] or han)
                piece = content[start : start + 2]
                if all("\u4e00" <= ch <= "\u9fff" for ch in piece) and len(piece) == 2:
                    add(classes, "zh_two_chars", (user, piece), args.queries)
            elif any("\uac00" <= ch <= "\ud7a3" for ch in content):
                hangul = [w.strip(".,!?") for w in content.split() if len(w.strip(".,!?")) >= 3]
                if hangul:
                    add(classes, "ko_word", (user, rng.choice(hangul)), args.queries)
    finally:
        conn.close()
    return classes, busiest


def add(classes: dict[str, list[tuple[str, str]]], name: str, item: tuple[str, str], limit: int) -> None:
    """Add a query to a class that still needs some."""
    if len(classes[name]) < limit:
        classes[name].append(item)


def time_calls(fn: Callable[[], Any], count: int) -> tuple[list[float], Any]:
    """Call `fn` `count` times; the durations and the last answer."""
    seconds, result = [], None
    for _ in range(count):
        started = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - started)
    return seconds, result


def time_in_process(path: Path, classes: dict[str, list[tuple[str, str]]], busiest: str) -> dict[str, Any]:
    """Search by user and mentions as the handlers call them, per query class."""
    store = open_store(Settings(db_path=path))
    results: dict[str, Any] = {}
    try:
        for user, q in classes["en_word"][:20]:  # warm the page cache
            store.read_now(lambda view, u=user, q=q: view.search.user(u, q))
        everything: list[float] = []
        for name, queries in classes.items():
            seconds: list[float] = []
            hits = 0
            for user, q in queries:
                started = time.perf_counter()
                answer = store.read_now(lambda view, u=user, q=q: view.search.user(u, q))
                seconds.append(time.perf_counter() - started)
                hits += bool(answer["results"])
            everything.extend(seconds)
            results[name] = {**latency_summary(seconds), "queries": len(queries), "with_results": hits,
                             "example": queries[0][1] if queries else None}  # fmt: skip
            print(
                f"  {name:<14} {fmt_ms(results[name])}   ({hits}/{len(queries)} found, e.g. {queries[0][1]!r})"
            )
        results["all"] = {**latency_summary(everything), "queries": len(everything)}
        print(f"  {'all':<14} {fmt_ms(results['all'])}")
        count = store.read_now(lambda view: view.conn.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM messages WHERE user_id = ?", (busiest,)).fetchone()[0])  # fmt: skip
        for label, q in (
            ("busiest_word", "morning"),
            ("busiest_common", "the"),
            ("busiest_zh2", "考试"),
        ):
            seconds, answer = time_calls(
                lambda q=q: store.read_now(lambda view: view.search.user(busiest, q)), 30
            )
            results[label] = {
                **latency_summary(seconds),
                "user_messages": count,
                "truncated": answer["truncated"],
            }
            print(f"  {label:<14} {fmt_ms(results[label])}   ({busiest}: {count:,} messages, q={q!r})")
        for label, q in (
            ("mentions_rare", classes["en_word"][0][1]),
            ("mentions_common", "morning"),
            ("mentions_zh2", "考试"),
        ):
            seconds, answer = time_calls(lambda q=q: store.read_now(lambda view: view.search.mentions(q)), 5)
            results[label] = {
                **latency_summary(seconds),
                "users": answer["total_users"],
                "messages": answer["total_messages"],
            }
            print(f"  {label:<14} {fmt_ms(results[label])}   (q={q!r}: {answer['total_users']:,} users, "
                  f"{answer['total_messages']:,} messages)")  # fmt: skip
    finally:
        store.close()
    return results


async def time_http(
    path: Path, classes: dict[str, list[tuple[str, str]]], requests: int, workdir: Path
) -> dict[str, Any]:
    """GET /v1/users/{u}/search against the real server, sequentially."""
    server = Server(path, env={"AGENT_MEMORY_API_TOKEN": TOKEN, "AGORA_WEBHOOK_SECRET": "bench",
                               "AGENT_MEMORY_SUMMARY_DELAY_S": "3600",
                               "AGENT_MEMORY_RETENTION_SWEEP_S": "86400"},
                    log_path=workdir / "server.log")  # fmt: skip
    mixed = [item for queries in classes.values() for item in queries]
    random.Random(7).shuffle(mixed)
    try:
        await server.wait_healthy(60)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            seconds: list[float] = []
            for user, q in (mixed * (requests // max(len(mixed), 1) + 1))[:requests]:
                started = time.perf_counter()
                async with session.get(f"{server.url}/v1/users/{user}/search", params={"q": q}) as resp:
                    await resp.read()
                    assert resp.status == 200, await resp.text()
                seconds.append(time.perf_counter() - started)
    finally:
        server.stop()
    return {**latency_summary(seconds), "requests": len(seconds)}


def main() -> None:
    """Build or load the database, time the queries, print the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--total", type=int, default=1_000_000, help="messages in the database")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=150, help="queries per class")
    parser.add_argument("--http", type=int, default=300, help="requests over HTTP (0: skip)")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    info = machine_info()
    print_machine(info)
    path = ensure_database(args)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    counts = {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
              for table in ("messages", "sessions", "facts", "summaries", "inbox")}  # fmt: skip
    conn.close()
    print(
        f"database: {db_size_bytes(path) / 1e6:,.0f} MB, "
        + ", ".join(f"{v:,} {k}" for k, v in counts.items())
    )
    classes, busiest = query_plan(path, args)
    print(f"search_user, in process ({args.queries} queries per class, each a random user's own words):")
    results = time_in_process(path, classes, busiest)
    if args.http:
        with tempfile.TemporaryDirectory() as workdir:
            print(
                f"GET /v1/users/{{u}}/search over HTTP, {args.http} sequential requests (all classes mixed):"
            )
            results["http"] = asyncio.run(time_http(path, classes, args.http, Path(workdir)))
            print(f"  {'http':<14} {fmt_ms(results['http'])}")
    print_summary({"bench": "search", "machine": info, "database": {"bytes": db_size_bytes(path), **counts},
                   "results": json.loads(json.dumps(results))})  # fmt: skip


if __name__ == "__main__":
    main()
