"""Many instances on one PostgreSQL database: jobs and followed agents claimed with leases.

Each instance is a real `PostgresStore` (with its own name and pools) on one database of the
test cluster. An instance "dies" by closing without releasing anything it holds; its lease then
runs out: for real where the test waits for it, or, to keep a test free of timing, by setting
the lease's end to the past (what the clock does a lease after the death).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import psycopg
import pytest
from conftest import agent_event, agora_settings, deliver, turns, wait_for
from fakes.agora_server import FakeAgora
from fakes.openai_server import FakeOpenAI
from served import Server, servers
from test_durability import post

from agent_memory.cli import main
from agent_memory.condense import make_condenser
from agent_memory.condense.base import CondenseInput, CondenseOutput, CondenseResult
from agent_memory.core.clock import now_ms
from agent_memory.core.domain import CONDENSE, Job
from agent_memory.core.events import HistoryWindow, IncomingMessage
from agent_memory.memory.jobs import CondenseJobs
from agent_memory.memory.refresh import Refresher
from agent_memory.memory.retention import PURGE_LEASE, SCRUB_LEASE
from agent_memory.memory.schedule import my_turn
from agent_memory.memory.service import Memory
from agent_memory.platforms.agora.client import AgoraClient
from agent_memory.platforms.agora.poller import Poller
from agent_memory.settings import Settings
from agent_memory.store import Transaction
from agent_memory.store.postgres import PostgresStore, PostgresTransaction
from agent_memory.store.types import NewMessage
from agent_memory.web.keys import MEMORY

# Several instances on one database, in process and in `serve` processes: the whole suite runs them.
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DUE_NOW = {"delay_ms": 0, "max_wait_ms": 0, "max_messages": 1, "new_messages": 1}
AGENTS = 1000


@pytest.fixture
def database(pg_cluster: Any) -> str:
    return str(pg_cluster.database())


@pytest.fixture
def instances(database: str) -> Iterator[Callable[..., PostgresStore]]:
    """Open another instance's store on the test's database (closed after the test)."""
    opened: list[PostgresStore] = []

    def open_instance(lease_s: float = 30.0) -> PostgresStore:
        store = PostgresStore(database, lease_s=lease_s, pool_size=4)
        store.open()
        opened.append(store)
        return store

    yield open_instance
    for store in opened:
        store.close()


async def lease_runs_out(survivor: PostgresStore, dead: PostgresStore) -> None:
    """What the clock does to a dead instance's claims a lease after it died."""

    def expire(tx: PostgresTransaction) -> None:
        for table in ("jobs", "watched_agents"):
            tx.conn.execute(
                f"UPDATE {table} SET lease_until_ms = 0 WHERE lease_owner = %s".encode(),
                (dead.instance.name,),
            )

    await survivor.write(expire)


def turns_of(user_id: str, count: int) -> list[NewMessage]:
    def turn(seq: int) -> NewMessage:
        return {
            "agent_id": f"run-{user_id}", "user_id": user_id, "character_id": "luna", "seq": seq,
            "role": "user" if seq % 2 == 0 else "assistant", "content": f"{user_id} says line {seq}",
            "at_ms": 1_000 + seq, "fp": f"fp{seq}", "created_ms": 5,
        }  # fmt: skip

    return [turn(seq) for seq in range(count)]


async def pending_pair(store: PostgresStore, user_id: str, messages: int = 6) -> Job:
    """A pair with stored turns and its condense job, due now."""

    def add(tx: Transaction) -> Job | None:
        tx.messages.insert(turns_of(user_id, messages))
        tx.jobs.schedule(CONDENSE, user_id, "luna", **DUE_NOW)
        return tx.jobs.get(CONDENSE, user_id, "luna")

    job = await store.write(add)
    assert job is not None and job.status == "pending"
    return job


