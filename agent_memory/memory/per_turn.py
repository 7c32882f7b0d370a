"""Memory for each turn of a live call, whatever platform asks: recall within a deadline,
recording the turns as they come, and the reply held until the platform's own copy of it.

A platform's custom-LLM endpoint names the pair and the session (its call) and hands over the
request's conversation; this recalls for the latest user turn (past the deadline the turn goes
on without memory), merges the conversation into the call's session exactly as a transcript
window is merged (so webhooks, polls and this never double a turn), and holds the reply until
the call's next request (which carries it as the platform heard it: cut short by an
interruption, or whole) or, failing one, `AGENT_MEMORY_LLM_REPLY_SETTLE_S`: stored at once, a
reply the user then interrupted would disagree with the platform's copy and double the turn.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_memory.core.clock import now_ms
from agent_memory.core.events import RELAYED, HistoryWindow, IncomingMessage, KnownEnd, Outcome
from agent_memory.core.recall import HEADING, Recall, RecalledMemory
from agent_memory.core.recall_fit import context_line, memory_line
from agent_memory.core.textcache import text_cache
from agent_memory.errors import StoreUnavailable
from agent_memory.logs import pair_ref
from agent_memory.memory.live_calls import BRIEF_PAIRS_HELD, BriefPairs, HeldReplies, ProxyStats
from agent_memory.memory.reading import Reuse
from agent_memory.memory.recall_reuse import RecallReuse
from agent_memory.memory.service import Memory
from agent_memory.settings import Settings
from agent_memory.store import NotBrief

log = logging.getLogger(__name__)

# A user turn this short ("yes", "what was it?") is asked about with the turn before it.
SHORT_TURN_WORDS = 5
# Recall misses are logged at most this often (each is counted): an overloaded service would
# otherwise spend its time writing one line per call.
MISS_LOG_EVERY_S = 10.0
_SPACES = re.compile(r"\s+")


@text_cache(4096)  # a call's messages come again in each of its requests, memories too
def normal(text: str) -> str:
    """Text as compared for "already said": spaces folded, case folded."""
    return _SPACES.sub(" ", text).strip().casefold()


def text_of(content: Any) -> str:
    """A chat message's content as text (its text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text") or "") for part in content if isinstance(part, Mapping))
    return ""


def recall_query(messages: Sequence[Any]) -> str:
    """The latest user turn, with the user turn before it when the latest is short."""
    said: list[str] = []  # the last two, newest first (a call's window holds dozens)
    for m in reversed(messages):
        if isinstance(m, Mapping) and m.get("role") == "user" and (text := text_of(m.get("content")).strip()):
            said.append(text)
            if len(said) == 2 or len(text.split()) >= SHORT_TURN_WORDS:
                break
    if not said:
        return ""
    if len(said) > 1:
        return f"{said[1]}\n{said[0]}"
    return said[0]


def memory_message(memories: Sequence[RecalledMemory], already: str) -> tuple[str, int]:
    """The recalled memories as one system message, without those the request already holds
    (recall leaves out the call's own turns)."""
    kept = [memory for memory in memories if normal(memory.text) not in already]
    if not kept:
        return "", 0
    lines = [HEADING]
    for memory in kept:
        lines.append(memory_line(memory))
        lines.extend(context_line(turn) for turn in memory.context)
    return "\n".join(lines), len(kept)


def with_memory(messages: list[dict[str, Any]], memory: str) -> list[dict[str, Any]]:
    """The messages with `memory` as a system message before the conversation (after the agent's own)."""
    if not memory:
        return messages
    at = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    return [*messages[:at], {"role": "system", "content": memory}, *messages[at:]]


