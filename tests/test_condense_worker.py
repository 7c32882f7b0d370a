"""The condensing worker process: work runs outside the service's process, and a dead worker is replaced."""

from __future__ import annotations

import os

import pytest

from agent_memory.condense.worker import WorkerPool
from agent_memory.errors import LLMError


async def test_work_runs_in_another_process_at_a_lower_priority_and_a_dead_worker_is_replaced():
    pool = WorkerPool()
    try:
        worker = await pool.run(os.getpid)
        assert worker != os.getpid()
        assert await pool.run(os.nice, 0) >= os.nice(0) + 1  # condensing yields to answering
        with pytest.raises(LLMError, match="worker process died"):
            await pool.run(os._exit, 1)
        replacement = await pool.run(os.getpid)
        assert replacement not in (worker, os.getpid())
    finally:
        pool.shutdown()
