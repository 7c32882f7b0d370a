"""Mutated bodies against the real server: the webhook (signed), a /v1 JSON route and the custom-LLM endpoint.

Starts `agent-memory serve` on a fresh SQLite file (or `--db postgresql://…`), with a fake upstream
model in this process, and sends `--bodies` bodies mutated from Agora's published payloads and
requests: nesting thousands deep, integers of thousands of digits, numbers past the float range,
NaN, lone surrogates, impossible times, truncation, wrong types, flipped bytes and invalid UTF-8.
Webhook bodies are signed after mutating, so only the body is at fault. Counts every status per
target; a 5xx (or no answer, a callback answered `failed`, or a traceback in the server log) is
a failure, and the first few are written out with their bodies. Last line: a JSON summary.

    python bench/fuzz_bodies.py [--bodies 3000] [--seed 1] [--db URL] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from _common import REPO, Server, free_port, machine_info, print_machine, print_summary, work_directory
from aiohttp import web

sys.path.insert(0, str(REPO))
from agent_memory.platforms.agora.signatures import agora_headers

SECRET = "fuzz-notification-secret"
TOKEN = "fuzz-api-token"
LLM_TOKEN = "fuzz-llm-key"
MARK = "\u0000MUTATE\u0000"
FIXTURES = REPO / "fixtures"
WEBHOOK_SEEDS = (
    "agora/103_short_term_memory_example.json",
    "agora/103_custom_llm_speech_times.json",
    "agora/103_tool_calls.json",
    "agora/102_agent_left.json",
    "agora/110_agent_error.json",
    "agora/111_agent_metrics.json",
    "agora/112_turns_finished.json",
    "agora/112_turns_finished_segmented_object.json",
)
TIME_FIELDS = {"timestamp", "start_ts", "stop_ts", "notifyMs", "interrupt_timestamp", "start_at", "end_at",
               "speech_start_ms", "speech_end_ms"}  # fmt: skip


def load(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def seeds() -> dict[str, list[Any]]:
    """Valid bodies per target, each mutated into many."""
    llm = load("agora_llm/custom_llm_request.json")
    llm["messages"] = load("agora_llm/long_term_system_messages.json") + llm["messages"]
    llm.update({"user_id": "u-fuzz", "character_id": "luna", "stream": True})
    return {
        "webhook": [load(name) for name in WEBHOOK_SEEDS],
        "v1_facts": [{"text": "my sister's wedding is on December 14th"}],
        "llm": [llm],
    }


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (the root too)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    holder = value
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = new
    return value


def with_raw(value: Any, path: tuple[Any, ...], raw: bytes) -> bytes:
    """`value` as JSON with the value at `path` replaced by `raw` bytes (which need not be JSON)."""
    marked = replace(copy.deepcopy(value), path, MARK)
    return json.dumps(marked).encode().replace(json.dumps(MARK).encode(), raw, 1)


def mutate(rng: random.Random, seed: Any) -> tuple[str, bytes]:
    """One mutated body and the name of its mutation."""
    where = rng.choice(paths(seed))
    kind = rng.choice(
        ["deep", "huge_int", "past_float", "nan", "surrogate", "time", "truncated", "wrong_type",
         "flipped", "bad_utf8", "deep_in_string", "big_valid_int"]
    )  # fmt: skip
    if kind == "deep":
        depth = rng.choice([129, 500, 999, 1000, 3000, 20000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        return kind, with_raw(seed, where, opener * depth + b"1" + closer * depth)
    if kind == "huge_int":
        return kind, with_raw(
            seed, where, rng.choice([b"", b"-"]) + b"7" * rng.choice([309, 400, 4300, 4301, 20000])
        )
    if kind == "past_float":
        return kind, with_raw(
            seed, where, rng.choice([b"1e400", b"-1e999", b"1.8e308", b"123E+0400", b"0.1e310"])
        )
    if kind == "nan":
        return kind, with_raw(seed, where, rng.choice([b"NaN", b"Infinity", b"-Infinity"]))
    if kind == "surrogate":
        lone = rng.choice(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"])
        strings = [p for p in paths(seed) if isinstance(get(seed, p), str)] or [where]
        target = rng.choice(strings)
        text = get(seed, target)
        cut = rng.randrange(len(text) + 1) if isinstance(text, str) else 0
        new = (text[:cut] + lone + text[cut:]) if isinstance(text, str) else lone
        return kind, json.dumps(replace(copy.deepcopy(seed), target, new), ensure_ascii=True).encode()
    if kind == "time":
        times = [p for p in paths(seed) if p and p[-1] in TIME_FIELDS] or [where]
        raw = rng.choice(
            [
                b"1000000000000000000000000000000",
                b"-1",
                b"1e300",
                b"253402300800000",
                b'"1e30"',
                b"9223372036854775808",
            ]
        )
        return kind, with_raw(seed, rng.choice(times), raw)
    body = json.dumps(seed, ensure_ascii=rng.random() < 0.5).encode()
    if kind == "truncated":
        return kind, body[: rng.randrange(len(body))]
    if kind == "wrong_type":
        new = rng.choice(
            [None, True, 0, -1, 1.5, "", "x" * 100, [], {}, [None], {"": None}, 2**63, -(2**63) - 1]
        )
        return kind, json.dumps(replace(copy.deepcopy(seed), where, new)).encode()
    if kind == "flipped":
        data = bytearray(body)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return kind, bytes(data)
    if kind == "bad_utf8":
        cut = rng.randrange(len(body))
        return kind, body[:cut] + rng.choice([b"\xff", b"\xed\xa0\x80", b"\xc3", b"\xf4\x90\x80\x80"]) + body[
            cut:
        ]
    if kind == "deep_in_string":
        return kind, with_raw(seed, where, json.dumps("[" * 5000 + "{" * 5000).encode())
    return kind, with_raw(seed, where, str(rng.choice([2**63, 2**64, 10**30, -(10**300)])).encode())


def get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


async def fake_upstream(port: int) -> web.AppRunner:
    """A model that answers every chat completion with one short SSE stream."""

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "fake",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}]}  # fmt: skip
        await response.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def send(session: aiohttp.ClientSession, url: str, target: str, body: bytes) -> tuple[int, str | None]:
    """The status, and for a callback answered 200 what became of it (done, partial, failed, …)."""
    if target == "webhook":
        path, headers = "/webhooks/agora", agora_headers(SECRET, body)
    elif target == "v1_facts":
        path, headers = "/v1/users/u-fuzz/characters/luna/facts", {"Authorization": f"Bearer {TOKEN}"}
    else:
        path, headers = "/v1/llm/chat/completions", {"Authorization": f"Bearer {LLM_TOKEN}"}
    headers["Content-Type"] = "application/json"
    async with session.post(url + path, data=body, headers=headers) as resp:
        raw = await resp.read()
        outcome = json.loads(raw).get("status") if target == "webhook" and resp.status == 200 else None
    if outcome == "failed" and not isinstance(json.loads(body).get("payload"), dict):
        outcome = "failed_not_an_object"  # by design: nothing to apply, kept raw for reprocess
    return resp.status, outcome


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    upstream_port = free_port()
    upstream = await fake_upstream(upstream_port)
    env = {
        "AGORA_WEBHOOK_SECRET": SECRET,
        "AGENT_MEMORY_API_TOKEN": TOKEN,
        "AGENT_MEMORY_LLM_TOKEN": LLM_TOKEN,
        "AGENT_MEMORY_UPSTREAM_BASE_URL": f"http://127.0.0.1:{upstream_port}/v1",
        "AGENT_MEMORY_UPSTREAM_API_KEY": "sk-fake",
        "AGENT_MEMORY_LLM_REPLY_SETTLE_S": "0",
    }
    server = Server(args.db or workdir / "fuzz.db", env=env, log_path=workdir / "server.log")
    statuses: dict[str, Counter[int]] = {"webhook": Counter(), "v1_facts": Counter(), "llm": Counter()}
    kinds: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    try:
        await server.wait_healthy()
        print(f"server pid {server.pid} on {server.url}; fake upstream on 127.0.0.1:{upstream_port}")
        all_seeds = seeds()
        targets = list(all_seeds)
        async with aiohttp.ClientSession() as session:
            for number in range(args.bodies):
                target = targets[number % len(targets)]
                seed = copy.deepcopy(rng.choice(all_seeds[target]))
                if target == "webhook":  # a new notice each time, or most would be duplicates
                    seed["noticeId"] = f"fuzz-{args.seed}-{number}"
                kind, body = mutate(rng, seed)
                kinds[kind] += 1
                try:
                    status, outcome = await send(session, server.url, target, body)
                except (TimeoutError, aiohttp.ClientError) as exc:
                    status, outcome = 599, None  # no answer at all counts as a server fault
                    kind = f"{kind} ({type(exc).__name__})"
                statuses[target][status] += 1
                if outcome is not None:
                    outcomes[outcome] += 1
                # A callback answered `failed` lost all of its parts: one bad field must not do that.
                if (status >= 500 or outcome == "failed") and len(failures) < 20:
                    failures.append(
                        {
                            "target": target,
                            "kind": kind,
                            "status": status,
                            "body": body[:2000].decode("utf-8", "replace"),
                        }
                    )
        log_text = server.log_tail(1_000_000)
        unexpected = log_text.count("unexpected error") + log_text.count("Traceback")
    finally:
        server.stop()
        await upstream.cleanup()
    if failures:
        (workdir / "failures.json").write_text(json.dumps(failures, indent=1), encoding="utf-8")
        print(
            f"{len(failures)} failing bodies written to {workdir / 'failures.json'} (use --keep to keep them)"
        )
    total: Counter[int] = sum(statuses.values(), Counter())
    fives = sum(count for status, count in total.items() if status >= 500)
    for target, counter in statuses.items():
        print(f"{target:9} " + "  ".join(f"{status}: {count}" for status, count in sorted(counter.items())))
    print(
        "callbacks answered 200: " + "  ".join(f"{name}: {count}" for name, count in sorted(outcomes.items()))
    )
    print("mutations " + "  ".join(f"{kind}: {count}" for kind, count in sorted(kinds.items())))
    print(
        f"bodies {sum(total.values())}, 5xx {fives}, errors with a traceback in the server log {unexpected}"
    )
    return {
        "bench": "fuzz_bodies",
        "bodies": sum(total.values()),
        "statuses": {str(status): count for status, count in sorted(total.items())},
        "by_target": {t: {str(s): n for s, n in sorted(c.items())} for t, c in statuses.items()},
        "5xx": fives,
        "callback_outcomes": dict(sorted(outcomes.items())),
        "failed_callbacks": outcomes["failed"],
        "unexpected_errors_logged": unexpected,
        "seed": args.seed,
        "backend": "postgres" if args.db and str(args.db).startswith("postgres") else "sqlite",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bodies", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", help="a PostgreSQL URL (default: a fresh SQLite file)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (database, log, failures)"
    )
    args = parser.parse_args()
    print_machine(machine_info())
    with work_directory("fuzz-bodies-", keep=args.keep) as workdir:
        summary = asyncio.run(run(args, workdir))
    print_summary(summary)
    if summary["5xx"] or summary["unexpected_errors_logged"] or summary["failed_callbacks"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
