"""Agora's documented payloads, signed and sent to the real app, compared field by field.

Each fixture under fixtures/agora says in fixtures/README.md which page or SDK file it copies.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import agent_event, deliver, inbox_of, load_fixture, nearest_rank, stored
from sqlite_utils import Database

from agent_memory.memory.ingest import Ingestor
from agent_memory.platforms.agora.events import history_window
from agent_memory.platforms.agora.payloads import HistoryResponse, to_ms
from agent_memory.store.sqlite import SQLiteStore
from agent_memory.store.sqlite.migrations import migrations

pytestmark = pytest.mark.postgres

TOOLS = "agora/103_tool_calls.json"
STAGE_OF = {"asr": "asr_ttlw", "llm": "llm_ttfb", "tts": "tts_ttfb"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The agent-memory command, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def expected_summary(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "mean": round(sum(values) / len(values), 2),
        "min": min(values),
        "p50": nearest_rank(values, 0.5),
        "p90": nearest_rank(values, 0.9),
        "p99": nearest_rank(values, 0.99),
        "max": max(values),
    }


# 103 with tool calls: every turn kept, tool traffic stored as its own kinds


async def test_a_103_with_tool_calls_keeps_all_its_turns(service) -> None:
    envelope = load_fixture(TOOLS)
    contents = envelope["payload"]["contents"]
    answer = await deliver(service, envelope, expect="done")
    assert answer["new_messages"] == len(contents)
    rows = await stored(service, envelope["payload"]["agent_id"])
    assert [row.kind for row in rows] == [
        "turn", "tool_call", "tool_result", "turn", "turn", "turn"
    ]  # fmt: skip
    for row, item in zip(rows, contents, strict=True):
        assert row.role == item["role"]
        assert row.turn_id == item["turn_id"]
        assert row.ts_ms == to_ms(item["timestamp"])
        if row.kind == "turn":
            assert row.content == item["content"]
            assert row.source == item["metadata"]["source"]
        else:
            # Never said: no text a transcript or search could pick up; the data is in extra.
            assert row.content == ""
            assert row.extra["content"] == item["content"]
    assert rows[1].extra["tool_calls"] == contents[1]["tool_calls"]
    assert rows[2].extra["tool_call_id"] == contents[2]["tool_call_id"]
    entry = await inbox_of(service, envelope["noticeId"])
    assert entry is not None and entry.status == "done"


async def test_tool_items_are_exposed_with_their_kind_and_never_spoken(service) -> None:
    envelope = load_fixture(TOOLS)
    contents = envelope["payload"]["contents"]
    await deliver(service, envelope, expect="done")
    status, body = await service.api("GET", "/v1/users/u-tools/characters/luna/messages")
    assert status == 200, body
    messages = body["messages"]
    assert [m["kind"] for m in messages] == ["turn", "tool_call", "tool_result", "turn", "turn", "turn"]
    assert messages[1]["tool"] == {"tool_calls": contents[1]["tool_calls"], "content": None}
    assert messages[2]["tool"] == {"tool_call_id": "call_abc123", "content": contents[2]["content"]}
    assert "tool" not in messages[0]
    status, body = await service.api("GET", "/v1/users/u-tools/characters/luna/system-messages")
    transcript = body["system_messages"][-1]["content"]
    assert body["included"]["messages"] == 4  # the spoken turns only
    for item in contents:
        if item["role"] in ("user", "assistant") and item.get("content"):
            assert item["content"] in transcript
    assert "get_weather" not in transcript and "temperature" not in transcript
    # Search finds what was said, not the tool's answer that also says "cloudy".
    status, found = await service.api(
        "GET", "/v1/users/u-tools/search", params={"q": "cloudy", "kinds": "message"}
    )
    assert status == 200, found
    assert [r["text"] for r in found["results"]] == ["It's 18 degrees and cloudy in Paris."]
    status, stats = await service.api("GET", "/v1/users/u-tools/stats")
    assert (stats["user_messages"], stats["assistant_messages"], stats["tool_items"]) == (2, 2, 2)
    assert stats["messages_stored"] == len(contents)


async def test_tool_items_align_when_windows_overlap(service) -> None:
    envelope = load_fixture(TOOLS)
    payload = envelope["payload"]
    contents = payload["contents"]
    # A poll-like copy of the head (role, content and tool data only) comes first.
    head = [{k: v for k, v in m.items() if k not in ("turn_id", "timestamp", "metadata")}
            for m in contents[:4]]  # fmt: skip
    first = agent_event(103, payload["agent_id"], notice_id="head", labels=payload["labels"],
                        contents=head)  # fmt: skip
    assert (await deliver(service, first, expect="done"))["new_messages"] == 4
    assert (await deliver(service, envelope, expect="done"))["new_messages"] == 2
    rows = await stored(service, payload["agent_id"])
    assert len(rows) == len(contents)
    assert [r.turn_id for r in rows] == [m["turn_id"] for m in contents]  # enriched in place
    # The same empty assistant content with another tool call is another message.
    other = json.loads(json.dumps(contents[:2]))
    other[1]["tool_calls"][0]["function"]["arguments"] = '{"city": "Lyon"}'
    other[1]["timestamp"] += 60_000
    later = agent_event(103, payload["agent_id"], notice_id="lyon", labels=payload["labels"],
                        contents=[*contents, other[1]])  # fmt: skip
    assert (await deliver(service, later, expect="done"))["new_messages"] == 1


# A part that cannot be applied never discards the valid rest


async def test_unusable_items_are_set_aside_and_the_rest_is_applied(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    contents = [
        {"role": "user", "content": "first"},
        "not an object",
        {"content": "no role"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        5,
        {"role": "assistant", "content": "last", "turn_id": "not a number"},
    ]  # fmt: skip
    envelope = agent_event(103, "PARTIAL", labels={"user_id": "u-p", "character_id": "c"},
                           contents=contents)  # fmt: skip
    answer = await deliver(service, envelope, expect="partial")
    assert answer["new_messages"] == 3
    rows = await stored(service, "PARTIAL")
    assert [(r.role, r.kind, r.content) for r in rows] == [
        ("user", "turn", "first"), ("assistant", "tool_call", ""), ("assistant", "turn", "last"),
    ]  # fmt: skip
    # The unreadable turn id is kept as sent; the message is not lost for it.
    assert rows[2].turn_id is None and rows[2].extra["turn_id_as_sent"] == "not a number"
    row = await inbox_of(service, envelope["noticeId"])
    assert row is not None
    assert row.status == "partial"
    assert json.loads(row.body) == envelope
    for index in (1, 2, 4):
        assert f"contents[{index}]" in row.error
    assert any("PARTIAL" in r.getMessage() and "contents[1]" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)  # fmt: skip
    # A non-object payload still fails whole; both show in the stats.
    status, answer = await service.callback(
        {"noticeId": "odd", "productId": 17, "eventType": 103, "payload": [1, 2]}
    )
    assert (status, answer["status"]) == (200, "failed")
    status, stats = await service.api("GET", "/v1/stats")
    assert stats["callbacks"] == {"failed": 1, "partial": 1}


async def test_110_errors_that_are_not_objects_are_set_aside(service) -> None:
    envelope = load_fixture("agora/110_agent_error.json")
    envelope["payload"]["errors"].append("garbage")
    await deliver(service, envelope, expect="partial")
    s = await service.store.read(lambda view: view.sessions.get(envelope["payload"]["agent_id"]))
    assert s.error_count == 2


@pytest.mark.slow
def test_reprocess_recovers_what_an_older_version_failed(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = SQLiteStore(db)
    store.open()
    store.close()
    tools = load_fixture(TOOLS)
    broken = agent_event(103, "HALF", labels={"user_id": "u-h", "character_id": "c"},
                         contents=[{"role": "user", "content": "kept"}, {"content": "no role"}])  # fmt: skip
    conn = sqlite3.connect(db)
    # What versions without content-less messages left: the raw callbacks, marked failed.
    for envelope, status in ((tools, "failed"), (broken, "partial")):
        conn.execute(
            "INSERT INTO inbox (notice_id, event_type, product_id, received_ms, agent_id, body, "
            "status, error) VALUES (?, 103, 17, ?, ?, ?, ?, 'old error')",
            (envelope["noticeId"], 1, envelope["payload"]["agent_id"], json.dumps(envelope), status),
        )
    conn.commit()
    conn.close()
    first = run_cli("reprocess", "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert "1 done, 1 partial" in first.stdout and "7 new messages" in first.stdout
    assert "HALF:103: still partial: 1 part(s)" in first.stderr and "contents[1]" in first.stderr
    conn = sqlite3.connect(db)
    kinds = [
        row[0]
        for row in conn.execute(
            "SELECT kind FROM messages WHERE agent_id = ? ORDER BY seq", (tools["payload"]["agent_id"],)
        )
    ]
    assert kinds == ["turn", "tool_call", "tool_result", "turn", "turn", "turn"]
    statuses = dict(conn.execute("SELECT notice_id, status FROM inbox").fetchall())
    assert statuses == {tools["noticeId"]: "done", broken["noticeId"]: "partial"}
    conn.close()
    # Again: nothing is stored twice.
    again = run_cli("reprocess", "--db", str(db))
    assert again.returncode == 0 and "0 new messages" in again.stdout


# 111 and 112 as documented; latency percentiles per stage


async def test_documented_111_yields_latency_percentiles_per_stage(service) -> None:
    envelope = load_fixture("agora/111_agent_metrics.json")
    metrics = envelope["payload"]["metrics"]
    await deliver(service, envelope, expect="done")
    status, stats = await service.api("GET", "/v1/stats")
    assert status == 200, stats
    for name in ("asr_ttlw", "llm_ttfb", "tts_ttfb"):
        assert stats["latency_ms"][name] == expected_summary([float(m[name]) for m in metrics])
    stages = stats["latency_stages_ms"]
    for stage, name in STAGE_OF.items():
        assert stages[stage] == expected_summary([float(m[name]) for m in metrics])
    # No measured end-to-end in a 111: Agora's own sum of the three stages, said to be derived.
    totals = [float(m["asr_ttlw"] + m["llm_ttfb"] + m["tts_ttfb"]) for m in metrics]
    assert stages["end_to_end"] == {**expected_summary(totals), "derived": len(metrics)}
    status, character = await service.api("GET", "/v1/characters/default/stats")
    assert character["latency_stages_ms"] == stages


@pytest.mark.sqlite_only  # reads SQLite's files or runs its SQL
async def test_documented_112_records_turn_timing_and_truncation(service, caplog) -> None:
    caplog.set_level(logging.INFO, logger="agent_memory.memory.ingest")
    envelope = load_fixture("agora/112_turns_finished.json")
    payload = envelope["payload"]
    turn = payload["turns"][0]
    # A 111 for the same turn first: a metric both name is counted once.
    first = agent_event(111, payload["agent_id"], notice_id="m-111",
                        metrics=[{"turn_id": 1, "tts_ttfb": 300, "asr_ttlw": 200, "llm_ttfb": 400}])  # fmt: skip
    await deliver(service, first, expect="done")
    await deliver(service, envelope, expect="done")
    status, body = await service.api("GET", f"/v1/sessions/{payload['agent_id']}")
    assert status == 200, body
    assert body["session"]["turn_count"] == payload["total_turn_count"]
    assert body["session"]["turns_truncated"] is True
    assert any("is_truncated" in r.getMessage() for r in caplog.records)
    status, stats = await service.api("GET", "/v1/stats")
    latency = stats["latency_ms"]
    assert latency["e2e_latency_ms"]["max"] == turn["metrics"]["e2e_latency_ms"]
    segment = turn["metrics"]["segmented_latency_ms"][0]
    assert latency[segment["name"]] == expected_summary([float(segment["latency"])])
    assert latency["turn_duration_ms"]["max"] == turn["end"]["end_at"] - turn["start"]["start_at"]
    stages = stats["latency_stages_ms"]
    assert stages["end_to_end"]["max"] == turn["metrics"]["e2e_latency_ms"]
    assert stages["end_to_end"]["derived"] == 0  # measured by Agora
    rows = await service.store.read(lambda view: view.conn.execute(
        "SELECT metric, at_ms FROM agent_metrics WHERE metric = 'e2e_latency_ms'").fetchall())  # fmt: skip
    assert [tuple(row) for row in rows] == [("e2e_latency_ms", turn["start"]["start_at"])]


async def test_early_shapes_of_111_and_112_are_still_read(service) -> None:
    await deliver(service, load_fixture("agora/tolerance_111_turns_shape.json"), expect="done")
    old = load_fixture("agora/tolerance_112_start_stop_ts_shape.json")
    await deliver(service, old, expect="done")
    status, stats = await service.api("GET", "/v1/stats")
    assert status == 200, stats
    durations = [float(t["stop_ts"] - t["start_ts"]) for t in old["payload"]["turns"]]
    assert stats["latency_ms"]["turn_duration_ms"] == expected_summary(durations)
    assert stats["latency_stages_ms"]["asr"]["count"] == 3
    status, body = await service.api("GET", f"/v1/sessions/{old['payload']['agent_id']}")
    assert status == 200 and body["session"]["turns_truncated"] is False


# 104, custom-vendor speech times, turn 0, productId


async def test_104_is_recorded_on_the_session_with_a_warning(service, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agent_memory.memory.ingest")
    await deliver(service, load_fixture("agora/101_agent_joined.json"), expect="done")
    warning = load_fixture("agora/104_token_expiring.json")
    agent = warning["payload"]["agent_id"]
    _status, body = await service.api("GET", f"/v1/sessions/{agent}")
    assert body["session"]["token_expiring"] is False and body["session"]["token_warning_ms"] is None
    await deliver(service, warning, expect="done")
    _status, body = await service.api("GET", f"/v1/sessions/{agent}")
    assert body["session"]["token_expiring"] is True
    assert body["session"]["token_warning_ms"] == warning["notifyMs"]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(agent in m and warning["payload"]["channel"] in m and f"agents/{agent}/update" in m
               and '"token"' in m for m in said)  # fmt: skip


async def test_speech_start_dates_a_custom_llm_message(service) -> None:
    envelope = load_fixture("agora/103_custom_llm_speech_times.json")
    contents = envelope["payload"]["contents"]
    await deliver(service, envelope, expect="done")
    rows = await stored(service, envelope["payload"]["agent_id"])
    assert [r.ts_ms for r in rows] == [m["speech_start_ms"] for m in contents]
    assert [r.at_ms for r in rows] == [m["speech_start_ms"] for m in contents]
    for row, item in zip(rows, contents, strict=True):
        for name in ("speech_start_ms", "speech_end_ms", "speech_algorithmic_delay"):
            assert row.extra.get(name) == item.get(name)
    _status, body = await service.api("GET", "/v1/users/u-custom/characters/luna/messages")
    assert [(m["ts_ms"], m["timestamp_known"]) for m in body["messages"]] == [
        (m["speech_start_ms"], True) for m in contents
    ]


async def test_speech_start_is_read_by_magnitude_and_a_timestamp_wins(service) -> None:
    start_ts = 1_763_690_000
    contents = [
        {"role": "user", "content": "relative", "speech_start_ms": 4_250},
        {"role": "assistant", "content": "microseconds", "speech_start_ms": 1_763_690_012_345_678},
        {"role": "user", "content": "both", "timestamp": 1_763_690_020, "speech_start_ms": 1_763_690_099_000},
    ]  # fmt: skip
    envelope = agent_event(103, "SPEECH", labels={"user_id": "u-s", "character_id": "c"},
                           contents=contents, start_ts=start_ts)  # fmt: skip
    await deliver(service, envelope, expect="done")
    rows = await stored(service, "SPEECH")
    assert [r.ts_ms for r in rows] == [
        start_ts * 1000 + 4_250, 1_763_690_012_346, 1_763_690_020_000
    ]  # fmt: skip


async def test_turn_id_zero_fills_a_missing_turn_id(service) -> None:
    labels = {"user_id": "u-zero", "character_id": "c"}
    bare = [{"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "Hi."}]
    await deliver(
        service, agent_event(103, "ZERO", notice_id="bare", labels=labels, contents=bare), expect="done"
    )
    full = [{**bare[0], "turn_id": 0}, {**bare[1], "turn_id": 1}]
    answer = await deliver(
        service, agent_event(103, "ZERO", notice_id="full", labels=labels, contents=full), expect="done"
    )
    assert answer["new_messages"] == 0
    assert [r.turn_id for r in await stored(service, "ZERO")] == [0, 1]


async def test_a_docs_portal_envelope_with_product_1_is_read(service, caplog) -> None:
    caplog.set_level(logging.INFO, logger="agent_memory.platforms.agora.events")
    envelope = load_fixture("agora/docs_portal_103_product_1.json")
    payload = envelope["payload"]
    answer = await deliver(service, envelope, expect="done")
    assert answer["new_messages"] == len(payload["contents"])
    rows = await stored(service, payload["agent_id"])
    assert [(r.role, r.content) for r in rows] == [(m["role"], m["content"]) for m in payload["contents"]]
    assert any("productId 1" in r.getMessage() and payload["agent_id"] in r.getMessage()
               for r in caplog.records)  # fmt: skip


async def test_rtc_and_other_products_are_kept_not_used_and_logged(service, caplog) -> None:
    caplog.set_level(logging.INFO, logger="agent_memory.platforms.agora.events")
    rtc = load_fixture("agora/tolerance_rtc_111_product_1.json")
    await deliver(service, rtc, expect="ignored")
    recording = agent_event(103, "REC-1", contents=[{"role": "user", "content": "x"}])
    recording["productId"] = 3
    await deliver(service, recording, expect="ignored")
    not_ours = agent_event(105, "RTC-AGENT")
    not_ours["productId"] = 1
    await deliver(service, not_ours, expect="ignored")
    counts = await service.store.read(lambda view: view.maintenance.counts())
    assert (counts["sessions"], counts["messages"], counts["inbox"]) == (0, 0, 3)
    levels = {r.levelno for r in caplog.records if rtc["noticeId"] in r.getMessage()}
    assert levels == {logging.INFO}
    assert any(r.levelno == logging.WARNING and "productId 3" in r.getMessage() for r in caplog.records)


# Existing databases


def test_a_database_from_before_message_kinds_opens_and_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    migrations.apply(Database(conn), stop_before="m006_message_kinds")
    conn.execute(
        "INSERT INTO sessions (agent_id, user_id, character_id, identity_source, status) "
        "VALUES ('OLD', 'u-old', 'luna', 'labels', 'stopped')"
    )
    conn.execute(
        "INSERT INTO messages (agent_id, user_id, character_id, seq, role, content, at_ms) "
        "VALUES ('OLD', 'u-old', 'luna', 0, 'user', 'an old line', 1763690000000)"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    store.open()
    try:
        rows = store.read_now(lambda view: view.messages.latest("u-old", "luna", 10))
        assert [(r.kind, r.content) for r in rows] == [("turn", "an old line")]
        session = store.read_now(lambda view: view.sessions.get("OLD"))
        assert (session.token_warning_ms, session.turns_truncated) == (None, False)
        names = store.read_now(lambda view: view.maintenance.schema())
        assert {"m006_message_kinds", "m007_session_notices"} <= set(names)
    finally:
        store.close()


@pytest.mark.parametrize("content", [None, [{"type": "text", "text": "parts"}], {"odd": 1}])
async def test_odd_content_never_fails_a_message(service, content) -> None:
    envelope = agent_event(103, "ODD", labels={"user_id": "u-odd", "character_id": "c"},
                           contents=[{"role": "user", "content": content}])  # fmt: skip
    await deliver(service, envelope, expect="done")
    assert len(await stored(service, "ODD")) == 1


async def test_a_polled_window_with_a_bad_item_keeps_the_rest(tmp_path: Path, make_settings) -> None:
    store = SQLiteStore(tmp_path / "poll.db")
    store.open()
    try:
        ingestor = Ingestor(make_settings())
        answer = HistoryResponse.model_validate({
            "agent_id": "POLLED", "start_ts": 1_763_690_000, "status": "RUNNING",
            "contents": [{"role": "user", "content": "one"}, None, {"role": "assistant", "content": "two"}],
        })  # fmt: skip
        assert answer.skipped == ["contents[1]: not an object (got NoneType)"]
        window = history_window("POLLED", answer)
        outcome = await store.write(lambda tx: ingestor.merge_window(tx, window, 1))
        assert (outcome.status, outcome.new_messages) == ("partial", 2)
        rows = store.read_now(lambda view: view.messages.of_session("POLLED"))
        assert [r.content for r in rows] == ["one", "two"]
    finally:
        store.close()
