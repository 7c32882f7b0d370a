"""Scoped keys: every /v1 route's scope, keys made, used and revoked, wrong guesses limited, no open API by accident.

The service runs on loopback with the admin token (conftest's TOKEN); keys are made through
the API or the command and used over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import TOKEN, Service, assert_error, wait_for

from agent_memory.cli import main
from agent_memory.core.domain import KEY_SCOPES, KeyScope
from agent_memory.core.secrets import API_KEY_PREFIX, hash_key
from agent_memory.errors import InvalidField, NotConfigured
from agent_memory.settings import Settings
from agent_memory.web.auth import FAILURES_ALLOWED, FailureLimiter, open_api_warning
from agent_memory.web.declare import OWN_BEARER, SCOPES, declared_routes
from agent_memory.web.keys import AUTH_STATS

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parent.parent
# What each path parameter is filled with when every route is called.
PATH_VALUES = {
    "user_id": "u-keys", "character_id": "luna", "fact_id": "999999", "job_id": "999999",
    "agent_id": "AGENT-KEYS", "channel": "room-keys", "key_id": "999999", "route": "r",
}  # fmt: skip


def v1_routes(service: Service) -> set[tuple[str, str]]:
    """Every (method, path) of the app's router under /v1 (HEAD goes with its GET), and each route
    elsewhere that a key admits (a platform's call-start webhook checks it as /v1 does)."""
    return {
        (route.method, route.resource.canonical)
        for route in service.server.app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith("/v1/")
        and route.method != "HEAD"
    } | {
        (route.method, route.canonical)
        for route in declared_routes(service.server.app)
        if route.auth == "token" and route.scope is not None and not route.path.startswith("/v1/")
    }


async def make_key(service: Service, scope: KeyScope, name: str | None = None) -> str:
    status, body = await service.api("POST", "/v1/keys", json={"scope": scope, "name": name})
    assert status == 201, body
    return str(body["key"])


def test_the_scopes_nest() -> None:
    from agent_memory.core.secrets import grants

    allowed = {(held, needed) for held in KEY_SCOPES for needed in KEY_SCOPES if grants(held, needed)}
    assert allowed == {
        ("read", "read"), ("write", "read"), ("write", "write"),
        ("admin", "read"), ("admin", "write"), ("admin", "admin"),
    }  # fmt: skip


async def test_every_v1_route_declares_its_scope_and_the_table_names_no_other(service: Service) -> None:
    assert v1_routes(service) == set(service.server.app[SCOPES])


@pytest.mark.slow  # every route under every scope (contract-like)
async def test_each_route_refuses_no_key_and_a_narrower_key_and_admits_its_scope(service: Service) -> None:
    keys: dict[str, str] = {scope: await make_key(service, scope, f"walk {scope}") for scope in KEY_SCOPES}
    keys["token"] = TOKEN  # the admin token
    checked = 0
    scopes = service.server.app[SCOPES]
    for method, route in sorted(v1_routes(service)):
        needed = scopes[(method, route)]
        if needed == OWN_BEARER:
            continue
        path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], route)
        body = {"json": {}} if method == "POST" else {}
        status, answer = await service.api(method, path, token=None, **body)
        assert "Bearer" in assert_error(status, answer, 401, "unauthorized"), (method, route)
        for held, key in keys.items():
            status, answer = await service.api(method, path, token=key, **body)
            scope = "admin" if held == "token" else held
            if KEY_SCOPES.index(scope) >= KEY_SCOPES.index(needed):
                assert status not in (401, 403), (method, route, held, answer)
            else:
                message = assert_error(status, answer, 403, "forbidden")
                assert f"needs a key of scope {needed}" in message and f"scope is {scope}" in message
                assert route in message
        checked += 1
    # All but the custom-LLM routes (each platform's), which take their own bearer key.
    own = [route for route, scope in scopes.items() if scope == OWN_BEARER]
    assert len(own) == 4 and checked == len(scopes) - len(own)
    # Refusals are counted for /metrics: a scope refusal is no wrong guess.
    refused = service.server.app[AUTH_STATS].refused
    assert refused["missing"] == checked and refused["scope"] > 0 and refused["wrong"] == 0


