"""Analytics over HTTP and the CLI, checked against counts made directly from the fixtures."""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from typing import Any

import pytest
from conftest import CONVERSATIONS, agent_event, deliver, load_conversations, load_fixture, nearest_rank

from agent_memory.cli import main
from agent_memory.platforms.agora.payloads import to_ms

pytestmark = pytest.mark.postgres

METRICS = ("asr_ttlw", "llm_ttfb", "llm_ttfs", "tts_ttfb")


def fixture_sessions() -> dict[str, dict[str, Any]]:
    """Each agent run of the conversation fixtures, worked out from the JSON alone."""
    runs: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for name in CONVERSATIONS:
        for envelope in load_fixture(f"conversations/{name}.json"):
            if envelope["noticeId"] in seen:
                continue
            seen.add(envelope["noticeId"])
            payload = envelope["payload"]
            run = runs.setdefault(
                payload["agent_id"],
                {"labels": None, "start_ms": None, "stop_ms": None, "reason": None, "messages": []},
            )
            run["labels"] = payload.get("labels") or run["labels"]
            run["start_ms"] = payload["start_ts"] * 1000
            if payload.get("stop_ts"):
                run["stop_ms"] = payload["stop_ts"] * 1000
            if envelope["eventType"] == 102:
                run["reason"] = payload["message"]
            run["messages"].extend(payload.get("contents", []))
    for run in runs.values():
        if run["labels"]:
            run["user"], run["character"] = run["labels"]["user_id"], run["labels"]["character_id"]
        else:  # DESIGN's fallback: the speaker's RTC uid, the default character
            uid = next(m["metadata"]["user"] for m in run["messages"] if m["role"] == "user")
            run["user"], run["character"] = f"rtc:{uid}", "default"
    # In a shared channel each speaker after the first also keeps their own turns in a session of
    # their own (docs/memory.md, shared channels); the fixtures name none of them, so `rtc:<uid>`.
    for agent_id, run in list(runs.items()):
        uids = [speaker(m) for m in run["messages"] if m["role"] == "user" and speaker(m)]
        for uid in dict.fromkeys(uids[1:]):
            if uid != uids[0]:
                own = [m for m in run["messages"] if m["role"] == "user" and speaker(m) == uid]
                runs[f"{agent_id}~{uid}"] = {
                    **run, "reason": None, "messages": own, "user": f"rtc:{uid}", "speaker": True
                }  # fmt: skip
    return runs


def speaker(message: dict[str, Any]) -> str | None:
    """The RTC uid of who said a message (`metadata.user`), if it names one."""
    return (message.get("metadata") or {}).get("user")


def expected_for(runs: list[dict[str, Any]]) -> dict[str, Any]:
    messages = [m for run in runs for m in run["messages"]]
    assistant = [m for m in messages if m["role"] == "assistant"]
    stamps = [to_ms(m.get("timestamp")) for m in messages if m.get("timestamp")]
    stamps += [run["stop_ms"] or run["start_ms"] for run in runs]
    return {
        "sessions": len(runs),
        "messages": len(messages),
        "messages_stored": len(messages),
        "user_messages": sum(m["role"] == "user" for m in messages),
        "assistant_messages": len(assistant),
        "interrupted": sum(bool((m.get("metadata") or {}).get("interrupted")) for m in assistant),
        "llm_failures": sum((m.get("metadata") or {}).get("source") == "llm_failure" for m in assistant),
        "talk_ms": sum(r["stop_ms"] - r["start_ms"] for r in runs if r["stop_ms"]),
        "last_active_ms": max(stamps),
    }


