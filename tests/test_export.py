"""The export: everything held about one user, as one JSON document, and nothing of anyone else."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import CONVERSATIONS, agent_event, load_conversations, load_fixture

from agent_memory.cli import main
from agent_memory.core.domain import Summary

pytestmark = pytest.mark.postgres


def alice_fixture() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Alice's messages in conversation order, and her distinct envelopes by noticeId."""
    envelopes: dict[str, dict[str, Any]] = {}
    for envelope in load_fixture("conversations/en_luna_companion.json"):
        envelopes.setdefault(envelope["noticeId"], envelope)
    runs = sorted(
        (e for e in envelopes.values() if e["eventType"] == 103),
        key=lambda e: e["payload"]["start_ts"],
    )
    return [m for run in runs for m in run["payload"]["contents"]], envelopes


async def test_export_holds_everything_about_the_user(service) -> None:
    await load_conversations(service, *CONVERSATIONS)
    labels = {"user_id": "u-alice", "character_id": "luna"}
    agent = "366YCNGT3TP2WA6A62BUEAWSB"
    status, _ = await service.callback(
        agent_event(
            111,
            agent,
            notice_id="metrics-1",
            labels=labels,
            metrics=[{"turn_id": 1, "llm_ttfb": 420}],
        )
    )
    status, added = await service.api(
        "POST",
        "/v1/users/u-alice/characters/luna/facts",
        json={"text": "Has a kitten named Miso", "scope": "user"},
    )
    # Its earlier text is the fact's history: exported too.
    status, _ = await service.api(
        "PATCH", f"/v1/facts/{added['fact']['id']}", json={"text": "Has a cat named Miso"}
    )
    assert status == 200
    for channel, user in (("alice-room", "u-alice"), ("wang-room", "u-wang")):
        pair = {"user_id": user, "character_id": "luna"}
        assert (await service.api("POST", f"/v1/channels/{channel}/bind", json=pair))[0] == 200
    summary = Summary(user_id="u-alice", character_id="luna", text="Alice is a nurse.", watermark_id=3,
                      covered_until_ms=5, message_count=3, method="offline", model="t", created_ms=1,
                      updated_ms=2, meta={"tokens_sent": 0})  # fmt: skip
    await service.store.write(lambda tx: tx.summaries.put(summary))
    status, doc = await service.api("GET", "/v1/users/u-alice/export")
    assert status == 200, doc
    messages, envelopes = alice_fixture()
    assert doc["format"] == "agent-memory-export/1" and doc["user_id"] == "u-alice"
    assert doc["characters"] == ["luna"] and doc["exported_ms"] > 0
    assert [m["content"] for m in doc["messages"]] == [m["content"] for m in messages]
    assert [m["role"] for m in doc["messages"]] == [m["role"] for m in messages]
    assert sum(m["interrupted"] for m in doc["messages"]) == 4
    assert {s["agent_id"] for s in doc["sessions"]} == {e["payload"]["agent_id"] for e in envelopes.values()}
    assert all(s["labels"] == labels for s in doc["sessions"])
    assert [(f["text"], f["scope"]) for f in doc["facts"]] == [("Has a cat named Miso", "user")]
    assert [(h["fact_id"], h["text"], h["scope"], h["change"]) for h in doc["fact_history"]] == [
        (added["fact"]["id"], "Has a kitten named Miso", "user", "edited")
    ]
    assert doc["facts"][0]["valid_from"] == doc["fact_history"][0]["valid_to"]
    assert doc["summaries"][0]["text"] == "Alice is a nurse." and doc["summaries"][0]["meta"] == {
        "tokens_sent": 0
    }
    assert doc["metrics"] == [
        {
            "agent_id": agent,
            "turn_id": 1,
            "metric": "llm_ttfb",
            "value_ms": 420.0,
            "at_ms": 1_763_700_000_000,
        }
    ]
    assert [(b["channel"], b["character_id"]) for b in doc["channel_bindings"]] == [("alice-room", "luna")]
    raw = {r["notice_id"]: r for r in doc["raw_callbacks"]}
    assert set(raw) == set(envelopes) | {"metrics-1"}
    for notice_id, envelope in envelopes.items():
        assert raw[notice_id]["body"] == envelope  # the callback as Agora sent it
    assert doc["counts"] == {
        "sessions": 3, "messages": len(messages), "facts": 1, "fact_history": 1, "summaries": 1, "bindings": 0,
        "channel_bindings": 1, "jobs": len(doc["jobs"]), "followed_agents": 0, "metrics": 1, "raw_callbacks": len(envelopes) + 1,
    }  # fmt: skip
    # Nothing of anyone else.
    text = json.dumps(doc, ensure_ascii=False)
    for other in ("u-wang", "wang-room", "u-kim", "u-team", "rtc:3003", "杭州", "Lisbon", "떡볶이"):
        assert other not in text, other