async def test_a_pairs_messages_commit_in_id_order_whichever_instance_writes_them(instances) -> None:
    """A summary's watermark reads "every id up to here": a later id must never commit first."""
    first, second = instances(), instances()
    holding, release = threading.Event(), threading.Event()

    def slow(tx: Transaction) -> None:
        tx.messages.insert([{**turns_of("u-order", 1)[0], "agent_id": "run-a"}])
        assert len(tx.messages.of_session("run-a")) == 1  # a read, as a merge's: the insert is sent
        holding.set()
        release.wait(10)

    def quick(tx: Transaction) -> None:
        tx.messages.insert([{**turns_of("u-order", 1)[0], "agent_id": "run-b"}])

    slow_write = asyncio.ensure_future(first.write(slow))
    await asyncio.get_running_loop().run_in_executor(None, holding.wait, 10)
    quick_write = asyncio.ensure_future(second.write(quick))
    # Time enough for the second write to commit, were it not held behind the first.
    await asyncio.sleep(0.5)
    seen = await second.read(lambda view: view.messages.after("u-order", "luna", 0, 10))
    assert seen == [], "a write of the same pair committed while an earlier one was open"
    release.set()
    await asyncio.gather(slow_write, quick_write)
    stored = await second.read(lambda view: view.messages.after("u-order", "luna", 0, 10))
    by_run = {message.agent_id: message.id for message in stored}
    assert by_run["run-a"] < by_run["run-b"]


async def test_a_claimed_job_is_held_by_its_instance_until_its_lease_runs_out(instances):
    a, b = instances(), instances()
    job = await pending_pair(a, "u1")
    (claimed,) = await a.write(lambda tx: tx.jobs.claim_due(CONDENSE, now_ms(), 10))
    assert (claimed.id, claimed.status) == (job.id, "running")

    # B finds nothing to take, whichever way it asks, while A holds the lease.
    assert await b.read(lambda view: view.jobs.due(CONDENSE, now_ms(), 10)) == []
    assert await b.write(lambda tx: tx.jobs.claim_due(CONDENSE, now_ms(), 10)) == []
    assert await b.write(lambda tx: tx.jobs.claim(job.id)) is None
    assert await b.write(lambda tx: tx.jobs.release_running()) == 0  # a live claim stands
    assert await b.write(lambda tx: tx.jobs.renew(job.id)) is False
    assert await a.write(lambda tx: tx.jobs.renew(job.id)) is True

    await lease_runs_out(b, dead=a)
    (due,) = await b.read(lambda view: view.jobs.due(CONDENSE, now_ms(), 10))
    assert due.id == job.id
    (taken,) = await b.write(lambda tx: tx.jobs.claim_due(CONDENSE, now_ms(), 10))
    assert (taken.id, taken.status) == (job.id, "running")
    # A, had it only stalled, learns that the job is no longer its own.
    assert await a.write(lambda tx: tx.jobs.renew(job.id)) is False
    assert await a.write(lambda tx: tx.jobs.claim(job.id)) is None
    assert await b.write(lambda tx: tx.jobs.finish(taken, again_at_ms=0)) is True
    assert await a.read(lambda view: view.jobs.by_status()) == []


async def test_a_restart_frees_only_the_jobs_whose_lease_ran_out(instances):
    a, b = instances(), instances()
    first = await pending_pair(a, "u1")
    second = await pending_pair(a, "u2")
    await a.write(lambda tx: tx.jobs.claim(first.id))
    await lease_runs_out(b, dead=a)
    await a.write(lambda tx: tx.jobs.claim(second.id))
    restarted = instances()
    assert await restarted.write(lambda tx: tx.jobs.release_running()) == 1
    statuses = {job.id: job.status for job in await b.read(lambda view: view.jobs.by_status())}
    assert statuses == {first.id: "pending", second.id: "running"}


