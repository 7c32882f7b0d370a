"""The reference in docs/ is generated from the code: its tables must match the code as it is now."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from cogapp import Cog

from agent_memory.cli import main
from agent_memory.settings import ENVIRONMENT, FLAGS, Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_generated_tables_match_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    """`cog --check` over docs/ (as datasette and llm do): a setting or route changed without
    `cog -r -I docs docs/*.md` fails here, naming the file."""
    pages = sorted(str(page) for page in DOCS.glob("*.md"))
    status = Cog().main(["cog", "--check", "-I", str(DOCS), *pages])
    assert status == 0, capsys.readouterr().out + "\nregenerate: .venv/bin/cog -r -I docs docs/*.md"
    sys.modules.pop("tables", None)


def test_every_setting_has_a_description_for_the_table() -> None:
    undescribed = [name for name in ENVIRONMENT if not Settings.model_fields[name].description]
    assert undescribed == [], "give each a docstring below its field in agent_memory/settings.py"


def test_the_flags_the_table_names_are_serve_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    usage = capsys.readouterr().out
    assert [flag for flag in FLAGS.values() if flag not in usage] == []
    assert set(FLAGS) <= set(ENVIRONMENT)


def test_the_readme_stays_a_readme() -> None:
    """The reference lives in docs/; the README keeps what it is, the two commands, a tour, links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    linked = {target for target, _anchor in links(readme)}
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked
    assert "webhooks/" in linked


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2, "the README gives exactly two commands: serve, and the whole suite"
    assert "'.[test]'" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_default_run_is_the_fast_tier_and_the_readmes_command_runs_all() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"][
        "ini_options"
    ]
    assert "-m 'not slow and not second_backend'" in options["addopts"]
    assert {marker.split(":")[0] for marker in options["markers"]} >= {"slow", "second_backend"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert next(line for line in readme.splitlines() if "'.[test]'" in line).endswith("pytest -m ''")


def links(text: str) -> list[tuple[str, str]]:
    """The relative links of a Markdown text, as (path, anchor)."""
    found = re.findall(r"\]\((?!https?:)([^)\s]*)\)", text)
    return [(target.partition("#")[0], target.partition("#")[2]) for target in found]


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a Markdown text's headings."""
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", ["README.md", "docs/*.md", "webhooks/*.md"])
def test_links_between_the_pages_lead_somewhere(page: str) -> None:
    for source in sorted(ROOT.glob(page)):
        text = source.read_text(encoding="utf-8")
        for target, anchor in links(text):
            where = (source.parent / target).resolve() if target else source
            assert where.exists(), f"{source.name} links {target}, which is not there"
            if anchor:
                assert anchor in anchors(where.read_text(encoding="utf-8")), (
                    f"{source.name}: {target}#{anchor}"
                )
