"""webhooks/: each platform's sample requests, sent the way its guide says, reach a real service and are kept."""

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
from conftest import SECRET, TOKEN, Service

from agent_memory.platforms.agora.events import parse_callback
from agent_memory.platforms.agora.signatures import agora_headers
from agent_memory.platforms.elevenlabs.signatures import HEADER as EL_HEADER
from agent_memory.platforms.elevenlabs.signatures import sign as el_sign

ROOT = Path(__file__).resolve().parent.parent
AGORA = ROOT / "webhooks" / "agora"
SAMPLES = sorted(AGORA.glob("*.json"))
CALL = [AGORA / "101_agent_joined.json", AGORA / "103_agent_history.json", AGORA / "102_agent_left.json"]
QUESTION = "/v1/users/u-demo/characters/luna/recall?q=What is my sister's dog called?"


def send_py() -> ModuleType:
    """webhooks/agora/send.py, loaded from its file (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("agora_send", AGORA / "send.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run_send(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """send.py's exit status and output lines; it blocks, so it runs beside the service's loop."""
    status = await asyncio.to_thread(send_py().main, list(argv))
    return status, capsys.readouterr().out.splitlines()


def test_every_sample_is_an_envelope_the_service_reads() -> None:
    assert {path.name for path in CALL} <= {path.name for path in SAMPLES}
    for sample in SAMPLES:
        raw, _event = parse_callback(sample.read_bytes(), 0, follow=False)
        assert raw.event_id == json.loads(sample.read_text())["noticeId"]


def test_send_py_signs_as_agora_does() -> None:
    body = CALL[1].read_bytes()
    assert send_py().signatures(SECRET, body) == agora_headers(SECRET, body)


async def test_the_sample_call_sent_by_send_py_is_remembered(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(path) for path in SAMPLES]
    status, lines = await run_send(capsys, service.url, *files, "--secret", SECRET)
    assert status == 0, lines
    answers = {line.split(":")[0]: line for line in lines}
    assert all(" 200 " in line for line in lines), lines
    history = json.loads(answers["103_agent_history.json"].split(" 200 ", 1)[1])
    assert (history["status"], history["new_messages"]) == ("done", 5)

    status, lines = await run_send(capsys, service.url, *files, "--secret", SECRET)
    assert status == 0 and all('"status": "duplicate"' in line for line in lines), lines

    code, recalled = await service.api("GET", QUESTION)
    assert code == 200
    assert "Biscuit" in recalled["memories"][0]["text"]


async def test_a_wrong_secret_is_told_apart(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = await run_send(capsys, service.url, str(CALL[1]), "--secret", "not-the-secret")
    assert status == 1
    assert lines[0].startswith("103_agent_history.json: 401 ")
    code, recalled = await service.api("GET", QUESTION)
    assert (code, recalled["memories"]) == (200, [])


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
async def test_the_guides_curl_lines_are_accepted(service: Service) -> None:
    guide = (ROOT / "webhooks" / "agora.md").read_text(encoding="utf-8")
    script = next(block for block in re.findall(r"```bash\n(.*?)```", guide, re.S) if "openssl" in block)
    script = re.sub(r"^URL=.*$", f"URL={service.url}", script, flags=re.M)
    env = {"PATH": os.environ["PATH"], "AGORA_WEBHOOK_SECRET": SECRET}
    shell = await asyncio.create_subprocess_exec(
        "bash", "-euc", script, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await shell.communicate()
    assert shell.returncode == 0
    assert json.loads(out)["status"] == "done"


ELEVENLABS = ROOT / "webhooks" / "elevenlabs"
ELEVENLABS_SECRET = "elevenlabs-guide-secret"


async def test_the_elevenlabs_samples_are_remembered_and_start_the_next_call(start_service: Any) -> None:
    service = await start_service(elevenlabs_secret=ELEVENLABS_SECRET, phone_identity=True)
    for name, conversation in (
        ("post_call_transcription.json", "conv_demo_1"),
        ("phone_call.json", "conv_demo_2"),
    ):
        body = (ELEVENLABS / name).read_bytes()
        for expected in ("done", "duplicate"):
            headers = {"Content-Type": "application/json", EL_HEADER: el_sign(ELEVENLABS_SECRET, body)}
            async with service.session.post(
                f"{service.url}/webhooks/elevenlabs", data=body, headers=headers
            ) as resp:
                answer = await resp.json()
            assert (resp.status, answer["conversation_id"], answer["status"]) == (200, conversation, expected)
    code, recalled = await service.api(
        "GET", "/v1/users/u-demo/characters/luna/recall?q=What is my sister's dog called?"
    )
    assert code == 200 and "Biscuit" in recalled["memories"][0]["text"]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    body = (ELEVENLABS / "initiation.json").read_bytes()
    url = f"{service.url}/webhooks/elevenlabs/initiation"
    async with service.session.post(url, data=body, headers=headers) as resp:
        answer = await resp.json()
    assert resp.status == 200 and "cello" in answer["dynamic_variables"]["memory"]


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
async def test_the_elevenlabs_guides_curl_lines_are_accepted(start_service: Any) -> None:
    service = await start_service(elevenlabs_secret=ELEVENLABS_SECRET)
    guide = (ROOT / "webhooks" / "elevenlabs.md").read_text(encoding="utf-8")
    script = next(block for block in re.findall(r"```bash\n(.*?)```", guide, re.S) if "openssl" in block)
    script = re.sub(r"^URL=.*$", f"URL={service.url}", script, flags=re.M)
    env = {"PATH": os.environ["PATH"], "AGENT_MEMORY_ELEVENLABS_SECRET": ELEVENLABS_SECRET}
    shell = await asyncio.create_subprocess_exec(
        "bash", "-euc", script, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await shell.communicate()
    assert shell.returncode == 0
    assert json.loads(out)["status"] == "done"


def test_the_readme_names_the_tests_that_send_each_platforms_samples() -> None:
    """webhooks/README.md tells where each folder's samples are sent to a real service: it says so truly."""
    readme = (ROOT / "webhooks" / "README.md").read_text(encoding="utf-8")
    named = [ROOT / name for name in re.findall(r"`(tests/test_\w+\.py)`", readme)]
    assert all(test.exists() for test in named), named
    sources = [test.read_text(encoding="utf-8") for test in named]
    for folder in sorted(path for path in (ROOT / "webhooks").iterdir() if path.is_dir()):
        assert any(f'"webhooks" / "{folder.name}"' in source for source in sources), folder.name
