"""A live call's kept recalls: a forget racing a recall in flight leaves none of it reachable."""

from __future__ import annotations

from pathlib import Path

from agent_memory.core.recall import Recall
from agent_memory.memory.live_calls import ProxyStats
from agent_memory.memory.recall_reuse import RecallReuse
from agent_memory.settings import Settings
from agent_memory.store import ReadView, open_store


def test_a_forget_while_a_recall_is_read_keeps_nothing_of_that_recall(tmp_path: Path) -> None:
    store = open_store(Settings(db_path=tmp_path / "m.db"))
    reuse = RecallReuse(ProxyStats())
    answer = object()

    def fresh(_: ReadView) -> Recall:
        reuse.forget("u1", None)  # the user's forget lands while this recall reads
        return answer  # type: ignore[return-value]

    try:
        read = reuse.read("agora:run-1", "u1", "luna", "where did I go?", 500, fresh)
        assert store.read_now(read) is answer
    finally:
        store.close()
    assert reuse.watch("agora:run-1") is None  # nothing kept of the call
    assert not reuse._calls
