"""Rendering: Agora's extended short-term-memory messages as plain OpenAI messages, and the dated
transcript (system_messages, the condensing LLM's input) with relative dates resolved."""

from __future__ import annotations

import copy
from typing import Any

from conftest import load_fixture, stored_message

from agent_memory.condense.base import CondenseInput
from agent_memory.condense.prompt import SYSTEM_PROMPT, build_user_content
from agent_memory.core.render import render_transcript, said_text, transcript_entries
from agent_memory.platforms.agora.custom_llm import RenderOptions, to_openai_messages

SCARECROW = "Why did the scarecrow win an award? Because he was outstanding in his field!"


def example() -> list[dict[str, Any]]:
    """AGORA.md's six-message example (10-digit second timestamps, one uid, an interruption)."""
    return load_fixture("agora/103_short_term_memory_example.json")["payload"]["contents"]


def multiuser() -> list[dict[str, Any]]:
    envelopes = load_fixture("conversations/multiuser_channel.json")
    return next(e for e in envelopes if e["eventType"] == 103)["payload"]["contents"]


def test_example_has_times_before_content_and_no_speaker_names_for_one_user():
    rendered = to_openai_messages(example())
    assert [m["role"] for m in rendered] == [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "assistant",
    ]
    assert rendered[0] == {"role": "assistant", "content": "[2023-03-15 17:27 UTC] How can I help you today?"}
    assert rendered[1] == {"role": "user", "content": "[2023-03-15 17:27 UTC] Can you tell me a joke?"}
    assert rendered[3]["content"] == "[2023-03-15 18:33 UTC] You know what? Tell me a story instead."
    assert all(set(m) == {"role", "content"} for m in rendered)
    assert not any("user123" in m["content"] for m in rendered)


def test_interrupted_reply_is_noted_with_the_unheard_rest():
    rendered = to_openai_messages(example())
    assert rendered[2]["content"] == (
        "[2023-03-15 17:27 UTC] Why did the scarecrow… [interrupted by the user; the unheard rest: "
        "win an award? Because he was outstanding in his field!]"
    )
    heard = to_openai_messages(example(), RenderOptions(interruptions="heard"))
    assert heard[2]["content"] == "[2023-03-15 17:27 UTC] Why did the scarecrow"


def test_interruption_whose_original_is_not_a_continuation_says_what_was_meant():
    message = {
        "role": "assistant",
        "content": "Sure, the capital",
        "metadata": {"interrupted": True, "original": "The capital of Portugal is Lisbon."},
    }
    rendered = to_openai_messages([message], RenderOptions(time="none"))
    assert rendered == [{
        "role": "assistant",
        "content": "Sure, the capital… [interrupted by the user; it was going to say: "
                   "The capital of Portugal is Lisbon.]",
    }]  # fmt: skip
    bare = {**message, "metadata": {"interrupted": "true"}}
    assert to_openai_messages([bare], RenderOptions(time="none"))[0]["content"] == (
        "Sure, the capital… [interrupted by the user]"
    )


def test_speaker_names_when_several_users_share_the_channel():
    rendered = to_openai_messages(multiuser())
    users = [m["content"] for m in rendered if m["role"] == "user"]
    assert users[0] == "[2026-11-16 09:20 UTC] User 2001: Hi, it's Jordan."
    assert users[1] == "[2026-11-16 09:20 UTC] User 2002: Priya here, hi!"
    assert all(": " in u.split("] ", 1)[1] and u.split("] ", 1)[1].startswith("User 200") for u in users)
    assistants = [m["content"] for m in rendered if m["role"] == "assistant"]
    assert not any("User 200" in a or "Assistant:" in a for a in assistants)
    never = to_openai_messages(multiuser(), RenderOptions(speakers="never"))
    assert not any("User 200" in m["content"] for m in never)


def test_speakers_always_names_even_a_single_user():
    rendered = to_openai_messages(example(), RenderOptions(speakers="always"))
    assert rendered[1]["content"] == "[2023-03-15 17:27 UTC] User user123: Can you tell me a joke?"
    assert rendered[0]["content"] == "[2023-03-15 17:27 UTC] How can I help you today?"


