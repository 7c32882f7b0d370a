"""Shared fixtures and helpers: real SQLite files in tmp_path, the real app on a real loopback port.

Tests send, read and wait through the helpers here (one of each), and read through the store's
repositories or the HTTP API, never through private attributes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# The service's modules are imported where used, not here: the run's controller (under xdist)
# imports this file too but runs no test, and importing them took it ~1.5 s of CPU before it
# could start its workers.
if TYPE_CHECKING:
    import aiohttp
    from aiohttp.test_utils import TestServer
    from fakes.agora_server import FakeAgora
    from postgres_server import PostgresCluster

    from agent_memory.core.domain import InboxEntry, Message, Session, Watch
    from agent_memory.settings import Settings
    from agent_memory.store import Store
    from agent_memory.store.postgres import PostgresView
    from agent_memory.store.sqlite import SQLiteStore, SQLiteTransaction

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SECRET = "test-notification-secret"
# Every file of fixtures/conversations, by name.
CONVERSATIONS = (
    "en_luna_companion",
    "zh_xiaoyu_tutor",
    "ko_minjun_mixed",
    "multiuser_channel",
    "nolabels",
)
TOKEN = "test-api-token"


def load_fixture(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def encode(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, ensure_ascii=False).encode()


class Service:
    """The running service, seen as Agora and an app backend see it."""

    def __init__(self, server: TestServer, session: aiohttp.ClientSession, settings: Settings):
        self.server = server
        self.session = session
        self.settings = settings
        self.url = str(server.make_url("")).rstrip("/")

    @property
    def store(self) -> Store:
        from agent_memory.web.keys import STORE

        return self.server.app[STORE]

    async def callback(
        self,
        envelope: dict[str, Any] | bytes,
        *,
        secret: str | None = SECRET,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """POST a callback signed like NCS signs it; returns (status, JSON body)."""
        from agent_memory.platforms.agora.signatures import agora_headers

        body = envelope if isinstance(envelope, bytes) else encode(envelope)
        sent = {"Content-Type": "application/json"}
        if secret is not None:
            sent.update(agora_headers(secret, body))
        sent.update(headers or {})
        async with self.session.post(f"{self.url}/webhooks/agora", data=body, headers=sent) as resp:
            return resp.status, await resp.json()

    async def api(
        self, method: str, path: str, *, token: str | None = TOKEN, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(method, f"{self.url}{path}", headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()


# The modules about the store itself: their PostgreSQL runs stay in the fast tier. Elsewhere the
# PostgreSQL run of a `postgres` test is `second_backend`, which only the whole suite runs
# (markers: pyproject.toml; `-m ''` selects everything).
STORE_MODULES = ("test_store.py", "test_store_text.py")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests (or modules) marked `postgres` run once per backend; the rest on SQLite alone."""
    if "backend" not in metafunc.fixturenames:
        return
    both = metafunc.definition.get_closest_marker("postgres") is not None
    if both and metafunc.definition.get_closest_marker("sqlite_only") is None:
        store = metafunc.definition.path.name in STORE_MODULES
        second = pytest.param("postgres", marks=() if store else pytest.mark.second_backend)
        metafunc.parametrize("backend", ["sqlite", second])


# A randomized sweep (a fast path checked against its plain form) runs a tenth of its rounds in the
# fast tier, and all of them, marked `slow`, in the whole suite: the same seeded draws, cut short.
SAMPLE_SHARE = 10


@pytest.fixture(params=["sample", pytest.param("whole", marks=pytest.mark.slow)])
def rounds(request: pytest.FixtureRequest) -> Callable[[int], int]:
    """How many of a sweep's `count` rounds (or of a count it must reach) this run asks for."""
    share = SAMPLE_SHARE if request.param == "sample" else 1
    return lambda count: count // share


# What a test must not inherit from the machine it runs on: the service's settings.
MACHINE_SETTINGS = ("AGENT_MEMORY_", "AGORA_", "OPENAI_")