@dataclass(slots=True)
class Turn:
    """One request of a live call, as its platform's endpoint read it."""

    # None: an unidentified call (nothing recalled; its turns recorded unlabelled).
    user_id: str | None
    character_id: str
    # The session its turns are recorded into (the platform's call); None: not recorded.
    session: str | None
    # What tells the call's requests apart from other calls' (the session, or the key it came
    # with); None: this request cannot be told from the call's others.
    run: str | None
    # The request's conversation as sent (what is asked is read from it).
    messages: Sequence[Any]
    # The request's turns as recorded into the session (None: not recorded, or not yet).
    window: HistoryWindow | None = None
    # Whether this asks the first recall of its call that this instance sees.
    first: bool = False
    # The call's last request (None: none kept) and, for each message, the index of the equal
    # message in it (None: new): what was read of those is not read again.
    before: LastRequest | None = None
    reused: list[int | None] | None = None
    # What the platform's rendering read of each message, kept for the call's next request.
    reads: list[Any] | None = None

    @property
    def pair(self) -> tuple[str, str]:
        return self.user_id or "", self.character_id


# A message of a request as its platform reads it: a transcript item (or several: the words an
# assistant message says, then its tool calls), a note on why it could not be read (it is set
# aside), or None (not conversation: the agent's system prompt).
Item = IncomingMessage | tuple[IncomingMessage, ...] | str | None


@dataclass(slots=True)
class LastRequest:
    """What is kept of a live call's last request."""

    messages: Sequence[Any]  # as sent
    items: list[Item]  # as read
    labels: Mapping[str, str]
    # The transcript items of the call's last window merged (None: none yet, or it failed).
    stored: Sequence[IncomingMessage] | None = None
    # What the platform's rendering read of each message (None: nothing kept).
    reads: list[Any] | None = None
    # The session's message and gap counts as that merge left them (None: not told).
    counts: tuple[int, int] | None = None


def _message_key(message: Any) -> int | None:
    """A hash that equal messages share (None: a message not worth looking up)."""
    if not isinstance(message, dict):
        return None
    try:
        return hash((message.get("role"), message.get("content"), message.get("timestamp")))
    except TypeError:  # content parts (a list): compared in place only
        return None


def reused(messages: Sequence[Any], before: Sequence[Any]) -> list[int | None]:
    """For each message, the index of an equal message of `before` (each used once), else None.

    A call's requests repeat its conversation, but once the platform's window is full it
    slides: the message at an index is not the one there last time. Equal messages are found
    wherever they are, by a hash, and compared whole.
    """
    at: dict[int, list[int]] = {}
    for index, message in enumerate(before):
        key = _message_key(message)
        if key is not None:
            at.setdefault(key, []).append(index)
    out: list[int | None] = []
    for position, message in enumerate(messages):
        found = None
        key = _message_key(message)
        if key is None:
            # Not hashable: still the same message when it is where it was.
            if position < len(before) and isinstance(message, dict) and message == before[position]:
                found = position
        else:
            candidates = at.get(key, [])
            for index, candidate in enumerate(candidates):
                if before[candidate] == message:
                    found = candidates.pop(index)
                    break
        out.append(found)
    return out


