"""What an operator meets: JSON logs with request ids, packaging, and a sentence for each everyday mistake.

The service and the command run as a user runs them (`python -m agent_memory …` in a subprocess,
or `main()` where the process would add nothing); the LLM that hangs is a real HTTP server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import closing, contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import FIXTURES, SECRET, TOKEN, agent_event, assert_error, encode, said, wait_for
from fakes.embeddings_server import FakeEmbeddings
from fakes.openai_server import FakeOpenAI
from postgres_server import bindir

from agent_memory import __version__
from agent_memory.cli import commands, main
from agent_memory.core import limits
from agent_memory.embed.openai_compatible import OpenAIEmbedder
from agent_memory.errors import EmbeddingError
from agent_memory.logs import JsonFormatter
from agent_memory.platforms.agora.signatures import agora_headers
from agent_memory.settings import Settings
from agent_memory.web import schemas

ROOT = Path(__file__).resolve().parent.parent
LUNA = FIXTURES / "conversations" / "en_luna_companion.json"
PAIR = "/v1/users/u-ops/characters/luna"


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**more: str) -> dict[str, str]:
    """The environment without this machine's service settings, plus `more`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_MEMORY_", "AGORA_", "OPENAI_"))}
    return {**env, "PYTHONPATH": str(ROOT), **more}


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m agent_memory ARGS` with `env` added, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agent_memory", *args],
        capture_output=True, text=True, timeout=60, env=clean_env(**env),
    )  # fmt: skip


def said_plainly(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The stderr of a command that failed with a sentence, not a traceback."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


# -- 5. logs an operator can use ------------------------------------------------------------
@contextmanager
def json_serve(tmp_path: Path, **env: str) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """`python -m agent_memory serve` with JSON logs at INFO; (its URL, its log file, the process)."""
    port, log = free_port(), tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_memory", "serve", "--db", str(tmp_path / "m.db"), "--port", str(port)],
            env=clean_env(AGENT_MEMORY_LOG_FORMAT="json", AGENT_MEMORY_LOG_LEVEL="INFO", **env),
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}", log, proc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


@pytest.fixture
def json_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A served service with JSON logs, a token and a webhook secret; (its URL, its log file)."""
    env = {
        "AGENT_MEMORY_API_TOKEN": TOKEN,
        "AGORA_WEBHOOK_SECRET": SECRET,
        "AGENT_MEMORY_SUMMARY_DELAY_S": "3600",
    }
    with json_serve(tmp_path, **env) as (url, log, _):
        yield url, log


@pytest.mark.slow
async def test_json_logs_are_one_object_per_line_and_every_response_has_a_request_id(
    json_server: tuple[str, Path],
) -> None:
    url, log = json_server
    auth = {"Authorization": f"Bearer {TOKEN}"}
    envelope = agent_event(103, "A-OPS", labels={"user_id": "u-ops", "character_id": "luna"},
                           contents=said("My cat is called Miso.", "What a lovely name."))  # fmt: skip
    body = encode(envelope)
    async with aiohttp.ClientSession() as session:

        async def healthy() -> bool:
            try:
                async with session.get(f"{url}/healthz") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(healthy, 30, failure="the server did not come up")
        seen: dict[str, tuple[str, int]] = {}  # X-Request-Id -> (what was asked, status)
        asks: list[tuple[str, str, dict[str, str], bytes | None]] = [
            (
                "POST",
                "/webhooks/agora",
                {"Content-Type": "application/json", **agora_headers(SECRET, body)},
                body,
            ),
            ("GET", f"{PAIR}/system-messages", {**auth, "X-Request-Id": "trace-42"}, None),
            ("GET", f"{PAIR}/recall?q=cat", {"X-Request-Id": "two words\tand a tab"}, None),  # 401
            ("GET", "/no/such/route", {}, None),
        ]
        for method, path, headers, data in asks:
            async with session.request(method, f"{url}{path}", headers=headers, data=data) as resp:
                await resp.read()
                seen[resp.headers["X-Request-Id"]] = (f"{method} {path}", resp.status)

    assert "trace-42" in seen  # a caller's sane id is kept…
    assert "two words\tand a tab" not in seen  # …one that could forge a log line is replaced
    assert sorted(status for _, status in seen.values()) == [200, 200, 401, 404]
    assert len(seen) == 4  # every answer has an id of its own

    async def logged() -> list[dict[str, Any]]:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # every line is one JSON object
        return records if sum(r["logger"] == "agent_memory.access" for r in records) >= 5 else []

    records = await wait_for(logged, 10, failure="the access lines were not written")
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
    access = {r["request_id"]: r for r in records if r["logger"] == "agent_memory.access"}
    for request_id, (asked, status) in seen.items():
        line = access[request_id]
        assert (line["method"], line["status"]) == (asked.split()[0], status)
        assert isinstance(line["duration_ms"], float | int) and line["duration_ms"] >= 0
    assert access["trace-42"]["route"] == "/v1/users/{user_id}/characters/{character_id}/system-messages"
    assert [r["route"] for r in access.values() if r["status"] == 404] == [None]
    # Routes are templates: no user id reaches the log through a request line.
    assert not any("u-ops" in json.dumps(r) for r in access.values())


def test_json_formatter_keeps_an_exception_on_its_one_line() -> None:
    from agent_memory.logs import JsonFormatter

    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging_record(exc_info=sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["level"] == "ERROR" and parsed["message"] == "it failed: 3"
    assert "ValueError: boom" in parsed["exception"]


def logging_record(**fields: Any) -> Any:
    import logging

    return logging.LogRecord("agent_memory.test", logging.ERROR, __file__, 1, "it failed: %d", (3,), **fields)


# -- 6. packaging ---------------------------------------------------------------------------
@pytest.mark.slow
def test_python_dash_m_is_the_command_and_version_is_the_package_version() -> None:
    by_module = run("--version")
    assert by_module.returncode == 0 and by_module.stdout.strip() == f"agent-memory {__version__}"
    script = Path(sys.executable).parent / "agent-memory"
    if script.exists():  # the console script of an installed checkout says the same
        by_script = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
        assert by_script.stdout == by_module.stdout


def test_the_package_ships_its_type_hints_and_a_license() -> None:
    assert resources.files("agent_memory").joinpath("py.typed").is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]


# Every line logged while a callback is handled carries its request id (the webhook's line and
# ingest's, written on the store's thread); no line of an ingest, condense, bind and forget
# names a user or repeats what they said.
@pytest.mark.postgres
async def test_lines_of_a_request_carry_its_id_and_none_names_a_user(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent_memory")
    service = await start_service(job_sweep_s=0.05)
    labels = {"user_id": "u-private-4242", "character_id": "luna"}
    for envelope in (
        agent_event(101, "A-PRIV", labels=labels),
        agent_event(103, "A-PRIV", labels=labels, contents=said("My cat is called Quillfeather.", "Lovely.")),
    ):
        body = encode(envelope)
        headers = {"Content-Type": "application/json", "X-Request-Id": f"hook-{envelope['eventType']}",
                   **agora_headers(SECRET, body)}  # fmt: skip
        async with service.session.post(f"{service.url}/webhooks/agora", data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
    status, _ = await service.api("POST", "/v1/users/u-private-4242/characters/luna/condense")
    assert status == 202

    async def summarised() -> bool:
        _, body = await service.api("GET", "/v1/users/u-private-4242/characters/luna/summary")
        return body["summary"] is not None

    await wait_for(summarised, 15, failure="the pair was not condensed")
    status, _ = await service.api(
        "POST", "/v1/sessions/A-PRIV/bind", json={"user_id": "u-moved-5151", "character_id": "luna"}
    )
    assert status == 200
    assert (await service.api("DELETE", "/v1/users/u-moved-5151"))[0] == 200

    records = [r for r in caplog.records if r.name.startswith("agent_memory")]
    said_for = [(r.name.rsplit(".", 1)[-1], r.getMessage(), r.__dict__.get("request_id")) for r in records]
    callbacks = [(message, request_id) for name, message, request_id in said_for if name == "webhook"]
    assert [request_id for _, request_id in callbacks] == ["hook-101", "hook-103"], callbacks
    created = [(message, request_id) for name, message, request_id in said_for
               if name == "ingest" and message.startswith("session A-PRIV for ")]  # fmt: skip
    assert [request_id for _, request_id in created] == ["hook-101"], created
    formatted = "\n".join(JsonFormatter().format(r) for r in records)
    assert "condensed user#" in formatted and "forgot user#" in formatted  # the lines are there…
    for private in ("u-private-4242", "u-moved-5151", "Quillfeather"):
        assert private not in formatted, [line for line in formatted.splitlines() if private in line]


# A wrong signature is a WARNING naming the peer, once a minute per address, not once a callback.
async def test_bad_signatures_are_a_rate_limited_warning_naming_the_peer(
    service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_memory")
    for index in range(3):
        status, _ = await service.callback(agent_event(101, f"A-BAD-{index}"), secret="not-the-secret")
        assert status == 401
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "refused" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert "127.0.0.1" in warned[0].getMessage() and "does not match" in warned[0].getMessage()


def healthy(port: int) -> bool:
    """Whether `serve` answers /healthz (its signal handlers are in place by then)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


# `serve` says when it stops (SIGTERM: a container's stop, a deploy).
@pytest.mark.slow
def test_serve_logs_a_line_when_it_shuts_down(tmp_path: Path) -> None:
    with json_serve(tmp_path) as (url, log, proc):
        port = int(url.rsplit(":", 1)[1])
        asyncio.run(wait_for(lambda: healthy(port), 30, failure="the server did not come up"))
    code = proc.returncode
    messages = [json.loads(line)["message"] for line in log.read_text().splitlines() if line.strip()]
    assert code == 0, messages
    assert any("shutting down" in message for message in messages), messages
    assert messages[-1].startswith("agent-memory stopped after"), messages


# -- 7. everyday mistakes get a sentence ----------------------------------------------------
@pytest.mark.slow
def test_a_port_already_in_use_is_said_before_the_database_is_touched(tmp_path: Path) -> None:
    with closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = run("serve", "--db", str(tmp_path / "m.db"), "--port", port)
    said_plainly(done, f"port {port} on 127.0.0.1 is already in use", "--port")
    assert not (tmp_path / "m.db").exists()
    assert not done.stderr.lstrip().startswith("{")  # text logs stay the default


@pytest.mark.slow
def test_an_unknown_host_is_said(tmp_path: Path) -> None:
    done = run("serve", "--db", str(tmp_path / "m.db"), "--host", "no-such-host.invalid", "--port", "0")
    said_plainly(done, "'no-such-host.invalid': no such host", "AGENT_MEMORY_HOST")
    assert not (tmp_path / "m.db").exists()


@pytest.fixture
def unwritable_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder this user cannot create files in."""
    if os.geteuid() == 0:
        # Permission bits do not stop root; sysfs takes no new files from anyone.
        yield Path("/sys")
        return
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["stats"], ["serve", "--port", "0"]])
def test_an_unwritable_database_folder_is_said(unwritable_folder: Path, command: list[str]) -> None:
    done = run(*command, "--db", str(unwritable_folder / "m.db"))
    said_plainly(done, f"cannot write in {unwritable_folder}", "m.db-wal", "AGENT_MEMORY_DB")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only files")
def test_a_read_only_database_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    assert main(["replay", "--db", str(db), str(LUNA)]) == 0
    db.chmod(0o444)
    assert main(["stats", "--db", str(db)]) == 2
    assert f"the database {db} is read-only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["stats"], {"AGENT_MEMORY_LOG_LEVEL": "LOUD"}, "AGENT_MEMORY_LOG_LEVEL"),
        (["stats", "--log-level", "verbose"], {}, "must be one of DEBUG, INFO, WARNING"),
        (
            ["serve", "--port", "0"],
            {"AGENT_MEMORY_LOG_LEVEL": "chatty"},
            "must be one of DEBUG, INFO, WARNING",
        ),
        (["serve", "--port", "0"], {"AGENT_MEMORY_LOG_FORMAT": "xml"}, "AGENT_MEMORY_LOG_FORMAT"),
        (["serve", "--port", "0"], {"AGENT_MEMORY_EVENT_LOOP": "trio"}, "AGENT_MEMORY_EVENT_LOOP"),
    ],
)
@pytest.mark.slow
def test_a_bad_log_or_loop_setting_is_said(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    said_plainly(run(*args, "--db", str(tmp_path / "m.db"), **env), named)


def test_export_to_an_unwritable_path_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert main(["replay", "--db", db, str(LUNA)]) == 0
    target = tmp_path / "no-such-folder" / "alice.json"
    capsys.readouterr()
    assert main(["export", "u-alice", "--db", db, "-o", str(target)]) == 1
    assert (
        capsys.readouterr().err.strip() == f"agent-memory: cannot write {target}: No such file or directory"
    )
    assert main(["export", "u-alice", "--db", db, "-o", str(tmp_path / "alice.json")]) == 0
    assert json.loads((tmp_path / "alice.json").read_text())["counts"]["messages"] > 0


@pytest.mark.slow
def test_replay_reports_each_unreadable_file_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing, broken = tmp_path / "missing.json", tmp_path / "broken.json"
    broken.write_text("{not json")
    done = run("replay", "--db", str(tmp_path / "m.db"), str(missing), str(broken), str(LUNA))
    stderr = said_plainly(
        done, f"{missing}: cannot read it (No such file or directory)", f"{broken}: not JSON"
    )
    assert "2 files could not be read" in done.stdout, stderr
    # The good file after the two bad ones was replayed all the same.
    assert main(["system-messages", "u-alice", "luna", "--db", str(tmp_path / "m.db"), "--text"]) == 0
    assert "Miso" in capsys.readouterr().out


def test_a_database_that_does_not_exist_is_said_to_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "typo" / "m.db"
    assert main(["jobs", "--db", str(db)]) == 0
    assert (
        f"no database at {db}: creating a new, empty one (and its folder {db.parent})"
        in capsys.readouterr().err
    )
    assert main(["jobs", "--db", str(db)]) == 0
    assert "creating" not in capsys.readouterr().err  # said once, when it happens


@pytest.mark.slow
async def test_a_hung_llm_is_named_and_waited_for_once(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert await asyncio.to_thread(main, ["replay", "--db", db, str(LUNA)]) == 0
    async with FakeOpenAI(hang_s=30) as llm:
        llm.script("hang", "hang")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent_memory", "condense", "u-alice", "luna", "--db", db,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test",
                          AGENT_MEMORY_LLM_MODEL="hung-model-7b", AGENT_MEMORY_LLM_TIMEOUT_S="0.5"),
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        calls = llm.calls
    done = subprocess.CompletedProcess([], proc.returncode or 0, "", err.decode())
    said_plainly(
        done, llm.base_url, "model hung-model-7b", "did not answer within 0.5s", "AGENT_MEMORY_LLM_TIMEOUT_S"
    )
    assert calls == 1  # the SDK does not retry by default: the wait is the configured one


async def test_a_hung_embeddings_endpoint_is_named_with_its_model() -> None:
    async with FakeEmbeddings() as fake:
        fake.script("hang", "hang")
        embedder = OpenAIEmbedder(
            Settings(embeddings_model="embed-x", embeddings_base_url=fake.base_url, llm_timeout_s=0.3)
        )
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
        await embedder.close()
        assert fake.calls == 1
    assert fake.base_url in caught.value.message and "(model embed-x)" in caught.value.message


async def test_the_cli_refuses_what_http_refuses_with_the_same_sentence(
    start_service: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    service = await start_service()
    for path, argv in [
        (f"{PAIR}/system-messages?max_tokens=10", ["system-messages", "u-ops", "luna", "--max-tokens", "10"]),
        (f"{PAIR}/recall?q=cat&max_tokens=10", ["recall", "u-ops", "luna", "cat", "--max-tokens", "10"]),
        ("/v1/jobs?limit=0", ["jobs", "--limit", "0"]),
        (
            f"{PAIR}/system-messages?query={'x' * 501}",
            ["system-messages", "u-ops", "luna", "--query", "x" * 501],
        ),
    ]:
        message = assert_error(*await service.api("GET", path), 422, "invalid_field")
        with pytest.raises(SystemExit) as refused:
            main(argv)
        assert refused.value.code == 2
        assert capsys.readouterr().err.strip().endswith(f"error: argument {argv[-2]}: {message}")


def test_the_cli_limits_are_the_http_limits() -> None:
    """Both read them from one module (core/limits.py), which the CLI imports without aiohttp."""
    assert (commands.MAX_PERSONA_CHARS, commands.MAX_QUERY_CHARS, commands.MAX_TOKENS_RANGE) == (
        schemas.MAX_PERSONA_CHARS,
        schemas.MAX_QUERY_CHARS,
        (limits.MIN_TOKENS, limits.MAX_TOKENS),
    )


# -- 6. the tests, run where a user runs them -----------------------------------------------
@pytest.mark.slow
def test_the_walkthrough_database_in_the_test_folder_changes_no_test(tmp_path: Path) -> None:
    """The README's walk-through (replay, condense) leaves ./agent_memory.db in the folder; the
    README's test command run from that folder afterwards passes all the same (on both backends)."""
    if bindir() is None:
        pytest.skip("PostgreSQL server binaries (initdb) not found")
    for step in (("replay", str(FIXTURES / "conversations")), ("condense", "rtc:3003", "default")):
        done = subprocess.run(
            [sys.executable, "-m", "agent_memory", *step],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "agent_memory.db").exists()
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "test_api.py"), "-k", "test_binding_a_condensed_session_takes_its_memory_along"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-4000:]
    assert "2 passed" in suite.stdout, suite.stdout[-4000:]
