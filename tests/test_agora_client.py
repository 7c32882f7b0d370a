"""AgoraClient against mocked HTTP (aioresponses): auth, bodies, typed errors, retry policy."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from yarl import URL

from agent_memory.errors import (
    AgoraConflict,
    AgoraError,
    AgoraNotFound,
    AgoraRateLimited,
    AgoraServerError,
    NotConfigured,
)
from agent_memory.platforms.agora.client import RETRY_AFTER_CAP_S, AgoraClient
from agent_memory.settings import Settings

API = "https://agora.test/api/conversational-ai-agent"
BASE = f"{API}/v2/projects/app"
AGENT = "1NT29X10YHxxxxxWJOXLYHNYB"
HISTORY = f"{BASE}/agents/{AGENT}/history"
JOIN = f"{BASE}/join"
UPDATE = f"{BASE}/agents/{AGENT}/update"
WINDOW = {"agent_id": AGENT, "start_ts": 1715003600, "status": "RUNNING", "contents": []}
NOT_FOUND = {"detail": "task not found", "reason": "TaskNotFound"}


class CompatResponse(aiohttp.ClientResponse):
    """aioresponses 0.7.9 does not pass the `stream_writer` aiohttp 3.14 requires; stub it."""

    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
        super().__init__(method, url, **kwargs)


class mock_http(aioresponses):
    """aioresponses whose canned answers use CompatResponse."""

    def add(self, url: Any, method: str = "GET", **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("response_class", CompatResponse)
        super().add(url, method, **kwargs)


class RecordingSleep:
    """Stands in for asyncio.sleep: records delays, never waits."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.calls.append(delay)


