"""Semantic recall's embeddings: the OpenAI-compatible client against a real loopback endpoint, the
background worker behind the job queue, exact nearest neighbours, and vectors leaving with their
messages (forget, moves) down to the bytes of the file."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import Service, agent_event, deliver, on_disk, on_sqlite, seed, turns, wait_for
from fakes.embeddings_server import FakeEmbeddings
from fakes.openai_server import Reply

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import CONDENSE, EMBED, Session
from agent_memory.embed import make_embedder
from agent_memory.embed.hashing import HashingEmbedder, hashed_vector
from agent_memory.embed.openai_compatible import OpenAIEmbedder
from agent_memory.errors import EmbeddingError, NotConfigured
from agent_memory.memory.embedding import EMBED_BATCH, semantic_candidates
from agent_memory.settings import Settings
from agent_memory.store import Store, Transaction
from agent_memory.store.sqlite import SQLiteTransaction
from agent_memory.store.types import NewMessage
from agent_memory.web.keys import EMBEDDINGS, JOBS

MODEL = "fake-embed"
pytestmark = pytest.mark.postgres


# The worker's sweep in the tests that wait for it to embed by itself (the default, 1 s, is
# what such a test would otherwise wait, idle, for each sweep).
SWEEP_S = 0.05


def embedding_settings(fake: FakeEmbeddings, **overrides: Any) -> dict[str, Any]:
    """Settings that embed through the fake endpoint; the SDK does not retry unless asked."""
    return {
        "embeddings_model": MODEL,
        "embeddings_base_url": fake.base_url,
        "embeddings_api_key": "embed-key",
        "llm_max_retries": 0,
        **overrides,
    }


def client(fake: FakeEmbeddings, **overrides: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(Settings(**embedding_settings(fake, **overrides)))


async def vector_count(service: Service, user_id: str, character_id: str | None = None) -> int:
    return await service.store.read(lambda view: view.vectors.count(user_id, character_id))


def vectors_reach(service: Service, expected: int, user_id: str, character_id: str | None = None) -> Any:
    """A check for `wait_for`: the user's (or pair's) vectors number `expected`."""

    async def check() -> bool:
        return await vector_count(service, user_id, character_id) == expected

    return check


# -- settings and the client -------------------------------------------------------------------


def test_embeddings_are_off_unless_a_model_is_named_and_a_model_needs_an_endpoint() -> None:
    assert make_embedder(Settings()) is None
    with pytest.raises(NotConfigured) as caught:
        make_embedder(Settings(embeddings_model="text-embedding-3-small"))
    assert "AGENT_MEMORY_EMBEDDINGS_BASE_URL" in caught.value.message
    settings = Settings.from_env(
        {
            "AGENT_MEMORY_EMBEDDINGS_MODEL": "text-embedding-3-small",
            "OPENAI_API_KEY": "sk-test",
            "AGENT_MEMORY_EMBEDDINGS_DIMENSIONS": "256",
            "AGENT_MEMORY_EMBEDDINGS_TIMEOUT_S": "0.5",
        }
    )
    embedder = make_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model, embedder.dimensions, settings.embeddings_timeout_s) == (
        "text-embedding-3-small", 256, 0.5,
    )  # fmt: skip


async def test_client_sends_batches_and_returns_one_vector_per_text_in_order() -> None:
    async with FakeEmbeddings(dimensions=32) as fake:
        embedder = OpenAIEmbedder(Settings(**embedding_settings(fake)), batch_size=3)
        texts = [f"text number {i}" for i in range(7)]
        vectors = await embedder.embed(texts)
        await embedder.close()
    assert vectors == [pytest.approx(hashed_vector(text, 32), abs=1e-6) for text in texts]
    assert fake.inputs == [texts[0:3], texts[3:6], texts[6:7]]
    assert {body["model"] for body in fake.requests} == {MODEL}
    assert {body["encoding_format"] for body in fake.requests} == {"float"}
    assert all("dimensions" not in body for body in fake.requests)
    assert {headers["Authorization"] for headers in fake.headers} == {"Bearer embed-key"}


async def test_client_passes_dimensions_and_refuses_an_answer_that_ignores_them() -> None:
    async with FakeEmbeddings() as fake:
        embedder = client(fake, embeddings_dimensions=16)
        assert [len(v) for v in await embedder.embed(["a", "b"])] == [16, 16]
        assert fake.requests[-1]["dimensions"] == 16
        wrong = {"data": [{"index": 0, "embedding": [0.5] * 8}]}
        fake.script(Reply(content=json.dumps(wrong)))
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["a"])
        assert "AGENT_MEMORY_EMBEDDINGS_DIMENSIONS" in caught.value.message
        await embedder.close()


async def test_client_retries_server_errors_and_rate_limits_then_succeeds() -> None:
    async with FakeEmbeddings(retry_after=0.01) as fake:
        embedder = client(fake, llm_max_retries=2)
        fake.script(500, 429)
        vectors = await embedder.embed(["hello there"])
        await embedder.close()
    assert fake.calls == 3
    assert vectors == [pytest.approx(hashed_vector("hello there", 64), abs=1e-6)]


@pytest.mark.parametrize(
    ("answer", "expected", "retry_after"),
    [
        (429, "answered 429", 2.0),
        (503, "answered 503", None),
        (401, "AGENT_MEMORY_EMBEDDINGS_API_KEY", None),
        (404, "AGENT_MEMORY_EMBEDDINGS_MODEL", None),
        (Reply(content='{"object": "list", "data": []}'), "answered 0 vectors for 1 texts", None),
    ],
)
async def test_client_failures_are_embedding_errors_naming_what_to_fix(
    answer: Any, expected: str, retry_after: float | None
) -> None:
    async with FakeEmbeddings() as fake:
        embedder = client(fake)
        fake.script(answer)
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
        await embedder.close()
    assert expected in caught.value.message
    assert caught.value.retry_after == retry_after


async def test_client_timeout_and_unreachable_endpoint_are_embedding_errors() -> None:
    async with FakeEmbeddings() as fake:
        embedder = client(fake, llm_timeout_s=0.3)
        fake.script("hang")
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
        await embedder.close()
        gone = fake.base_url
    assert "did not answer within 0.3s" in caught.value.message
    embedder = OpenAIEmbedder(Settings(embeddings_model=MODEL, embeddings_base_url=gone, llm_max_retries=0))
    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])
    await embedder.close()
    assert (
        "unreachable" in caught.value.message and "AGENT_MEMORY_EMBEDDINGS_BASE_URL" in caught.value.message
    )


# -- the store: planted vectors, nearest neighbours, deletion ------------------------------------


def session(agent_id: str, user_id: str, character_id: str) -> Session:
    return Session(
        agent_id=agent_id, user_id=user_id, character_id=character_id, identity_source="labels",
        status="stopped", channel="room", start_ms=1_000,
    )  # fmt: skip


def spoken(agent_id: str, user_id: str, character_id: str, *contents: str) -> list[NewMessage]:
    return [
        {
            "agent_id": agent_id,
            "user_id": user_id,
            "character_id": character_id,
            "seq": seq,
            "role": "user" if seq % 2 == 0 else "assistant",
            "content": content,
            "at_ms": 1_000 + seq,
            "fp": f"{agent_id}-{seq}",
            "created_ms": 1,
        }
        for seq, content in enumerate(contents)
    ]


async def store_turns(
    store: Store, agent_id: str, user_id: str, character_id: str, *contents: str
) -> list[int]:
    """Store a session of turns; returns their message ids in order."""

    def write(tx: Transaction) -> list[int]:
        tx.sessions.insert(session(agent_id, user_id, character_id))
        tx.messages.insert(spoken(agent_id, user_id, character_id, *contents))
        return [message.id for message in tx.messages.of_session(agent_id)]

    return await store.write(write)


async def test_nearest_ranks_planted_vectors_by_cosine_within_a_pair_or_a_user(store: Store) -> None:
    east, north_east, north, west = await store_turns(store, "A1", "u1", "luna", "e", "ne", "n", "w")
    (other_character,) = await store_turns(store, "A2", "u1", "kai", "k")
    (other_user,) = await store_turns(store, "A3", "u2", "luna", "x")
    planted = [(east, [2.0, 0, 0]), (north_east, [0.8, 0.6, 0]), (north, [0, 1, 0]), (west, [-1, 0, 0])]
    assert await store.write(lambda tx: tx.vectors.add("m", planted)) == 4
    await store.write(lambda tx: tx.vectors.add("m", [(other_character, [0.9, 0.3, 0])]))
    await store.write(lambda tx: tx.vectors.add("m", [(other_user, [1, 0, 0])]))
    # Another model's vector of the best match is no answer to this model's question.
    await store.write(lambda tx: tx.vectors.add("other-model", [(other_user, [1, 0, 0])]))

    query = [1.0, 0.1, 0.0]
    pair = await store.read(lambda view: view.vectors.nearest("u1", "luna", query, "m", 10))
    assert [message_id for message_id, _ in pair] == [east, north_east, north, west]
    assert [round(score, 3) for _, score in pair] == [0.995, 0.856, 0.1, -0.995]
    top = await store.read(lambda view: view.vectors.nearest("u1", "luna", query, "m", 2))
    assert [message_id for message_id, _ in top] == [east, north_east]
    user = await store.read(lambda view: view.vectors.nearest("u1", None, query, "m", 3))
    assert [message_id for message_id, _ in user] == [east, other_character, north_east]
    assert await store.read(lambda view: view.vectors.nearest("u1", "luna", query, "unknown", 3)) == []
    assert await store.read(lambda view: view.vectors.nearest("u1", "luna", [1.0, 0.0], "m", 3)) == []


async def test_nearest_sees_vectors_added_replaced_and_deleted_after_it_was_last_asked(store: Store) -> None:
    first, second, third, fourth = await store_turns(store, "A1", "u1", "luna", "1", "2", "3", "4")

    async def nearest(query: list[float]) -> list[int]:
        found = await store.read(lambda view: view.vectors.nearest("u1", "luna", query, "m", 10))
        return [message_id for message_id, _ in found]

    await store.write(lambda tx: tx.vectors.add("m", [(first, [1, 0]), (second, [0, 1])]))
    assert await nearest([1, 0.1]) == [first, second]
    # Added only: the answer grows by the new vectors.
    await store.write(lambda tx: tx.vectors.add("m", [(third, [1, 0.2])]))
    await store.write(lambda tx: tx.vectors.add("m", [(fourth, [-1, 0])]))
    assert await nearest([1, 0]) == [first, third, second, fourth]
    # A newer vector for a message replaces its old one.
    await store.write(lambda tx: tx.vectors.add("m", [(second, [1, 0.01])]))
    assert await nearest([1, 0.01]) == [second, first, third, fourth]
    # Deleted with their messages, and one added meanwhile: the answer has exactly what is held.
    await store.write(lambda tx: tx.sessions.move("A1", "u9", "luna"))
    (fifth,) = await store_turns(store, "A2", "u1", "luna", "5")
    await store.write(lambda tx: tx.vectors.add("m", [(fifth, [0, 1])]))
    assert await nearest([1, 0]) == [fifth]
    await store.write(lambda tx: tx.maintenance.forget("u1", "luna"))
    assert await nearest([1, 0]) == []
    assert await store.read(lambda view: view.vectors.count("u1")) == 0


async def test_a_vector_for_a_message_that_is_gone_is_not_stored(store: Store) -> None:
    (kept,) = await store_turns(store, "A1", "u1", "luna", "kept")
    assert await store.write(lambda tx: tx.vectors.add("m", [(kept + 100, [1, 0]), (kept, [0, 1])])) == 1
    assert await store.read(lambda view: view.vectors.count("u1", "luna")) == 1


async def test_moving_a_session_drops_the_vectors_of_its_old_messages(store: Store) -> None:
    ids = await store_turns(store, "A1", "u1", "luna", "said once", "said twice")
    await store.write(lambda tx: tx.vectors.add("m", [(i, [1, 0]) for i in ids]))
    await store.write(lambda tx: tx.sessions.move("A1", "u9", "luna"))
    assert await store.read(lambda view: view.vectors.count("u1")) == 0
    missing = await store.read(lambda view: view.vectors.missing("u9", "luna", "m", None, 10))
    assert [m.content for m in missing] == ["said once", "said twice"]
    assert all(m.id not in ids for m in missing)


async def test_missing_lists_unembedded_spoken_turns_of_the_model_oldest_first(store: Store) -> None:
    ids = await store_turns(store, "A1", "u1", "luna", "first", "   ", "second", "third")

    def tool_call(tx: Transaction) -> None:
        rows = spoken("A1", "u1", "luna", "")
        rows[0].update({"seq": 10, "kind": "tool_call", "fp": "tool"})
        tx.messages.insert(rows)

    await store.write(tool_call)
    await store.write(lambda tx: tx.vectors.add("m", [(ids[0], [1, 0])]))
    missing = await store.read(lambda view: view.vectors.missing("u1", "luna", "m", None, 10))
    assert [m.content for m in missing] == ["second", "third"]  # no blank turn, no tool call
    assert [m.content for m in await store.read(lambda v: v.vectors.missing("u1", "luna", "m", 3, 10))] == [
        "first", "second", "third",
    ]  # fmt: skip
    assert await store.read(lambda view: view.vectors.pairs_missing("m", None, 10)) == [("u1", "luna")]
    assert await store.read(lambda view: view.vectors.pairs_missing("new-model", None, 10)) == [
        ("u1", "luna")
    ]


async def test_semantic_candidates_finds_the_turn_that_shares_the_question_s_words(store: Store) -> None:
    ids = await store_turns(
        store, "A1", "u1", "luna",
        "I started a pottery class last Friday",
        "That sounds lovely!",
        "My sister lives in Lisbon",
        "我下个月去杭州看朋友",
    )  # fmt: skip
    embedder = HashingEmbedder()
    vectors = await embedder.embed(["I started a pottery class last Friday", "That sounds lovely!",
                                    "My sister lives in Lisbon", "我下个月去杭州看朋友"])  # fmt: skip
    await store.write(lambda tx: tx.vectors.add(embedder.model, list(zip(ids, vectors, strict=True))))
    ask = {"user_id": "u1", "character_id": "luna", "k": 2, "timeout_s": 1.0}
    pottery = await semantic_candidates(store, embedder, q="When did I start pottery class?", **ask)
    assert pottery[0][0] == ids[0]
    hangzhou = await semantic_candidates(store, embedder, q="什么时候去杭州", **ask)
    assert hangzhou[0][0] == ids[3]
    assert await semantic_candidates(store, embedder, q="   ", **ask) == []


async def test_semantic_candidates_answer_nothing_with_one_warning_when_the_model_fails(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    (said,) = await store_turns(store, "A1", "u1", "luna", "pottery class")
    async with FakeEmbeddings() as fake:
        embedder = client(fake)
        await store.write(lambda tx: tx.vectors.add(MODEL, [(said, hashed_vector("pottery class", 64))]))
        ask = {"user_id": "u1", "character_id": "luna", "k": 5, "timeout_s": 0.3}
        fake.script("hang", 500)
        with caplog.at_level(logging.WARNING, logger="agent_memory.memory.embedding"):
            assert await semantic_candidates(store, embedder, q="pottery?", **ask) == []
            assert await semantic_candidates(store, embedder, q="pottery class?", **ask) == []
        # The model answers again: given time enough on a loaded machine, it finds the turn.
        found = await semantic_candidates(store, embedder, q="pottery class", **{**ask, "timeout_s": 10})
        await embedder.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "AGENT_MEMORY_EMBEDDINGS_TIMEOUT_S" in warnings[0] and "answered 500" in warnings[1]
    assert [message_id for message_id, _ in found] == [said]


# -- the worker, through the service -------------------------------------------------------------


async def test_turns_are_embedded_after_ingest_by_an_embed_job(start_service: Any) -> None:
    async with FakeEmbeddings() as fake:
        service = await start_service(**embedding_settings(fake, job_sweep_s=SWEEP_S))
        count = EMBED_BATCH + 6
        await seed(service, "u1", "luna", "A1", turns(count))
        await wait_for(lambda: vector_count(service, "u1", "luna"), failure="no vectors were stored")
        await wait_for(
            lambda: service.store.read(lambda view: view.jobs.get(EMBED, "u1", "luna") is None),
            failure="the embed job did not finish",
        )
    assert await vector_count(service, "u1", "luna") == count
    assert [len(texts) for texts in fake.inputs] == [EMBED_BATCH, 6]
    assert sorted(text for texts in fake.inputs for text in texts) == sorted(
        m["content"] for m in turns(count)
    )
    # The stored vectors are what the model answered, so a question finds its turn.
    found = await semantic_candidates(
        service.store, HashingEmbedder(64, model=MODEL), user_id="u1", character_id="luna",
        q="user line 42", k=1, timeout_s=1,
    )  # fmt: skip
    by_id = await service.store.read(
        lambda view: {m.id: m.content for m in view.messages.latest("u1", "luna", 200)}
    )
    assert by_id[found[0][0]] == "user line 42"


async def test_a_webhook_is_answered_while_the_embeddings_endpoint_hangs(start_service: Any) -> None:
    async with FakeEmbeddings() as fake:
        fake.script("hang")
        service = await start_service(**embedding_settings(fake, job_sweep_s=SWEEP_S))
        await seed(service, "u1", "luna", "A1", turns(EMBED_BATCH))  # a full batch: due at once
        await wait_for(lambda: fake.calls >= 1, failure="the worker never called the endpoint")
        labels = {"user_id": "u1", "character_id": "luna"}
        answer = await deliver(
            service, agent_event(103, "A2", labels=labels, contents=turns(4, prefix="more ")), expect="done"
        )
        assert answer["new_messages"] == 4
        assert fake.calls == 1  # the second callback did not call the model either
        assert await vector_count(service, "u1") == 0


async def test_a_failed_batch_is_retried_by_the_job_with_backoff(start_service: Any) -> None:
    async with FakeEmbeddings() as fake:
        fake.script(503)
        service = await start_service(**embedding_settings(fake, job_sweep_s=3600))
        await seed(service, "u1", "luna", "A1", turns(4))
        await embed_now(service)
        job = await service.store.read(lambda view: view.jobs.get(EMBED, "u1", "luna"))
        assert job is not None and job.status == "pending" and job.attempts == 1
        assert job.last_error is not None and "answered 503" in job.last_error
        assert job.due_ms > now_ms()  # backing off
        await embed_now(service)
    assert await vector_count(service, "u1", "luna") == 4
    assert await service.store.read(lambda view: view.jobs.get(EMBED, "u1", "luna")) is None


async def embed_now(service: Service) -> None:
    """Make every pending job due now (not after its debounce or backoff) and run the embed jobs."""

    def due(tx: Any) -> None:  # the same SQL on either backend's connection
        tx.conn.execute("UPDATE jobs SET due_ms = 0 WHERE status = 'pending'")

    await service.store.write(due)
    await service.server.app[EMBEDDINGS].run_due_now()


def vector_rows(view: Any) -> list[tuple[Any, ...]]:
    """Every stored vector as (id, message id, bytes), on either backend's connection."""
    rows = view.conn.execute("SELECT id, message_id, vector FROM message_vectors").fetchall()
    return [tuple(row.values()) if isinstance(row, dict) else tuple(row) for row in rows]


