"""The reference tables of docs/, generated from the code by cog (never edited by hand).

`cog -r -I docs docs/*.md` rewrites them; `cog --check` (tests/test_docs.py, .ci/run) fails when
the code moved and the tables did not. Settings come from `agent_memory.settings` (each field's
docstring is its description), the HTTP API from the OpenAPI document the service serves.
"""

from __future__ import annotations

import typing
from pathlib import Path, PurePath
from typing import Any

import annotated_types
import cog  # type: ignore[import-not-found]

from agent_memory.settings import ENVIRONMENT, FLAGS, Settings
from agent_memory.web.app import create_app
from agent_memory.web.declare import declared_routes
from agent_memory.web.openapi import document


def cell(text: str) -> str:
    """One line of a Markdown table cell: newlines folded, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def default_of(value: Any) -> str:
    """A default as a reader would type it."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, PurePath):
        return f"`{value if value.is_absolute() else './' + str(value)}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def values_of(annotation: Any, metadata: list[Any]) -> str:
    """What a setting accepts: its choices, or its kind and bounds."""
    if typing.get_origin(annotation) is typing.Literal:
        return ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    kinds = {bool: "`1` / `0`", int: "integer", float: "number", str: "text", Path: "path or URL"}
    bare = [arg for arg in typing.get_args(annotation) if arg is not type(None)] or [annotation]
    kind = kinds.get(bare[0], "list" if typing.get_origin(bare[0]) is tuple else "text")
    bounds = []
    for rule in metadata:
        if isinstance(rule, annotated_types.Gt):
            bounds.append(f"> {rule.gt}")
        elif isinstance(rule, annotated_types.Ge):
            bounds.append(f"≥ {rule.ge}")
        elif isinstance(rule, annotated_types.Lt):
            bounds.append(f"< {rule.lt}")
        elif isinstance(rule, annotated_types.Le):
            bounds.append(f"≤ {rule.le}")
    return " ".join([kind, ", ".join(bounds)]).strip()


def settings_rows() -> list[str]:
    """The settings table: one row per environment variable, in settings.py's order."""
    rows = ["| variable | `serve` flag | default | values | what |", "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        if name not in ENVIRONMENT:
            continue
        flag = f"`{FLAGS[name]}`" if name in FLAGS else ""
        rows.append(
            f"| `{ENVIRONMENT[name]}` | {flag} | {default_of(field.default)} "
            f"| {cell(values_of(field.annotation, field.metadata))} | {cell(field.description or '')} |"
        )
    return rows


def who(operation: dict[str, Any]) -> str:
    """Who may call an operation: a key's scope, the LLM key, Agora's signature, or anyone."""
    security = operation.get("security") or []
    if not security:
        return "none"
    scheme, scopes = next(iter(security[0].items()))
    if scheme == "token":
        return f"`{scopes[0]}` key" if scopes else "API token"
    return {"llm": "LLM key", "signature": "signature"}.get(scheme, scheme)


def api_rows() -> list[str]:
    """The HTTP API table: one row per operation of /openapi.json, in its order."""
    rows = ["| method | path | needs | what | query | answers |", "|---|---|---|---|---|---|"]
    # The routes a service with every part switched on declares (its store is made, never opened).
    app = create_app(Settings(db_path=Path("never-opened.db"), api_token="docs", metrics=True))
    for path, operations in document(declared_routes(app))["paths"].items():
        for method, operation in operations.items():
            query = [
                f"`{param['name']}`" + ("" if param.get("required") else "?")
                for param in operation.get("parameters", [])
                if param["in"] == "query"
            ]
            statuses = ", ".join(sorted(operation["responses"]))
            rows.append(
                f"| {method.upper()} | `{path}` | {who(operation)} | {cell(operation['summary'])} "
                f"| {' '.join(query)} | {statuses} |"
            )
    return rows


def settings() -> None:
    """Write the settings table into the document cog is running over."""
    cog.outl("\n".join(settings_rows()))


def api() -> None:
    """Write the HTTP API table into the document cog is running over."""
    cog.outl("\n".join(api_rows()))
