"""The agent-memory command, run as a user runs it."""

import asyncio
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import FIXTURES, said, seed, wait_for
from test_api import GatedOpenAI

from agent_memory.cli import main

pytestmark = pytest.mark.postgres


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
def test_replay_then_system_messages(tmp_path):
    db = str(tmp_path / "m.db")
    replay = run("replay", "--db", db, str(FIXTURES / "conversations"))
    assert replay.returncode == 0, replay.stderr
    assert "duplicate" in replay.stdout and "new messages" in replay.stdout
    shown = run("system-messages", "u-alice", "luna", "--db", db, "--max-tokens", "400")
    context = json.loads(shown.stdout)
    assert context["tokens"] <= 400
    assert "Good night, Alice" in context["system_messages"][-1]["content"]
    again = run("replay", "--db", db, str(FIXTURES / "conversations"))
    assert "0 new messages" in again.stdout  # replaying is harmless


def test_system_messages_text_of_a_pair_with_no_memory_says_so(tmp_path, capsys):
    db = str(tmp_path / "m.db")
    assert main(["system-messages", "u-nobody", "luna", "--db", db, "--text"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no memory is held for u-nobody with luna" in err


def test_condense_jobs_and_forget(tmp_path, capsys):
    db = str(tmp_path / "m.db")
    assert main(["replay", "--db", db, str(FIXTURES / "conversations" / "zh_xiaoyu_tutor.json")]) == 0
    assert main(["jobs", "--db", db]) == 0
    assert "u-wang/xiaoyu" in capsys.readouterr().out
    assert main(["condense", "u-wang", "xiaoyu", "--db", db]) == 0
    assert "(offline summary)" in capsys.readouterr().out
    assert main(["forget", "u-wang", "--db", db]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["deleted"]["messages"] == 32 and receipt["deleted"]["summaries"] == 1


def test_reprocess_applies_failed_callbacks_again(tmp_path, capsys):
    db = tmp_path / "m.db"
    broken = {"noticeId": "n-1", "productId": 17, "eventType": 103, "payload": {
        "agent_id": "A1", "labels": {"user_id": "u", "character_id": "c"},
        "contents": [{"role": "user", "content": "hello"}, {"content": "no role"}]}}  # fmt: skip
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    assert main(["replay", "--db", str(db), str(path)]) == 1  # it failed, and says so
    # An operator repairs the stored body (say, after a fix to the parser) and reprocesses.
    conn = sqlite3.connect(db)
    repaired = json.dumps(
        {**broken, "payload": {**broken["payload"], "contents": broken["payload"]["contents"][:1]}}
    )
    conn.execute("UPDATE inbox SET body = ? WHERE notice_id = 'n-1'", (repaired,))
    conn.commit()
    conn.close()
    capsys.readouterr()
    assert main(["reprocess", "--db", str(db)]) == 0
    assert "1 done" in capsys.readouterr().out
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT content FROM messages").fetchall() == [("hello",)]


def test_reprocess_reads_each_platforms_events_with_its_own_reader(tmp_path, capsys, monkeypatch):
    # A platform's event (not an Agora envelope) that failed is read again by its platform's
    # reader, by the prefix of its id, not as an Agora callback.
    from agent_memory.core.events import IncomingMessage
    from agent_memory.platforms import recorded
    from agent_memory.platforms.calls import CallTranscript, call_identity
    from agent_memory.settings import Settings
    from agent_memory.store import open_store

    def read(body: str, settings: Settings) -> CallTranscript:
        data = json.loads(body)
        return CallTranscript(
            platform="demo",
            call_id=data["call"],
            event="ended",
            identity=call_identity(settings, user_id=data["user"], character_id="luna"),
            messages=[IncomingMessage(role="user", content=data["said"], ts_ms=1_763_690_000_000)],
        )

    monkeypatch.setitem(recorded.READERS, "demo", read)
    db = tmp_path / "m.db"
    open_store(Settings(db_path=db)).close()  # the schema
    body = json.dumps({"call": "c1", "user": "u-demo", "said": "my parrot is called Kiwi"})
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO inbox (notice_id, event_type, received_ms, body, status, agent_id, error) "
        "VALUES ('demo:c1:ended', 0, 1763690000000, ?, 'failed', 'demo:c1', 'it failed')",
        (body,),
    )
    conn.commit()
    conn.close()
    assert main(["reprocess", "--db", str(db)]) == 0
    assert "1 done" in capsys.readouterr().out
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT user_id, character_id, agent_id, content FROM messages").fetchall() == [
        ("u-demo", "luna", "demo:c1", "my parrot is called Kiwi")
    ]


# Whether stdout is buffered (a pipe's is, unless PYTHONUNBUFFERED is set, as CI's images
# often do): buffered, the write to the closed pipe happens only when stdout is flushed.
@pytest.mark.slow
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path, buffered):
    """`agent-memory search … | head` ends quietly when head closes the pipe."""
    db = str(tmp_path / "m.db")
    assert run("replay", "--db", db, str(FIXTURES / "conversations")).returncode == 0
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    reader = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    reader.wait(timeout=10)  # gone before a byte is written: every write meets a closed pipe
    search = subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", "search", "u-alice", "Miso", "--db", db],
        stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert search.returncode == 0, search.stderr
    assert "Traceback" not in search.stderr