async def test_a_restart_keeps_what_was_embedded_and_embeds_the_rest(start_service: Any) -> None:
    count = 2 * EMBED_BATCH + 10
    async with FakeEmbeddings() as fake:
        fake.script(Reply(), "hang")  # the first batch is answered, the second never is
        # On PostgreSQL the restarted process is another instance: it takes the job over once
        # the stopped one's lease on it has run out.
        first = await start_service(**embedding_settings(fake, lease_s=1, job_sweep_s=SWEEP_S))
        await seed(first, "u1", "luna", "A1", turns(count))
        await wait_for(lambda: fake.calls >= 2, failure="the second batch was never asked for")
        before = await first.store.read(vector_rows)
        assert len(before) == EMBED_BATCH
        await first.server.close()  # the process stops with its job still running

        second = await start_service(**embedding_settings(fake, lease_s=1, job_sweep_s=SWEEP_S))
        await wait_for(vectors_reach(second, count, "u1", "luna"), failure="the rest was not embedded")
    after = await second.store.read(vector_rows)
    assert set(before) <= set(after)
    # After the restart only the turns still without a vector were sent.
    embedded_first = set(fake.inputs[0])
    resent = {text for texts in fake.inputs[2:] for text in texts}
    assert resent and not resent & embedded_first
    assert len(resent) == count - EMBED_BATCH


