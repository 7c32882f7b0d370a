"""The start of a call knows the life, not the last call: profile, dated events, open threads (issue 24)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import said, seed, stored_message, wait_for

from agent_memory.condense.base import CondenseInput
from agent_memory.condense.life import PROFILE_HEADING, THREADS_HEADING
from agent_memory.condense.offline import (
    LABEL,
    SUMMARY_MAX_TOKENS,
    condense_offline,
    fits,
    lines_tokens,
    shorten_summary,
)
from agent_memory.core.context import RECENT_HEADING, RECENT_SHARE, build_context
from agent_memory.core.domain import Message, Summary
from agent_memory.core.styles import STYLES
from agent_memory.core.tokens import count_message_tokens

pytestmark = pytest.mark.postgres

DAY_MS = 86_400_000
FIRST_DAY_MS = 1_763_690_000_000  # 2025-11-21 01:53 UTC
COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "silver", "golden"]
HILLS = ["Primrose", "Parliament", "Box", "Pendle", "Kinder", "Malvern", "Cleeve", "Arthur's Seat"]
PET = "So the adoption papers went through, Noodle the rabbit is officially mine now."
RACE = "I ran the city half marathon yesterday and finished in under two hours."
# A trip and a friend's move: life events with no date to resolve and no pet, job or kin in them.
TRIP = "Back from Lapland! Sunburnt, broke and completely happy."
FRIEND_MOVES = "Marcus called, he's packing up and relocating to Tallinn for a research post."


def filler(call: int) -> list[str]:
    """Four distinct, unremarkable statements for one call (nothing about the user's life)."""
    colour, hill = COLOURS[call % 8], HILLS[call // 8 % 8]
    return [
        f"Call {call}: the {colour} kite flew over {hill} hill for {call + 3} minutes.",
        f"Call {call}: I counted {call * 7 + 11} clouds shaped like teapots above {hill}.",
        f"Call {call}: the {colour} umbrella kept {call + 2} strangers dry at the {hill} stop.",
        f"Call {call}: a {colour} balloon drifted past the {hill} clock at {call % 12 + 1} o'clock.",
    ]


async def call(service: Any, number: int, *lines: str) -> None:
    """One call of the user's (a 103 on its own day), condensed as the offline condenser does."""
    contents: list[str] = []
    for line in lines:
        contents += [line, "I see, tell me more."]
    await seed(service, "u-life", "luna", f"LIFE-{number:03d}",
               said(*contents, start_ms=FIRST_DAY_MS + number * DAY_MS))  # fmt: skip
    status, _ = await service.api("POST", "/v1/users/u-life/characters/luna/condense")
    assert status == 202

    async def covered() -> bool | None:
        _status, body = await service.api("GET", "/v1/users/u-life/characters/luna/summary")
        return True if body["summary"] is not None and body["messages_not_yet_covered"] == 0 else None

    await wait_for(covered, 20, failure=f"call {number} was not condensed")


async def start_of_call(service: Any, **params: Any) -> tuple[str, dict[str, Any]]:
    """The joined system_messages of `GET …/system-messages` (1,500 tokens), and the answer."""
    status, body = await service.api(
        "GET", "/v1/users/u-life/characters/luna/system-messages", params={"max_tokens": 1500, **params}
    )
    assert status == 200, body
    parts = []
    for message in body["system_messages"]:
        content = message.get("content") or message.get("parts") or message.get("text") or ""
        parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts), body


# A pet named and a dated event told in the first call are still in the start context forty
# calls later (the old summary kept ~600 tokens of the newest calls' digests and lost them),
# dated with the day said and the day meant, beside the latest turns; in every llm.style.
async def test_an_early_calls_pet_and_dated_event_outlast_forty_later_calls(start_service):
    service = await start_service(job_sweep_s=0.05)
    await call(service, 0, PET, RACE, TRIP, FRIEND_MOVES, *filler(0)[:2])
    for number in range(1, 41):
        await call(service, number, *filler(number))

    text, body = await start_of_call(service)

    assert PROFILE_HEADING in text
    assert f"- [2025-11-21] {PET}" in text
    assert f"- [2025-11-21] {RACE} (yesterday = 20 November 2025)" in text
    assert f"- [2025-11-21] {TRIP}" in text and f"- [2025-11-21] {FRIEND_MOVES}" in text
    assert "Call 0:" not in text  # the first call's small talk is long gone
    assert "Call 40:" in text  # the newest call's digest is there
    assert RECENT_HEADING in text and body["included"]["messages"] > 0
    assert body["tokens"] <= 1500
    for style in STYLES:
        styled, _ = await start_of_call(service, style=style)
        assert "Noodle the rabbit" in styled and "half marathon" in styled, style


# "You said you'd tell me how the interview went": a plan told with its date ahead is an open
# thread at the start of the next call, and is no longer one once the user has told about it.
async def test_an_open_thread_is_shown_until_it_is_followed_up(start_service):
    service = await start_service(job_sweep_s=0.05)
    plan = "My job interview at the bank is next Tuesday, I'll tell you how it goes."
    await call(service, 0, "Hi there, it's been a long week.", plan)

    text, _ = await start_of_call(service)
    assert f"{THREADS_HEADING}\n- [2025-11-21] {plan} (next Tuesday = 25 November 2025)" in text

    await call(service, 3, "The kettle broke again this morning, typical.")
    text, _ = await start_of_call(service)
    assert THREADS_HEADING in text  # nothing said about it yet: still open

    await call(service, 6, "Guess what, the interview went really well and they offered me the job!")
    text, _ = await start_of_call(service)
    assert THREADS_HEADING not in text
    summary = text.split(RECENT_HEADING)[0]
    assert summary.count(plan) == 1  # still in the timeline, where it was said


def offline_memory(calls: int, first: tuple[str, ...] = (PET,)) -> tuple[str, list[Message]]:
    """The offline summary of `calls` calls (the first says `first`, a pet), condensed call by
    call, and the last call's messages."""
    summary: str | None = None
    messages: list[Message] = []
    seq = 0
    for number in range(calls):
        lines = [*first, *filler(number)[:3]] if number == 0 else filler(number)
        messages = []
        for index, line in enumerate(lines):
            for role, text in (("user", line), ("assistant", "I see, tell me more.")):
                seq += 1
                at_ms = FIRST_DAY_MS + number * DAY_MS + index * 60_000
                messages.append(stored_message(seq, role, text, at_ms=at_ms, agent_id=f"run-{number}"))
        job = CondenseInput(user_id="u-1", character_id="luna", previous_summary=summary, messages=messages)
        summary = condense_offline(job).summary
    assert summary is not None
    return summary, messages


# The split of a start context: the latest turns keep RECENT_SHARE of max_tokens, the summary
# the rest, trimmed by what it says (the weakest bullets, the oldest digests: the profile and
# the newest call stay) rather than cut at its end, which lost the newest calls first.
def test_a_full_summary_leaves_the_latest_turns_their_share_and_keeps_its_profile() -> None:
    text, messages = offline_memory(40)
    summary = Summary(user_id="u-1", character_id="luna", text=text, watermark_id=1, covered_until_ms=None,
                      message_count=1, method="offline", model="offline", created_ms=FIRST_DAY_MS,
                      updated_ms=FIRST_DAY_MS)  # fmt: skip
    assert count_message_tokens(text) > 1000 > SUMMARY_MAX_TOKENS * 0.5

    context = build_context(facts=[], summary=summary, messages=messages, max_tokens=1000,
                            shorten_summary=shorten_summary)  # fmt: skip

    summary_part, recent_part = context.system_messages[0]["content"], context.system_messages[1]["content"]
    assert recent_part.startswith(RECENT_HEADING)
    assert count_message_tokens(recent_part) >= 1000 * RECENT_SHARE * 0.8
    assert context.included["messages"] > 0 and context.tokens <= 1000
    assert PROFILE_HEADING in summary_part and PET in summary_part
    assert "Call 39:" in summary_part  # the newest call's digest survives the trim


# Where the 1,500 tokens go: a digest's header is its day alone (its time of day and number of
# exchanges cost ~15 tokens a call), the latest turns are reserved RECENT_SHARE (0.05: measured,
# bench/README.md), and a trip or a friend's move told in the first call stays in the profile
# sixty calls later, beside the newest call's digest, each section within the budget.
def test_at_1500_tokens_a_first_calls_trip_and_friends_move_outlast_sixty_later_calls() -> None:
    text, messages = offline_memory(60, first=(PET, TRIP, FRIEND_MOVES))
    summary = Summary(user_id="u-1", character_id="luna", text=text, watermark_id=1, covered_until_ms=None,
                      message_count=1, method="offline", model="offline", created_ms=FIRST_DAY_MS,
                      updated_ms=FIRST_DAY_MS)  # fmt: skip

    context = build_context(facts=[], summary=summary, messages=messages, max_tokens=1500,
                            shorten_summary=shorten_summary)  # fmt: skip

    summary_part, recent_part = context.system_messages[0]["content"], context.system_messages[1]["content"]
    assert f"- [2025-11-21] {TRIP}" in summary_part and f"- [2025-11-21] {FRIEND_MOVES}" in summary_part
    assert "Call 59:" in summary_part and "\n2026-01-19:\n" in summary_part  # the newest call, under its day
    assert "UTC (" not in summary_part and "exchanges" not in summary_part
    assert RECENT_SHARE == 0.05 and count_message_tokens(recent_part) >= 1500 * RECENT_SHARE * 0.8
    assert context.tokens <= 1500


# At 1,500 tokens a full offline summary is shown whole: it may hold ~1,400 tokens (more of a
# life), and the latest turns are reserved a twentieth, not a tenth, which would cut it
# (bench/recall_hard.py --set life, --details 2 and --set hard: system_messages +1.6 to +3.6 points).
def test_at_1500_tokens_the_fullest_offline_summary_is_shown_whole_beside_a_few_latest_turns() -> None:
    lines = [LABEL, "2025-03-01:"]
    for number in range(100):  # the longest summary the condenser keeps
        line = f"- Call {number}: the plumber said the boiler needs {number % 17 + 2} valves and a {number * 37} euro part."
        if not fits([*lines, line]):
            break
        lines.append(line)
    text = "\n".join(lines)
    assert lines_tokens(lines) > SUMMARY_MAX_TOKENS - 40 >= 1350 and count_message_tokens(text) > 1300
    summary = Summary(user_id="u-1", character_id="luna", text=text, watermark_id=1, covered_until_ms=None,
                      message_count=1, method="offline", model="offline", created_ms=FIRST_DAY_MS,
                      updated_ms=FIRST_DAY_MS)  # fmt: skip
    messages = [  # more latest turns than any share holds
        stored_message(
            seq, "user", f"Turn {seq}: the kettle broke, I walked to the café.", at_ms=FIRST_DAY_MS + seq
        )
        for seq in range(1, 41)
    ]

    context = build_context(facts=[], summary=summary, messages=messages, max_tokens=1500,
                            shorten_summary=shorten_summary)  # fmt: skip

    assert not context.included["summary_shortened"] and context.included["messages"] > 0
    assert text in context.system_messages[0]["content"] and context.tokens <= 1500
