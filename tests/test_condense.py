"""LLMCondenser against a fake OpenAI endpoint, over loopback HTTP, through the real SDK."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from conftest import stored_message

from agent_memory.condense import make_condenser
from agent_memory.condense.base import (
    SUMMARY_MAX_CHARS,
    CondenseInput,
    CondenseOutput,
    FactAdd,
    FactIn,
    FactUpdate,
    sanitize,
)
from agent_memory.condense.offline import OfflineCondenser
from agent_memory.condense.openai_compatible import LLMCondenser, LLMRanker
from agent_memory.condense.prompt import output_json_schema
from agent_memory.core.domain import Message
from agent_memory.core.facts import MAX_FACT_CHARS
from agent_memory.core.render import render_transcript
from agent_memory.errors import LLMBadOutput, LLMError, LLMUnavailable
from agent_memory.settings import Settings
from tests.fakes.openai_server import FakeOpenAI, Reply, estimate_prompt_tokens

DAY_MS = 1_793_736_900_000  # 2026-11-03 20:15 UTC


def msg(seq: int, role: str, content: str, **extra: Any) -> Message:
    """Alice's message as the store hands it to condensers."""
    return stored_message(
        seq, role, content, at_ms=DAY_MS + seq * 7_000, user_id="u-alice",
        source="asr" if role == "user" else "llm", speaker="1001" if role == "user" else None,
        **extra,
    )  # fmt: skip


FACTS = [
    FactIn(id=1, text="The user's name is Alice.", scope="user", pinned=True),
    FactIn(id=2, text="The user works night shifts.", scope="user", pinned=False),
    FactIn(id=3, text="Luna promised to quiz the user on cardiac rhythms.", scope="character"),
]
CONVERSATION = [
    msg(1, "assistant", "Welcome back, Alice! How was the night?"),
    msg(2, "user", "Rough. Oh, and remember that my exam is on the 22nd."),
    msg(
        3,
        "assistant",
        "The 22nd, so about two weeks",
        interrupted=True,
        original="The 22nd, so about two weeks from now. We can start practising tonight.",
    ),
    msg(4, "user", "I switched to day shifts, by the way."),
]
GOOD = {
    "summary": "Alice had a rough night; her exam is on the 22nd and she moved to day shifts.",
    "add_facts": [{"text": "The user's exam is on the 22nd.", "scope": "user"}],
    "update_facts": [{"id": 2, "text": "The user works day shifts."}],
    "remove_facts": [],
}


def job(messages: list[Message] = CONVERSATION, **overrides: Any) -> CondenseInput:
    """A condensing job for Alice and Luna."""
    values: dict[str, Any] = {
        "user_id": "u-alice",
        "character_id": "luna",
        "previous_summary": "Alice is a nurse in the ICU; her cat is called Miso.",
        "facts": FACTS,
        "messages": messages,
    }
    return CondenseInput(**{**values, **overrides})


