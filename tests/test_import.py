"""Import: an export restored into a database (the same answers), idempotently; a forgotten user
refused unless forced; a bad file refused by its line before anything is written."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CONVERSATIONS,
    TOKEN,
    Service,
    agent_event,
    assert_error,
    condense,
    counts,
    deliver,
    load_conversations,
    on_disk,
)

from agent_memory.cli import main
from agent_memory.errors import InvalidJSON
from agent_memory.memory.restore import importer, reader

pytestmark = pytest.mark.postgres

PAIRS = (("u-alice", "luna"), ("u-wang", "xiaoyu"))
QUESTIONS = ("cat", "nurse", "Miso", "exam")
# Rows take the ids of the database they are restored into.
NEW_IDS = ("message_id", "fact_id")


def other_database(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Any:
    """A second, empty database on the test's backend."""
    if backend == "postgres":
        return request.getfixturevalue("pg_cluster").database()
    return tmp_path / "restored.db"


async def remembered(service: Service) -> dict[str, Any]:
    """What the service answers about each pair: start-of-call memory, recall, facts, summary."""
    answers: dict[str, Any] = {}
    for user, character in PAIRS:
        pair = f"/v1/users/{user}/characters/{character}"
        status, context = await service.api("GET", f"{pair}/system-messages")
        assert status == 200, context
        answers[f"{pair} system"] = context["system_messages"]
        for question in QUESTIONS:
            status, recalled = await service.api("GET", f"{pair}/recall", params={"q": question})
            assert status == 200, recalled
            answers[f"{pair} recall {question}"] = [
                {key: value for key, value in memory.items() if key not in NEW_IDS}
                for memory in recalled["memories"]
            ]
        status, facts = await service.api("GET", f"{pair}/facts")
        answers[f"{pair} facts"] = [(f["text"], f["scope"], f["pinned"]) for f in facts["facts"]]
        status, summary = await service.api("GET", f"{pair}/summary")
        answers[f"{pair} summary"] = (status, (summary.get("summary") or {}).get("text"))
    return answers


async def populated(start_service: Any) -> Service:
    """A service holding the sample conversations, condensed, with a fact edited by hand."""
    service: Service = await start_service()
    await load_conversations(service, *CONVERSATIONS)
    for user, character in PAIRS:
        status, _ = await service.api("POST", f"/v1/users/{user}/characters/{character}/condense")
        assert status == 202
    await condense(service)
    status, added = await service.api(
        "POST",
        "/v1/users/u-alice/characters/luna/facts",
        json={"text": "Has a kitten named Miso", "scope": "user"},
    )
    assert status == 201, added
    status, _ = await service.api(
        "PATCH", f"/v1/facts/{added['fact']['id']}", json={"text": "Has a cat named Miso"}
    )
    assert status == 200
    # Said after the summary was made: a turn the restored summary must not cover.
    labels = {"user_id": "u-alice", "character_id": "luna"}
    contents = [{"turn_id": 1, "role": "user", "content": "Miso chased a moth at the window today"}]
    await deliver(service, agent_event(103, "AFTER-SUMMARY", labels=labels, contents=contents))
    return service


async def exported(service: Service, user: str) -> bytes:
    status, document = await service.api("GET", f"/v1/users/{user}/export")
    assert status == 200, document
    return json.dumps(document, ensure_ascii=False, indent=2).encode()


