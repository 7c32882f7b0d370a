"""What the image is built from and what it leaves on disk: the lock file held to pyproject.toml,
the Dockerfile's user and volume, and a new SQLite database readable by its owner alone."""

from __future__ import annotations

import re
import stat
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from agent_memory.settings import Settings
from agent_memory.store import open_store

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
# How pip-compile marks what pyproject.toml itself asks for, and its build backend.
FROM_PROJECT = "agent-memory (pyproject.toml)"
FROM_BUILD = "agent-memory (pyproject.toml::build-system.requires)"
REGENERATE = "regenerate requirements.lock with the command in its header"


def locked() -> dict[str, tuple[str, set[str], int]]:
    """The lock's pins: canonical name -> (version, what asked for it, how many hashes)."""
    pins: dict[str, tuple[str, set[str], int]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", line)
        if pin:
            name = canonicalize_name(pin.group(1))
            pins[name] = (pin.group(2), set(), 0)
        elif name and (hashed := re.match(r"^\s+--hash=sha256:[0-9a-f]{64}", line)):
            version, via, hashes = pins[name]
            pins[name] = (version, via, hashes + bool(hashed))
        elif name and (via := re.match(r"^\s+#\s+(?:via\s+)?(\S.*)$", line)):
            pins[name][1].add(via.group(1).strip())
    return pins


def test_the_lock_pins_exactly_what_pyproject_asks_for_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = locked()
    for asked_by, requirements in (
        (FROM_PROJECT, project["project"]["dependencies"]),
        (FROM_BUILD, project["build-system"]["requires"]),
    ):
        wanted = {canonicalize_name(Requirement(text).name): Requirement(text) for text in requirements}
        pinned_for = {name for name, (_, via, _) in pins.items() if asked_by in via}
        assert pinned_for == set(wanted), (
            f"{asked_by}: missing from the lock {sorted(set(wanted) - pinned_for)}, "
            f"in the lock but no longer asked for {sorted(pinned_for - set(wanted))}: {REGENERATE}"
        )
        for name, requirement in wanted.items():
            version = pins[name][0]
            assert requirement.specifier.contains(version, prereleases=True), (
                f"the lock pins {name}=={version}, outside {requirement}: {REGENERATE}"
            )
    unhashed = sorted(name for name, (_, _, hashes) in pins.items() if not hashes)
    assert not unhashed, f"pins without a hash: {unhashed}"
    assert len(pins) > 20  # the whole tree, not only what pyproject names


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continued lines joined, comments dropped)."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    )
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_the_image_runs_as_a_numeric_user_with_a_volume_installing_the_lock() -> None:
    steps = instructions((ROOT / "Dockerfile").read_text())
    known = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "VOLUME", "EXPOSE", "HEALTHCHECK", "CMD"}
    assert {keyword for keyword, _ in steps} <= known, steps
    (user,) = [rest for keyword, rest in steps if keyword == "USER"]
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), f"USER {user}: runAsNonRoot needs a numeric uid"
    (volume,) = [rest for keyword, rest in steps if keyword == "VOLUME"]
    db = next(rest for keyword, rest in steps if keyword == "ENV" and "AGENT_MEMORY_DB=" in rest)
    assert '"/data"' in volume and "AGENT_MEMORY_DB=/data/" in db
    runs = [rest for keyword, rest in steps if keyword == "RUN"]
    assert any("--require-hashes" in run and "-r requirements.lock" in run for run in runs), runs
    assert all("pip install" not in run or "--no-deps" in run for run in runs), runs  # nothing unpinned


def test_a_new_sqlite_database_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "made" / "memory.db"
    store = open_store(Settings(db_path=path))
    try:
        store.read_now(lambda view: view.jobs.counts())
        modes = {
            part.name: stat.S_IMODE(part.stat().st_mode)
            for part in (path, path.with_name("memory.db-wal"), path.with_name("memory.db-shm"))
        }
    finally:
        store.close()
    assert modes == {"memory.db": 0o600, "memory.db-wal": 0o600, "memory.db-shm": 0o600}, modes
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
