"""Import: an export restored into a database (the same answers), idempotently; a forgotten user
refused unless forced; a bad file refused by its line before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import CONVERSATIONS, Service, agent_event, condense, counts, deliver, load_conversations

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
                {key: value for key, value in memory.items() if key not in NEW_IDS} for memory in recalled["memories"]
            ]
        status, facts = await service.api("GET", f"{pair}/facts")
        answers[f"{pair} facts"] = [(f["text"], f["scope"], f["pinned"]) for f in facts["facts"]]
        status, summary = await service.api("GET", f"{pair}/summary")
        answers[f"{pair} summary"] = (status, summary.get("summary", {}).get("text"))
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
    status, _ = await service.api("PATCH", f"/v1/facts/{added['fact']['id']}", json={"text": "Has a cat named Miso"})
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
