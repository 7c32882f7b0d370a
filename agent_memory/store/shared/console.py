"""What the operator console reads and keeps: its sign-ins, the list of users, a pair's calls,
the agents followed now, and callbacks per day."""

from __future__ import annotations

from agent_memory.core.clock import DAY_MS
from agent_memory.core.domain import ConsoleSession, RunningCall, Session, UserEntry, UserPage, Watch
from agent_memory.store.shared.messages import SPOKEN
from agent_memory.store.shared.search import like_pattern
from agent_memory.store.shared.sessions import SESSION_COLUMNS, session_of
from agent_memory.store.shared.sql import Repository, pair_scope
from agent_memory.store.shared.watches import QUALIFIED

CONSOLE_COLUMNS = "token_hash, key_hash, created_ms, expires_ms"


class ConsoleSessions(Repository):
    """The `console_sessions` table."""

    def get(self, token_hash: str, now_ms: int) -> ConsoleSession | None:
        """The live session of this token hash (None once it expired)."""
        return self.sql.record(
            ConsoleSession,
            f"SELECT {CONSOLE_COLUMNS} FROM console_sessions WHERE token_hash = ? AND expires_ms > ?",
            (token_hash, now_ms),
        )

    def open(self, session: ConsoleSession) -> None:
        """Keep a new sign-in, dropping the expired ones (they would never be read again)."""
        self.sql.run("DELETE FROM console_sessions WHERE expires_ms <= ?", (session.created_ms,))
        self.sql.run(
            f"INSERT INTO console_sessions ({CONSOLE_COLUMNS}) VALUES (?, ?, ?, ?)",
            (session.token_hash, session.key_hash, session.created_ms, session.expires_ms),
        )

    def end(self, token_hash: str) -> bool:
        """Sign out: the session goes; False if there was none."""
        return self.sql.run("DELETE FROM console_sessions WHERE token_hash = ?", (token_hash,)) > 0

    def end_for_key(self, key_hash: str) -> int:
        """End every session opened with a key (it was revoked); how many ended."""
        return self.sql.run("DELETE FROM console_sessions WHERE key_hash = ?", (key_hash,))


# A pair appears in the list by a call or by a fact said about it (a user-wide fact names no
# character); its last sign of life is its newest call's or fact's.
_PAIRS = (
    "SELECT user_id, character_id, 1 AS calls, "
    "coalesce(updated_ms, stop_ms, start_ms, first_seen_ms) AS seen FROM sessions "
    "UNION ALL SELECT user_id, character_id, 0 AS calls, updated_ms AS seen FROM facts"
)