async def test_instances_claiming_at_once_each_take_different_jobs(instances):
    a, b = instances(), instances()

    def many(tx: Transaction) -> None:
        for number in range(200):
            tx.jobs.schedule(CONDENSE, f"u{number:03d}", "luna", **DUE_NOW)

    await a.write(many)

    async def drain(store: PostgresStore) -> list[int]:
        taken: list[int] = []
        while claimed := await store.write(lambda tx: tx.jobs.claim_due(CONDENSE, now_ms(), 7)):
            taken += [job.id for job in claimed]
        return taken

    by_a, by_b = await asyncio.gather(drain(a), drain(b))
    assert not set(by_a) & set(by_b)
    assert len(by_a) + len(by_b) == len(set(by_a) | set(by_b)) == 200


class Held:
    """A condenser that holds each call until told to go on, counting calls per pair."""

    reads_history = False

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.calls: list[str] = []

    async def condense(self, job: CondenseInput) -> CondenseResult:
        self.calls.append(job.user_id)
        await self.go.wait()
        return CondenseResult(
            output=CondenseOutput(summary=f"{len(job.messages)} turns"), method="offline", model="held"
        )

    async def close(self) -> None:
        """Nothing to release."""


async def test_a_running_job_keeps_its_lease_for_as_long_as_it_runs(instances, database):
    a, b = instances(lease_s=1.5), instances()
    job = await pending_pair(a, "u1")
    condenser = Held()
    jobs = CondenseJobs(Settings(db_path=database, lease_s=1.5), a, condenser)
    assert await jobs.sweep() == 1

    def lease_end(tx: PostgresTransaction) -> int:
        row = tx.conn.execute(b"SELECT lease_until_ms FROM jobs WHERE id = %s", (job.id,)).fetchone()
        assert row is not None
        return int(row["lease_until_ms"])

    first = await a.write(lease_end)
    await wait_for(lambda: a.write(lambda tx: lease_end(tx) > first), failure="the lease was never renewed")
    assert await b.write(lambda tx: tx.jobs.claim(job.id)) is None
    condenser.go.set()
    await jobs.drained()
    assert condenser.calls == ["u1"]
    assert await a.read(lambda view: view.jobs.by_status()) == []
    summary = await b.read(lambda view: view.summaries.get("u1", "luna"))
    assert summary is not None and summary.text == "6 turns"


async def test_a_job_its_instance_died_with_is_condensed_once_by_another(instances, database):
    a, b = instances(lease_s=0.5), instances()
    await pending_pair(a, "u1", messages=8)
    await a.write(lambda tx: tx.jobs.claim_due(CONDENSE, now_ms(), 10))
    a.close()  # dies mid-job: nothing is released
    settings = Settings(db_path=database)
    jobs = CondenseJobs(settings, b, make_condenser(settings))

    async def condensed() -> bool:
        await jobs.run_due_now()  # takes the job once A's lease (0.5 s) has run out
        return await b.read(lambda view: view.jobs.by_status()) == []

    await wait_for(condensed, failure="the dead instance's job was never taken over")
    summary = await b.read(lambda view: view.summaries.get("u1", "luna"))
    assert summary is not None and summary.message_count == 8  # condensed once, not twice


# cluster-wide work


async def test_cluster_wide_work_is_one_instances_turn_until_its_lease_runs_out(instances):
    a, b = instances(), instances()
    assert await my_turn(a, PURGE_LEASE, 3600) is True
    assert await my_turn(b, PURGE_LEASE, 3600) is False
    assert await my_turn(a, PURGE_LEASE, 3600) is True  # its holder keeps it, period after period
    assert await my_turn(b, SCRUB_LEASE, 30) is True  # another name, another lease

    def a_is_gone(tx: PostgresTransaction) -> None:
        tx.conn.execute(b"UPDATE leases SET until_ms = 0 WHERE owner = %s", (a.instance.name,))

    await b.write(a_is_gone)
    assert await my_turn(b, PURGE_LEASE, 3600) is True
    assert await my_turn(a, PURGE_LEASE, 3600) is False


# followed agents


def history_path(agent_id: str) -> str:
    return f"/v2/projects/app/agents/{agent_id}/history"