async def test_export_of_unknown_or_forgotten_users_is_404(service) -> None:
    status, body = await service.api("GET", "/v1/users/nobody/export")
    assert status == 404 and body["error"]["code"] == "not_found"
    await load_conversations(service, *CONVERSATIONS)
    assert (await service.api("GET", "/v1/users/u-kim/export"))[0] == 200
    assert (await service.api("DELETE", "/v1/users/u-kim"))[0] == 200
    status, body = await service.api("GET", "/v1/users/u-kim/export")
    assert status == 404 and "u-kim" in body["error"]["message"]
    status, _ = await service.api("GET", "/v1/users/u-kim/export", token=None)
    assert status == 401


async def test_a_channel_binding_alone_is_exported_and_forgotten(service) -> None:
    pair = {"user_id": "u-chan", "character_id": "mira"}
    assert (await service.api("POST", "/v1/channels/room-7/bind", json=pair))[0] == 200
    status, doc = await service.api("GET", "/v1/users/u-chan/export")
    assert status == 200 and doc["counts"]["channel_bindings"] == 1
    (binding,) = doc["channel_bindings"]
    assert binding["channel"] == "room-7" and binding["character_id"] == "mira"
    assert doc["bindings"] == [] and doc["characters"] == []
    # Forgetting deletes what the export showed: nothing is left to export.
    assert (await service.api("DELETE", "/v1/users/u-chan"))[0] == 200
    assert (await service.api("GET", "/v1/users/u-chan/export"))[0] == 404


async def test_a_binding_alone_is_exported(service) -> None:
    status, _ = await service.api(
        "POST", "/v1/sessions/AGENT-LATER/bind", json={"user_id": "u-bound", "character_id": "mira"}
    )
    assert status == 200
    status, doc = await service.api("GET", "/v1/users/u-bound/export")
    assert status == 200 and [b["agent_id"] for b in doc["bindings"]] == ["AGENT-LATER"]
    assert doc["messages"] == [] and doc["characters"] == []


async def test_cli_export_writes_the_same_document(service, tmp_path, capsys) -> None:
    await load_conversations(service, *CONVERSATIONS)
    _status, api_doc = await service.api("GET", "/v1/users/u-wang/export")
    out = tmp_path / "wang.json"
    db = service.settings.postgres_url or str(service.settings.db_path)
    assert await asyncio.to_thread(main, ["export", "--db", db, "u-wang", "--output", str(out)]) == 0
    # What was written, said in words (not a Python dict's repr).
    assert f"wrote 2 sessions, {api_doc['counts']['messages']} messages, " in capsys.readouterr().err
    cli_doc = json.loads(out.read_text(encoding="utf-8"))
    assert {k: v for k, v in cli_doc.items() if k != "exported_ms"} == {
        k: v for k, v in api_doc.items() if k != "exported_ms"
    }
    assert "记住我22号有考试" in out.read_text(encoding="utf-8")  # UTF-8, not escaped
    assert await asyncio.to_thread(main, ["export", "--db", db, "nobody"]) == 1
    assert "nothing is held about user nobody" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["search", "--db", db, "u-wang", "考试"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("[考试]") == 4 and "xiaoyu" in printed
    assert await asyncio.to_thread(main, ["search", "--db", db, "u-wang", "   "]) == 2