class Windows:
    """Each live call's last request as sent and as read.

    Every request of a call carries the whole conversation so far; read anew, a 32-message
    window cost about 1 ms of the event loop (Agora's, bench/llm_proxy.py). The messages a
    request repeats unchanged from the call's last one are taken as read then; only the rest is
    read; a window that adds nothing to the one last stored is not merged again, and of one that
    starts with its end only what follows is (`KnownEnd`: the writer checks the session is still
    as that merge left it, else merges the whole window). Kept until the call goes quiet (its
    reply settles), a forget of its pair, or `held` calls.
    """

    def __init__(self, stats: ProxyStats, held: int = BRIEF_PAIRS_HELD) -> None:
        self.stats = stats
        self.held = held
        self._last: dict[str, LastRequest] = {}

    def compare(self, turn: Turn, labels: Mapping[str, str]) -> None:
        """Find which of the turn's messages its call's last request held (`Turn.reused`)."""
        if turn.session is None:
            return
        last = self._last.get(turn.session)
        if last is None or last.labels != labels:
            return
        turn.before = last
        turn.reused = reused(turn.messages, last.messages)

    def read(self, turn: Turn, item: Callable[[Any], Item], labels: Mapping[str, str]) -> list[Item]:
        """Each message read, those the call's last request held not again."""
        assert turn.session is not None
        session, messages = turn.session, turn.messages
        if turn.reused is None:
            self.compare(turn, labels)
        last, found = turn.before, turn.reused
        if last is None or found is None or last.labels != labels:
            last, found = None, [None] * len(messages)
        kept = last.items if last is not None else []
        items = [
            item(message) if index is None else kept[index]
            for message, index in zip(messages, found, strict=True)
        ]
        self.stats.messages_read += sum(index is None for index in found)
        # What was stored holds only while the call is still kept (a forget drops it meanwhile).
        still = last if last is not None and self._last.get(session) is last else None
        stored = still.stored if still is not None else None
        counts = still.counts if still is not None else None
        if session not in self._last and len(self._last) >= self.held:
            self._last.clear()
        self._last[session] = LastRequest(messages, items, labels, stored, turn.reads, counts)
        return items

    def repeated(
        self, session: str, said: Sequence[IncomingMessage]
    ) -> tuple[int | None, tuple[int, int] | None]:
        """How many of `said`'s first items end the window last stored for the call, item for
        item (None: it does not start so, or nothing is stored; all of them: nothing new), and
        the session's counts as that window's merge left them.

        A call's window slides: its start falls away as the conversation grows, and what it
        adds comes at its end.
        """
        last = self._last.get(session)
        if last is None or last.stored is None:
            return None, None
        stored = last.stored
        if not said or not stored:
            return (0 if not said and not stored else None), last.counts
        first = said[0]
        start = next((index for index, item in enumerate(stored) if item is first), None)
        if start is None:
            return None, None
        count = len(stored) - start
        if count > len(said) or any(a is not b for a, b in zip(stored[start:], said, strict=False)):
            return None, None
        return count, last.counts

    def stored(self, session: str, said: Sequence[IncomingMessage], counts: tuple[int, int] | None) -> None:
        """The call's window `said` was merged, leaving its session at `counts`."""
        last = self._last.get(session)
        if last is not None:
            last.stored, last.counts = said, counts

    def drop(self, session: str) -> None:
        self._last.pop(session, None)

    def forget(self, labels: Mapping[str, str]) -> None:
        """A forget: drop what is kept of the calls of the pair (or user) whose `labels` it names."""
        for session, last in list(self._last.items()):
            if all(last.labels.get(key) == value for key, value in labels.items()):
                del self._last[session]