async def test_a_key_is_shown_once_kept_by_its_hash_and_refused_once_revoked(service: Service) -> None:
    status, body = await service.api("POST", "/v1/keys", json={"scope": "read", "name": "dashboard"})
    assert status == 201
    key, made = body["key"], body["api_key"]
    assert key.startswith(API_KEY_PREFIX) and "not shown again" in body["note"]
    assert made["scope"] == "read" and made["name"] == "dashboard" and made["revoked_ms"] is None
    stored = await service.store.read(lambda view: view.api_keys.by_hash(hash_key(key)))
    assert stored is not None and stored.id == made["id"] and stored.key_hash != key

    status, _ = await service.api("GET", "/v1/users/u/characters/c/messages", token=key)
    assert status == 200
    status, body = await service.api("GET", "/v1/keys")
    listed = {item["id"]: item for item in body["api_keys"]}[made["id"]]
    assert listed["last_used_ms"] is not None  # the first use is recorded at once
    assert key not in str(body) and stored.key_hash not in str(body)  # neither key nor hash is listed again

    status, body = await service.api("DELETE", f"/v1/keys/{made['id']}")
    assert status == 200 and body["revoked"]["revoked_ms"] is not None
    status, answer = await service.api("GET", "/v1/users/u/characters/c/messages", token=key)
    assert "wrong or revoked" in assert_error(status, answer, 401, "unauthorized")
    status, again = await service.api("DELETE", f"/v1/keys/{made['id']}")
    assert status == 200 and again["revoked"]["revoked_ms"] == body["revoked"]["revoked_ms"]
    assert_error(*await service.api("DELETE", "/v1/keys/424242"), 404, "not_found")
    assert_error(*await service.api("POST", "/v1/keys", json={"scope": "root"}), 422, "invalid_field")
    assert_error(*await service.api("POST", "/v1/keys", json={}), 422, "invalid_field")


