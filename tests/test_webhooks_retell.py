"""webhooks/retell: the guide's samples, sent as it says (send.py, curl), reach a real service and are kept."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import Service

from agent_memory.platforms.retell.payloads import read_envelope
from agent_memory.platforms.retell.signatures import sign

ROOT = Path(__file__).resolve().parent.parent
RETELL = ROOT / "webhooks" / "retell"
SAMPLES = sorted(RETELL.glob("*.json"))
KEY = "key_guide_0123456789abcdef"
QUESTION = "/v1/users/u-demo/characters/luna/recall?q=How old is my dog?"


def send_py() -> ModuleType:
    """webhooks/retell/send.py, loaded from its file (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("retell_send", RETELL / "send.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run_send(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """send.py's exit status and output lines; it blocks, so it runs beside the service's loop."""
    status = await asyncio.to_thread(send_py().main, list(argv))
    return status, capsys.readouterr().out.splitlines()


@pytest.fixture
async def retell(start_service: Any) -> Service:
    service: Service = await start_service(retell_api_key=KEY)
    return service


def test_every_sample_is_a_webhook_the_service_reads() -> None:
    assert [path.name for path in SAMPLES] == ["call_analyzed.json", "call_ended.json", "call_inbound.json"]
    for sample in SAMPLES:
        assert read_envelope(sample.read_bytes()).event == json.loads(sample.read_text())["event"]


def test_send_py_signs_as_retell_does() -> None:
    body = SAMPLES[0].read_bytes()
    assert send_py().signature(KEY, body, 1_764_324_000_000) == sign(KEY, body, 1_764_324_000_000)


async def test_the_sample_call_sent_by_send_py_is_remembered(
    retell: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(path) for path in SAMPLES]
    status, lines = await run_send(capsys, retell.url, *files, "--key", KEY)
    assert status == 0, lines
    answers = {line.split(":")[0]: json.loads(line.split(" 200 ", 1)[1]) for line in lines}
    assert (answers["call_analyzed.json"]["status"], answers["call_analyzed.json"]["new_messages"]) == (
        "done",
        7,
    )
    assert (answers["call_ended.json"]["status"], answers["call_ended.json"]["new_messages"]) == ("done", 0)
    assert answers["call_inbound.json"] == {"call_inbound": {"dynamic_variables": {"memory": ""}}}

    status, lines = await run_send(capsys, retell.url, *files[:2], "--key", KEY)
    assert status == 0 and all('"status": "duplicate"' in line for line in lines), lines

    code, recalled = await retell.api("GET", QUESTION)
    assert code == 200
    assert "Biscuit" in recalled["memories"][0]["text"]


async def test_a_wrong_key_is_told_apart(retell: Service, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = await run_send(capsys, retell.url, str(SAMPLES[1]), "--key", "not-the-key")
    assert status == 1
    assert lines[0].startswith("call_ended.json: 401 ")
    code, recalled = await retell.api("GET", QUESTION)
    assert (code, recalled["memories"]) == (200, [])


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
async def test_the_guides_curl_lines_are_accepted(retell: Service) -> None:
    guide = (ROOT / "webhooks" / "retell.md").read_text(encoding="utf-8")
    script = next(block for block in re.findall(r"```bash\n(.*?)```", guide, re.S) if "openssl" in block)
    script = re.sub(r"^URL=.*$", f"URL={retell.url}", script, flags=re.M)
    env = {"PATH": os.environ["PATH"], "AGENT_MEMORY_RETELL_API_KEY": KEY}
    shell = await asyncio.create_subprocess_exec(
        "bash", "-euc", script, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await shell.communicate()
    assert shell.returncode == 0
    assert json.loads(out)["status"] == "done"