async def test_forget_deletes_the_vectors_rows_and_bytes(start_service: Any, db_path: Any) -> None:
    # The file's bytes are SQLite's to check here (PostgreSQL's files: test_retention).
    sqlite = isinstance(db_path, Path)
    async with FakeEmbeddings() as fake:
        service = await start_service(**embedding_settings(fake, job_sweep_s=3600))
        await seed(service, "u1", "luna", "A1", turns(6))
        await seed(service, "u2", "luna", "B1", turns(2, prefix="other "))
        await embed_now(service)
        assert (await vector_count(service, "u1"), await vector_count(service, "u2")) == (6, 2)
        blobs = await service.store.read(
            lambda view: [
                bytes(row["v"])
                for row in view.conn.execute("SELECT vector AS v FROM message_vectors WHERE user_id = 'u1'")
            ]
        )
        await service.store.checkpoint()
        assert len(blobs) == 6 and (not sqlite or all(blob in on_disk(db_path) for blob in blobs))
        status, receipt = await service.api("DELETE", "/v1/users/u1")
    assert status == 200 and receipt["deleted"]["embeddings"] == 6
    assert await vector_count(service, "u1") == 0
    assert await vector_count(service, "u2") == 2
    assert not sqlite or not any(blob in on_disk(db_path) for blob in blobs)


