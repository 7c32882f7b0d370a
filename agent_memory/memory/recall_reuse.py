"""A live call's recalls, each answered again when the call asks its question again and nothing
that recall could find has changed since.

A call's recall leaves out the call's own turns (its request carries them), so what it can
find changes only when the pair's memory changes otherwise: another session's turns, a fact,
a summary, a forget. The store counts every change of a pair's memory (`view.versions`); the
call's own recording changes it too, so each merge of the call's window reads the pair's
version before and after itself, in its transaction: a version the call's own merge moved from
the one its last recall was read at still stands for what that recall could find. Only BM25's
statistics move with the call's own turns (they count every indexed turn); the turns, facts
and summaries it can find do not.

A recall read while other sessions' turns of the pair were stored but not yet indexed (a busy
writer indexes them once writes pause: the call just before this one, say) is kept with their
count, and answered again only while that count stands: at one version the pair's other turns
are the same ones, and indexing only takes them out of the count, so the same count means none
of them was indexed since (a recall a moment after the index took one finds it). The count is
read before the recall: one indexed in between counts as indexed after it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from agent_memory.core.recall import Recall
from agent_memory.memory.live_calls import BRIEF_PAIRS_HELD, ProxyStats
from agent_memory.store import ReadView, Transaction

Versions = tuple[int, int]
# The questions kept of each call (the latest asked): a call comes back to what it talked about.
QUESTIONS_HELD = 16


@dataclass(slots=True)
class Recalled:
    """One question a call asked, its answer, the versions of its pair's memory it read at, and
    how many of the pair's other turns were not indexed yet (0: none)."""

    max_tokens: int
    versions: Versions
    found: Recall
    lag: int = 0


@dataclass(slots=True)
class CallRecalls:
    """A call's pair and the questions it asked (latest last)."""

    user_id: str
    character_id: str
    asked: OrderedDict[str, Recalled]


@dataclass(slots=True)
class OwnMerge:
    """A merge of the call's own window: its pair's versions before and after it (`Watch`)."""

    call: CallRecalls
    before_versions: Versions | None = None
    after_versions: Versions | None = None

    def before(self, tx: Transaction) -> None:
        self.before_versions = tx.versions.of_pair(self.call.user_id, self.call.character_id)

    def after(self, tx: Transaction) -> None:
        self.after_versions = tx.versions.of_pair(self.call.user_id, self.call.character_id)


class RecallReuse:
    """Each live call's recalls (by session), until the call goes quiet, a forget of its pair, or `held` calls."""

    def __init__(
        self, stats: ProxyStats, held: int = BRIEF_PAIRS_HELD, questions: int = QUESTIONS_HELD
    ) -> None:
        self.stats = stats
        self.held = held
        self.questions = questions
        self._calls: dict[str, CallRecalls] = {}
        self._lock = threading.Lock()  # recalls read on reader threads too

    def read(
        self,
        session: str,
        user_id: str,
        character_id: str,
        q: str,
        max_tokens: int,
        fresh: Callable[[ReadView], Recall],
    ) -> Callable[[ReadView], Recall]:
        """A read that answers with the call's recall of `q` where it stands (counted), else
        reads `fresh` and keeps it for the call's next requests."""

        def read(view: ReadView) -> Recall:
            started = time.perf_counter()
            versions = view.versions.of_pair(user_id, character_id)
            with self._lock:
                call = self._call(session, user_id, character_id)
                kept = call.asked.get(q)
                if kept is None or kept.versions != versions or kept.max_tokens != max_tokens:
                    kept = None
            # Kept while other turns waited for the index: only while none of them was indexed.
            lag = self._lag(view, session, user_id, character_id) if kept is None or kept.lag else 0
            if kept is not None and lag == kept.lag:
                self.stats.recalls_reused += 1
                return replace(kept.found, read_ms=(time.perf_counter() - started) * 1000)
            found = fresh(view)
            with self._lock:
                call.asked[q] = Recalled(max_tokens, versions, found, lag)
                while len(call.asked) > self.questions:
                    call.asked.popitem(last=False)
            return found

        return read

    @staticmethod
    def _lag(view: ReadView, session: str, user_id: str, character_id: str) -> int:
        """The pair's turns stored but not indexed yet, the call's own left out (one cheap look first)."""
        return view.recall.lag(user_id, character_id, exclude_session=session) if view.recall.behind() else 0

    def _call(self, session: str, user_id: str, character_id: str) -> CallRecalls:
        call = self._calls.get(session)
        if call is None or (call.user_id, call.character_id) != (user_id, character_id):
            if session not in self._calls and len(self._calls) >= self.held:
                self._calls.clear()
            call = self._calls[session] = CallRecalls(user_id, character_id, OrderedDict())
        return call

    def watch(self, session: str) -> OwnMerge | None:
        """What a merge of the call's own window reads, for `merged` (None: no recall kept)."""
        with self._lock:
            call = self._calls.get(session)
            return OwnMerge(call) if call is not None and call.asked else None

    def merged(self, session: str, merge: OwnMerge) -> None:
        """The call's own merge committed: the recalls read at the versions it started from
        stand at the versions it left; those read at others before it are stale (versions only
        grow), those read at the ones it left (after it, before this was told) stand."""
        before, after = merge.before_versions, merge.after_versions
        with self._lock:
            call = self._calls.get(session)
            if call is not merge.call or before is None or after is None:
                return
            for asked, kept in list(call.asked.items()):
                if kept.versions == before:
                    kept.versions = after
                elif kept.versions != after:
                    del call.asked[asked]

    def drop(self, session: str) -> None:
        with self._lock:
            self._calls.pop(session, None)

    def forget(self, user_id: str, character_id: str | None) -> None:
        """A forget of a user (or pair): drop its calls' recalls (they hold its words)."""
        with self._lock:
            for session, call in list(self._calls.items()):
                if call.user_id == user_id and character_id in (None, call.character_id):
                    del self._calls[session]
