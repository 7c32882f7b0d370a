"""`python -m agent_memory`: the `agent-memory` command."""

from agent_memory.cli import main

raise SystemExit(main())