# The running service holds the pair's job (its model is answering): the command says so,
# instead of "nothing to condense", and waits for it, or gives up non-zero at once with --wait 0.
async def test_condense_while_the_service_condenses_the_pair_says_so_and_waits(start_service, capsys):
    async with GatedOpenAI() as llm:
        llm.script({"summary": "The user's cat is called Miso.", "add_facts": [], "update_facts": [],
                    "remove_facts": []})  # fmt: skip
        service = await start_service(openai_base_url=llm.base_url, openai_api_key="test", job_sweep_s=0.05)
        await seed(service, "u-held", "luna", "HELD-1", said("my cat is called Miso", "what a lovely name"))
        status, _ = await service.api("POST", "/v1/users/u-held/characters/luna/condense")
        assert status == 202
        await asyncio.wait_for(llm.arrived.wait(), 10)  # the service has claimed the job
        db = service.settings.postgres_url or str(service.settings.db_path)
        command = ["condense", "u-held", "luna", "--db", db]
        capsys.readouterr()

        assert await asyncio.to_thread(main, [*command, "--wait", "0"]) == 3
        out, err = capsys.readouterr()
        assert "nothing to condense" not in out
        assert "u-held/luna is being condensed by the running service" in err and "--wait" in err, err

        waiting = asyncio.create_task(asyncio.to_thread(main, [*command, "--wait", "120"]))
        said_so = ""

        def progress() -> bool:
            nonlocal said_so
            said_so += capsys.readouterr().err
            return "waiting for it" in said_so

        await wait_for(progress, 30, failure="the command did not say it waits for the service")
        assert not waiting.done()
        llm.release.set()
        assert await asyncio.wait_for(waiting, 60) == 0
        out, _ = capsys.readouterr()
        assert "The user's cat is called Miso." in out
        assert llm.calls == 1  # the service's condense, waited for, not a second one


def test_the_help_names_the_platforms_the_readme_names(capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    opening = (root / "README.md").read_text(encoding="utf-8").split("\n\n")[1]
    with pytest.raises(SystemExit):
        main(["--help"])
    described = " ".join(capsys.readouterr().out.split())
    summary = next(
        line for line in (root / "pyproject.toml").read_text().splitlines() if line.startswith("description")
    )
    for platform in ("Agora", "Vapi", "Retell", "ElevenLabs", "LiveKit", "Pipecat"):
        assert platform in opening
        assert platform in described and platform in summary, platform


def test_stats_of_an_empty_memory_line_up(tmp_path, capsys):
    assert main(["stats", "--db", str(tmp_path / "m.db")]) == 0
    lines = capsys.readouterr().out.splitlines()
    latency = [line for line in lines if line.startswith("latency")]
    assert len(latency) == 2
    assert all(line[22:] == " none recorded" for line in latency), latency
