"""A platform's wire names stay in its own folder: the rest of the package speaks neutral events.

import-linter checks imports (the Agora payloads module is forbidden outside platforms/agora);
a wire name written out as a string or a field name escapes that check, so it is checked here on
the code itself: docstrings and comments may still name it (they explain what maps to what).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent_memory"
# The NCS envelope's own keys (AGORA.md §2): nothing outside platforms/agora reads or writes them.
AGORA_WIRE_NAMES = frozenset({"noticeId", "productId", "eventType", "notifyMs"})


def names_used(tree: ast.AST) -> set[str]:
    """The wire names a module uses in code: string values, field and variable names, keywords."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg is not None):
            found.add(node.arg)
    return found & AGORA_WIRE_NAMES


def leaks(package: Path) -> dict[str, set[str]]:
    """Each module outside platforms/ that uses an Agora wire name, with the names it uses."""
    found: dict[str, set[str]] = {}
    for module in sorted(package.rglob("*.py")):
        if package / "platforms" in module.parents:
            continue
        text = module.read_text(encoding="utf-8")
        if not any(name in text for name in AGORA_WIRE_NAMES):
            continue  # a module that never spells one has none in its code (parsing all takes a second)
        used = names_used(ast.parse(text))
        if used:
            found[str(module.relative_to(package.parent))] = used
    return found


def test_agora_wire_names_stay_inside_platforms() -> None:
    assert leaks(PACKAGE) == {}


def test_the_check_sees_a_wire_name_in_code_but_not_in_prose() -> None:
    code = 'def f(item):\n    """Reads Agora\'s noticeId."""\n    return item["noticeId"]  # noticeId\n'
    assert names_used(ast.parse(code)) == {"noticeId"}
    assert names_used(ast.parse('"""Agora\'s noticeId and eventType."""\n# productId\n')) == set()