class Instance:
    """One instance's memory and poller, reading Agora through its own fake (to tell who polled)."""

    def __init__(self, store: PostgresStore, fake: FakeAgora, session: aiohttp.ClientSession) -> None:
        settings = Settings(db_path=store.url, **agora_settings(fake))
        self.store = store
        self.fake = fake
        self.memory = Memory(settings, store)
        client = AgoraClient(settings, session)
        self.poller = Poller(
            settings, self.memory, client, Refresher(settings, store, self.memory.reading, client)
        )

    def polls(self, agent_id: str) -> int:
        return self.fake.requests[history_path(agent_id)]


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeAgora, FakeAgora]]:
    """Two fakes of one Agora: the same agents, each counting one instance's requests."""
    async with FakeAgora() as first, FakeAgora() as second:
        for number in range(AGENTS):
            agent_id = f"AG{number:04d}"
            for fake in (first, second):
                fake.add_agent(agent_id)
                fake.say(agent_id, [{"role": "user", "content": f"hello from {agent_id}", "turn_id": 1}])
        yield first, second


async def make_due(store: PostgresStore) -> None:
    await store.write(lambda tx: tx.conn.execute(b"UPDATE watched_agents SET next_poll_ms = 0"))


async def test_followed_agents_are_split_between_instances_and_move_when_one_dies(instances, fakes):
    async with aiohttp.ClientSession() as session:
        a = Instance(instances(), fakes[0], session)
        b = Instance(instances(), fakes[1], session)
        agents = [f"AG{number:04d}" for number in range(AGENTS)]
        # The platform's events reach both: each instance follows the agents it was told of.
        followed = {a: agents[0::2], b: agents[1::2]}
        for instance, mine in followed.items():

            def follow(tx: Transaction, mine: list[str] = mine) -> None:
                for agent_id in mine:
                    tx.watches.follow(agent_id, "callback", first_poll_ms=now_ms())

            await instance.store.write(follow)

        for round_number in (1, 2):
            await make_due(a.store)
            await asyncio.gather(a.poller.run_due_now(), b.poller.run_due_now())
            # Every agent polled once per round, by the instance that follows it.
            for instance, mine in followed.items():
                assert [instance.polls(agent_id) for agent_id in mine] == [round_number] * len(mine)
            other = {a: b, b: a}
            for instance, mine in followed.items():
                assert sum(other[instance].polls(agent_id) for agent_id in mine) == 0
        stored = await b.store.read(lambda view: view.messages.of_session(agents[0]))
        assert [message.content for message in stored] == [f"hello from {agents[0]}"]

        a.store.close()  # A dies
        await make_due(b.store)
        await b.poller.run_due_now()
        # A's agents stay with it while its lease lasts ...
        assert sum(b.polls(agent_id) for agent_id in followed[a]) == 0
        await lease_runs_out(b.store, dead=a.store)
        await b.poller.run_due_now()
        # ... and are B's once it ran out: polled once, by B, and kept by B from then on.
        assert [b.polls(agent_id) for agent_id in followed[a]] == [1] * len(followed[a])
        await make_due(b.store)
        await b.poller.run_due_now()
        assert all(b.polls(agent_id) == 2 for agent_id in followed[a])
        assert all(b.polls(agent_id) == 4 for agent_id in followed[b])


