"""What SQLite writes its own way (the rest of each repository is store/shared/): one process
serves a database file, so it claims jobs, follows agents and holds leases alone; a new fact's
id; moving a session; a vector batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_memory.core.domain import Watch
from agent_memory.store.shared.facts import Facts
from agent_memory.store.shared.jobs import Jobs
from agent_memory.store.shared.sessions import MOVED_COLUMNS, Sessions
from agent_memory.store.shared.sql import Repository
from agent_memory.store.shared.vectors import Vectors
from agent_memory.store.shared.watches import Watches

# What a session's messages are moved by while their (unique per session) seq is rewritten;
# sequence numbers stay far below it (gaps leave 2**20 of room each).
MOVE_SEQ_SHIFT = 1 << 52
_COPIED = MOVED_COLUMNS.replace("seq, ", "")


class SQLiteFacts(Facts):
    """The `facts` table and its history, over a SQLite connection."""

    # An id no fact had before: an ended fact's history keeps its id (SQLite would hand the
    # newest one out again).
    new_id = "1 + max(coalesce((SELECT max(id) FROM facts), 0), coalesce((SELECT max(fact_id) FROM fact_history), 0))"


class SQLiteJobs(Jobs):
    """The `jobs` table. One process claims: a job left running was its own (see release_running)."""

    def _claimable(self, now_ms: int) -> tuple[str, list[Any]]:
        return "status = 'pending'", []

    def renew(self, job_id: int) -> bool:
        """One process holds every claim for as long as it lives: True while the job runs."""
        row = self.sql.one("SELECT status FROM jobs WHERE id = ?", (job_id,))
        return row is not None and row["status"] == "running"

    def release_running(self) -> int:
        """At start nothing runs: a job left 'running' by a crash is pending again."""
        return self.sql.run("UPDATE jobs SET status = 'pending' WHERE status = 'running'")


class SQLiteWatches(Watches):
    """The `watched_agents` table: one process polls and refreshes every followed agent."""

    def claim_polls(self, now_ms: int, limit: int) -> list[Watch]:
        return self.due_polls(now_ms, limit)

    def claim_pushes(self, now_ms: int, limit: int) -> list[Watch]:
        return self.due_pushes(now_ms, limit)

    def release_held(self) -> int:
        """Nothing is held: the next process to open the file polls every followed agent."""
        return 0


class SQLiteLeases(Repository):
    """Cluster-wide work needs no arbiter when the cluster is one process."""

    def acquire(self, name: str, ttl_ms: int) -> bool:
        """Always held: no other instance shares the file."""
        return True


class SQLiteSessions(Sessions):
    """The `sessions` table."""

    def _move_messages(self, agent_id: str, user_id: str, character_id: str) -> int:
        # Copies first (new ids above every other), shifted out of the originals' seq range
        # (seq is unique per session); then the originals go and the copies take their seq.
        moved = self.sql.run(
            f"INSERT INTO messages (user_id, character_id, seq, {_COPIED}) "
            f"SELECT ?, ?, seq + {MOVE_SEQ_SHIFT}, {_COPIED} FROM messages WHERE agent_id = ? ORDER BY id",
            (user_id, character_id, agent_id),
        )
        self.sql.run(f"DELETE FROM messages WHERE agent_id = ? AND seq < {MOVE_SEQ_SHIFT // 2}", (agent_id,))
        self.sql.run(f"UPDATE messages SET seq = seq - {MOVE_SEQ_SHIFT} WHERE agent_id = ?", (agent_id,))
        return moved


class SQLiteVectors(Vectors):
    """The `message_vectors` table (rows leave with their messages, by trigger: see m012)."""

    def _store(self, model: str, dims: int, vectors: Sequence[tuple[int, bytes]]) -> int:
        # One statement a vector; REPLACE gives a replaced vector a new id.
        return sum(
            self.sql.run(
                "INSERT OR REPLACE INTO message_vectors (message_id, user_id, character_id, model, dims, "
                "vector) SELECT id, user_id, character_id, ?, ?, ? FROM messages WHERE id = ?",
                (model, dims, vector, message_id),
            )
            for message_id, vector in vectors
        )