async def test_round_trip_gives_the_same_answers(
    start_service: Any, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    source = await populated(start_service)
    before = await remembered(source)
    documents = [await exported(source, user) for user, _ in PAIRS]
    target: Service = await start_service(db_path=other_database(tmp_path, backend, request))
    for document in documents:
        status, report = await target.api("POST", "/v1/import", data=document)
        assert status == 200, report
        assert report["restored"]["messages"] > 0 and not report["already_held"].get("messages"), report
    after = await remembered(target)
    assert after == before
    # The summary's watermark was carried over: the turn it did not cover is waiting to be condensed.
    status, jobs = await target.api("GET", "/v1/jobs")
    assert any(job["user_id"] == "u-alice" and job["character_id"] == "luna" for job in jobs["jobs"]), jobs
    # The same export, again: nothing changes.
    held = await counts(target)
    status, again = await target.api("POST", "/v1/import", data=documents[0])
    assert status == 200, again
    assert not any(again["restored"].values()), again
    assert again["already_held"]["messages"] == json.loads(documents[0])["counts"]["messages"]
    assert await counts(target) == held
    assert await remembered(target) == before
    assert [await exported(target, user) for user, _ in PAIRS] != []


async def small_world(service: Service, user: str = "u-ida") -> bytes:
    """A user with one call and a fact; returns the user's export."""
    labels = {"user_id": user, "character_id": "luna"}
    contents = [
        {"turn_id": 1, "role": "user", "content": "My parrot Kestrel4471 learned to whistle"},
        {"turn_id": 1, "role": "assistant", "content": "Kestrel4471 sounds like a talented bird!"},
    ]
    await deliver(service, agent_event(103, f"CALL-{user}", labels=labels, contents=contents))
    status, _ = await service.api(
        "POST", f"/v1/users/{user}/characters/luna/facts", json={"text": "Owns a parrot named Kestrel4471"}
    )
    assert status == 201
    return await exported(service, user)


async def test_a_user_forgotten_after_the_export_is_refused_unless_forced(service: Service) -> None:
    document = await small_world(service)
    status, _ = await service.api("DELETE", "/v1/users/u-ida")
    assert status == 200
    status, body = await service.api("POST", "/v1/import", data=document)
    message = assert_error(status, body, 409, "conflict")
    assert "was forgotten at 20" in message and "force" in message, message
    status, body = await service.api("GET", "/v1/users/u-ida/export")
    assert status == 404  # nothing was written
    status, report = await service.api("POST", "/v1/import", params={"force": "true"}, data=document)
    assert status == 200, report
    assert report["forced"] is True and report["forgotten_ms"] >= json.loads(document)["exported_ms"]
    status, recalled = await service.api(
        "GET", "/v1/users/u-ida/characters/luna/recall", params={"q": "parrot"}
    )
    assert "Kestrel4471" in json.dumps(recalled["memories"])
    # An export taken after the forget restores without forcing.
    later = await exported(service, "u-ida")
    status, _ = await service.api("DELETE", "/v1/users/u-ida")
    status, report = await service.api("POST", "/v1/import", params={"force": "no"}, data=later)
    assert_error(status, report, 400, "bad_request")


async def test_a_forget_in_the_exports_own_millisecond_counts_as_after_it(service: Service) -> None:
    """Which came first is unknown; a forget is final, so the import is refused unless forced."""
    document = json.loads(await small_world(service))
    status, _ = await service.api("DELETE", "/v1/users/u-ida")
    assert status == 200
    cutoff = await service.store.read(lambda view: view.maintenance.forget_cutoff("u-ida", ""))
    document["exported_ms"] = cutoff.at_ms

    status, body = await service.api("POST", "/v1/import", data=json.dumps(document).encode())

    assert "was forgotten at 20" in assert_error(status, body, 409, "conflict")


SECOND = '"seq": "second"'


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def record_line(text: str, needle: str) -> int:
    """The line of the record holding `needle` (its opening brace)."""
    return text[: text.rindex("{", 0, text.index(needle))].count("\n") + 1


async def test_a_bad_file_is_named_by_its_line_and_nothing_is_written(service: Service) -> None:
    document = (await small_world(service, "u-jo")).decode()
    status, _ = await service.api("DELETE", "/v1/users/u-jo")
    doc = json.loads(document)
    doc["exported_ms"] = 2**62  # newer than the forget: not refused for it
    good = json.dumps(doc, ensure_ascii=False, indent=2)
    held = await counts(service)
    wrong_seq = good.replace('"seq": 1,', '"seq": "second",', 1)
    cut = good[: good.index("learned to whistle")]
    one_less = json.loads(good)
    one_less["messages"].pop()
    cases = {
        "truncated": (cut, 400, f"line {line_of(good, 'learned to whistle')}", "cut short"),
        "a wrong field": (wrong_seq, 422, f"line {record_line(wrong_seq, SECOND)}", "].seq: "),
        "counts that disagree": (json.dumps(one_less, indent=2), 422, "line", "cut short or edited"),
        "not JSON": ("hello", 400, "line 1", "expected '{'"),
        "trailing garbage": (good + "\n{}", 400, f"line {good.count(chr(10)) + 2}", "more follows"),
        "not an export": (json.dumps({"user_id": "u-jo"}), 422, "line 1", "not an agent-memory export"),
        "a NUL": (good.replace("whistle", "whis\\u0000tle"), 422, "line", "NUL"),
        "a huge number": (
            good.replace('"seq": 1,', '"seq": 1' + "0" * 30 + ",", 1),
            400,
            "line",
            "too large",
        ),
        "too deep": (
            good.replace('"images": []', '"images": ' + "[" * 200 + "]" * 200, 1),
            400,
            "the body nests",
            "deeper than 128",
        ),
        "a message of no session": (
            good.replace('"agent_id": "CALL-u-jo"', '"agent_id": "ELSEWHERE"', 2).replace(
                '"agent_id": "ELSEWHERE"', '"agent_id": "CALL-u-jo"', 1
            ),
            422,
            "line",
            "which no session of the export holds",
        ),
        "a list that is not": (
            good.replace('"facts": [', '"facts": 3, "x": [', 1),
            422,
            "line",
            "must be a list",
        ),
    }
    for name, (text, expected, line, what) in cases.items():
        status, body = await service.api("POST", "/v1/import", data=text.encode())
        code = "invalid_json" if expected == 400 else "invalid_field"
        message = assert_error(status, body, expected, code)
        assert message.startswith(line) and what in message, (name, message)
    status, body = await service.api("POST", "/v1/import", data=b"")
    assert_error(status, body, 400, "bad_request")
    assert await counts(service) == held
    status, _ = await service.api("GET", "/v1/users/u-jo/export")
    assert status == 404
    status, report = await service.api("POST", "/v1/import", data=good.encode())
    assert status == 200 and report["restored"]["messages"] == 2, report


def test_the_reader_streams_across_any_chunk_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    document = {
        "format": "agent-memory-export/1",
        "exported_ms": 1_793_736_960_000,
        "user_id": "u-ünï",
        "messages": [{"id": n, "content": f'line {n} 猫 \\" é', "x": [1.5, None, True]} for n in range(40)],
        "counts": {"messages": 40},
        "unknown": {"kept": [1, 2]},
    }
    text = json.dumps(document, ensure_ascii=False, indent=1)
    for chunk in (1, 2, 3, 7, 64):
        monkeypatch.setattr(reader, "CHUNK_CHARS", chunk)
        pieces = list(reader.ExportReader(io.StringIO(text)).pieces())
        rebuilt: dict[str, Any] = {}
        for piece in pieces:
            if piece.record:
                rebuilt.setdefault(piece.key, []).append(piece.value)
            else:
                rebuilt[piece.key] = piece.value
        assert rebuilt == document
        assert [p.line for p in pieces if p.record][:2] == [
            line_of(text, '"id": 0') - 1,
            line_of(text, '"id": 1') - 1,
        ]


@pytest.mark.sqlite_only  # reads SQLite's files
async def test_forget_after_an_import_removes_everything_it_wrote(
    start_service: Any, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    source = await start_service()
    document = await small_world(source, "u-kim")
    # Metrics and a raw callback of the call are exported (and imported) too.
    labels = {"user_id": "u-kim", "character_id": "luna"}
    await deliver(
        source, agent_event(111, "CALL-u-kim", labels=labels, metrics=[{"turn_id": 1, "llm_ttfb": 420}])
    )
    document = await exported(source, "u-kim")
    target: Service = await start_service(db_path=other_database(tmp_path, backend, request))
    status, report = await target.api("POST", "/v1/import", data=document)
    assert status == 200, report
    assert report["restored"]["metrics"] == 1 and report["restored"]["raw_callbacks"] == 2, report
    assert found(on_disk(target.settings.db_path), "Kestrel4471")
    status, body = await target.api("DELETE", "/v1/users/u-kim")
    assert status == 200, body
    deleted = body["deleted"]
    assert (deleted["messages"], deleted["facts"], deleted["sessions"], deleted["metrics"]) == (2, 1, 1, 1)
    assert deleted["raw_callbacks"] == 2 and deleted["fact_history"] == 0
    status, _ = await target.api("GET", "/v1/users/u-kim/export")
    assert status == 404
    assert not found(on_disk(target.settings.db_path), "Kestrel4471")


def found(data: bytes, marker: str) -> bool:
    return marker.encode() in data or marker.casefold().encode() in data


@pytest.mark.sqlite_only  # the CLI on a database file here
async def test_the_cli_imports_a_file_and_says_which_line_is_wrong(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = await small_world(service, "u-lee")
    path = tmp_path / "u-lee.json"
    path.write_bytes(document)
    restored = tmp_path / "restored.db"
    assert await asyncio.to_thread(main, ["import", str(path), "--db", str(restored)]) == 0
    assert json.loads(capsys.readouterr().out)["restored"]["messages"] == 2
    assert await asyncio.to_thread(main, ["import", str(path), "--db", str(restored)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert not any(again["restored"].values()) and again["already_held"]["messages"] == 2, again
    cut = tmp_path / "cut.json"
    cut.write_bytes(document[: document.index(b"learned")])
    assert await asyncio.to_thread(main, ["import", str(cut), "--db", str(restored)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"agent-memory: {cut}: line ") and "cut short" in error, error
    backup = tmp_path / "copy.db"
    assert await asyncio.to_thread(main, ["backup", str(backup), "--db", str(restored)]) == 0
    assert "integrity check: ok" in capsys.readouterr().err
    assert (
        await asyncio.to_thread(main, ["backup", str(backup), "--db", str(restored)]) == 2
    )  # never overwrites
    assert "exists already" in capsys.readouterr().err


async def test_a_partly_restored_user_is_completed_not_doubled(
    start_service: Any, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    source = await populated(start_service)
    before = await remembered(source)
    full = json.loads(await exported(source, "u-alice"))
    # What an import that stopped part way left: the first calls' messages, no summary or facts yet.
    part = {**full, "messages": full["messages"][:20], "summaries": [], "facts": [], "fact_history": []}
    part["counts"] = {**full["counts"], "messages": 20, "summaries": 0, "facts": 0, "fact_history": 0}
    target: Service = await start_service(db_path=other_database(tmp_path, backend, request))
    status, report = await target.api("POST", "/v1/import", data=json.dumps(part).encode())
    assert status == 200 and report["restored"]["messages"] == 20, report
    status, report = await target.api("POST", "/v1/import", data=json.dumps(full).encode())
    assert status == 200, report
    assert report["already_held"]["messages"] == 20
    assert report["restored"]["messages"] == len(full["messages"]) - 20
    assert report["restored"]["summaries"] == 1 and report["restored"]["facts"] == len(full["facts"])
    status, messages = await target.api(
        "GET", "/v1/users/u-alice/characters/luna/messages", params={"limit": "1000"}
    )
    assert [m["content"] for m in messages["messages"]] == [
        m["content"] for m in full["messages"] if m["character_id"] == "luna" and m["kind"] == "turn"
    ]
    after = await remembered(target)
    assert {k: v for k, v in after.items() if "u-alice" in k} == {
        k: v for k, v in before.items() if "u-alice" in k
    }


async def test_an_older_export_still_imports(service: Service, start_service: Any, tmp_path: Path) -> None:
    document = json.loads(await small_world(service, "u-old"))
    # As exports were before fingerprints, fact history, bindings, metrics and raw callbacks.
    for message in document["messages"]:
        del message["fp"]
    for kind in (
        "fact_history",
        "bindings",
        "channel_bindings",
        "jobs",
        "followed_agents",
        "metrics",
        "raw_callbacks",
    ):
        document.pop(kind, None)
        document["counts"].pop(kind, None)
    status, _ = await service.api("DELETE", "/v1/users/u-old")
    document["exported_ms"] = 2**53  # taken after that forget
    status, report = await service.api("POST", "/v1/import", data=json.dumps(document).encode())
    assert status == 200 and report["restored"]["messages"] == 2, report
    status, recalled = await service.api(
        "GET", "/v1/users/u-old/characters/luna/recall", params={"q": "parrot"}
    )
    assert "Kestrel4471" in json.dumps(recalled["memories"])
    # The fingerprint recomputed is ingest's: the same call delivered again adds nothing.
    labels = {"user_id": "u-old", "character_id": "luna"}
    contents = [
        {"turn_id": 1, "role": "user", "content": "My parrot Kestrel4471 learned to whistle"},
        {"turn_id": 1, "role": "assistant", "content": "Kestrel4471 sounds like a talented bird!"},
    ]
    answer = await deliver(service, agent_event(103, "CALL-u-old", labels=labels, contents=contents))
    assert answer["new_messages"] == 0, answer


async def test_a_forget_during_an_import_stops_it(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    document = await small_world(service, "u-mid")
    assert (await service.api("DELETE", "/v1/users/u-mid"))[0] == 200
    doc = json.loads(document)
    doc["exported_ms"] = 2**53  # taken after that forget: imported without forcing
    flush = importer.Importer._flush
    batches: list[str] = []

    async def forget_after_the_sessions(self: Any, kind: str, *args: Any) -> None:
        await flush(self, kind, *args)
        batches.append(kind)
        if kind == "sessions":  # the operator forgets the user again while the import runs
            await self.store.write(lambda tx: tx.maintenance.forget("u-mid", None))

    monkeypatch.setattr(importer.Importer, "_flush", forget_after_the_sessions)
    status, body = await service.api("POST", "/v1/import", data=json.dumps(doc).encode())
    message = assert_error(status, body, 409, "conflict")
    assert "while it was being imported" in message, message
    assert batches == ["sessions"]
    status, _ = await service.api("GET", "/v1/users/u-mid/export")
    assert status == 404  # the session written before the forget went with it, the rest never came


@pytest.mark.sqlite_only  # also imports into the database file here
async def test_import_through_the_cli_and_the_client_at_url(
    start_service: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service: Service = await start_service(max_body_bytes=64 * 1024)
    document = await small_world(service, "u-url")
    assert (await service.api("DELETE", "/v1/users/u-url"))[0] == 200
    doc = json.loads(document)
    doc["exported_ms"] = 2**53
    path = tmp_path / "u-url.json"
    path.write_text(json.dumps(doc))
    remote = ["--url", service.url, "--api-key", TOKEN]
    assert await asyncio.to_thread(main, ["import", str(path), *remote]) == 0
    assert json.loads(capsys.readouterr().out)["restored"]["messages"] == 2
    # Over the body limit: refused by the service, said by the command with the file's name.
    doc["messages"] += [{**doc["messages"][0], "seq": 100 + n, "content": "x" * 1000} for n in range(80)]
    doc["counts"]["messages"] = len(doc["messages"])
    path.write_text(json.dumps(doc))
    assert await asyncio.to_thread(main, ["import", str(path), *remote]) == 1
    error = capsys.readouterr().err
    assert (
        error.startswith(f"agent-memory: {path}: the body is") and "AGENT_MEMORY_MAX_BODY_BYTES" in error
    ), error
    # The same file on the database here: streamed, any size.
    assert await asyncio.to_thread(main, ["import", str(path), "--db", str(service.settings.db_path)]) == 0
    assert json.loads(capsys.readouterr().out)["restored"]["messages"] == 80


def test_the_reader_refuses_a_record_nested_too_deep() -> None:
    text = (
        '{"format": "agent-memory-export/1",\n "messages": [\n  {"id": 1},\n  {"extra": '
        + "[" * 200
        + "]" * 200
        + "}]}"
    )
    with pytest.raises(InvalidJSON, match=r"^line 4: messages\[1\] nests arrays and objects deeper than 128"):
        list(reader.ExportReader(io.StringIO(text)).pieces())