async def test_agents_due_at_once_are_polled_once_whichever_instance_sweeps(instances, fakes):
    """Agents nobody holds (followed before leases, or by a CLI): instances sweeping at once
    share them out, and none is polled twice."""
    async with aiohttp.ClientSession() as session:
        a = Instance(instances(), fakes[0], session)
        b = Instance(instances(), fakes[1], session)
        agents = [f"AG{number:04d}" for number in range(AGENTS // 2)]

        def follow(tx: Transaction) -> None:
            for agent_id in agents:
                tx.watches.follow(agent_id, "manual", first_poll_ms=0)

        await a.store.write(follow)
        await a.store.write(lambda tx: tx.conn.execute(b"UPDATE watched_agents SET lease_owner = NULL"))
        await asyncio.gather(a.poller.run_due_now(), b.poller.run_due_now())
        assert [a.polls(agent_id) + b.polls(agent_id) for agent_id in agents] == [1] * len(agents)


# two real service processes on one database, one of them killed under load

CLIENTS = 8
CALLBACKS_PER_CLIENT = 40
KILL_AFTER = 120  # callbacks answered before the kill
LIVE_AGENTS = 12
LEASE_S = 3


class HeldModel(FakeOpenAI):
    """A model that never answers: the instance using it dies with its condense jobs running."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def before_answer(self, body: dict[str, Any]) -> None:
        await self.release.wait()


def instance_env(database: str, agora: FakeAgora, model: FakeOpenAI) -> dict[str, str]:
    """One instance's settings: the shared database, short leases and intervals, its own fakes."""
    return {
        "AGENT_MEMORY_DB": database, "AGENT_MEMORY_LEASE_S": str(LEASE_S),
        "AGORA_APP_ID": "app", "AGORA_CUSTOMER_ID": "cid", "AGORA_CUSTOMER_SECRET": "csec",
        "AGORA_API_BASE": agora.base_url, "AGENT_MEMORY_AGORA_MAX_RETRIES": "0",
        "AGENT_MEMORY_POLL_INTERVAL_S": "0.3", "AGENT_MEMORY_REFRESH_INTERVAL_S": "3600",
        "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test", "AGENT_MEMORY_LLM_MAX_RETRIES": "0",
        "AGENT_MEMORY_LLM_TIMEOUT_S": "300", "AGENT_MEMORY_JOB_SWEEP_S": "0.2",
        "AGENT_MEMORY_SUMMARY_DELAY_S": "0.2", "AGENT_MEMORY_SUMMARY_AFTER_CALL_S": "0.2",
        "AGENT_MEMORY_SUMMARY_MAX_WAIT_S": "1", "AGENT_MEMORY_CONDENSE_CONCURRENCY": "2",
    }  # fmt: skip


def history(agent_id: str, count: int, start: int = 0) -> list[dict[str, Any]]:
    """Messages `start`..`count-1` of an agent run, unique to it."""
    return turns(count, prefix=f"{agent_id} ")[start:]


def kill_callback(client: int, index: int) -> dict[str, Any]:
    agent_id = f"TWO-{client:02d}-{index:04d}"
    return agent_event(
        103, agent_id, notice_id=f"two:{client}:{index}",
        labels={"user_id": f"u-two-{client:02d}", "character_id": "c"}, contents=history(agent_id, 8),
    )  # fmt: skip


def windows(client: int, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two overlapping windows of one agent run (24 and all 32 of its messages), as two callbacks."""
    agent_id = f"WIN-{client:02d}-{index:04d}"
    labels = {"user_id": f"u-two-{client:02d}", "character_id": "c"}
    return (
        agent_event(103, agent_id, notice_id=f"win:{client}:{index}:a", labels=labels, contents=history(agent_id, 24)),
        agent_event(103, agent_id, notice_id=f"win:{client}:{index}:b", labels=labels, contents=history(agent_id, 32)),
    )  # fmt: skip


def database_state(database: str) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
    """(inbox status by noticeId, (messages, distinct contents) per agent), read with psycopg itself."""
    with psycopg.connect(database) as conn:
        inbox = dict(conn.execute("SELECT notice_id, status FROM inbox").fetchall())
        messages = {
            agent_id: (count, distinct)
            for agent_id, count, distinct in conn.execute(
                "SELECT agent_id, count(*), count(DISTINCT content) FROM messages GROUP BY agent_id"
            )
        }
    return inbox, messages


def condensed_pairs(database: str) -> tuple[int, list[tuple[str, str, int, int | None]]]:
    """(jobs left, (user, character, turns stored, turns its summary covers) per pair)."""
    with psycopg.connect(database) as conn:
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()
        pairs = conn.execute(
            "SELECT m.user_id, m.character_id, count(*), s.message_count FROM messages m "
            "LEFT JOIN summaries s ON s.user_id = m.user_id AND s.character_id = m.character_id "
            "WHERE m.kind = 'turn' GROUP BY m.user_id, m.character_id, s.message_count"
        ).fetchall()
    return (jobs[0] if jobs else 0), [tuple(row) for row in pairs]  # type: ignore[misc]


def held_by(database: str, pid: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The condense jobs (pairs) and followed agents an instance's process holds."""
    with psycopg.connect(database) as conn:
        owner = f"%:{pid}:%"
        jobs = conn.execute(
            "SELECT user_id, character_id FROM jobs WHERE status = 'running' AND lease_owner LIKE %s",
            (owner,),
        ).fetchall()
        agents = conn.execute(
            "SELECT agent_id FROM watched_agents WHERE lease_owner LIKE %s", (owner,)
        ).fetchall()
    return [(user, character) for user, character in jobs], [agent_id for (agent_id,) in agents]


async def test_two_processes_share_the_work_and_one_killed_under_load_loses_nothing(pg_cluster, tmp_path):
    database = pg_cluster.database()
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        FakeAgora() as agora_a,
        FakeAgora() as agora_b,
        HeldModel() as model_a,
        FakeOpenAI() as model_b,
    ):
        live_agents = [f"LIVE{number:02d}" for number in range(LIVE_AGENTS)]
        for agent_id in live_agents:
            for agora in (agora_a, agora_b):  # one Agora, seen by each instance through its own fake
                agora.add_agent(agent_id)
                agora.say(agent_id, history(agent_id, 4))
        with servers() as started:
            a = Server(database, tmp_path / "a.log", instance_env(database, agora_a, model_a))
            b = Server(database, tmp_path / "b.log", instance_env(database, agora_b, model_b))
            started += [a, b]
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await asyncio.gather(a.wait_healthy(session, 30), b.wait_healthy(session, 30))

                # Agents start: each instance follows those whose 101 reached it.
                receiver = {agent_id: (a, b)[number % 2] for number, agent_id in enumerate(live_agents)}
                for agent_id, server in receiver.items():
                    labels = {"user_id": f"u-{agent_id}", "character_id": "c"}
                    status, answer = await post(
                        session, server.url, agent_event(101, agent_id, labels=labels)
                    )
                    assert status == 200, answer
                of_a = [agent_id for agent_id, server in receiver.items() if server is a]
                of_b = [agent_id for agent_id, server in receiver.items() if server is b]

                def live_stored(count: int) -> bool:
                    _, messages = database_state(database)
                    return all(messages.get(agent_id, (0, 0))[0] >= count for agent_id in live_agents)

                await wait_for(lambda: live_stored(4), 30, failure="the followed agents were not polled")
                # Each agent is polled by the instance that follows it, not by both.
                assert all(agora_a.requests[history_path(agent_id)] for agent_id in of_a)
                assert not any(agora_b.requests[history_path(agent_id)] for agent_id in of_a)
                assert all(agora_b.requests[history_path(agent_id)] for agent_id in of_b)
                assert not any(agora_a.requests[history_path(agent_id)] for agent_id in of_b)

                acked: list[str] = []
                duplicates: list[str] = []
                rerouted: list[str] = []
                ready = asyncio.Event()

                async def send(server: Server, envelope: dict[str, Any]) -> dict[str, Any] | None:
                    """The answer, or None when the instance is gone (a load balancer then retries)."""
                    try:
                        status, answer = await post(session, server.url, envelope)
                    except (TimeoutError, aiohttp.ClientError, OSError):
                        return None
                    assert status == 200, answer
                    return answer

                async def deliver(first: Server, envelope: dict[str, Any]) -> dict[str, Any]:
                    """Send to `first`; if it is gone, to the other one, as Agora redelivers."""
                    answer = await send(first, envelope)
                    if answer is None:
                        rerouted.append(envelope["noticeId"])
                        answer = await send(b, envelope)
                        assert answer is not None, "the surviving instance did not answer"
                    acked.append(envelope["noticeId"])
                    if len(acked) >= KILL_AFTER:
                        ready.set()
                    return answer

                async def client(number: int) -> None:
                    for index in range(CALLBACKS_PER_CLIENT):
                        here, there = (a, b) if (number + index) % 2 else (b, a)
                        envelope = kill_callback(number, index)
                        if index % 4 == 0:  # delivered to both at once
                            answers = await asyncio.gather(deliver(here, envelope), deliver(there, envelope))
                            assert sorted(answer["status"] for answer in answers) in (
                                ["done", "duplicate"], ["duplicate", "duplicate"],
                            ), answers  # fmt: skip
                        else:
                            answer = await deliver(here, envelope)
                            assert answer["status"] in ("done", "duplicate"), answer
                            # Redelivered to the other instance: still a duplicate there.
                            again = await send(there, envelope)
                            if again is not None:
                                assert again["status"] == "duplicate", again
                                duplicates.append(envelope["noticeId"])
                        if index % 5 == 0:  # windows of one agent run reaching both at once
                            first, second = windows(number, index)
                            await asyncio.gather(deliver(here, first), deliver(there, second))

                tasks = [asyncio.create_task(client(number)) for number in range(CLIENTS)]
                await wait_for(lambda: ready.is_set() and model_a.calls > 0, 60,
                               failure="the load did not get going")  # fmt: skip
                jobs_of_a, agents_of_a = held_by(database, a.proc.pid)
                a.proc.send_signal(signal.SIGKILL)
                await asyncio.gather(*tasks)
                assert a.proc.wait(timeout=10) == -signal.SIGKILL
                assert rerouted, "the kill did not interrupt the load"
                assert jobs_of_a, "the killed instance held no condense job"
                assert set(agents_of_a) == set(of_a)

                # The calls A was following go on; B takes them over once A's leases run out.
                for agent_id in live_agents:
                    for agora in (agora_a, agora_b):
                        agora.say(agent_id, history(agent_id, 8, start=4))
                await wait_for(lambda: live_stored(8), 60, failure="A's followed agents were not taken over")
                assert all(agora_b.requests[history_path(agent_id)] for agent_id in of_a)

                # Every pending condense job, those A died running included, runs to the end once.
                def all_condensed() -> bool:
                    jobs, pairs = condensed_pairs(database)
                    return jobs == 0 and all(stored == covered for _, _, stored, covered in pairs)

                await wait_for(
                    all_condensed, 90, failure=f"not every pair was condensed: {condensed_pairs(database)}"
                )
            model_a.release.set()

    inbox, messages = database_state(database)
    missing = [notice_id for notice_id in acked if notice_id not in inbox]
    assert not missing, f"{len(missing)} answered callbacks are not in the inbox: {missing[:5]}"
    assert duplicates and all(inbox[notice_id] == "done" for notice_id in acked)
    for notice_id in acked:
        kind, client_no, index, *_ = notice_id.split(":")
        agent_id = f"{'TWO' if kind == 'two' else 'WIN'}-{int(client_no):02d}-{int(index):04d}"
        expected = 8 if kind == "two" else 32
        assert messages[agent_id] == (expected, expected), (agent_id, messages[agent_id])
    # Whatever was committed without an answer is whole too (never half a callback, never twice).
    assert all(count == distinct for count, distinct in messages.values())
    assert {messages[agent_id] for agent_id in live_agents} == {(8, 8)}
    _, pairs = condensed_pairs(database)
    assert {(user, character) for user, character, _, _ in pairs} >= set(jobs_of_a)


# -- a forget racing the merges of a live run -----------------------------------------------

RACE_LABELS = {"user_id": "u-race", "character_id": "luna"}


def race_window(agent_id: str, count: int, start_ms: int, tag: str) -> HistoryWindow:
    """The run's first `count` turns, as a poll or the custom-LLM endpoint merges them."""
    said = [
        IncomingMessage(role="user" if i % 2 == 0 else "assistant", content=f"{tag} line {i}",
                        turn_id=i // 2 + 1, ts_ms=start_ms + i * 1000)
        for i in range(count)
    ]  # fmt: skip
    return HistoryWindow(agent_id=agent_id, messages=said, labels=dict(RACE_LABELS))


async def test_a_forget_racing_the_merges_of_a_run_leaves_the_run_whole(
    instances, database, start_service, backend
) -> None:
    if backend == "sqlite":
        pytest.skip("two instances on one PostgreSQL database (the service is started on it)")
    service = await start_service(db_path=database)
    here = service.server.app[MEMORY]
    other = Memory(Settings(db_path=database, summary_delay_s=3600), instances())
    agent = "AGENT-RACE"
    # A merge holds its transaction open after writing (as a slow one does) while the forget
    # starts: the forget waits for it, where it used to delete around it.
    writing, release = threading.Event(), threading.Event()

    def held_open(tx: Any) -> None:
        writing.set()
        release.wait(30)

    first = asyncio.ensure_future(
        other.merge_window(race_window(agent, 4, now_ms() - 600_000, "before"), now_ms(), then=held_open)
    )
    await wait_for(writing.is_set)
    forgetting = asyncio.ensure_future(here.admin.forget("u-race"))

    def lock_waits(view: Any) -> int:
        return view.conn.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()["n"]

    await wait_for(lambda: forgetting.done() or service.store.read(lock_waits))
    release.set()
    assert (await first).new_messages == 4
    assert (await forgetting)["messages"] == 4
    window = race_window(agent, 4, now_ms() + 1000, "after the first forget")
    assert (await here.merge_window(window, now_ms())).new_messages == 4
    # Then merges of both instances, a forget starting among them, round after round.
    for round_ in range(8):
        before = now_ms() - 600_000
        merges = [
            (here if k % 2 else other).merge_window(race_window(agent, 2 * k + 2, before, "before"), now_ms())
            for k in range(8)
        ]
        # The forget starts while the merges of both instances are under way.
        outcomes = await asyncio.gather(*merges[:4], here.admin.forget("u-race"), *merges[4:])
        assert all(o.status == "done" for o in outcomes if not isinstance(o, dict)), (round_, outcomes)
        # The run goes on after the forget, on either instance: its windows merge.
        window = race_window(agent, 4, now_ms() + 1000, f"after {round_}")
        for memory in (here, other):
            assert (await memory.merge_window(window, now_ms())).status == "done"

    def orphans(view: Any) -> int:
        return view.conn.execute(
            "SELECT count(*) AS n FROM messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM sessions s WHERE s.agent_id = m.agent_id)"
        ).fetchone()["n"]

    assert await service.store.read(orphans) == 0
    # Only what was said after the last forget is held, once.
    _, body = await service.api("GET", "/v1/users/u-race/characters/luna/messages")
    assert [m["content"] for m in body["messages"]] == [f"after 7 line {i}" for i in range(4)]
    # The run's 103, and a callback applied in part, which `reprocess` applies again.
    contents = [
        *(
            {"role": m.role, "content": m.content, "turn_id": m.turn_id, "timestamp": m.ts_ms}
            for m in window.messages
        ),
        {"role": "user", "content": "a late question", "turn_id": 3, "timestamp": now_ms() + 10_000},
    ]
    answer = await deliver(
        service, agent_event(103, agent, labels=RACE_LABELS, contents=contents), expect="done"
    )
    assert answer["new_messages"] == 1
    partial = agent_event(103, agent, labels=RACE_LABELS, notice_id="late-partial",
                          contents=[*contents, {"content": "no role"}])  # fmt: skip
    await deliver(service, partial, expect="partial")
    assert await asyncio.to_thread(main, ["reprocess", "--db", database]) == 0
