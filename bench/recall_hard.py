"""Hard recall benchmark: paraphrased, multi-session, temporal, other-person and inference questions.

    python bench/recall_hard.py [--set hard|life] [--en 8] [--zh 4] [--seed 11] [--sessions 10 13]
                                [--exchanges 22 30] [--condense session|end|off] [--concurrency 8] [--keep]
                                [--db PATH] [--misses] [--teller user|character] [--named] [--details 1|2]

The data is synthetic: `--set hard` (the default) is bench/recall_hard_data.py, some fifteen facts
of a user's life among small talk; `--set life` is bench/life_data.py, some fifty details over
about twenty calls told by both speakers in long turns, far more than a start context can quote
(seeded templates, see their docstrings; seed 21 by default, sessions 18-24 of 14-20 exchanges;
`--details 2` tells sixteen more kinds, some seventy details a user, bench/life_more.py). Every
session goes to the real server as a signed Agora 103 callback, round by round, condensed with
the offline condenser as bench/recall.py does (`--condense session` by default). Then each
question is answered, side by side in one run, by:

- `recall_500` / `recall_1000`: `GET …/recall?q=<question>&max_tokens=…`, its
  `system_message.content` only;
- `system_messages_1500`: `GET …/system-messages?max_tokens=1500`, the joined contents;
- `recency_*`: the latest raw turns sent as `speaker: text` lines filling the budget;
- `bm25s_*`: bm25s (default parameters; English stop words; character bigrams for Chinese) over
  the raw turns sent as `speaker: text` lines, in rank order while they fit the budget.

Baselines fill their budget at ~4 characters a token, as the held-out scoring does. A question
counts when its gold answer, or the first 60 characters of every evidence turn, appears in the
text (lowercased, punctuation folded to spaces). Prints hit rates per question type and
language, then the JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import bm25s
import recall
from _common import Server, machine_info, print_machine, print_summary, work_directory
from life_data import first_person, second_person
from life_data import generate as generate_life
from recall_hard_data import CHARACTERS, LANGUAGES, TYPES, User, fold, generate, leaks

PAIR = recall.PAIR
METRICS = ("recall_500", "recall_1000", "system_messages_1500", "bm25s_500", "bm25s_1000",
           "recency_500", "recency_1000", "recency_1500")  # fmt: skip
CHARS_PER_TOKEN = 4
TELLERS = ("user", "character")


def fill(lines: Sequence[str], budget: int) -> list[str]:
    """The leading `lines` that fit in `budget` tokens at ~4 characters a token."""
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + 1
        if used + cost > budget * CHARS_PER_TOKEN:
            break
        kept.append(line)
        used += cost
    return kept


def bigrams(text: str) -> list[str]:
    """Character bigrams of the letters and digits of `text` (for Chinese)."""
    tokens: list[str] = []
    for run in re.findall(r"\w+", text.lower()):
        tokens.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return tokens


class Bm25:
    """bm25s over one pair's `speaker: text` lines."""

    def __init__(self, lines: list[str], language: str) -> None:
        self.lines, self.language = lines, language
        self.retriever = bm25s.BM25()
        self.retriever.index(self.tokens(lines), show_progress=False)

    def tokens(self, texts: list[str]) -> list[list[str]]:
        if self.language == "zh":
            return [bigrams(text) for text in texts]
        return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)  # type: ignore[no-any-return]

    def ranked(self, query: str) -> list[str]:
        tokens = self.tokens([query])
        if not tokens[0]:
            return []
        docs, scores = self.retriever.retrieve(tokens, k=min(200, len(self.lines)), show_progress=False)
        return [self.lines[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def speaker_lines(user: User) -> list[str]:
    """The raw turns sent, as `speaker: text`, oldest first (the user's name, the character's)."""
    character = CHARACTERS[user.language][int(user.user_id[-2:]) % 2]
    return [
        f"{user.name if m['role'] == 'user' else character}: {m['content']}"
        for s in user.sessions
        for m in s["contents"]
    ]


# `--misses` asks each question recall_500 missed again with this budget: an evidence turn found
# there was ranked below the budget, one not found there was not recalled at all (no word matched).
DEEP_TOKENS = 20_000


async def ask(
    session: aiohttp.ClientSession, url: str, users: Sequence[User], *, deep: bool = False
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for user in users:
        pair = PAIR.format(url=url, user=user.user_id, character=user.character_id)
        lines = speaker_lines(user)
        recent = {b: "\n".join(reversed(fill(lines[::-1], b))) for b in (500, 1000, 1500)}
        status, context = await recall.get_json(session, f"{pair}/system-messages", max_tokens=1500)
        assert status == 200, context
        start = "\n".join(str(m.get("content") or "") for m in context["system_messages"])
        index = Bm25(lines, user.language)
        for q in user.questions:
            row: dict[str, Any] = {"question": q, "system_messages_1500": q.answered_by(start)}
            for budget in (500, 1000):
                status, answer = await recall.get_json(session, f"{pair}/recall", q=q.text, max_tokens=budget)
                assert status == 200, answer
                text = str((answer.get("system_message") or {}).get("content") or "")
                row[f"recall_{budget}"] = q.answered_by(text)
                row[f"recall_{budget}_text"] = text
                row[f"recall_{budget}_tokens"] = int(answer.get("tokens") or 0)
                row[f"bm25s_{budget}"] = q.answered_by("\n".join(fill(index.ranked(q.text), budget)))
            for budget, text in recent.items():
                row[f"recency_{budget}"] = q.answered_by(text)
            if deep and not row["recall_500"]:
                status, answer = await recall.get_json(
                    session, f"{pair}/recall", q=q.text, max_tokens=DEEP_TOKENS
                )
                assert status == 200, answer
                row["deep"] = [fold(str(m.get("text") or ""))[:200] for m in answer.get("memories") or []]
            rows.append(row)
    return rows


def print_misses(rows: Sequence[dict[str, Any]], shown: int = 4) -> None:
    """Each question recall_500 missed: its type, the question, its evidence turns and gold, and
    the first `shown` memories recall gave instead (what outranked the evidence)."""
    for row in rows:
        if row["recall_500"]:
            continue
        q = row["question"]
        print(f"missed [{q.type}/{q.language}] {q.user_id} {q.text!r} gold={q.answer!r} "
              f"recall_1000={row['recall_1000']} bm25s_500={row['bm25s_500']}")  # fmt: skip
        for turn in q.evidence:
            print(f"    evidence ({where(turn.content, row)}): {turn.content!r}")
        lines = [line for line in row["recall_500_text"].splitlines()[1:] if line.startswith("- ")]
        for line in lines[:shown]:
            print(f"    instead:  {line[:150]}")
        if not lines:
            print("    instead:  (nothing recalled)")


def where(content: str, row: dict[str, Any]) -> str:
    """Where recall left an evidence turn: shown at 500 tokens, ranked below the budget (its place
    among the memories of a recall at `DEEP_TOKENS`), or not recalled (no word of it matched)."""
    opening = fold(content[:60])
    if opening in fold(row["recall_500_text"]):
        return "shown"
    place = next((i for i, text in enumerate(row.get("deep", ())) if text.startswith(opening)), None)
    return "not recalled" if place is None else f"ranked {place + 1}, below the budget"


def swap_roles(users: Sequence[User]) -> None:
    """The character tells the life and the user answers with the small talk (`--teller character`):
    the questions are then about what the other speaker said of their own life, and ask it so (the
    user asks "What did you win?" of what the character won: "I" is always the user)."""
    for user in users:
        for session in user.sessions:
            for message in session["contents"]:
                message["role"] = "assistant" if message["role"] == "user" else "user"
        user.questions[:] = [
            dataclasses.replace(q, teller="character", text=second_person(q.text, user.language))
            if q.teller == "user"
            else dataclasses.replace(q, teller="user", text=first_person(q.text, user.language))
            for q in user.questions
        ]


# How two people who know each other open and close a call, by name (`--named`).
GREETINGS = {
    "en": (("Hi {name}!", "Hey {name}, good to hear from you.", "{name}! Hello again."),
           ("Talk soon, {name}.", "Bye for now, {name}!", "Take care, {name}.")),
    "zh": (("{name}你好！", "嗨，{name}！", "{name}，又见面啦。"), ("{name}，回头聊。", "拜拜，{name}！", "{name}，保重。")),
}  # fmt: skip
# A question about someone's life as an outsider asks it: by their name (N), no "I" or "you".
THIRD_PERSON_EN = (
    (r"\b(?:did|have) (?:I|you) tell (?:you|me)\b", "did N mention"), (r"\b(?:I|you) told (?:you|me)\b", "N mentioned"),
    (r"\bam I\b", "is N"), (r"\bare you\b", "is N"), (r"\bhave (?:I|you)\b", "has N"),
    (r"\bdo (?:I|you)\b", "does N"), (r"\b(?:I'd|you'd)\b", "N had"), (r"\b(?:I'm|you're)\b", "N is"),
    (r"\b(?:I've|you've)\b", "N has"), (r"\b(?:my|your)\b", "N's"), (r"\b(?:we)\b", "N and co"),
    (r"\b(?:our)\b", "N's"), (r"\b(?:I|you|me)\b", "N"),
)  # fmt: skip


def name_speakers(users: Sequence[User]) -> None:
    """`--named`: the speakers greet each other by name at each call's start and end (as people who
    know each other do), and every question names whom it asks about instead of "I" or "you"."""
    for user in users:
        character = CHARACTERS[user.language][int(user.user_id[-2:]) % 2]
        hello, bye = GREETINGS[user.language]
        rng = random.Random(user.user_id)
        changed: dict[tuple[str, int], str] = {}
        for session in user.sessions:
            contents = session["contents"]
            for role, other in (("user", character), ("assistant", user.name)):
                said = [i for i, m in enumerate(contents) if m["role"] == role]
                for index, lines, at_start in ((said[0], hello, True), (said[-1], bye, False)):
                    greeting = rng.choice(lines).format(name=other)
                    text = contents[index]["content"]
                    gap = "" if user.language == "zh" else " "
                    contents[index]["content"] = (
                        f"{greeting}{gap}{text}" if at_start else f"{text}{gap}{greeting}"
                    )
                    changed[(session["agent_id"], index)] = contents[index]["content"]
        roles = {(s["agent_id"], i): m["role"] for s in user.sessions for i, m in enumerate(s["contents"])}
        for number, q in enumerate(user.questions):
            first = q.evidence[0]
            teller = user.name if roles[(first.agent_id, first.index)] == "user" else character
            evidence = tuple(
                dataclasses.replace(t, content=changed.get((t.agent_id, t.index), t.content))
                for t in q.evidence
            )
            user.questions[number] = dataclasses.replace(
                q, text=third_person(q.text, user.language, teller), evidence=evidence
            )


def third_person(text: str, language: str, name: str) -> str:
    """A question in the first or second person asked of `name` in the third."""
    if language == "zh":
        return re.sub("[我你]", name, text)
    for pattern, into in THIRD_PERSON_EN:
        text = re.sub(pattern, into.replace("N", name), text)
    return text


def rates(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for metric in METRICS:
        out[metric] = round(100 * sum(r[metric] for r in rows) / len(rows), 1) if rows else None
    return out


def report(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "overall": rates(rows),
        "by_type": {t: rates([r for r in rows if r["question"].type == t]) for t in TYPES},
        "by_language": {
            lang: rates([r for r in rows if r["question"].language == lang]) for lang in LANGUAGES
        },
        "by_teller": {
            teller: rates([r for r in rows if r["question"].teller == teller]) for teller in TELLERS
        },
    }


def print_table(figures: dict[str, Any]) -> None:
    header = f"{'questions':<20}{'n':>5}" + "".join(f"{m:>22}" for m in METRICS)
    print(header)
    print("-" * len(header))
    lines = [("all", figures["overall"]), *figures["by_type"].items(), *figures["by_language"].items(),
             *((f"told by {teller}", line) for teller, line in figures["by_teller"].items())]  # fmt: skip
    for name, line in lines:
        if not line["n"]:
            continue
        print(f"{name:<20}{line['n']:>5}" + "".join(f"{line[m]:>21.1f}%" for m in METRICS))


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    info = machine_info()
    print_machine(info)
    if args.set == "life":
        users = generate_life(args.en, args.zh, seed=args.seed, sessions=tuple(args.sessions),
                              exchanges=tuple(args.exchanges), details=args.details)  # fmt: skip
    else:
        users = generate(args.en, args.zh, seed=args.seed, sessions=tuple(args.sessions),
                         exchanges=tuple(args.exchanges), filler=args.filler)  # fmt: skip
    if args.teller == "character":
        swap_roles(users)
    if args.named:
        name_speakers(users)
    leaked = leaks(users)
    messages = sum(len(s["contents"]) for u in users for s in u.sessions)
    print(f"generated {len(users)} users ({args.en} English, {args.zh} Chinese), "
          f"{sum(len(u.sessions) for u in users)} sessions, {messages:,} messages, "
          f"{sum(len(u.questions) for u in users)} questions; gold answers said elsewhere: {len(leaked)}")  # fmt: skip
    env = {"AGORA_WEBHOOK_SECRET": recall.SECRET, "AGENT_MEMORY_LOG_LEVEL": "WARNING",
           "AGENT_MEMORY_JOB_SWEEP_S": "0.2"}  # fmt: skip
    if args.condense == "off":
        env.update({"AGENT_MEMORY_SUMMARY_DELAY_S": "3600", "AGENT_MEMORY_SUMMARY_MAX_MESSAGES": "100000000"})
    else:
        env.update({"AGENT_MEMORY_SUMMARY_DELAY_S": "0.1", "AGENT_MEMORY_SUMMARY_MAX_WAIT_S": "0.1"})
    db = Path(args.db) if args.db else workdir / "hard.db"
    reuse = db.exists()
    server = Server(db, env=env, log_path=workdir / "server.log")
    try:
        await server.wait_healthy()
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            if reuse:  # asked again of a database a run with the same arguments filled
                ingested = {"sessions": 0, "seconds": 0.0, "condense_s": 0.0, "errors": [], "dead_jobs": 0}
            else:
                ingested = await recall.ingest(session, server.url, users, args)  # type: ignore[arg-type]
            print(f"ingested {ingested['sessions']} sessions in {ingested['seconds']:.1f} s (condensing "
                  f"{args.condense}: {ingested['condense_s']:.1f} s); {len(ingested['errors'])} errors, "
                  f"{ingested['dead_jobs']} dead jobs")  # fmt: skip
            asked = time.perf_counter()
            rows = await ask(session, server.url, users, deep=args.misses)
            print(f"asked {len(rows)} questions in {time.perf_counter() - asked:.1f} s")
    finally:
        exit_code = server.stop()
    figures = report(rows)
    used = {b: round(sum(r[f"recall_{b}_tokens"] for r in rows) / max(len(rows), 1), 1) for b in (500, 1000)}
    print()
    print_table(figures)
    print(f"recall used on average {used[500]} of 500 tokens and {used[1000]} of 1,000")
    # How much of a life the start context holds: the questions it answers a user, of how many.
    capacity = round(sum(r["system_messages_1500"] for r in rows) / max(len(users), 1), 1)
    print(
        f"system_messages_1500 answered {capacity} questions a user, of {len(rows) / max(len(users), 1):.1f}"
    )
    if args.misses:
        print_misses(rows)
    return {
        "bench": "recall_hard", "set": args.set, "seed": args.seed, "en": args.en, "zh": args.zh, "condense": args.condense,
        "details": args.details, "filler": args.filler, "teller": args.teller, "named": args.named,
        "sessions": ingested["sessions"], "messages": messages, "questions": len(rows), **figures,
        "recall_mean_tokens": used, "start_answers_per_user": capacity, "gold_leaks": len(leaked), "errors": len(ingested["errors"]), "dead_jobs": ingested["dead_jobs"],
        "server_exit": exit_code, "machine": info,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--en", type=int, default=8, help="English users")
    parser.add_argument("--zh", type=int, default=4, help="Chinese users")
    parser.add_argument("--set", choices=("hard", "life"), default="hard",
                        help="the data: fifteen facts a user among small talk (hard), or a life told at length by both speakers (life)")  # fmt: skip
    parser.add_argument("--seed", type=int, help="11 for the hard set, 21 for the life set by default")
    parser.add_argument(
        "--sessions", type=int, nargs=2, metavar=("LO", "HI"), help="10 13 (hard), 18 24 (life)"
    )
    parser.add_argument(
        "--exchanges", type=int, nargs=2, metavar=("LO", "HI"), help="22 30 (hard), 14 20 (life)"
    )
    parser.add_argument("--condense", choices=("session", "end", "off"), default="session")
    parser.add_argument("--filler", choices=("varied", "templates"), default="varied",
                        help="small talk mostly of lines seldom said twice (the default: a question-blind pick of the lines said once answers most of `templates`), or from a few repeated templates")  # fmt: skip
    parser.add_argument("--details", type=int, choices=(1, 2), default=1,
                        help="--set life: 2 tells about 60 %% more details a user (sixteen more kinds) in as many calls")  # fmt: skip
    parser.add_argument("--named", action="store_true",
                        help="the speakers greet each other by name, and the questions ask about them by name (no I or you)")  # fmt: skip
    parser.add_argument("--teller", choices=("user", "character"), default="user",
                        help="who tells the life: the user (the default), or the character, the user saying the small talk")  # fmt: skip
    parser.add_argument("--condense-timeout", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    parser.add_argument(
        "--misses",
        action="store_true",
        help="print the questions recall_500 missed, their evidence (shown, ranked below the budget, or "
        "not recalled: asked again at 20,000 tokens) and what recall gave instead",
    )
    parser.add_argument("--db", help="this database file: filled when missing, else only asked again")
    args = parser.parse_args()
    life = args.set == "life"
    args.seed = args.seed if args.seed is not None else (21 if life else 11)
    args.sessions = args.sessions or ([18, 24] if life else [10, 13])
    args.exchanges = args.exchanges or ([14, 20] if life else [22, 30])
    with work_directory("agent-memory-recall-hard-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    print_summary(summary)
    return 0 if not summary["errors"] and not summary["dead_jobs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