class HalfwayRng(random.Random):
    """Records each jitter range and draws its midpoint, so backoff is observable."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return (a + b) / 2


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "agora_app_id": "app",
        "agora_customer_id": "cid",
        "agora_customer_secret": "csec",
        "agora_api_base": API + "/",  # the trailing slash must not double up
        "agora_timeout_s": 2.5,
        "agora_max_retries": 3,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def mocked() -> Iterator[aioresponses]:
    with mock_http() as m:
        yield m


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def make_client(session: aiohttp.ClientSession, sleep: RecordingSleep) -> Any:
    def make(rng: random.Random | None = None, **overrides: Any) -> AgoraClient:
        return AgoraClient(settings(**overrides), session, sleep=sleep, rng=rng)

    return make


def calls(m: aioresponses, method: str, url: str) -> list[Any]:
    return m.requests.get((method, URL(url)), [])


# -- auth and request shape ------------------------------------------------------------------


async def test_basic_auth_header_is_base64_of_customer_id_and_secret(mocked, make_client) -> None:
    mocked.get(HISTORY, payload=WINDOW)
    await make_client().history(AGENT)
    (call,) = calls(mocked, "GET", HISTORY)
    assert call.kwargs["headers"]["Authorization"] == "Basic Y2lkOmNzZWM="  # base64("cid:csec")
    assert call.kwargs["timeout"].total == 2.5


@pytest.mark.parametrize("customer_id", [None, "cid"])  # half a key pair falls back to the token
async def test_token_auth_header_without_a_customer_key_pair(mocked, make_client, customer_id) -> None:
    mocked.get(HISTORY, payload=WINDOW)
    client = make_client(agora_customer_id=customer_id, agora_customer_secret=None, agora_token="007eJxTYBBg")
    await client.history(AGENT)
    (call,) = calls(mocked, "GET", HISTORY)
    assert call.kwargs["headers"]["Authorization"] == "agora token=007eJxTYBBg"


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"agora_app_id": None}, ["AGORA_APP_ID"]),
        (
            {"agora_customer_secret": None},
            ["AGORA_CUSTOMER_ID", "AGORA_CUSTOMER_SECRET", "AGORA_TOKEN"],
        ),
        (
            {"agora_customer_id": None, "agora_customer_secret": None},
            ["AGORA_CUSTOMER_ID", "AGORA_CUSTOMER_SECRET", "AGORA_TOKEN"],
        ),
    ],
)
async def test_not_configured_names_the_missing_variables(mocked, make_client, overrides, names) -> None:
    client = make_client(**overrides)
    assert client.configured is False
    with pytest.raises(NotConfigured) as info:
        await client.history(AGENT)
    for name in names:
        assert name in str(info.value)
    assert mocked.requests == {}  # nothing was sent without credentials


async def test_history_is_parsed_and_second_timestamps_become_ms(mocked, make_client) -> None:
    mocked.get(
        HISTORY,
        payload={
            **WINDOW,
            "contents": [
                {
                    "role": "user",
                    "content": "Tell me a joke",
                    "turn_id": 2,
                    "timestamp": 1678901235,
                    "metadata": {"source": "asr", "user": "user123"},
                },
                {
                    "role": "assistant",
                    "content": "Why did the scarecrow ",
                    "turn_id": 2,
                    "timestamp": 1678901236000,
                    "metadata": {
                        "interrupted": True,
                        "interrupt_timestamp": 1678905225,
                        "original": "Why did ... field!",
                    },
                },
            ],
        },
    )
    window = await make_client().history(AGENT)
    assert window.agent_id == AGENT
    assert window.status == "RUNNING"
    assert window.start_ms == 1715003600000
    user, assistant = window.contents
    assert (user.role, user.content, user.timestamp) == ("user", "Tell me a joke", 1678901235000)
    assert user.metadata.user == "user123"
    assert assistant.timestamp == 1678901236000
    assert assistant.metadata.interrupted is True
    assert assistant.metadata.interrupt_timestamp == 1678905225000


async def test_join_sends_the_body_exactly_and_returns_the_answer(mocked, make_client) -> None:
    body = {
        "name": "u-1-luna",
        "properties": {
            "channel": "room-42",
            "labels": {"user_id": "u-1", "character_id": "luna"},
            "llm": {"system_messages": [{"role": "system", "content": "You are Luna."}]},
        },
    }
    answer = {"agent_id": AGENT, "create_ts": 1715000000, "status": "RUNNING"}
    mocked.post(JOIN, payload=answer)
    assert await make_client().join(body) == answer
    (call,) = calls(mocked, "POST", JOIN)
    assert call.kwargs["json"] == body


async def test_update_wraps_properties(mocked, make_client) -> None:
    mocked.post(UPDATE, payload={"agent_id": AGENT, "status": "RUNNING"})
    await make_client().update(AGENT, {"llm": {"params": {"model": "gpt-4o"}}})
    (call,) = calls(mocked, "POST", UPDATE)
    assert call.kwargs["json"] == {"properties": {"llm": {"params": {"model": "gpt-4o"}}}}


async def test_update_system_messages_sends_the_whole_list(mocked, make_client) -> None:
    messages = [
        {"role": "system", "content": "You are Luna."},
        {"role": "system", "content": "Previously: the user has a cat named Miso."},
    ]
    mocked.post(UPDATE, payload={"agent_id": AGENT, "status": "RUNNING"})
    await make_client().update_system_messages(AGENT, messages)
    (call,) = calls(mocked, "POST", UPDATE)
    assert call.kwargs["json"] == {"properties": {"llm": {"system_messages": messages}}}


async def test_leave_with_empty_body_and_query(mocked, make_client) -> None:
    mocked.post(f"{BASE}/agents/{AGENT}/leave", body="")
    mocked.get(f"{BASE}/agents/{AGENT}", payload={"agent_id": AGENT, "status": "STOPPED"})
    client = make_client()
    assert await client.leave(AGENT) == {}
    assert await client.query(AGENT) == {"agent_id": AGENT, "status": "STOPPED"}


# -- typed errors --------------------------------------------------------------------------


async def test_404_is_agora_not_found_with_detail_and_reason(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=404, payload=NOT_FOUND, repeat=True)
    with pytest.raises(AgoraNotFound) as info:
        await make_client().history(AGENT)
    err = info.value
    assert (err.http_status, err.detail, err.reason) == (404, "task not found", "TaskNotFound")
    assert str(err) == f"Agora history for agent {AGENT} failed: 404 TaskNotFound: task not found"
    assert len(calls(mocked, "GET", HISTORY)) == 1
    assert sleep.calls == []


@pytest.mark.parametrize("status", [400, 401, 403, 409, 422])
async def test_other_4xx_are_never_retried(mocked, make_client, sleep, status) -> None:
    mocked.post(JOIN, status=status, payload={"detail": "nope", "reason": "Bad"}, repeat=True)
    with pytest.raises(AgoraError) as info:
        await make_client().join({"name": "x"})
    # A 409 (an agent of that name runs) is the caller's conflict to resolve: answered as a 409.
    assert type(info.value) is (AgoraConflict if status == 409 else AgoraError)
    assert info.value.http_status == status
    assert str(info.value) == f"Agora join failed: {status} Bad: nope"
    assert len(calls(mocked, "POST", JOIN)) == 1
    assert sleep.calls == []


async def test_non_json_error_body_is_kept_as_truncated_detail(mocked, make_client) -> None:
    page = "<html>" + "x" * 500 + "</html>"
    mocked.get(HISTORY, status=502, body=page, content_type="text/html")
    with pytest.raises(AgoraServerError) as info:
        await make_client(agora_max_retries=0).history(AGENT)
    assert info.value.http_status == 502
    assert info.value.reason is None
    assert info.value.detail == page[:200]
    assert str(info.value).startswith(f"Agora history for agent {AGENT} failed: 502: <html>xxx")


async def test_success_that_is_not_json_is_an_error_and_not_retried(mocked, make_client) -> None:
    mocked.get(HISTORY, body="<html>ok</html>", content_type="text/html", repeat=True)
    with pytest.raises(AgoraError) as info:
        await make_client().history(AGENT)
    assert info.value.http_status == 200
    assert len(calls(mocked, "GET", HISTORY)) == 1


# -- retries -------------------------------------------------------------------------------


async def test_429_honours_retry_after_then_succeeds(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=429, payload={"detail": "slow down"}, headers={"Retry-After": "2"})
    mocked.get(HISTORY, payload=WINDOW)
    window = await make_client().history(AGENT)
    assert window.agent_id == AGENT
    assert sleep.calls == [2.0]
    assert len(calls(mocked, "GET", HISTORY)) == 2


async def test_retry_after_is_capped(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=429, headers={"Retry-After": "3600"})
    mocked.get(HISTORY, payload=WINDOW)
    await make_client().history(AGENT)
    assert sleep.calls == [RETRY_AFTER_CAP_S]


async def test_429_forever_raises_rate_limited_with_retry_after(mocked, make_client, sleep) -> None:
    mocked.get(
        HISTORY,
        status=429,
        payload={"detail": "slow down", "reason": "TooManyRequests"},
        headers={"Retry-After": "1.5"},
        repeat=True,
    )
    with pytest.raises(AgoraRateLimited) as info:
        await make_client(agora_max_retries=2).history(AGENT)
    assert info.value.retry_after == 1.5
    assert info.value.http_status == 429
    assert sleep.calls == [1.5, 1.5]


async def test_503_twice_then_200_succeeds_after_two_retries(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=503, payload={"detail": "busy"})
    mocked.get(HISTORY, status=503, payload={"detail": "busy"})
    mocked.get(HISTORY, payload=WINDOW)
    window = await make_client(rng=random.Random(7)).history(AGENT)
    assert window.status == "RUNNING"
    assert len(calls(mocked, "GET", HISTORY)) == 3
    assert len(sleep.calls) == 2
    assert 0 <= sleep.calls[0] <= 0.5 and 0 <= sleep.calls[1] <= 1.0


async def test_backoff_is_exponential_with_full_jitter_and_capped(mocked, make_client, sleep) -> None:
    mocked.post(JOIN, status=500, repeat=True)
    rng = HalfwayRng()
    with pytest.raises(AgoraServerError):
        await make_client(rng=rng, agora_max_retries=6).join({})
    assert [high for _, high in rng.ranges] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert all(low == 0 for low, _ in rng.ranges)  # full jitter: anywhere from zero
    assert sleep.calls == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0]


async def test_503_forever_gives_up_after_max_retries_plus_one(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=503, payload={"detail": "busy", "reason": "ServiceUnavailable"}, repeat=True)
    with pytest.raises(AgoraServerError) as info:
        await make_client(agora_max_retries=3).history(AGENT)
    assert len(calls(mocked, "GET", HISTORY)) == 4
    assert len(sleep.calls) == 3
    assert info.value.http_status == 503
    assert str(info.value) == (
        f"Agora history for agent {AGENT} failed after 4 attempts: 503 ServiceUnavailable: busy"
    )


async def test_no_retries_when_max_retries_is_zero(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, status=503, repeat=True)
    with pytest.raises(AgoraServerError):
        await make_client(agora_max_retries=0).history(AGENT)
    assert len(calls(mocked, "GET", HISTORY)) == 1
    assert sleep.calls == []


async def test_timeout_is_retried(mocked, make_client, sleep) -> None:
    mocked.get(HISTORY, exception=TimeoutError())
    mocked.get(HISTORY, payload=WINDOW)
    window = await make_client().history(AGENT)
    assert window.agent_id == AGENT
    assert len(calls(mocked, "GET", HISTORY)) == 2
    assert len(sleep.calls) == 1


async def test_timeout_forever_is_a_server_error(mocked, make_client) -> None:
    mocked.get(HISTORY, exception=TimeoutError(), repeat=True)
    with pytest.raises(AgoraServerError) as info:
        await make_client(agora_max_retries=1).history(AGENT)
    assert info.value.http_status is None
    assert "no answer within 2.5s" in str(info.value)
    assert len(calls(mocked, "GET", HISTORY)) == 2


async def test_connection_error_is_retried(mocked, make_client, sleep) -> None:
    mocked.post(UPDATE, exception=aiohttp.ClientConnectionError("connection reset"))
    mocked.post(UPDATE, payload={"agent_id": AGENT})
    assert await make_client().update(AGENT, {}) == {"agent_id": AGENT}
    assert len(calls(mocked, "POST", UPDATE)) == 2
    assert len(sleep.calls) == 1


async def test_each_retry_is_logged_with_agent_status_and_delay(mocked, make_client, caplog) -> None:
    mocked.get(HISTORY, status=429, headers={"Retry-After": "2"})
    mocked.get(HISTORY, payload=WINDOW)
    with caplog.at_level(logging.INFO, logger="agent_memory.platforms.agora.client"):
        await make_client().history(AGENT)
    (record,) = [r for r in caplog.records if r.name == "agent_memory.platforms.agora.client"]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert AGENT in text and "429" in text and "2.00s" in text
