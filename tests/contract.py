"""The fuzzed contract: schemathesis against the live service, driven by its /openapi.json.

    .venv/bin/python tests/contract.py [--seed N] [--max-examples N] [--max-time S]

Starts the real app on a free loopback port with an API token, a webhook secret, a fake Agora
and a fake upstream LLM (so the agent and custom-LLM routes answer for real), stores one
conversation of the examples' pair (u-alice, luna), then runs every schemathesis phase and
check against it, bounded in examples and time. Prints the figures (requests sent, statuses
seen, 5xx) and exits non-zero on any failed check or any 5xx. .ci/run runs it after pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import sys
import tempfile
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web
from fakes.agora_server import FakeAgora
from fakes.upstream_llm import FakeUpstreamLLM

from agent_memory.platforms.agora.signatures import agora_headers
from agent_memory.settings import Settings
from agent_memory.web.app import create_app
from agent_memory.web.auth import GATE

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "conversations" / "en_luna_companion.json"
ACCEPTED = ["2xx", "401", "403", "404", "409"]
# What JSON Schema cannot state is answered 422 for requests the schema allows: since_ms must
# come before until_ms; a persona must fit in max_tokens; a channel name is at most 64 bytes of
# UTF-8 (the schema can only count characters); a fact holds a letter, number or symbol (Unicode
# categories, which hypothesis cannot generate from); a message's timestamp is a date (ISO 8601
# with its offset, or epoch seconds or ms) at most 10 minutes ahead; an import's records must be
# what an export holds, and its `counts` must match them (and a number anywhere in its free-form
# records fits 64 bits, else the file is unreadable JSON: 400, as for every body). The custom-LLM routes take a key minted by
# POST /v1/agents (its route names the pair), filled in by `mint_llm_key`.
CONFIG = f"""
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "409", "413", "415", "422", "429"]

[[operations]]
include-path-regex = "/stats$|/system-messages$|^/v1/channels/|^/v1/agents$|/facts$|/messages$"
checks.positive_data_acceptance.expected-statuses = {[*ACCEPTED, "422"]}

[[operations]]
include-path-regex = "^/v1/import$"
checks.positive_data_acceptance.expected-statuses = {[*ACCEPTED, "400", "422"]}

[[operations]]
include-path-regex = "^/v1/llm/.*completions$"
headers = {{ Authorization = "Bearer {{llm_key}}" }}
"""


def settings_for(folder: Path, token: str, agora: FakeAgora, upstream: FakeUpstreamLLM) -> Settings:
    return Settings(
        db_path=folder / "memory.db",
        api_token=token,
        webhook_secret=secrets.token_hex(16),
        retell_api_key=secrets.token_hex(16),
        elevenlabs_secret=secrets.token_hex(16),
        vapi_secret=secrets.token_hex(16),
        upstream_base_url=upstream.base_url,
        public_url="https://memory.example",
        agora_app_id="app",
        agora_customer_id="cid",
        agora_customer_secret="csec",
        agora_api_base=agora.base_url,
        agora_max_retries=0,
        agora_timeout_s=5,
        # Nothing scheduled races the run: polls, refreshes and condensing wait an hour.
        poll_interval_s=3600,
        refresh_interval_s=3600,
        summary_delay_s=3600,
        job_sweep_s=3600,
    )


async def seed(url: str, secret: str) -> None:
    """Store the examples' pair through the signed webhook, as Agora would."""
    async with aiohttp.ClientSession() as session:
        for envelope in json.loads(FIXTURE.read_text()):
            body = json.dumps(envelope).encode()
            headers = {"Content-Type": "application/json", **agora_headers(secret, body)}
            async with session.post(f"{url}/webhooks/agora", data=body, headers=headers) as resp:
                if resp.status != 200:
                    raise SystemExit(f"seeding failed: {resp.status} {await resp.text()}")