class ConsoleReads(Repository):
    """Reads across users the console lists (no other route needs them)."""

    def users(self, q: str | None, after: str | None, limit: int) -> UserPage:
        """Users whose id contains `q` (any case), in id order after `after`, at most `limit`."""
        c = self.sql.binary
        where, params = [], []
        if q:
            where.append("lower(user_id) LIKE ? ESCAPE '\\'")
            params.append(like_pattern(q.lower()))
        if after is not None:
            where.append(f"user_id{c} > ?")
            params.append(after)
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        # Each table's first ids on its own (an index on user_id leads both, so without `q` each
        # read stops after a page), then the page of the two together.
        first = f"SELECT DISTINCT user_id{c} AS uid FROM {{}} {condition} ORDER BY uid LIMIT ?"
        ids = [
            row["uid"]
            for row in self.sql.all(
                f"SELECT uid FROM (SELECT uid FROM ({first.format('sessions')}) s "
                f"UNION SELECT uid FROM ({first.format('facts')}) f) u ORDER BY uid LIMIT ?",
                (*params, limit + 1, *params, limit + 1, limit + 1),
            )
        ]
        more = len(ids) > limit
        ids = ids[:limit]
        return UserPage(self._entries(ids), ids[-1] if more and ids else None)

    def user(self, user_id: str) -> UserEntry | None:
        """One user as the list shows it; None when nothing is held about it."""
        entries = self._entries([user_id])
        return entries[0] if entries else None

    def _entries(self, ids: list[str]) -> list[UserEntry]:
        """The users of `ids` (those with a call or a fact), in that order."""
        if not ids:
            return []
        among, values = self.sql.among("user_id", ids)
        rows = self.sql.all(
            f"SELECT user_id, character_id, sum(calls) AS calls, max(seen) AS seen FROM ({_PAIRS}) p "
            f"WHERE {among} GROUP BY user_id, character_id",
            values,
        )
        by_user: dict[str, tuple[set[str], int, int | None]] = {}
        for row in rows:
            characters, calls, seen = by_user.setdefault(row["user_id"], (set(), 0, None))
            if row["character_id"]:  # a user-wide fact names none ('' or NULL)
                characters.add(row["character_id"])
            newest = seen if row["seen"] is None else max(seen or 0, row["seen"])
            by_user[row["user_id"]] = (characters, calls + int(row["calls"] or 0), newest)
        return [
            UserEntry(user, sorted(by_user[user][0]), *by_user[user][1:]) for user in ids if user in by_user
        ]

    def calls(self, user_id: str, character_id: str, limit: int) -> list[Session]:
        """The pair's calls, newest first, at most `limit`."""
        return self.sql.records(
            session_of,
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE user_id = ? AND character_id = ? "
            f"ORDER BY coalesce(start_ms, first_seen_ms) DESC, agent_id{self.sql.binary} DESC LIMIT ?",
            (user_id, character_id, limit),
        )

    def running(self, limit: int) -> list[RunningCall]:
        """Agents followed now, the most recently followed first, with their sessions."""
        watches = self.sql.records(
            Watch,
            f"SELECT {QUALIFIED} FROM watched_agents w WHERE w.status = 'watching' "
            f"ORDER BY w.created_ms DESC, w.agent_id{self.sql.binary} LIMIT ?",
            (limit,),
        )
        if not watches:
            return []
        among, values = self.sql.among("agent_id", [watch.agent_id for watch in watches])
        sessions = {
            session.agent_id: session
            for session in self.sql.records(
                session_of, f"SELECT {SESSION_COLUMNS} FROM sessions WHERE {among}", values
            )
        }
        return [RunningCall(watch, sessions.get(watch.agent_id)) for watch in watches]

    def callbacks_per_day(self, since_ms: int) -> dict[int, int]:
        """Platform callbacks received per UTC day (the day's first ms) since `since_ms`, as retained."""
        rows = self.sql.all(
            "SELECT received_ms / ? AS day, count(*) AS n FROM inbox WHERE received_ms >= ? GROUP BY day",
            (DAY_MS, since_ms),
        )
        return {int(row["day"]) * DAY_MS: int(row["n"]) for row in rows}

    def holdings(self, user_id: str, character_id: str | None) -> dict[str, int]:
        """How many calls, messages, facts and summaries a user (or one pair) has: what a forget takes."""
        pair, params = pair_scope(user_id, character_id)
        held = {
            table: self.sql.count(f"SELECT count(*) FROM {table} WHERE {pair}", params)
            for table in ("sessions", "messages", "facts", "summaries")
        }
        # The forget's receipt counts these among its messages, and so does this.
        held["shared_call_turns"] = self._turns_as_guest(user_id, character_id)
        held["messages"] += held["shared_call_turns"]
        return held

    def _turns_as_guest(self, user_id: str, character_id: str | None) -> int:
        """The turns a user (or pair) said as a guest of others' shared calls (which a forget takes),
        found through their own sessions `<call>~<uid>`."""
        guest, params = pair_scope(user_id, character_id, "s.")
        host = pair_scope(user_id, character_id, "r.")[0]
        return self.sql.count(
            "SELECT count(*) FROM sessions s "
            "JOIN sessions r ON r.agent_id = substr(s.agent_id, 1, length(s.agent_id) - length(s.rtc_uid) - 1) "
            "JOIN messages m ON m.agent_id = r.agent_id AND m.speaker = s.rtc_uid "
            f"WHERE {guest} AND s.agent_id = r.agent_id || '~' || s.rtc_uid "
            f"AND m.role = 'user' AND m.{SPOKEN} AND NOT ({host})",
            (*params, *params),
        )