def test_time_options():
    minute = to_openai_messages(example(), RenderOptions(time="time"))
    assert minute[0]["content"] == "[17:27] How can I help you today?"
    none = to_openai_messages(example(), RenderOptions(time="none"))
    assert none[0]["content"] == "How can I help you today?"
    undated = to_openai_messages([{"role": "user", "content": "no time given"}])
    assert undated == [{"role": "user", "content": "no time given"}]


def test_seconds_and_milliseconds_render_the_same():
    in_seconds = example()
    in_ms = copy.deepcopy(in_seconds)
    for message in in_ms:
        message["timestamp"] *= 1000
        message["metadata"].pop("interrupt_timestamp", None)
    assert to_openai_messages(in_ms) == to_openai_messages(in_seconds)
    as_text = copy.deepcopy(in_seconds)
    for message in as_text:
        message["timestamp"] = str(message["timestamp"])
    assert to_openai_messages(as_text) == to_openai_messages(in_seconds)


def test_empty_content_is_dropped_unless_asked_to_keep_it():
    messages = [
        {"role": "user", "content": "Hello?", "timestamp": 1678901234},
        {"role": "user", "content": "   ", "timestamp": 1678901235},
        {"role": "assistant", "content": "", "timestamp": 1678901236},
        {"role": "assistant", "content": "Hi!", "timestamp": 1678901237},
    ]
    rendered = to_openai_messages(messages, RenderOptions(time="none"))
    assert rendered == [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hi!"}]
    kept = to_openai_messages(messages, RenderOptions(time="none", drop_empty=False))
    assert [m["role"] for m in kept] == ["user", "user", "assistant", "assistant"]
    assert [m["content"].strip() for m in kept] == ["Hello?", "", "", "Hi!"]


def test_an_interrupted_reply_with_nothing_heard_is_still_rendered():
    message = {
        "role": "assistant",
        "content": "",
        "metadata": {"interrupted": True, "original": "Let me explain the plan."},
    }
    rendered = to_openai_messages([message], RenderOptions(time="none"))
    assert len(rendered) == 1 and "Let me explain the plan." in rendered[0]["content"]


def test_stored_rows_render_like_the_messages_they_came_from():
    rows = [
        {
            "role": m["role"],
            "content": m["content"],
            "ts_ms": m["timestamp"] * 1000,
            "speaker": m["metadata"].get("user"),
            "interrupted": bool(m["metadata"].get("interrupted")),
            "original": m["metadata"].get("original"),
        }
        for m in example()
    ]
    assert to_openai_messages(rows) == to_openai_messages(example())


# -- over HTTP ---------------------------------------------------------------------------------


async def test_render_endpoint_over_http(service):
    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": multiuser(), "options": {"time": "time", "speakers": "auto"}},
    )  # fmt: skip
    assert status == 200
    assert body["messages"] == to_openai_messages(multiuser(), RenderOptions(time="time"))
    assert body["messages"][1] == {"role": "user", "content": "[09:20] User 2001: Hi, it's Jordan."}

    status, body = await service.api("POST", "/v1/render/openai-messages", json={"messages": example()})
    assert status == 200 and SCARECROW.split("crow ", 1)[1] in body["messages"][2]["content"]


async def test_render_endpoint_renders_what_the_service_stored(service):
    await service.callback(load_fixture("agora/103_short_term_memory_example.json"))
    status, stored = await service.api("GET", "/v1/users/u-1/characters/luna/messages")
    assert status == 200 and len(stored["messages"]) == 6
    status, body = await service.api(
        "POST", "/v1/render/openai-messages", json={"messages": stored["messages"]}
    )
    assert status == 200
    assert body["messages"] == to_openai_messages(example())