def metrics_envelopes(
    runs: dict[str, dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """111 callbacks with random per-turn latencies for every run, and the values they carry."""
    rng = random.Random(111)
    envelopes, values = [], defaultdict(list)
    for agent_id, run in sorted(runs.items()):
        if run.get("speaker"):  # a speaker's own session, not an agent run: no metrics of its own
            continue
        turns = []
        for turn_id in range(1, rng.randint(3, 9)):
            turn = {"turn_id": turn_id, **{name: rng.randint(120, 2400) for name in METRICS}}
            turns.append(turn)
            for name in METRICS:
                values[(run["character"], name)].append(turn[name])
        labels = run["labels"]
        envelopes.append(
            agent_event(111, agent_id, labels=labels, metrics=turns, start_ts=run["start_ms"] // 1000)
        )
    return envelopes, values


async def loaded(
    service: Any,
) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], list[float]]]:
    runs = fixture_sessions()
    await load_conversations(service, *CONVERSATIONS)
    envelopes, values = metrics_envelopes(runs)
    await deliver(service, *envelopes)
    await deliver(service, *envelopes[:2])  # redelivered: the same noticeIds, counted once
    return runs, values


def assert_matches(stats: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in (
        "sessions",
        "messages",
        "messages_stored",
        "user_messages",
        "assistant_messages",
        "talk_ms",
    ):
        assert stats[key] == expected[key], key
    assert stats["minutes_talked"] == round(expected["talk_ms"] / 60_000, 2)
    assert stats["interruptions"]["count"] == expected["interrupted"]
    assert stats["interruptions"]["of"] == expected["assistant_messages"]
    if expected["assistant_messages"]:
        assert stats["interruptions"]["rate"] == pytest.approx(
            expected["interrupted"] / expected["assistant_messages"], abs=1e-4
        )
    else:  # a speaker's own session: their words alone
        assert stats["interruptions"]["rate"] is None
    assert stats["llm_failures"]["count"] == expected["llm_failures"]
    assert stats["last_active_ms"] == expected["last_active_ms"]


async def test_user_stats_match_the_fixtures(service) -> None:
    runs, _ = await loaded(service)
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs.values():
        by_user[run["user"]].append(run)
    assert set(by_user) == {"u-alice", "u-wang", "u-kim", "u-team", "rtc:3003", "rtc:2002"}
    for user, user_runs in by_user.items():
        status, stats = await service.api("GET", f"/v1/users/{user}/stats")
        assert status == 200, stats
        assert_matches(stats, expected_for(user_runs))
        assert stats["first_active_ms"] == min(r["start_ms"] for r in user_runs)
        assert [c["character_id"] for c in stats["favourite_characters"]] == [user_runs[0]["character"]]
    status, alice = await service.api("GET", "/v1/users/u-alice/stats")
    assert (
        alice["sessions"] == 3
        and alice["interruptions"]["count"] == 4
        and alice["llm_failures"]["count"] == 1
    )
    assert alice["favourite_characters"][0]["minutes_talked"] == alice["minutes_talked"]


async def test_favourite_characters_are_ordered_by_sessions_then_messages(service) -> None:
    def run(agent_id: str, character: str, count: int) -> dict[str, Any]:
        contents = [{"role": "user", "content": f"line {i}"} for i in range(count)]
        labels = {"user_id": "u-fan", "character_id": character}
        return agent_event(103, agent_id, labels=labels, contents=contents, stop_ts=1_763_690_060)

    await deliver(
        service, run("F1", "luna", 2), run("F2", "atlas", 1), run("F3", "atlas", 1), run("F4", "mira", 5)
    )
    _status, stats = await service.api("GET", "/v1/users/u-fan/stats")
    assert [(c["character_id"], c["sessions"], c["messages"]) for c in stats["favourite_characters"]] == [
        ("atlas", 2, 2), ("mira", 1, 5), ("luna", 1, 2)
    ]  # fmt: skip
    assert stats["characters"] == 3 and stats["talk_ms"] == 4 * 60_000


async def test_character_and_overall_stats_match_the_fixtures(service) -> None:
    runs, values = await loaded(service)
    # A speaker's own session holds copies of its call's turns: the service's and a character's
    # figures count each call and each turn once (docs/memory.md); every speaker is a user.
    calls = [r for r in runs.values() if not r.get("speaker")]
    luna_runs = [r for r in calls if r["character"] == "luna"]
    status, luna = await service.api("GET", "/v1/characters/luna/stats")
    assert status == 200, luna
    assert_matches(luna, expected_for(luna_runs))
    assert luna["active_users"] == 1 and [u["user_id"] for u in luna["top_users"]] == ["u-alice"]
    for name in METRICS:
        series = values[("luna", name)]
        assert luna["latency_ms"][name]["count"] == len(series)
        for label, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert luna["latency_ms"][name][label] == nearest_rank(series, fraction), (name, label)
        assert luna["latency_ms"][name]["max"] == max(series)
    status, overall = await service.api("GET", "/v1/stats")
    assert status == 200, overall
    assert_matches(overall, expected_for(calls))
    assert overall["users"] == 6 and overall["characters"] == 5
    assert overall["stop_reasons"] == {
        reason: sum(r["reason"] == reason for r in calls) for reason in {r["reason"] for r in calls} if reason
    }
    assert overall["interruptions"]["count"] == 8 and overall["llm_failures"]["count"] == 1
    every = defaultdict(list)
    for (_, name), series in values.items():
        every[name].extend(series)
    for name in METRICS:
        assert overall["latency_ms"][name]["count"] == len(every[name])
        assert overall["latency_ms"][name]["p50"] == nearest_rank(every[name], 0.5)
        assert overall["latency_ms"][name]["p99"] == nearest_rank(every[name], 0.99)
        assert overall["latency_ms"][name]["mean"] == pytest.approx(
            sum(every[name]) / len(every[name]), abs=0.01
        )
    # Two people talked with the host in the shared channel (its run's user, and speaker 2002).
    assert [c["character_id"] for c in overall["top_characters"][:2]] == ["host", "luna"]
    assert overall["top_characters"][0]["active_users"] == 2


async def test_a_time_window_counts_only_the_sessions_started_in_it(service) -> None:
    runs, _ = await loaded(service)
    luna = sorted((r for r in runs.values() if r["character"] == "luna"), key=lambda r: r["start_ms"])
    since, until = luna[1]["start_ms"], luna[2]["start_ms"]
    status, stats = await service.api(
        "GET", "/v1/characters/luna/stats", params={"since_ms": since, "until_ms": until}
    )
    assert status == 200, stats
    assert stats["sessions"] == 1 and stats["messages"] == len(luna[1]["messages"])
    assert stats["window"] == {"since_ms": since, "until_ms": until}
    status, overall = await service.api("GET", "/v1/stats", params={"since_ms": luna[2]["start_ms"]})
    later = [r for r in runs.values() if r["start_ms"] >= luna[2]["start_ms"] and not r.get("speaker")]
    assert overall["sessions"] == len(later)


async def test_111_metrics_are_kept_per_turn_and_a_resent_turn_replaces(service) -> None:
    # The early `payload.turns` shape is still read (tolerance fixture).
    await deliver(service, load_fixture("agora/tolerance_111_turns_shape.json"))
    metrics = [
        {"turn_id": 3, "asr_ttlw": 500, "llm_ttfb": "600", "llm_ttfs": None, "tts_ttfb": True},
        {"turn_id": "4", "asr_ttlw": 100, "custom_ms": 7},
        {"asr_ttlw": 1},  # no turn id: set aside
        "garbage",
    ]
    agent = load_fixture("agora/tolerance_111_turns_shape.json")["payload"]["agent_id"]
    later = agent_event(
        111, agent, notice_id="later-111", labels={"user_id": "u-1", "character_id": "luna"},
        metrics=metrics,
    )  # fmt: skip
    status, answer = await service.callback(later)
    assert (status, answer["status"]) == (200, "partial"), answer
    status, stats = await service.api("GET", "/v1/characters/luna/stats")
    assert status == 200, stats
    latency = stats["latency_ms"]
    # asr_ttlw: turns 1, 2 from the fixture, turn 3 replaced by 500, turn 4 new.
    assert latency["asr_ttlw"]["count"] == 4 and latency["asr_ttlw"]["max"] == 500
    assert latency["llm_ttfb"]["count"] == 3 and latency["llm_ttfb"]["max"] == 600
    assert latency["llm_ttfs"]["count"] == 3 and latency["tts_ttfb"]["count"] == 3
    assert latency["custom_ms"] == {
        "count": 1,
        "mean": 7.0,
        "min": 7.0,
        "p50": 7.0,
        "p90": 7.0,
        "p99": 7.0,
        "max": 7.0,
    }
    _status, user = await service.api("GET", "/v1/users/u-1/stats")
    assert user["sessions"] == 1 and user["messages"] == 0


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/v1/users/nobody/stats", {}, 404),
        ("/v1/characters/nobody/stats", {}, 404),
        ("/v1/stats", {"since_ms": "10", "until_ms": "10"}, 422),
        ("/v1/stats", {"since_ms": "yesterday"}, 422),
        ("/v1/characters/luna/stats", {"until_ms": "-5"}, 422),
    ],
)
async def test_unknown_and_invalid_stats_requests(service, path, params, status) -> None:
    got, body = await service.api("GET", path, params=params)
    assert got == status, body
    assert body["error"]["message"]