@pytest.fixture(autouse=True)
def elsewhere(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test (and the commands it starts) runs in an empty folder of its own, without this
    machine's settings: a ./agent_memory.db left by the README's walk-through is never seen."""
    folder = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(folder)
    for name in list(os.environ):
        if name.startswith(MACHINE_SETTINGS):
            monkeypatch.delenv(name)
    return folder


@pytest.fixture
def backend() -> str:
    return "sqlite"


# The run's own folder, where its processes meet to share one PostgreSQL server (postgres_server.shared).
RUN_FOLDER = pytest.StashKey[str]()


# Where the tests' files (tmp_path: their SQLite databases) go when nobody said where: in memory,
# if the machine has a tmpfs with room. The store commits with synchronous=FULL, and each fsync
# of a disk file waits milliseconds (thousands of them in a run, ~6 per test) for nothing a test
# checks: what a process or another instance reads back is the same from either.
RAM_FOLDER = Path("/dev/shm")
RAM_ROOM = 2 * 1024**3


def pytest_configure(config: pytest.Config) -> None:
    """The run's controller (the only process under `-n 0`) makes the run's folder, and puts the
    tests' temporary files in memory unless told where (`--basetemp`, TMPDIR, PYTEST_DEBUG_TEMPROOT)."""
    if not hasattr(config, "workerinput"):
        config.stash[RUN_FOLDER] = tempfile.mkdtemp(prefix="agent-memory-run-")
        told = config.option.basetemp or os.environ.get("TMPDIR") or os.environ.get("PYTEST_DEBUG_TEMPROOT")
        if not told and has_room(RAM_FOLDER, RAM_ROOM):
            # pytest's root of numbered temporary folders (it keeps the last three, as ever).
            os.environ["PYTEST_DEBUG_TEMPROOT"] = str(RAM_FOLDER)


def has_room(folder: Path, needed: int) -> bool:
    """Whether this process may write in `folder`, and it has `needed` bytes free."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return os.access(folder, os.W_OK) and stats.f_bavail * stats.f_frsize >= needed


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: each worker is told the run's folder and its controller's process id."""
    node.workerinput["run_folder"] = node.config.stash[RUN_FOLDER]
    node.workerinput["controller"] = os.getpid()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the shared server once every worker is done (or has crashed); a
    process that was starting it in the background first lets that finish."""
    if STARTING in config.stash:
        config.stash[STARTING].join()
    if RUN_FOLDER in config.stash:
        from postgres_server import stop_shared

        folder = Path(config.stash[RUN_FOLDER])
        stop_shared(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster(pytestconfig: pytest.Config) -> PostgresCluster:
    """The run's one PostgreSQL server, started on first use by whichever worker needs it first
    (or earlier, by `pytest_collection_finish`); each worker makes databases of its own in it."""
    from postgres_server import bindir

    if bindir() is None:
        # CI installs the server (.ci/run); a developer's machine without one runs SQLite alone.
        message = "PostgreSQL server binaries (initdb) not found: install the postgresql package"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if STARTING in pytestconfig.stash:
        pytestconfig.stash[STARTING].join()
    return run_cluster(pytestconfig)


def run_cluster(config: pytest.Config) -> PostgresCluster:
    """The run's server as this process reaches it: started now if no process of the run has."""
    from postgres_server import shared

    worker = getattr(config, "workerinput", None)
    if worker is None:
        return shared(Path(config.stash[RUN_FOLDER]), "main", os.getpid())
    return shared(Path(worker["run_folder"]), worker["workerid"], worker["controller"])


# The thread starting the run's server in the background, in a process that will run PostgreSQL tests.
STARTING = pytest.StashKey[threading.Thread]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """A process whose selection holds PostgreSQL tests starts the run's server (initdb, start,
    the migrated template: seconds) while its first tests run, not when its first PostgreSQL test
    sets up; the first to ask starts it, the others find it (`postgres_server.shared`)."""
    if session.config.option.collectonly or not any(map(on_postgres, session.items)):
        return

    def start() -> None:
        try:
            run_cluster(session.config).prepare()
        except Exception:  # no server binaries, say: pg_cluster skips or fails with the reason
            pass

    thread = threading.Thread(target=start, name="postgres-start", daemon=True)
    session.config.stash[STARTING] = thread
    thread.start()


def on_postgres(item: pytest.Item) -> bool:
    """Whether the test runs on PostgreSQL: its `backend` is, or it asks for the server itself."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "postgres":
        return True
    names = getattr(item, "fixturenames", ())
    # The modules of PostgreSQL-only tests override `backend` (conftest's says sqlite).
    return "pg_cluster" in names or ("backend" in names and hasattr(getattr(item, "module", None), "backend"))


@pytest.fixture
def db_path(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Any:
    """Where the test's database lives: a SQLite file in tmp_path, or a fresh PostgreSQL database's URL."""
    if backend == "postgres":
        return request.getfixturevalue("pg_cluster").database()
    return tmp_path / "memory.db"


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A new SQLite database with every migration applied, made once per process: running the
    migrations costs a test ten times what copying their result does (the PostgreSQL side copies
    a migrated template database the same way, PostgresCluster.database)."""
    from agent_memory.store.sqlite import SQLiteStore

    path = tmp_path_factory.mktemp("migrated") / "memory.db"
    made = SQLiteStore(path)  # not open_store(Settings()): this machine's settings are not cleared yet
    made.open()
    made.close()
    assert not path.with_name("memory.db-wal").exists(), "the last close leaves no WAL"
    return path.read_bytes()


def seed_sqlite(settings: Settings, migrated: bytes) -> None:
    """Put a copy of the migrated database where the settings' SQLite file is to be made; an
    existing file (a test's older schema, a second service on one file) is left as it is."""
    path = settings.db_path
    if settings.backend != "sqlite" or str(path) == ":memory:" or not path.parent.is_dir():
        return
    try:
        made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(made, "wb") as file:
        file.write(migrated)


@pytest.fixture
def make_settings(db_path: Path, migrated_sqlite: bytes) -> Callable[..., Settings]:
    from agent_memory.settings import Settings

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "db_path": db_path,
            "webhook_secret": SECRET,
            "api_token": TOKEN,
            # Tests that want condensing ask for it; others must not race a job (nor the
            # condense that follows a call's whole transcript).
            "summary_delay_s": 3600,
            "summary_after_call_s": 3600,
            # Nor a job made due at once by a pair's count of new messages or their age (a
            # sample conversation holds 40 and more; a loaded machine runs a test for minutes).
            "summary_max_messages": 100_000,
            "summary_max_wait_s": 3600,
        }
        values.update(overrides)
        settings = Settings(**values)
        seed_sqlite(settings, migrated_sqlite)
        return settings

    return make


