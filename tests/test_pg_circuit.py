"""PostgreSQL's circuit: what it does when the service stops during an outage."""

from __future__ import annotations

import threading

import psycopg
import pytest

from agent_memory.errors import DatabaseDown, StoreUnavailable
from agent_memory.store import Store
from agent_memory.store.postgres import PostgresStore, engine


@pytest.fixture
def backend() -> str:
    return "postgres"


def test_stopping_while_the_probe_finds_postgres_back_does_not_hang(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(store, PostgresStore)
    probing = threading.Event()
    answers = store._answers

    def stopped_meanwhile() -> bool:
        probing.set()
        store._stop.wait(10)  # the service stops while this probe is under way; then it answers
        return answers()

    monkeypatch.setattr(store, "_answers", stopped_meanwhile)
    store._failure(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert probing.wait(10), "the circuit did not trip"
    closing = threading.Thread(target=store.close, daemon=True)
    closing.start()
    # The prober cleared the circuit's wake-up after close() had set it, and waited for ever.
    closing.join(30)
    assert not closing.is_alive(), "closing the store hung on the prober"


def test_a_pool_that_is_slow_to_hand_out_a_connection_is_not_an_outage(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "POOL_WAIT_S", 0.2)  # the wait this test sits out
    store = PostgresStore(db_path, pool_size=1, index=False)
    store.open()
    try:
        holding, release = threading.Event(), threading.Event()

        def hold(view: object) -> None:
            holding.set()
            release.wait(30)

        holder = threading.Thread(target=store.read_now, args=(hold,), daemon=True)
        holder.start()
        assert holding.wait(10)
        # The only reader connection is taken: this one waits out the pool, PostgreSQL answers.
        with pytest.raises(StoreUnavailable, match="no pooled connection was free") as raised:
            store.read_now(lambda view: None)
        assert not isinstance(raised.value, DatabaseDown)
        assert store._outage is None  # the circuit did not trip: other requests are served
        release.set()
        holder.join(10)
        assert store.read_now(lambda view: 1) == 1
    finally:
        release.set()
        store.close()
