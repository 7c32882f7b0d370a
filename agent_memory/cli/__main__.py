"""`python -m agent_memory.cli`: the `agent-memory` command."""

from agent_memory.cli import main

raise SystemExit(main())