def settings_for(fake: FakeOpenAI, **overrides: Any) -> Settings:
    """Settings pointing at the fake; no SDK retries so each call is one request."""
    values: dict[str, Any] = {
        "openai_base_url": fake.base_url,
        "openai_api_key": "test",
        "llm_max_retries": 0,
        "llm_timeout_s": 2,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(retry_after=7) as server:
        yield server


@pytest.fixture
async def condenser(fake: FakeOpenAI) -> AsyncIterator[LLMCondenser]:
    llm = LLMCondenser(settings_for(fake))
    yield llm
    await llm.close()


def walk_objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object schema inside `schema`."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from walk_objects(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from walk_objects(item)


# -- success -------------------------------------------------------------------------------
async def test_success_parses_summary_and_facts(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    fake.script(GOOD)

    result = await condenser.condense(job())

    assert result.method == "llm"
    assert result.model == "gpt-4o-mini"
    assert result.fallback_reason is None
    assert result.summary == GOOD["summary"]
    assert result.add_facts == [FactAdd(text="The user's exam is on the 22nd.", scope="user")]
    assert result.update_facts == [FactUpdate(id=2, text="The user works day shifts.")]
    assert result.remove_facts == []
    assert fake.calls == 1
    # The API's usage is reported, not our estimate.
    assert result.tokens_sent == estimate_prompt_tokens(fake.requests[0])


async def test_request_asks_for_strict_json_schema(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    await condenser.condense(job())

    body = fake.requests[0]
    assert body["model"] == "gpt-4o-mini"
    assert fake.headers[0]["Authorization"] == "Bearer test"
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "memory_update"
    assert response_format["json_schema"]["strict"] is True
    schema = response_format["json_schema"]["schema"]
    assert schema == output_json_schema()
    assert set(schema["properties"]) == {"summary", "facts"}
    objects = list(walk_objects(schema))
    assert len(objects) == 2  # the answer, one decision
    decision = schema["$defs"]["FactDecision"]
    assert decision["properties"]["event"]["enum"] == ["ADD", "UPDATE", "DELETE", "NONE"]
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    # Keywords outside the strict subset are not sent.
    assert "maxLength" not in json.dumps(schema) and "default" not in json.dumps(schema)


async def test_request_carries_summary_facts_and_transcript(
    fake: FakeOpenAI, condenser: LLMCondenser
) -> None:
    await condenser.condense(job())

    system, user = fake.requests[0]["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert "pinned" in system["content"] and "language of the conversation" in system["content"]
    content = user["content"]
    assert "Alice is a nurse in the ICU; her cat is called Miso." in content
    assert "[1] (user, pinned) The user's name is Alice." in content
    assert "[2] (user) The user works night shifts." in content
    assert "[3] (character) Luna promised" in content
    # The transcript is render.py's, verbatim: dated, interrupted reply marked with its rest.
    assert render_transcript(CONVERSATION) in content
    assert "2026-11-03" in content
    assert "User: Rough. Oh, and remember that my exam is on the 22nd." in content
    interrupted = next(line for line in content.splitlines() if "two weeks" in line)
    assert "interrupted by the user" in interrupted
    assert "We can start practising tonight." in interrupted


async def test_default_answer_echoes_last_user_line(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    result = await condenser.condense(job())

    assert result.summary == "Echo: I switched to day shifts, by the way."
    assert result.add_facts == [] and result.update_facts == [] and result.remove_facts == []


async def test_code_fenced_json_is_accepted(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    fake.script("```json\n" + json.dumps(GOOD) + "\n```")

    result = await condenser.condense(job())

    assert result.summary == GOOD["summary"] and fake.calls == 1


async def test_chinese_conversation_is_sent_in_chinese(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    chinese = [
        msg(1, "assistant", "欢迎回来,小王!豆豆最近怎么样?"),
        msg(2, "user", "对了,记住我22号有考试,是HSK五级。"),
        msg(
            3,
            "assistant",
            "好的,我记住了",
            interrupted=1,
            original="好的,我记住了:你22号有HSK五级考试。",
        ),
    ]
    fake.script(
        {
            "summary": "小王22号有HSK五级考试。",
            "add_facts": [{"text": "用户22号有HSK五级考试", "scope": "user"}],
            "update_facts": [],
            "remove_facts": [],
        }
    )

    result = await condenser.condense(
        job(chinese, previous_summary="小王住在杭州,有一只柯基叫豆豆。", facts=[])
    )

    content = fake.requests[0]["messages"][1]["content"]
    assert "小王住在杭州,有一只柯基叫豆豆。" in content
    assert "User: 对了,记住我22号有考试,是HSK五级。" in content
    assert render_transcript(chinese) in content
    assert "你22号有HSK五级考试" in content  # what the interrupted reply meant
    assert "Remembered facts:\n(none yet)" in content
    assert result.summary == "小王22号有HSK五级考试。"
    assert result.add_facts[0].text == "用户22号有HSK五级考试"


async def test_no_new_messages_makes_no_call(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    result = await condenser.condense(job([msg(1, "user", "   ")]))

    assert fake.calls == 0
    assert result.summary == "Alice is a nurse in the ICU; her cat is called Miso."
    assert result.tokens_sent == 0


# -- unavailable endpoints ------------------------------------------------------------------
async def test_server_error_is_unavailable(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    fake.script(500)

    with pytest.raises(LLMUnavailable) as caught:
        await condenser.condense(job())

    assert "500" in caught.value.message
    assert fake.calls == 1


async def test_rate_limit_is_unavailable_with_retry_after(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    fake.script(429)

    with pytest.raises(LLMUnavailable) as caught:
        await condenser.condense(job())

    assert caught.value.retry_after == 7
    assert fake.calls == 1


async def test_timeout_is_unavailable(fake: FakeOpenAI) -> None:
    fake.script("hang")
    llm = LLMCondenser(settings_for(fake, llm_timeout_s=0.5))
    started = time.monotonic()
    try:
        with pytest.raises(LLMUnavailable) as caught:
            await llm.condense(job())
    finally:
        await llm.close()

    assert time.monotonic() - started < 3
    assert "0.5s" in caught.value.message
    assert caught.value.retry_after is None


async def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on once this socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = LLMCondenser(
        Settings(openai_base_url=f"http://127.0.0.1:{port}/v1", llm_max_retries=0, llm_timeout_s=2)
    )
    try:
        with pytest.raises(LLMUnavailable):
            await llm.condense(job())
    finally:
        await llm.close()


async def test_client_error_is_llm_error_not_unavailable(fake: FakeOpenAI, condenser: LLMCondenser) -> None:
    fake.script(400)

    with pytest.raises(LLMError) as caught:
        await condenser.condense(job())

    assert not isinstance(caught.value, LLMUnavailable)
    assert "400" in caught.value.message and "fake bad request" in caught.value.message
    assert fake.calls == 1


async def test_sdk_retries_when_configured(fake: FakeOpenAI) -> None:
    # Retry-After: 0 keeps the SDK's own back-off short.
    fake.script(Reply(status=503, headers={"Retry-After": "0"}), GOOD)
    llm = LLMCondenser(settings_for(fake, llm_max_retries=1))
    try:
        result = await llm.condense(job())
    finally:
        await llm.close()

    assert result.summary == GOOD["summary"] and fake.calls == 2


# -- bad output -----------------------------------------------------------------------------
async def test_malformed_twice_is_bad_output_after_two_calls(
    fake: FakeOpenAI, condenser: LLMCondenser
) -> None:
    fake.script("malformed", "malformed", GOOD)

    with pytest.raises(LLMBadOutput):
        await condenser.condense(job())

    assert fake.calls == 2
    retry = fake.requests[1]["messages"]
    assert len(retry) == 3 and "could not be used" in retry[2]["content"]
    assert retry[:2] == fake.requests[0]["messages"]


@pytest.mark.parametrize(
    "bad",
    [
        "malformed",
        {"add_facts": [], "update_facts": [], "remove_facts": []},
        {**GOOD, "summary": "x" * (SUMMARY_MAX_CHARS + 1)},
        Reply(content=""),  # a 200 without content
    ],
    ids=[
        "not-json",
        "no-summary",
        "long-summary",
        "no-content",
    ],
)
async def test_one_bad_answer_then_valid_succeeds(
    fake: FakeOpenAI, condenser: LLMCondenser, bad: Any
) -> None:
    fake.script(bad, GOOD)

    result = await condenser.condense(job())

    assert result.summary == GOOD["summary"]
    assert fake.calls == 2
    assert result.tokens_sent == sum(estimate_prompt_tokens(body) for body in fake.requests)


@pytest.mark.parametrize(
    "bad_fact",
    [
        {"text": "", "scope": "user"},
        {"text": "x" * (MAX_FACT_CHARS + 1), "scope": "user"},
        {"text": "ok", "scope": "world"},
    ],
    ids=["empty-fact", "long-fact", "scope"],
)
async def test_one_bad_fact_is_ignored_and_counted_not_asked_again(
    fake: FakeOpenAI, condenser: LLMCondenser, bad_fact: Any
) -> None:
    fake.script({**GOOD, "add_facts": [*GOOD["add_facts"], bad_fact]})

    result = await condenser.condense(job())

    assert fake.calls == 1 and result.summary == GOOD["summary"]
    assert result.add_facts == [FactAdd(text="The user's exam is on the 22nd.", scope="user")]
    assert result.fact_decisions["ignored"] == 1 and result.fact_decisions["add"] == 1


# -- pinned facts ---------------------------------------------------------------------------
async def test_changes_to_pinned_or_unknown_facts_are_dropped(
    fake: FakeOpenAI, condenser: LLMCondenser
) -> None:
    fake.script(
        {
            "summary": "Alice switched to day shifts.",
            "add_facts": [],
            "update_facts": [
                {"id": 1, "text": "The user's name is Alicia."},
                {"id": 3, "text": "Luna quizzes the user on cardiac rhythms every call."},
                {"id": 99, "text": "Unknown."},
            ],
            "remove_facts": [1, 2, 42],
        }
    )

    result = await condenser.condense(job())

    assert result.remove_facts == [2]
    assert result.update_facts == [
        FactUpdate(id=3, text="Luna quizzes the user on cardiac rhythms every call.")
    ]


def test_sanitize_is_pure_and_drops_what_it_must() -> None:
    output = CondenseOutput(
        summary="s",
        add_facts=[
            FactAdd(text="the user's name is  ALICE", scope="user"),  # already known
            FactAdd(text="The user has a cat called Miso.", scope="user"),
            FactAdd(text="The user has a cat called miso", scope="user"),  # duplicate add
            FactAdd(text="The user works nights at St. Mary's.", scope="user"),  # as an update
        ],
        update_facts=[
            FactUpdate(id=1, text="The user's name is Alicia."),  # pinned
            FactUpdate(id=2, text="The user works nights at St. Mary's."),
            FactUpdate(id=2, text="Second update of the same fact."),
            FactUpdate(id=3, text="Luna promised to quiz the user on cardiac rhythms"),  # no-op
            FactUpdate(id=7, text="Unknown id."),
        ],
        remove_facts=[1, 3, 3, 8],
    )
    before = output.model_copy(deep=True)

    clean = sanitize(output, FACTS)

    assert output == before
    assert clean.summary == "s"
    assert clean.remove_facts == [3]
    assert clean.update_facts == [FactUpdate(id=2, text="The user works nights at St. Mary's.")]
    assert clean.add_facts == [FactAdd(text="The user has a cat called Miso.", scope="user")]


def test_sanitize_update_of_removed_fact_is_dropped() -> None:
    output = CondenseOutput(summary="s", update_facts=[FactUpdate(id=2, text="new")], remove_facts=[2])

    clean = sanitize(output, FACTS)

    assert clean.remove_facts == [2] and clean.update_facts == []


# -- small pieces ---------------------------------------------------------------------------
async def test_make_condenser_chooses_by_settings() -> None:
    offline = make_condenser(Settings())
    assert isinstance(offline, OfflineCondenser)
    llm = make_condenser(Settings(openai_base_url="http://127.0.0.1:9/v1"))
    assert isinstance(llm, LLMCondenser)
    await llm.close()
    await offline.close()


async def test_the_llm_clients_of_a_process_read_the_ca_certificates_once(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each app with an LLM built its clients' TLS context anew (~30 ms of CPU reading the system's
    CA certificates, twice an app): they share the one the process built first."""
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args)
        load(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    made = [LLMCondenser(settings_for(fake)), LLMRanker(settings_for(fake)), LLMCondenser(settings_for(fake))]
    try:
        assert len(loads) <= 1, loads
        fake.script(GOOD)
        assert (await made[2].condense(job())).summary == GOOD["summary"]  # and they still talk
    finally:
        for client in made:
            await client.close()