async def mint_llm_key(url: str, token: str, agora: FakeAgora, upstream: FakeUpstreamLLM) -> str:
    """Start an agent with memory_llm (forwarding to the fake upstream); the key Agora was given."""
    join = {
        "name": "contract-llm",
        "properties": {"channel": "contract", "llm": {"url": f"{upstream.base_url}/chat/completions"}},
    }
    body = {"user_id": "u-alice", "character_id": "luna", "memory_llm": True, "join": join}
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/agents", json=body, headers=headers) as resp,
    ):
        if resp.status != 201:
            raise SystemExit(f"minting a custom-LLM key failed: {resp.status} {await resp.text()}")
        agent_id = (await resp.json())["agent_id"]
    joined = agora.agents[agent_id].join_body
    assert joined is not None
    key: str = joined["properties"]["llm"]["api_key"]
    return key


async def fuzz(url: str, token: str, llm_key: str, folder: Path, args: argparse.Namespace) -> int:
    """Run schemathesis against `url`; its exit code."""
    config = folder / "schemathesis.toml"
    config.write_text(CONFIG.replace("{llm_key}", llm_key))
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color", "run", f"{url}/openapi.json",
        "--header", f"Authorization: Bearer {token}", "--checks", "all",
        # A user or pair is not a resource that exists or not: after a forget its facts, search
        # and recall answer empty, as for one never seen, not 404 (docs/http-api.md).
        "--exclude-checks", "use_after_free",
        "--max-examples", str(args.max_examples), "--seed", str(args.seed), "--max-time", str(args.max_time),
        "--workers", "1", "--request-timeout", "10", "--generation-allow-x00", "false",
        "--generation-database", "none",
        "--report", "har", "--report-har-path", str(folder / "run.har"),
    ]  # fmt: skip
    # In the run's folder: schemathesis keeps what `st replay` needs in ./.schemathesis.
    process = await asyncio.create_subprocess_exec(
        *command, cwd=folder, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    print(unbannered(output.decode(errors="replace")), end="", flush=True)
    return process.returncode or 0


def unbannered(output: str) -> str:
    """Schemathesis's report without its closing pytest-style banner (`=== 3 warnings in 40s ===`).

    CI reads the last such banner in its log as the test run's summary; the contract's own figures
    line follows instead, and pytest's summary stays the only one.
    """
    return re.sub(r"(?m)^=+ (.+?) =+$", r"schemathesis: \1", output)


def figures(har: Path) -> tuple[int, Counter[int]]:
    """Requests sent and the statuses answered, from the run's HAR file."""
    entries = json.loads(har.read_text())["log"]["entries"]
    return len(entries), Counter(entry["response"]["status"] for entry in entries)


async def main(args: argparse.Namespace) -> int:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="contract-") as tmp:
        folder = Path(tmp)
        async with FakeAgora() as agora, FakeUpstreamLLM() as upstream:
            settings = settings_for(folder, token, agora, upstream)
            app = create_app(settings)
            # The fuzzer sends wrong and missing keys by the thousand on purpose (ignored_auth);
            # the lockout after FAILURES_ALLOWED of them (tests/test_keys.py) would 429 the rest.
            app[GATE].limiter.allowed = sys.maxsize
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            url = f"http://127.0.0.1:{port}"
            try:
                assert settings.webhook_secret is not None
                await seed(url, settings.webhook_secret)
                llm_key = await mint_llm_key(url, token, agora, upstream)
                code = await fuzz(url, token, llm_key, folder, args)
            finally:
                await runner.cleanup()
        sent, statuses = figures(folder / "run.har")
    server_errors = sum(count for status, count in statuses.items() if status >= 500)
    seen = ", ".join(f"{status} x{count}" for status, count in sorted(statuses.items()))
    print(f"contract: seed {args.seed}, {sent} requests; statuses {seen}; {server_errors} x 5xx")
    return code or (1 if server_errors else 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="schemathesis's random seed (default 1)")
    parser.add_argument("--max-examples", type=int, default=8, help="test cases per operation and phase")
    parser.add_argument("--max-time", type=int, default=40, help="seconds the whole run may take")
    sys.exit(asyncio.run(main(parser.parse_args())))