async def test_a_session_bound_to_another_pair_is_embedded_there(start_service: Any) -> None:
    async with FakeEmbeddings() as fake:
        service = await start_service(**embedding_settings(fake, job_sweep_s=3600))
        await seed(service, "u1", "luna", "A1", turns(4))
        await embed_now(service)
        assert await vector_count(service, "u1") == 4
        status, _ = await service.api(
            "POST", "/v1/sessions/A1/bind", json={"user_id": "u2", "character_id": "kai"}
        )
        assert status == 200
        assert await vector_count(service, "u1") == 0
        assert await service.store.read(lambda view: view.jobs.get(EMBED, "u2", "kai")) is not None
        await embed_now(service)
    assert await vector_count(service, "u2", "kai") == 4
    assert sorted(fake.inputs[1]) == sorted(fake.inputs[0])  # the same turns, embedded again


@pytest.mark.sqlite_only  # drops SQLite's triggers
async def test_without_a_model_nothing_is_scheduled_and_no_vector_is_read(start_service: Any) -> None:
    service = await start_service()
    assert EMBEDDINGS not in service.server.app

    def drop_vectors(tx: SQLiteTransaction) -> None:
        # Whatever reads or writes vectors now fails: "no such table".
        for statement in (
            "DROP TRIGGER message_vectors_ad", "DROP TRIGGER message_vectors_au", "DROP TABLE message_vectors",
        ):  # fmt: skip
            tx.conn.execute(statement)

    await on_sqlite(service.store).write(drop_vectors)
    await seed(service, "u1", "luna", "A1", turns(8))
    jobs = await service.store.read(lambda view: view.jobs.by_status())
    assert [job.kind for job in jobs] == [CONDENSE]
    status, body = await service.api("GET", "/v1/users/u1/characters/luna/system-messages")
    assert status == 200 and "user line 6" in str(body["system_messages"])
    status, body = await service.api("GET", "/v1/users/u1/search", params={"q": "line"})
    assert status == 200 and body["results"]
    status, _ = await service.api("POST", "/v1/users/u1/characters/luna/condense")
    assert status == 202
    await service.server.app[JOBS].run_due_now()
    summary = await service.store.read(lambda view: view.summaries.get("u1", "luna"))
    assert summary is not None
    # (Forget still clears the table, setting or not: vectors from when it was set must go too.)