class PerTurn:
    """Per-turn memory for every custom-LLM endpoint of one service."""

    def __init__(self, memory: Memory, settings: Settings, stats: ProxyStats | None = None) -> None:
        self.memory = memory
        self.settings = settings
        self.stats = stats or ProxyStats()
        self.windows = Windows(self.stats)
        self.recalls = RecallReuse(self.stats)
        self.replies = HeldReplies(memory, self.stats, settings.llm_reply_settle_s, self._quiet)
        self.brief = BriefPairs(settings.recall_brief_ms)
        self.labels = (settings.label_user_key, settings.label_character_key)
        self._miss_logged_at = float("-inf")
        self._unlogged_misses = 0
        # Calls (or per-agent keys) seen: a call's first request starts warming its pair.
        self._runs: set[str] = set()
        memory.forget_listeners.append(self._forgotten)

    def _forgotten(self, user_id: str, character_id: str | None) -> None:
        """Held replies of a forgotten user (or pair) are dropped (any recorded later would
        be left out by the forget's cut-off all the same, on every instance)."""
        labels = {self.labels[0]: user_id}
        if character_id is not None:
            labels[self.labels[1]] = character_id
        self.replies.forget(labels)
        self.windows.forget(labels)
        self.recalls.forget(user_id, character_id)

    def _quiet(self, session: str) -> None:
        """A call's reply settled (the call went quiet): what was kept for its next request goes."""
        self.windows.drop(session)
        self.recalls.drop(session)

    async def close(self) -> None:
        await self.replies.close()

    def pair_labels(self, turn: Turn) -> dict[str, str]:
        """The labels a recorded window carries: whose words these are (none: unidentified,
        kept under the session's own pair, as ingest does with any unlabelled call)."""
        if turn.user_id is None:
            return {}
        return {self.labels[0]: turn.user_id, self.labels[1]: turn.character_id}

    def started(self, turn: Turn) -> None:
        """A call's first request here warms its pair at once (should its recall miss the
        deadline, the next finds the index in memory); its first recall is marked first."""
        if turn.user_id is None or turn.run is None or turn.run in self._runs:
            return  # a request naming no call cannot be told from the call's others
        self.memory.reading.warm(turn.user_id, turn.character_id)
        if not recall_query(turn.messages):
            return  # nothing asked yet: the call's first recall is still to come
        if len(self._runs) >= BRIEF_PAIRS_HELD:
            self._runs.clear()
        self._runs.add(turn.run)
        turn.first = True

    def is_brief(self, turn: Turn) -> bool:
        """Whether the turn's pair is recalled right here, on the event loop."""
        return turn.user_id is not None and turn.pair in self.brief

    async def recall(self, turn: Turn, *, brief: bool) -> Recall | None:
        """The memories recalled for the turn's latest user turn; None when nothing was asked,
        or recall was too late or failed (counted and logged). A `brief` pair is read right
        here on the event loop, without suspending (unless the store declines), and so at once."""
        query = recall_query(turn.messages) if turn.user_id is not None else ""
        if not query or turn.user_id is None:
            return None
        self.stats.recalls += 1
        self.stats.first_turn_recalls += turn.first
        started = time.perf_counter()
        if brief:
            self.stats.recalls_brief += 1
            try:
                found = self.memory.reading.recall_here(
                    turn.user_id,
                    turn.character_id,
                    query,
                    max_tokens=self.settings.recall_max_tokens,
                    exclude_session=turn.session,
                    reuse=self._reuse(turn, query),
                )
            except NotBrief:
                pass  # on a reader thread, within what is left of the deadline
            except Exception as exc:
                self._failed(turn, started, exc)
                return None
            else:
                return self._read_here(turn, found, started)
        return await self._recall_away(turn, query, started)

    def _reuse(self, turn: Turn, query: str) -> Reuse | None:
        """The call's recall of this question answered again where it stands (memory/recall_reuse.py)."""
        session, user_id = turn.session, turn.user_id
        if session is None or user_id is None:
            return None
        max_tokens = self.settings.recall_max_tokens
        return lambda fresh: self.recalls.read(session, user_id, turn.character_id, query, max_tokens, fresh)

    def _read_here(self, turn: Turn, found: Recall, started: float) -> Recall | None:
        if (time.perf_counter() - started) * 1000 > self.settings.recall_timeout_ms:
            # Read on the event loop, the recall could not be cut short: still, past its
            # deadline the request goes on without memory, as from a reader thread.
            self._missed(turn)
            return None
        self.brief.took(turn.pair, found.read_ms)
        return found

    async def _recall_away(self, turn: Turn, query: str, started: float) -> Recall | None:
        """Recall on a reader thread, within what is left of the deadline."""
        deadline_s = self.settings.recall_timeout_ms / 1000
        try:
            found = await asyncio.wait_for(
                # The request carries this call's turns: recall needs only what is already
                # indexed, and must not wait for the index to catch up with them.
                self.memory.reading.recall(
                    turn.pair[0],
                    turn.character_id,
                    query,
                    max_tokens=self.settings.recall_max_tokens,
                    indexed_only=True,
                    exclude_session=turn.session,
                    reuse=self._reuse(turn, query),
                ),
                max(deadline_s - (time.perf_counter() - started), 0.0),
            )
        except TimeoutError:
            self._missed(turn)
            return None
        except Exception as exc:
            self._failed(turn, started, exc)
            return None
        self.brief.took(turn.pair, found.read_ms)
        return found

    def _failed(self, turn: Turn, started: float, exc: Exception) -> None:
        """A recall that failed: counted and logged; its pair is not brief."""
        self.brief.took(turn.pair, None)
        self.stats.recall_errors += 1
        if isinstance(exc, StoreUnavailable):
            self.stats.store_unavailable += 1
        log.warning(
            "custom LLM: recall for %s failed after %.1f ms (%s); answered without memory",
            pair_ref(*turn.pair),
            (time.perf_counter() - started) * 1000,
            exc,
        )

    def _missed(self, turn: Turn) -> None:
        """A recall past its deadline: counted, logged now and then; its pair is not brief."""
        self.brief.took(turn.pair, None)
        self.stats.recall_misses += 1
        self.stats.first_turn_misses += turn.first
        self._unlogged_misses += 1
        now = time.monotonic()
        if now - self._miss_logged_at < MISS_LOG_EVERY_S:
            return
        log.warning(
            "custom LLM: recall for %s missed its %g ms deadline; answered without memory "
            "(%d such misses since this was last logged)",
            pair_ref(*turn.pair),
            self.settings.recall_timeout_ms,
            self._unlogged_misses,
        )
        self._miss_logged_at, self._unlogged_misses = now, 0

    def inject(
        self, found: Recall | None, messages: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages with the recalled memories the request does not already hold, and how many."""
        if found is None or not found.memories:
            return messages, 0
        # As `normal` of the joined contents, each content folded once (and again only when new).
        already = " ".join(part for m in messages if (part := normal(text_of(m.get("content")))))
        memory, injected = memory_message(found.memories, already)
        self.stats.memories_injected += injected
        return with_memory(messages, memory), injected

    def known_reads(self, turn: Turn) -> list[Any] | None:
        """What the platform's rendering read of each of the turn's messages in the call's last
        request (None each where it is new), a list it fills in and the call keeps; None: no call."""
        if turn.session is None:
            return None
        self.windows.compare(turn, self.pair_labels(turn))
        before, found = turn.before, turn.reused
        reads = before.reads if before is not None else None
        if reads is None or found is None:
            turn.reads = [None] * len(turn.messages)
        else:
            turn.reads = [None if index is None else reads[index] for index in found]
        return turn.reads

    def window(
        self, turn: Turn, item: Callable[[Any], Item], labels_field: str | None = None
    ) -> HistoryWindow | None:
        """The request's conversation as a window of its call's session (None: no session);
        `item` reads one message, `labels_field` is where the platform takes the app's ids."""
        if turn.session is None:
            return None
        labels = self.pair_labels(turn)
        items = self.windows.read(turn, item, labels)
        said = [
            message
            for read in items
            for message in (read if isinstance(read, tuple) else (read,))
            if isinstance(message, IncomingMessage)
        ]
        skipped = [f"messages[{index}]: {read}" for index, read in enumerate(items) if isinstance(read, str)]
        return HistoryWindow(
            agent_id=turn.session, messages=said, skipped=skipped, labels=labels, labels_field=labels_field
        )

    def record(self, turn: Turn, window: HistoryWindow | None) -> None:
        """Merge the request's turns into its call's session, in the background."""
        if turn.session is None or window is None:
            self.stats.unrecorded += 1
            return
        turn.window = window
        session = turn.session
        self.replies.drop(session)
        said = window.messages
        repeated, counts = self.windows.repeated(session, said) if not window.skipped else (None, None)
        if repeated == len(said):
            self.stats.unchanged_windows += 1  # stored as it is: a repeated request
            return
        # Only what follows the window last stored is merged, while the session is as that
        # merge left it (checked where it is written); else the whole window.
        known = KnownEnd(repeated, counts) if repeated and counts is not None else None
        watch = self.recalls.watch(session)

        def merged(outcome: Outcome) -> None:
            self.windows.stored(session, said, outcome.counts)
            if watch is not None:
                self.recalls.merged(session, watch)

        self.replies.merge(window, merged, known, watch)

    def reply(self, turn: Turn, text: str, *, interrupted: bool, said_ms: int | None) -> None:
        """The reply the caller got, held until the call's next request (or recorded at once)."""
        window = turn.window
        if window is None or turn.session is None or not text.strip():
            return
        # Placed in time when the caller got it: undated, it would sort at the call's start,
        # before the question it answers. Not dated as the platform's own copy will be (that
        # copy, in the next request or the transcript, merges into this one).
        said = IncomingMessage(
            role="assistant",
            content=text,
            source=RELAYED,
            interrupted=interrupted,
            seen_ms=said_ms or now_ms(),
        )
        held = HistoryWindow(
            agent_id=window.agent_id,
            messages=[*window.messages, said],
            labels=window.labels,
            labels_field=window.labels_field,
        )
        if self.settings.llm_reply_settle_s <= 0:
            self.replies.merge(held)
        else:
            self.replies.hold(turn.session, held)