@pytest.fixture
async def start_service(make_settings: Callable[..., Settings]) -> AsyncIterator[Any]:
    """Start the real app on 127.0.0.1 with the given settings; stopped after the test."""
    import aiohttp
    from aiohttp.test_utils import TestServer

    from agent_memory.web.app import create_app

    started: list[tuple[TestServer, aiohttp.ClientSession]] = []

    async def start(**overrides: Any) -> Service:
        settings = make_settings(**overrides)
        server = TestServer(create_app(settings), host="127.0.0.1")
        await server.start_server()
        session = aiohttp.ClientSession()
        started.append((server, session))
        return Service(server, session, settings)

    yield start
    for server, session in reversed(started):
        await session.close()
        await server.close()


@pytest.fixture
async def service(start_service: Any) -> Service:
    return await start_service()


@pytest.fixture
def store(db_path: Path, migrated_sqlite: bytes) -> Iterator[Store]:
    """An open store over a fresh database file, without the service around it."""
    from agent_memory.settings import Settings
    from agent_memory.store import open_store

    settings = Settings(db_path=db_path)
    seed_sqlite(settings, migrated_sqlite)
    opened = open_store(settings)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeAgora]:
    """The fake Agora REST server on loopback (test_condense's own `fake` is the fake LLM)."""
    from fakes.agora_server import FakeAgora

    async with FakeAgora(app_id="app", customer_id="cid", customer_secret="csec") as server:
        yield server


def agent_event(
    event_type: int,
    agent_id: str,
    *,
    notice_id: str | None = None,
    notify_ms: int = 1_763_700_000_000,
    labels: dict[str, str] | None = None,
    **payload: Any,
) -> dict[str, Any]:
    """An NCS envelope for an agent event."""
    body: dict[str, Any] = {
        "agent_id": agent_id,
        "channel": f"room-{agent_id}",
        "start_ts": 1_763_690_000,
        **payload,
    }
    if labels is not None:
        body["labels"] = labels
    return {
        "noticeId": notice_id or f"{agent_id}:{event_type}",
        "productId": 17,
        "eventType": event_type,
        "notifyMs": notify_ms,
        "sid": f"sid-{agent_id}",
        "payload": body,
    }


def alternating(
    indices: range, content: Callable[[int, str], str], *, start_ms: int, user_meta: dict[str, Any]
) -> list[dict[str, Any]]:
    """User/assistant messages at `indices`, with turn ids, ms timestamps and a source."""
    return [
        {
            "role": role,
            "content": content(index, role),
            "turn_id": index // 2 + 1,
            "timestamp": start_ms + index * 1000,
            "metadata": dict(user_meta) if role == "user" else {"source": "llm"},
        }
        for index in indices
        for role in ("user" if index % 2 == 0 else "assistant",)
    ]