async def test_an_empty_service_answers_zeros(service) -> None:
    status, stats = await service.api("GET", "/v1/stats")
    assert status == 200
    assert stats["sessions"] == 0 and stats["users"] == 0 and stats["latency_ms"] == {}
    assert stats["interruptions"] == {"count": 0, "of": 0, "rate": None}


async def test_cli_stats_print_the_same_numbers(service, capsys) -> None:
    await loaded(service)
    _status, api_stats = await service.api("GET", "/v1/stats")
    db = service.settings.postgres_url or str(service.settings.db_path)
    assert await asyncio.to_thread(main, ["stats", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == api_stats
    assert await asyncio.to_thread(main, ["stats", "--db", db, "--user", "u-alice"]) == 0
    out = capsys.readouterr().out
    assert "sessions               3" in out and "interruptions          4 of 29 (13.8%)" in out
    assert "luna" in out and "2026-11-12" in out
    assert await asyncio.to_thread(main, ["stats", "--db", db, "--character", "luna"]) == 0
    out = capsys.readouterr().out
    assert "active_users           1" in out and "asr_ttlw" in out
    assert await asyncio.to_thread(main, ["stats", "--db", db, "--user", "nobody"]) == 1
    assert "nothing is held about user nobody" in capsys.readouterr().err


async def test_talk_time_leaves_out_runs_with_placeholder_times(service) -> None:
    """A run longer than a day (Agora's docs examples carry start_ts 1000) adds no talk time."""
    real = agent_event(102, "REAL", labels={"user_id": "u-t", "character_id": "luna"},
                       start_ts=1_763_690_000, stop_ts=1_763_690_300, status="STOPPED")  # fmt: skip
    placeholder = agent_event(102, "DOCS", labels={"user_id": "u-t", "character_id": "luna"},
                              start_ts=1000, stop_ts=1_672_531_200, status="STOPPED")  # fmt: skip
    await deliver(service, real, placeholder)
    _status, stats = await service.api("GET", "/v1/users/u-t/stats")
    assert stats["sessions"] == 2 and stats["talk_ms"] == 300_000


async def test_112_stage_latencies_sent_as_an_object_reach_the_stats(service) -> None:
    """Agora's documented 112 sends `segmented_latency_ms` as an object of stage -> ms (issue 23.6)."""
    envelope = load_fixture("agora/112_turns_finished_segmented_object.json")
    await deliver(service, envelope, expect="done")
    for path in ("/v1/characters/luna/stats", "/v1/stats"):
        status, stats = await service.api("GET", path)
        assert status == 200, stats
        latency = stats["latency_ms"]
        assert {name: latency[name]["count"] for name in ("asr_ttlw", "llm_ttft", "tts_ttfb")} == {
            "asr_ttlw": 2,
            "llm_ttft": 2,
            "tts_ttfb": 2,
        }, latency
        assert (latency["asr_ttlw"]["min"], latency["llm_ttft"]["max"]) == (200, 700)
        stages = stats["latency_stages_ms"]
        assert {stage: stages[stage]["count"] for stage in ("asr", "llm", "tts", "end_to_end")} == {
            "asr": 2,
            "llm": 2,
            "tts": 2,
            "end_to_end": 2,
        }, stages
        assert (stages["llm"]["min"], stages["end_to_end"]["derived"]) == (600, 0)
