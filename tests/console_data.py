"""A pair with a rich call for the console's tests: gaps, an interruption, an image, tool calls, facts."""

from __future__ import annotations

from typing import Any

from conftest import Service, agent_event, deliver, load_fixture, said

USER, CHARACTER = "u-alice", "luna"
PAIR_PAGE = f"/console/users/{USER}/characters/{CHARACTER}"
PHOTO = "https://photos.example.test/rex-on-the-beach.jpg"
START_MS = 1_763_690_000_000


def rich_call() -> list[dict[str, Any]]:
    """A call's turns: the user names the dog (with a photo), the reply is cut off."""
    contents = said(
        "my dog is called Rex and he loves the beach",
        "Rex sounds like a happy dog",
        "I moved to Lyon last spring",
        "Lyon is lovely in spring",
        start_ms=START_MS,
    )
    contents[0]["content"] = [
        {"type": "text", "text": contents[0]["content"]},
        {"type": "image_url", "image_url": {"url": PHOTO}},
    ]
    contents[1]["metadata"] = {
        "source": "llm",
        "interrupted": True,
        "original": "Rex sounds like a happy dog who would chase every wave",
        "interrupt_timestamp": START_MS + 1500,
    }
    return contents


async def seed_console(service: Service) -> None:
    """Two calls of the pair (the later one with a gap), another user's tool call, a fact."""
    labels = {"user_id": USER, "character_id": CHARACTER}
    first = agent_event(103, "CALL-ONE", labels=labels, contents=rich_call())
    await deliver(service, first, expect="done")
    later = said("do you remember my dog", "Of course, Rex!", start_ms=START_MS + 86_400_000)
    window = agent_event(103, "CALL-TWO", labels=labels, contents=later, start_ts=START_MS // 1000 + 86_400)
    await deliver(service, window, expect="done")
    # A second window of the later call that overlaps nothing stored: a gap before it.
    skipped = said("I am back", "Welcome back", start_ms=START_MS + 86_500_000)
    for index, item in enumerate(skipped):
        item["turn_id"] = 20 + index // 2
    gap = agent_event(
        103,
        "CALL-TWO",
        labels=labels,
        contents=skipped,
        notice_id="CALL-TWO:103:b",
        start_ts=START_MS // 1000 + 86_400,
    )
    await deliver(service, gap)
    await deliver(service, load_fixture("agora/103_tool_calls.json"), expect="done")
    status, body = await service.api(
        "POST",
        f"/v1/users/{USER}/characters/{CHARACTER}/facts",
        json={"text": "The user's dog is called Rex"},
    )
    assert status == 201, body
