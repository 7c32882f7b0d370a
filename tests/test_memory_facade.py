"""`Memory` stays a thin facade over its capabilities, and nothing reaches through it.

What a route, a command or a platform needs besides memory (settings, metrics, the job runner,
the store) is handed to it (app keys in web/keys.py, constructor arguments), never read off
`Memory`: so `Memory` holds none of them, and no code outside memory/ asks it for one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import open_store

PACKAGE = Path(__file__).resolve().parent.parent / "agent_memory"
COLLABORATORS = {"settings", "metrics", "jobs", "store", "retention", "embedder"}
CAPABILITIES = {"reading", "facts", "identity", "follows", "keys", "queue", "console", "admin"}
EVENTS_IN = {
    "accept_event",
    "reapply_event",
    "recorded_events",
    "merge_window",
    "merge_windows",
    "add_messages",
}
# What any reach through spells, whatever its spacing or line breaks: `memory` or `MEMORY]`, then a
# dot and a collaborator's name. A module that never spells it has none (parsing all takes a second).
SPELLED = re.compile(r"\b(?:memory|MEMORY\s*\])[\s)\\]*\.\s*(?:" + "|".join(COLLABORATORS) + r")\b")


def reaches_through(node: ast.AST) -> bool:
    """`memory.<collaborator>`, `<x>.memory.<collaborator>` or `<app>[MEMORY].<collaborator>`."""
    if not isinstance(node, ast.Attribute) or node.attr not in COLLABORATORS:
        return False
    owner = node.value
    if isinstance(owner, ast.Name):
        return owner.id == "memory"
    if isinstance(owner, ast.Attribute):
        return owner.attr == "memory"
    if isinstance(owner, ast.Subscript):
        return isinstance(owner.slice, ast.Name) and owner.slice.id == "MEMORY"
    return False


def test_no_code_outside_memory_reaches_through_memory_to_its_collaborators() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "memory" and path.parent.parent == PACKAGE:
            continue  # memory/ itself: its capabilities hold what they were given
        text = path.read_text(encoding="utf-8")
        if not SPELLED.search(text):
            continue
        tree = ast.parse(text)
        found += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(tree)
            if reaches_through(node)
        ]
    assert found == [], "pass these in (an app key, an argument) instead:\n" + "\n".join(found)


def test_the_text_filter_lets_through_every_reach_the_tree_finds() -> None:
    reaches = [
        "memory.settings",
        "self.memory.jobs",
        "request.app[MEMORY].store",
        "request.app[ MEMORY ] . metrics",
        "(memory\n    .retention)",
        "(service.memory.\n    embedder)",
        "memory \\\n    .settings",
    ]
    for code in reaches:
        assert any(reaches_through(node) for node in ast.walk(ast.parse(code))), code
        assert SPELLED.search(code), code
    assert not SPELLED.search("from agent_memory.settings import Settings\nmemory_settings = 1\n")


def test_memory_holds_its_capabilities_and_taking_events_in_and_nothing_else(tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "memory.db")
    store = open_store(settings)
    try:
        memory = Memory(settings, store)
        public = {name for name in dir(memory) if not name.startswith("_")}
        assert public == CAPABILITIES | EVENTS_IN | {"forget_listeners"}
        assert not COLLABORATORS & public
    finally:
        store.close()