def turns(count: int, *, start_ms: int = 1_763_690_000_000, prefix: str = "") -> list[dict[str, Any]]:
    """`count` alternating user/assistant messages with turn ids and ms timestamps."""
    return alternating(
        range(count),
        lambda i, role: f"{prefix}{role} line {i}",
        start_ms=start_ms,
        user_meta={"source": "asr"},
    )


def said(*lines: str, start_ms: int = 1_763_690_000_000) -> list[dict[str, Any]]:
    """Alternating user/assistant messages with the given contents, turn ids and ms timestamps."""
    return [
        {
            "role": "user" if index % 2 == 0 else "assistant",
            "content": line,
            "turn_id": index // 2 + 1,
            "timestamp": start_ms + index * 1000,
        }
        for index, line in enumerate(lines)
    ]


def conversation(
    count: int, tag: str = "live", start: int = 0, base_ms: int = 1_795_000_000_000
) -> list[dict[str, Any]]:
    """Messages `start`..`count-1` of a live call: unique contents, ms timestamps, turn ids."""
    return alternating(
        range(start, count),
        lambda i, role: f"{tag} {role} message {i}",
        start_ms=base_ms,
        user_meta={"source": "asr", "user": "1001"},
    )


# -- driving the service ---------------------------------------------------------------------


async def deliver(
    service: Service, *envelopes: dict[str, Any] | bytes, expect: str | tuple[str, ...] | None = None
) -> dict[str, Any]:
    """Send callbacks in order; each must be answered 200 (and with status `expect` when given).

    Returns the last answer.
    """
    answer: dict[str, Any] = {}
    for envelope in envelopes:
        status, answer = await service.callback(envelope)
        assert status == 200, answer
        if expect is not None:
            expected = (expect,) if isinstance(expect, str) else expect
            assert answer["status"] in expected, answer
    return answer


async def load_conversations(service: Service, *names: str) -> None:
    """Deliver every callback of the named fixtures/conversations files, in order."""
    for name in names:
        await deliver(service, *load_fixture(f"conversations/{name}.json"))


async def seed(
    service: Service, user: str, character: str, agent_id: str, contents: list[dict[str, Any]]
) -> None:
    """Store one 103 of `contents` for the pair; every message must be new."""
    labels = {"user_id": user, "character_id": character}
    answer = await deliver(
        service, agent_event(103, agent_id, labels=labels, contents=contents), expect="done"
    )
    assert answer["new_messages"] == len(contents), answer


async def condense(service: Service) -> None:
    """Run every due condense job now and wait for them."""
    from agent_memory.web.keys import JOBS

    await service.server.app[JOBS].run_due_now()


async def poll(service: Service) -> None:
    """Make every followed agent due now and run one poll sweep to completion."""
    from agent_memory.platforms.agora.keys import POLLER

    def due(tx: Any) -> None:  # the same SQL on either backend
        tx.conn.execute("UPDATE watched_agents SET next_poll_ms = 0 WHERE status = 'watching'")

    await service.store.write(due)
    await service.server.app[POLLER].run_due_now()


def agora_settings(fake: FakeAgora, **overrides: Any) -> dict[str, Any]:
    """Settings that point the service at the fake Agora, with every scheduler slowed to an hour."""
    return {
        "agora_app_id": "app",
        "agora_customer_id": "cid",
        "agora_customer_secret": "csec",
        "agora_api_base": fake.base_url,
        "agora_max_retries": 0,
        "agora_timeout_s": 5,
        "poll_interval_s": 3600,
        "refresh_interval_s": 3600,
        "summary_delay_s": 0,
        "job_sweep_s": 3600,
        **overrides,
    }


async def live(start_service: Any, fake: FakeAgora, **overrides: Any) -> Service:
    """The service with Agora configured; its poll and condense schedulers paused."""
    from agent_memory.platforms.agora.keys import POLLER
    from agent_memory.web.keys import JOBS

    service: Service = await start_service(**agora_settings(fake, **overrides))
    poller = service.server.app[POLLER]
    assert poller.scheduler is not None, "the poller must start when Agora is configured"
    poller.scheduler.pause()
    jobs = service.server.app[JOBS]
    if jobs.scheduler is not None:
        jobs.scheduler.pause()
    return service


