"""The condensing worker process: work runs outside the service's process, and a dead worker is replaced."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import fields, replace
from typing import Any

import pytest
from conftest import condense, said, seed, stored_message

from agent_memory.condense.base import CondenseInput, FactIn
from agent_memory.condense.worker import WORKERS, WorkerPool
from agent_memory.core.domain import Message
from agent_memory.core.textcache import held_texts
from agent_memory.errors import LLMError


@pytest.mark.slow
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


SERVICE = """
import asyncio, os, sys, time
from agent_memory.condense.worker import WORKERS
print(asyncio.run(WORKERS.run(os.getpid)), flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_the_worker_exits_when_its_service_is_killed():
    service = subprocess.Popen([sys.executable, "-c", SERVICE], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(service.stdout.readline())
        os.kill(service.pid, signal.SIGKILL)
        service.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(worker), "the worker outlived its killed service"
    finally:
        service.kill()
        service.wait(timeout=10)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
async def test_a_forget_empties_the_condensing_workers_text_caches(start_service: Any) -> None:
    # The offline condenser caches what it reads (token counts, salience, statements) in the
    # worker process: a forget must reach there too, not only the service's own caches.
    service = await start_service(summary_after_call_s=0)
    await seed(service, "u1", "luna", "a1", said("My tortoise Zanzibarino turned 50 yesterday.", "Wow."))
    await condense(service)
    assert await WORKERS.run(held_texts) > 0
    status, _ = await service.api("DELETE", "/v1/users/u1")
    assert status == 200
    assert await WORKERS.run(held_texts) == 0


def test_a_record_is_pickled_as_its_class_and_values() -> None:
    message = stored_message(1, "user", "I adopted a kitten called Miso.", at_ms=1_793_736_900_000)
    message = replace(message, extra_json='{"tool": 1}', interrupted=True)
    # Rebuilt by its own __init__: a slotted dataclass's state methods walk `fields()` per
    # record, which made sending a condense job to the worker a tenth of its cost.
    assert message.__reduce__() == (Message, tuple(getattr(message, f.name) for f in fields(message)))
    for copied in (pickle.loads(pickle.dumps(message)), copy.copy(message), copy.deepcopy(message)):
        assert copied == message and type(copied) is Message


@pytest.mark.slow
async def test_a_condense_job_comes_back_from_the_worker_as_it_was_sent() -> None:
    job = CondenseInput(
        user_id="u-1",
        character_id="luna",
        previous_summary="(offline summary)\n2026-11-03 20:15 UTC (1 exchange):\n- I have a cat.",
        facts=[FactIn(id=1, text="The user has a cat.")],
        messages=[
            stored_message(seq, role, text, at_ms=1_793_736_900_000 + seq)
            for seq, (role, text) in enumerate((("user", "My cat Miso is ill."), ("assistant", "Oh no.")))
        ],
    )
    pool = WorkerPool()
    try:
        assert await pool.run(copy.deepcopy, job) == job
    finally:
        pool.shutdown()