async def test_render_endpoint_rejects_bad_input_with_422(service):
    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": [{"content": "who am I?", "timestamp": 1678901234}]},
    )  # fmt: skip
    assert status == 422
    assert body["error"]["code"] == "invalid_field" and "role" in body["error"]["message"]

    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": example(), "options": {"speakers": "sometimes"}},
    )  # fmt: skip
    assert status == 422 and "speakers" in body["error"]["message"]

    status, body = await service.api("POST", "/v1/render/openai-messages", json={"messages": "hi"})
    assert status == 422

    status, body = await service.api("POST", "/v1/render/openai-messages", json={"messages": []}, token=None)
    assert status == 401


async def test_render_endpoint_rejects_a_stored_shape_message_without_role(service):
    status, body = await service.api(
        "POST", "/v1/render/openai-messages", json={"messages": [{"content": "hi", "ts_ms": 1}]}
    )
    assert status == 422, body
    assert "role" in body["error"]["message"]
    status, body = await service.api(
        "POST", "/v1/render/openai-messages",
        json={"messages": [{"role": "user", "content": None, "at_ms": 5}], "options": {"drop_empty": False}},
    )  # fmt: skip
    assert status == 200, body  # a null content is empty text, never a 500
    assert body["messages"] == [{"role": "user", "content": ""}]


# -- the dated transcript ------------------------------------------------------------------------
MONDAY = 1_683_554_160_000  # 2023-05-08 13:56 UTC
DAY = 86_400_000


def test_transcript_lines_resolve_relative_dates_against_their_own_time():
    messages = [
        stored_message(1, "user", "I went to a support group yesterday.", at_ms=MONDAY),
        # Said a day later; `at_ms` (the session start) is not when it was said.
        stored_message(2, "user", "Next month I'm starting a course.", at_ms=MONDAY, ts_ms=MONDAY + DAY),
        stored_message(3, "user", "No dates here.", at_ms=MONDAY + DAY, ts_ms=None),
        stored_message(4, "assistant", "上周五你说过的。", at_ms=MONDAY + DAY),
    ]

    assert render_transcript(messages).splitlines() == [
        "— 2023-05-08 —",
        "[13:56] User: I went to a support group yesterday. (yesterday = 7 May 2023)",
        "— 2023-05-09 —",
        "[13:56] User: Next month I'm starting a course. (Next month = June 2023)",
        "[13:56] User: No dates here.",
        "[13:56] Assistant: 上周五你说过的。 (上周五 = 2023年5月5日)",
    ]


def test_the_day_itself_needs_no_note_under_its_day_header():
    messages = [stored_message(1, "user", "Tonight I rest; tomorrow I fly.", at_ms=MONDAY)]

    (entry,) = transcript_entries(messages)

    assert entry.text == "[13:56] User: Tonight I rest; tomorrow I fly. (tomorrow = 9 May 2023)"


def test_an_interrupted_reply_keeps_its_marks_and_gets_the_note_after_them():
    message = stored_message(
        1, "assistant", "See you tomorrow at the", at_ms=MONDAY, interrupted=True,
        original="See you tomorrow at the park. Next Friday is the concert.",
    )  # fmt: skip

    (entry,) = transcript_entries([message])

    said = said_text(message.content, message.interrupted, message.original)
    assert said == (
        "See you tomorrow at the… [interrupted by the user; the unheard rest: park. Next Friday is the concert.]"
    )
    # The whole said text is dated, what was meant included.
    assert entry.text == f"[13:56] Assistant: {said} (tomorrow = 9 May 2023; Next Friday = 19 May 2023)"


def test_the_condensing_llm_reads_the_resolved_dates():
    messages = [
        stored_message(1, "user", "My sister's wedding is this Saturday.", at_ms=MONDAY),
        stored_message(2, "user", "我昨天去了医院。", at_ms=MONDAY + DAY),
    ]

    content = build_user_content(CondenseInput(user_id="u-1", character_id="luna", messages=messages))

    assert "User: My sister's wedding is this Saturday. (this Saturday = 13 May 2023)" in content
    assert "User: 我昨天去了医院。 (昨天 = 2023年5月8日)" in content
    assert "(yesterday = " in SYSTEM_PROMPT  # the model is told what the notes mean