def pushed_list(update: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The system_messages of an agent update sent to Agora, which must carry nothing else."""
    _, body = update
    assert list(body) == ["properties"] and list(body["properties"]) == ["llm"]
    return body["properties"]["llm"]["system_messages"]


# -- reading what the service holds ----------------------------------------------------------


async def stored(service: Service, agent_id: str) -> list[Message]:
    """A session's stored items (turns and tool traffic), in order."""
    return await service.store.read(lambda view: view.messages.of_session(agent_id))


async def session_of(service: Service, agent_id: str) -> Session | None:
    """The agent run's session, if one is stored."""
    return await service.store.read(lambda view: view.sessions.get(agent_id))


async def watch_of(service: Service, agent_id: str) -> Watch | None:
    """How the service follows a running agent, if it does."""
    return await service.store.read(lambda view: view.watches.get(agent_id))


async def inbox_of(service: Service, notice_id: str) -> InboxEntry | None:
    """The raw callback as received, by its noticeId."""
    return await service.store.read(lambda view: view.inbox.get(notice_id))


async def counts(service: Service) -> dict[str, int]:
    """Rows held of each main kind (messages, sessions, facts, summaries, jobs, inbox)."""
    return await service.store.read(lambda view: view.maintenance.counts())


def on_sqlite(store: Store) -> SQLiteStore:
    """The store as the SQLite backend it is in these tests, for the checks that run SQL."""
    from agent_memory.store.sqlite import SQLiteStore

    assert isinstance(store, SQLiteStore), store
    return store


async def integrity_check(store: Store) -> None:
    """The search indexes' consistency: FTS5's own check of each on SQLite; on PostgreSQL, once
    caught up, the recall index's per-pair statistics and owners against its docs and turns."""
    from agent_memory.store.postgres import PostgresStore

    if isinstance(store, PostgresStore):
        await store.catch_up_search()

        def check_recall(view: PostgresView) -> None:
            wrong_stats = view.conn.execute(
                "SELECT p.pair FROM recall_pairs p LEFT JOIN (SELECT pair, count(*) AS docs, "
                "sum(length) AS length FROM recall_docs GROUP BY pair) d ON d.pair = p.pair "
                "WHERE p.docs <> coalesce(d.docs, 0) OR p.total_length <> coalesce(d.length, 0)"
            ).fetchall()
            wrong_docs = view.conn.execute(
                "SELECT d.id FROM recall_docs d JOIN messages m ON m.id = d.id JOIN recall_pairs p "
                "ON p.pair = d.pair WHERE m.kind <> 'turn' OR p.user_id <> m.user_id "
                "OR p.character_id <> m.character_id"
            ).fetchall()
            assert not wrong_stats and not wrong_docs, (wrong_stats, wrong_docs)

        await store.read(check_recall)
        return

    def check(tx: SQLiteTransaction) -> None:
        for fts in ("messages_fts", "recall_fts"):
            tx.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")

    await on_sqlite(store).write(check)


def on_disk(db_path: Path | str) -> bytes:
    """The SQLite database file and its WAL, as anyone with disk access reads them."""
    path = Path(db_path)
    # A PostgreSQL test's settings hold the default ./agent_memory.db: reading it would scan
    # whatever the folder the tests run in holds (database_files reads PostgreSQL's).
    assert path.is_absolute() and path.exists(), f"{path} is not a test's SQLite database"
    wal = path.with_name(path.name + "-wal")
    return b"".join(part.read_bytes() for part in (path, wal) if part.exists())


def nearest_rank(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile, computed independently of the service's statistics."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def assert_error(status: int, body: dict[str, Any], expected_status: int, code: str) -> str:
    """The one error shape, {"error": {"code", "message"}}, with this status and code; returns the message."""
    assert status == expected_status, body
    assert set(body) == {"error"} and set(body["error"]) >= {"code", "message"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return body["error"]["message"]


async def wait_for(
    check: Callable[[], Any],
    timeout: float = 15.0,
    *,
    failure: str = "condition not met before the deadline",
) -> Any:
    """Call (and await) `check()` until it is truthy: a deadline for background work, not a timing test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(failure)


def stored_message(seq: int, role: str, content: str, *, at_ms: int, **fields: Any) -> Message:
    """A spoken turn as the store hands it back (to rendering, context and condensers)."""
    from agent_memory.core.domain import Message

    values: dict[str, Any] = {
        "id": seq, "agent_id": "agent-1", "user_id": "u-1", "character_id": "luna", "seq": seq,
        "role": role, "kind": "turn", "content": content, "turn_id": (seq + 1) // 2,
        "ts_ms": at_ms, "at_ms": at_ms, "source": None, "speaker": None, "interrupted": False,
        "interrupt_ms": None, "original": None, "gap_before": False,
    }  # fmt: skip
    values.update(fields)
    return Message(**values)
