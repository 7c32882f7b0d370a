"""The `agent-memory` command: serve, replay fixture callbacks, print memory, forget.

Each command is a row of the table in cli/commands.py. The reading commands are written once
over `MemoryApi` (cli/api.py): the same code asks the database here through `Memory` (the
use-cases the HTTP API calls) or, with --url, a running service through the client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agent_memory.cli.commands import build_parser
from agent_memory.cli.serve import serving_loop, tune_interpreter
from agent_memory.errors import AgentMemoryError

__all__ = ["build_parser", "main", "serving_loop", "tune_interpreter"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names; its exit status."""
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        # A pipe's stdout is block-buffered: what is still held is written here, where a
        # closed pipe is handled, not at exit, where Python reports it and exits with 120.
        sys.stdout.flush()
        return code
    except AgentMemoryError as exc:
        print(f"agent-memory: {exc.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped early (`agent-memory stats | head`): end quietly, as Unix tools
        # do, and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