async def test_the_command_makes_lists_and_revokes_keys_the_service_takes(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(service.settings.postgres_url or service.settings.db_path)

    async def command(*args: str) -> str:
        assert await asyncio.to_thread(main, ["keys", *args, "--db", db]) == 0
        return capsys.readouterr().out

    writer = (await command("create", "--scope", "write", "--name", "backend")).strip()
    gone = (await command("create", "--scope", "admin")).strip()
    assert writer.startswith(API_KEY_PREFIX) and writer != gone
    status, _ = await service.api(
        "POST", "/v1/users/u-cli/characters/luna/facts", token=writer, json={"text": "Likes tea"}
    )
    assert status == 201
    status, answer = await service.api("GET", "/v1/stats", token=writer)
    assert "scope admin" in assert_error(status, answer, 403, "forbidden")

    listed = {item["name"]: item for item in json.loads(await command("list", "--json"))}
    assert listed["backend"]["scope"] == "write" and listed[None]["scope"] == "admin"
    assert "revoked" in await command("revoke", str(listed[None]["id"]))
    status, answer = await service.api("GET", "/v1/stats", token=gone)
    assert_error(status, answer, 401, "unauthorized")
    assert "revoked" in await command("list")


async def get(
    service: Service, path: str, key: str | None, forwarded: str | None = None
) -> tuple[int, str, str]:
    """GET `path` with `key` as bearer (and an X-Forwarded-For): (status, media type, body text)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    async with service.session.get(f"{service.url}{path}", headers=headers) as resp:
        return resp.status, resp.content_type, await resp.text()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The gate's warnings, as logged."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "agent_memory.web.auth" and r.levelname == "WARNING"
    ]


async def test_wrong_keys_are_limited_but_a_right_key_is_always_let_in(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    reader = await make_key(service, "read")
    for _ in range(FAILURES_ALLOWED + 5):  # no key at all is no guess
        assert (await service.api("GET", "/v1/stats", token=None))[0] == 401
    assert warnings_of(caplog) == []
    for _ in range(FAILURES_ALLOWED):
        assert (await service.api("GET", "/v1/stats", token="guess-1234"))[0] == 401
    for _ in range(5):  # the address's further wrong keys wait
        async with service.session.get(
            f"{service.url}/v1/stats", headers={"Authorization": "Bearer guess-1234"}
        ) as resp:
            message = assert_error(resp.status, await resp.json(), 429, "rate_limited")
            assert int(resp.headers["Retry-After"]) >= 1 and "too many wrong keys from 127.0.0.1" in message
    # The right keys are let in all the same: the admin token, a scoped key, the metrics scrape.
    assert (await service.api("GET", "/v1/stats"))[0] == 200
    assert (await service.api("GET", "/v1/users/u/characters/c/facts", token=reader))[0] == 200
    status, media, text = await get(service, "/metrics", TOKEN)
    assert (status, media) == (200, "text/plain") and "agent_memory_auth_refused" in text
    assert (await service.api("GET", "/v1/stats", token="guess-1234"))[0] == 429  # and the wrong still wait
    status, _ = await service.api("GET", "/healthz", token=None)
    assert status == 200  # only /v1 is behind the gate
    refused = service.server.app[AUTH_STATS].refused
    assert refused["wrong"] == FAILURES_ALLOWED and refused["limited"] == 6
    # One warning for the address, naming it and never the key sent.
    (warning,) = warnings_of(caplog)
    assert "127.0.0.1" in warning and f"{FAILURES_ALLOWED} wrong API keys" in warning
    assert "guess-1234" not in caplog.text and TOKEN not in caplog.text


async def test_metrics_refuses_in_plain_text(service: Service) -> None:
    """A scraper reads text: a refusal in JSON breaks its parser; a plain line is shown as the target's error."""
    reader = await make_key(service, "read")
    for key, status, code in (
        (None, 401, "unauthorized"),
        (reader, 403, "forbidden"),
        ("wrong", 401, "unauthorized"),
    ):
        answered, media, text = await get(service, "/metrics", key)
        assert (answered, media) == (status, "text/plain") and text.startswith(f"{code}: "), (key, text)
        assert not text.lstrip().startswith("{")
    for _ in range(FAILURES_ALLOWED):
        await get(service, "/metrics", "wrong")
    answered, media, text = await get(service, "/metrics", "wrong")
    assert (answered, media) == (429, "text/plain") and text.startswith("rate_limited: too many wrong keys")
    assert (await get(service, "/metrics", TOKEN))[:2] == (200, "text/plain")


async def test_x_forwarded_for_names_the_client_only_from_a_trusted_proxy(
    start_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Not a trusted proxy (the default): the header is anyone's to write, and changes nothing.
    direct = await start_service()
    for number in range(FAILURES_ALLOWED):
        assert (await get(direct, "/v1/stats", "wrong", forwarded=f"198.51.100.{number}"))[0] == 401
    assert (await get(direct, "/v1/stats", "wrong", forwarded="198.51.100.99"))[0] == 429
    assert [w for w in warnings_of(caplog) if "127.0.0.1" in w] and "198.51.100" not in caplog.text
    caplog.clear()

    # Behind trusted proxies (the test client's 127.0.0.1 and a 10/8 hop), the right-most address
    # that is not one of them is the client's; what a client wrote left of it is not believed.
    proxied = await start_service(trusted_proxies="127.0.0.1, 10.0.0.0/8")
    for number in range(FAILURES_ALLOWED):
        spoofed = f"192.0.2.{number}, 203.0.113.7, 10.1.2.3"
        assert (await get(proxied, "/v1/stats", "wrong", forwarded=spoofed))[0] == 401
    assert (await get(proxied, "/v1/stats", "wrong", forwarded="203.0.113.7"))[0] == 429
    assert (await get(proxied, "/v1/stats", TOKEN, forwarded="203.0.113.7"))[0] == 200
    assert (await get(proxied, "/v1/stats", "wrong", forwarded="203.0.113.8"))[0] == 401  # another client
    assert (await get(proxied, "/v1/stats", "wrong"))[0] == 401  # the proxy itself, as a client
    (warning,) = warnings_of(caplog)
    assert "203.0.113.7" in warning and "192.0.2." not in caplog.text


def test_trusted_proxies_are_read_from_the_environment_and_a_bad_one_is_named() -> None:
    read = Settings.from_env({"AGENT_MEMORY_TRUSTED_PROXIES": "10.0.0.1, 172.16.0.0/12,::1"})
    assert [str(network) for network in read.trusted_proxies] == ["10.0.0.1/32", "172.16.0.0/12", "::1/128"]
    assert Settings.from_env({}).trusted_proxies == ()
    with pytest.raises(InvalidField) as refused:
        Settings.from_env({"AGENT_MEMORY_TRUSTED_PROXIES": "10.0.0.1,proxy.local"})
    assert (
        "AGENT_MEMORY_TRUSTED_PROXIES" in refused.value.message and "'proxy.local'" in refused.value.message
    )


def test_the_limiter_forgets_an_address_after_its_window_and_keeps_few() -> None:
    now = [1000.0]
    limiter = FailureLimiter(3, 60.0, kept=2, clock=lambda: now[0])
    for count in range(3):
        assert limiter.wait_s("10.0.0.1") == 0
        now[0] += 1.0
        assert limiter.failed("10.0.0.1") == (count == 2)  # reported once, when it becomes limited
    assert limiter.wait_s("10.0.0.1") == 60.0  # a whole window from the failure that limited it
    assert limiter.wait_s("10.0.0.2") == 0  # others are heard
    now[0] += 59.0
    assert limiter.wait_s("10.0.0.1") == 1.0
    now[0] += 1.0
    assert limiter.wait_s("10.0.0.1") == 0  # the window is over
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        for _ in range(3):
            limiter.failed(address)
    assert limiter.wait_s("10.0.0.1") == 0  # dropped: only the 2 newest addresses are kept
    assert limiter.wait_s("10.0.0.3") > 0


# -- refusing to serve an open API ----------------------------------------------------------
def test_an_open_api_is_refused_off_loopback_allowed_when_asked_and_warned_of_on_loopback() -> None:
    with pytest.raises(NotConfigured) as refused:
        open_api_warning(Settings(host="0.0.0.0"))
    assert "AGENT_MEMORY_API_TOKEN" in refused.value.message and "--allow-open-api" in refused.value.message
    allowed = Settings.from_env({"AGENT_MEMORY_ALLOW_OPEN_API": "1"}, host="0.0.0.0")
    assert "answers anyone who can reach 0.0.0.0" in (open_api_warning(allowed) or "")
    for host in ("127.0.0.1", "::1", "localhost"):
        assert "AGENT_MEMORY_API_TOKEN is not set" in (open_api_warning(Settings(host=host)) or "")
    assert open_api_warning(Settings(host="0.0.0.0", api_token="t")) is None


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`python -m agent_memory serve ARGS` with none of this machine's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_MEMORY_", "AGORA_", "OPENAI_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "agent_memory", "serve", "--db", str(tmp_path / "m.db"), *args],
        env={**env, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_serve_refuses_an_open_api_on_every_address_before_touching_the_database(tmp_path: Path) -> None:
    proc = serve(tmp_path, "--host", "0.0.0.0", "--port", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert "refusing to serve the /v1 API on 0.0.0.0" in err and "Set AGENT_MEMORY_API_TOKEN" in err
    assert not (tmp_path / "m.db").exists()


@pytest.mark.slow
@pytest.mark.sqlite_only
async def test_serve_with_allow_open_api_answers_without_a_key_and_warns(tmp_path: Path) -> None:
    port = free_port()
    proc = serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), "--allow-open-api")
    try:
        async with aiohttp.ClientSession() as session:

            async def answers() -> Any:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/v1/keys") as resp:
                        return resp.status == 200 and await resp.json()
                except aiohttp.ClientConnectionError:
                    return False

            assert (await wait_for(answers, 60))["api_keys"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "--allow-open-api is given" in err and "anyone who can reach 0.0.0.0" in err
