"""Agora's custom LLM (`llm.vendor = "custom"`): recall per turn, forward upstream, record as it goes.

`POST /v1/llm/chat/completions` (and `/v1/llm/<route>/chat/completions`, so `llm.url` can carry
routing) is an OpenAI Chat Completions endpoint. Each request is authorised by its bearer
(`AGENT_MEMORY_LLM_TOKEN`, or a per-agent key minted by `POST /v1/agents`), names its pair
(top-level `user_id`/`character_id` from `llm.params`, else the key's route), gets the memories
recalled for its latest user turn as one system message (within a deadline: past it the request
goes on without them), is rendered plain for the model and streamed from the upstream as the
chunks arrive. A client that goes away (the user interrupted) closes the upstream at once.

Recording: the request's turns are merged into the agent run's session exactly as a history
window is (so callbacks, polls and this endpoint never double a turn). The session is the
route's agent, else a top-level `agent_id` param; with neither nothing is recorded (Agora's
request names no agent, and a made-up session would double the callbacks' one). The reply is
held until the next request of the run (which carries it as Agora heard it: cut short by an
interruption, or whole) or, failing one, `AGENT_MEMORY_LLM_REPLY_SETTLE_S`: stored at once, a
reply the user then interrupted would disagree with Agora's copy of it and double the turn.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from agent_memory.core.clock import now_ms
from agent_memory.core.domain import LlmRoute
from agent_memory.core.events import RELAYED, HistoryWindow, IncomingMessage
from agent_memory.core.jsonutil import dumps
from agent_memory.core.recall import HEADING, Recall, RecalledMemory, context_line, memory_line
from agent_memory.core.secrets import hash_key
from agent_memory.errors import InvalidField, InvalidJSON, StoreUnavailable
from agent_memory.logs import pair_ref
from agent_memory.memory.service import Memory
from agent_memory.platforms.agora.custom_llm import to_openai_messages
from agent_memory.platforms.agora.events import LABELS_FIELD, incoming
from agent_memory.platforms.agora.payloads import MemoryMessage
from agent_memory.store import NotBrief
from agent_memory.upstream import HttpUpstream, Target, Upstream, UpstreamFailed
from agent_memory.web.http import read_json_body

log = logging.getLogger(__name__)

# What Agora adds at the body's top level, and what our own `llm.params` add: none of it is the model's.
AGORA_FIELDS = ("turn_id", "timestamp", "interruptable")
OUR_PARAMS = ("user_id", "character_id", "agent_id")
DEFAULT_UPSTREAM = "https://api.openai.com/v1"
# A user turn this short ("yes", "what was it?") is asked about with the turn before it.
SHORT_TURN_WORDS = 5
# How often open streams are checked for a client that went away (well inside 100 ms).
DISCONNECT_POLL_S = 0.05
# A pair whose last recall read in less than AGENT_MEMORY_RECALL_BRIEF_MS is recalled on the
# event loop (the embedded store): handing the read to a reader thread and back cost about
# 0.5 ms of a 2 ms recall (bench/llm_proxy.py, side by side). One read slower (its index not
# held in memory yet, so searched in SQLite, which a reader thread does without the GIL) goes
# back to a reader thread, where the deadline can cut it short.
BRIEF_PAIRS_HELD = 10_000
# Recall misses are logged at most this often (each is counted): an overloaded service would
# otherwise spend its time writing one line per call.
MISS_LOG_EVERY_S = 10.0
PARAMS_ADVICE = (
    'say whose memory this is: put "user_id" and "character_id" in the agent\'s llm.params '
    "(Agora sends them at the top level of every request), or start the agent through "
    "POST /v1/agents with memory_llm, whose key names the pair"
)
_SPACES = re.compile(r"\s+")
# An event that ends the answer: a finish reason (not null), or the stream's `[DONE]`.
_ANSWER_END = re.compile(rb'"finish_reason"\s*:\s*"|data:\s*\[DONE\]')


@dataclass(slots=True)
class ProxyStats:
    """What the endpoint did since the service started."""

    requests: int = 0
    streamed: int = 0
    unauthorized: int = 0
    bad_requests: int = 0
    recalls: int = 0
    recall_misses: int = 0  # past the deadline
    first_turn_recalls: int = 0  # the first recall of an agent run at this endpoint (this instance)
    first_turn_misses: int = 0  # of those, past the deadline
    recalls_brief: int = 0  # of a pair whose last recall was brief (read on the event loop by SQLite)
    recall_errors: int = 0
    memories_injected: int = 0
    upstream_errors: int = 0
    cancelled: int = 0  # the client went away mid-answer
    recorded: int = 0
    record_errors: int = 0
    unrecorded: int = 0  # no agent run to record into
    store_unavailable: int = (
        0  # recalls and recordings skipped: the database was down (relayed without memory)
    )

    def report(self) -> dict[str, int]:
        return asdict(self)


def openai_error(
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """An error in OpenAI's shape (what the SDKs and Agora read)."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(status=status, body=dumps(body), content_type="application/json", headers=headers)


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text") or "") for part in content if isinstance(part, Mapping))
    return ""


def recall_query(messages: Sequence[Any]) -> str:
    """The latest user turn, with the user turn before it when the latest is short."""
    said = [
        _text_of(m.get("content")).strip()
        for m in messages
        if isinstance(m, Mapping) and m.get("role") == "user"
    ]
    said = [text for text in said if text]
    if not said:
        return ""
    if len(said) > 1 and len(said[-1].split()) < SHORT_TURN_WORDS:
        return f"{said[-2]}\n{said[-1]}"
    return said[-1]


def memory_message(memories: Sequence[RecalledMemory], already: str) -> tuple[str, int]:
    """The recalled memories as one system message, without those the request already holds
    (recall leaves out the call's own turns)."""
    kept = [memory for memory in memories if _normal(memory.text) not in already]
    if not kept:
        return "", 0
    lines = [HEADING]
    for memory in kept:
        lines.append(memory_line(memory))
        lines.extend(context_line(turn) for turn in memory.context)
    return "\n".join(lines), len(kept)


def window_of(
    messages: Sequence[Any], agent_id: str, user_id: str, character_id: str, label_keys: tuple[str, str]
) -> HistoryWindow:
    """The request's conversation as a history window of the run, read as a 103's messages are."""
    items: list[IncomingMessage] = []
    skipped: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") == "system":
            continue  # the agent's system_messages are not conversation
        try:
            items.append(incoming(MemoryMessage.model_validate(message)))
        except ValidationError as exc:
            skipped.append(f"messages[{index}]: {exc.errors()[0]['msg']}")
    return HistoryWindow(
        agent_id=agent_id,
        messages=items,
        skipped=skipped,
        labels_field=LABELS_FIELD,
        labels={label_keys[0]: user_id, label_keys[1]: character_id},
    )


_EVENT_END = re.compile(rb"\r?\n\r?\n")


def event_spans(block: bytes) -> Iterator[tuple[int, int]]:
    """Where each whole server-sent event in `block` starts and ends (its blank line included)."""
    start = 0
    for end in _EVENT_END.finditer(block):
        yield start, end.end()
        start = end.end()


def event_chunks(event: bytes) -> Iterator[Any]:
    """The JSON of each `data:` line of one event (`[DONE]` and what does not parse left out)."""
    for line in event.splitlines():
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def first_error(block: bytes) -> tuple[int, int, dict[str, Any]] | None:
    """The first event of `block` that carries an error: where it starts and ends, and its chunk."""
    for start, end in event_spans(block):
        for chunk in event_chunks(block[start:end]):
            if isinstance(chunk, dict) and chunk.get("error") is not None:
                return start, end, chunk
    return None


def streamed_text(blocks: Sequence[bytes]) -> str:
    """The content of the first choice across a streamed answer's events."""
    parts: list[str] = []
    for line in b"".join(blocks).splitlines():
        # A chunk without content (role, finish, usage, tool calls) is not decoded at all.
        if not line.startswith(b"data:") or b'"content"' not in line:
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if (
                isinstance(delta, dict)
                and choice.get("index", 0) == 0
                and isinstance(delta.get("content"), str)
            ):
                parts.append(delta["content"])
    return "".join(parts)


@dataclass(slots=True)
class Reply:
    """What the upstream answered so far. A stream's blocks are kept as they pass and read once,
    when the reply is recorded: not event by event on the way to the caller."""

    blocks: list[bytes] = field(default_factory=list)
    answer: str = ""  # a whole (not streamed) answer's content
    interrupted: bool = False
    # The upstream's last chunk (its finish, `[DONE]`, or the end of its stream) was relayed:
    # a caller that leaves now (Agora's engine closes right after `[DONE]`) heard it all.
    relayed_all: bool = False
    # When the caller got its first token (or the whole answer): when the agent began to say it.
    said_ms: int | None = None

    def read_body(self, body: bytes) -> None:
        try:
            answer = json.loads(body)
            content = answer["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return
        if isinstance(content, str):
            self.answer = content

    @property
    def text(self) -> str:
        return streamed_text(self.blocks) if self.blocks else self.answer


class EventStream(web.StreamResponse):
    """A stream of server-sent events whose headers go out with its first event, in one write."""

    # aiohttp sends a StreamResponse's headers at `prepare()`, in a write of their own (a
    # `Response` buffers them, as this does): with the first chunk instead, the caller is
    # woken once, not twice, on the way to its first token (a tenth to half a millisecond
    # under load, bench/llm_proxy.py). Were aiohttp to drop the attribute, headers would
    # just go out at once again.
    _send_headers_immediately = False


class Disconnects:
    """Watches open streams and cancels the handler of one whose client went away.

    aiohttp does not cancel a handler when its client disconnects; a stream waiting on the
    upstream would notice only at its next write. One task checks all open streams.
    """

    def __init__(self, every_s: float = DISCONNECT_POLL_S) -> None:
        self.every_s = every_s
        self._open: dict[asyncio.Task[Any], web.Request] = {}
        self._gone: set[asyncio.Task[Any]] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, request: web.Request) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert task is not None
        self._open[task] = request
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return task

    def unwatch(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching; True if the client went away."""
        self._open.pop(task, None)
        if task in self._gone:
            self._gone.discard(task)
            return True
        return False

    async def _run(self) -> None:
        while self._open:
            await asyncio.sleep(self.every_s)
            for task, request in list(self._open.items()):
                transport = request.transport
                if transport is None or transport.is_closing():
                    del self._open[task]
                    self._gone.add(task)
                    task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class HeldReplies:
    """Replies waiting for the next request of their run (or the settle time) to be recorded."""

    def __init__(self, memory: Memory, stats: ProxyStats, settle_s: float) -> None:
        self.memory = memory
        self.stats = stats
        self.settle_s = settle_s
        self._held: dict[str, tuple[HistoryWindow, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def drop(self, agent_id: str) -> None:
        """The run's next request came: it carries the reply as Agora heard it."""
        held = self._held.pop(agent_id, None)
        if held is not None:
            held[1].cancel()

    def hold(self, agent_id: str, window: HistoryWindow) -> None:
        self.drop(agent_id)
        loop = asyncio.get_running_loop()
        handle = loop.call_later(self.settle_s, self._settle, agent_id)
        self._held[agent_id] = (window, handle)

    def forget(self, labels: Mapping[str, str]) -> None:
        """A forget: drop the held replies of the pair (or user) whose `labels` it names."""
        for agent_id, (window, _) in list(self._held.items()):
            if all(window.labels.get(key) == value for key, value in labels.items()):
                self.drop(agent_id)

    def _settle(self, agent_id: str) -> None:
        held = self._held.pop(agent_id, None)
        if held is not None:
            self.merge(held[0])

    def merge(self, window: HistoryWindow) -> None:
        """Merge a window in the background; never fails the answer, errors are logged."""
        task = asyncio.get_running_loop().create_task(self._merge(window))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _merge(self, window: HistoryWindow) -> None:
        try:
            outcome = await self.memory.merge_window(window, now_ms())
            self.stats.recorded += outcome.new_messages
        except StoreUnavailable as exc:
            # The run's next request (or its 103) carries these turns again.
            self.stats.record_errors += 1
            self.stats.store_unavailable += 1
            log.warning("custom LLM: recording agent %s failed: %s", window.agent_id, exc.message)
        except Exception:
            self.stats.record_errors += 1
            log.exception("custom LLM: recording agent %s failed", window.agent_id)

    async def close(self) -> None:
        """Record what is still held, and wait for the merges under way."""
        for agent_id in list(self._held):
            self._settle(agent_id)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)


class BriefPairs:
    """The pairs whose last recall read in under `brief_ms`: recalled on the event loop."""

    def __init__(self, brief_ms: float, held: int = BRIEF_PAIRS_HELD) -> None:
        self.brief_ms = brief_ms
        self.held = held
        self._pairs: set[tuple[str, str]] = set()

    def __contains__(self, pair: tuple[str, str]) -> bool:
        return pair in self._pairs

    def took(self, pair: tuple[str, str], ms: float | None) -> None:
        """How long the pair's recall read took (None: it did not finish)."""
        if ms is None or ms >= self.brief_ms:
            self._pairs.discard(pair)
            return
        if len(self._pairs) >= self.held:
            self._pairs.clear()  # the pairs still in a call are brief again after one recall
        self._pairs.add(pair)


@dataclass(slots=True)
class Call:
    """One request, as the endpoint understood it."""

    body: dict[str, Any]
    user_id: str
    character_id: str
    agent_id: str | None
    route: LlmRoute | None
    stream: bool
    # The request's turns as recorded into the agent run (None: not recorded, or not yet).
    window: HistoryWindow | None = None
    # Whether this asks the first recall of its agent run that this instance sees.
    first: bool = False


class LlmProxy:
    """The custom-LLM endpoint of one service."""

    def __init__(self, memory: Memory, upstream: Upstream | None = None) -> None:
        self.memory = memory
        self.settings = settings = memory.settings
        self.upstream: Upstream = upstream or HttpUpstream(
            connect_timeout_s=settings.upstream_connect_timeout_s,
            first_byte_timeout_s=settings.upstream_first_byte_timeout_s,
        )
        self.stats = ProxyStats()
        self.disconnects = Disconnects()
        self.replies = HeldReplies(memory, self.stats, settings.llm_reply_settle_s)
        self.brief = BriefPairs(settings.recall_brief_ms)
        self._miss_logged_at = float("-inf")
        self._unlogged_misses = 0
        # Per-agent keys found in the database, by hash: while it is down, a live call whose key
        # was found before goes on (without memory) instead of failing.
        self._routes: dict[str, LlmRoute] = {}
        # Agent runs (or per-agent keys) seen: a run's first request starts warming its pair.
        self._runs: set[str] = set()
        memory.forget_listeners.append(self._forgotten)

    def _forgotten(self, user_id: str, character_id: str | None) -> None:
        """Held replies of a forgotten user (or pair) are dropped (any recorded later would
        be left out by the forget's cut-off all the same, on every instance)."""
        labels = {self.settings.label_user_key: user_id}
        if character_id is not None:
            labels[self.settings.label_character_key] = character_id
        self.replies.forget(labels)

    async def close(self) -> None:
        await self.disconnects.stop()
        await self.replies.close()
        await self.upstream.close()

    async def report(self, request: web.Request) -> web.Response:
        """The endpoint's counters (GET /v1/llm/stats, behind the API token)."""
        body = {"llm_proxy": self.stats.report(), "warming": self.memory.warming.report()}
        return web.json_response(body, dumps=dumps)

    def _started(self, call: Call) -> None:
        """A run's first request here warms its pair at once (should its recall miss the
        deadline, the next finds the index in memory); its first recall is marked first."""
        run = call.agent_id or (call.route.key_hash if call.route is not None else None)
        if run is None or run in self._runs:
            return  # a request naming no run cannot be told from the run's others
        self.memory.warming.warm(call.user_id, call.character_id)
        if not recall_query(call.body["messages"]):
            return  # nothing asked yet: the run's first recall is still to come
        if len(self._runs) >= BRIEF_PAIRS_HELD:
            self._runs.clear()
        self._runs.add(run)
        call.first = True

    # the request

    async def _authorise(self, request: web.Request) -> LlmRoute | web.Response | None:
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        key = key.strip()
        token = self.settings.llm_token
        if scheme.lower() == "bearer" and key:
            if token and hmac.compare_digest(key.encode(), token.encode()):
                return None
            try:
                route = await self.memory.llm_route(key)
            except StoreUnavailable:
                route = self._routes.get(hash_key(key))
                if route is None:
                    raise
                return route
            if route is not None:
                if len(self._routes) >= BRIEF_PAIRS_HELD:
                    self._routes.clear()
                self._routes[route.key_hash] = route
                return route
        self.stats.unauthorized += 1
        return openai_error(
            401,
            "missing or wrong bearer key: send llm.api_key = AGENT_MEMORY_LLM_TOKEN, or the key "
            "POST /v1/agents minted for the agent",
            kind="invalid_request_error",
            code="invalid_api_key",
        )

    def _bad(self, message: str, param: str | None = None) -> web.Response:
        self.stats.bad_requests += 1
        return openai_error(400, message, kind="invalid_request_error", param=param)

    async def _read(self, request: web.Request, route: LlmRoute | None) -> Call | web.Response:
        try:
            body = await read_json_body(request)
        except InvalidJSON as exc:
            return self._bad(exc.message)
        if not isinstance(body, dict):
            return self._bad("the body must be a JSON object (an OpenAI chat completion request)")
        if not isinstance(body.get("messages"), list):
            return self._bad("messages must be a list of chat messages", "messages")
        user_id, character_id = body.get("user_id"), body.get("character_id")
        if isinstance(user_id, str | int) and str(user_id).strip():
            user_id = str(user_id).strip()
            given = str(character_id).strip() if isinstance(character_id, str | int) else ""
            character_id = given or self.settings.default_character
        elif route is not None:
            user_id, character_id = route.user_id, route.character_id
        else:
            return self._bad(f"no user for this request: {PARAMS_ADVICE}", "user_id")
        agent_id = route.agent_id if route is not None and route.agent_id else body.get("agent_id")
        agent_id = str(agent_id) if isinstance(agent_id, str | int) and str(agent_id) else None
        return Call(body, user_id, character_id, agent_id, route, body.get("stream") is True)

    async def _recall(self, call: Call, *, brief: bool) -> Recall | None:
        """The memories recalled for the call's latest user turn; None when nothing was asked,
        or recall was too late or failed (counted and logged). A `brief` pair is read right
        here on the event loop, without suspending (unless the store declines), and so at once."""
        query = recall_query(call.body["messages"])
        if not query:
            return None
        self.stats.recalls += 1
        self.stats.first_turn_recalls += call.first
        deadline_ms = self.settings.recall_timeout_ms
        pair = (call.user_id, call.character_id)
        started = time.perf_counter()
        if brief:
            self.stats.recalls_brief += 1
            try:
                found = self.memory.recall_here(
                    call.user_id,
                    call.character_id,
                    query,
                    max_tokens=self.settings.recall_max_tokens,
                    exclude_session=call.agent_id,
                )
            except NotBrief:
                pass  # on a reader thread, within what is left of the deadline
            except Exception as exc:
                self._failed(call, pair, started, exc)
                return None
            else:
                if (time.perf_counter() - started) * 1000 > deadline_ms:
                    # Read on the event loop, the recall could not be cut short: still, past its
                    # deadline the request goes on without memory, as from a reader thread.
                    self._missed(call, pair)
                    return None
                self.brief.took(pair, found.read_ms)
                return found
        try:
            found = await asyncio.wait_for(
                # The request carries this call's turns: recall needs only what is already
                # indexed, and must not wait for the index to catch up with them.
                self.memory.recall(
                    call.user_id,
                    call.character_id,
                    query,
                    max_tokens=self.settings.recall_max_tokens,
                    indexed_only=True,
                    exclude_session=call.agent_id,
                ),
                max(deadline_ms / 1000 - (time.perf_counter() - started), 0.0),
            )
        except TimeoutError:
            self._missed(call, pair)
            return None
        except Exception as exc:
            self._failed(call, pair, started, exc)
            return None
        self.brief.took(pair, found.read_ms)
        return found

    def _failed(self, call: Call, pair: tuple[str, str], started: float, exc: Exception) -> None:
        """A recall that failed: counted and logged; its pair is not brief."""
        self.brief.took(pair, None)
        self.stats.recall_errors += 1
        if isinstance(exc, StoreUnavailable):
            self.stats.store_unavailable += 1
        log.warning(
            "custom LLM: recall for %s failed after %.1f ms (%s); answered without memory",
            pair_ref(call.user_id, call.character_id),
            (time.perf_counter() - started) * 1000,
            exc,
        )

    def _missed(self, call: Call, pair: tuple[str, str]) -> None:
        """A recall past its deadline: counted, logged now and then; its pair is not brief."""
        self.brief.took(pair, None)
        self.stats.recall_misses += 1
        self.stats.first_turn_misses += call.first
        self._log_miss(call)

    def _log_miss(self, call: Call) -> None:
        self._unlogged_misses += 1
        now = time.monotonic()
        if now - self._miss_logged_at < MISS_LOG_EVERY_S:
            return
        log.warning(
            "custom LLM: recall for %s missed its %g ms deadline; answered without memory "
            "(%d such misses since this was last logged)",
            pair_ref(call.user_id, call.character_id),
            self.settings.recall_timeout_ms,
            self._unlogged_misses,
        )
        self._miss_logged_at, self._unlogged_misses = now, 0

    def _forwarded(self, call: Call, messages: list[dict[str, Any]], memory: str) -> dict[str, Any]:
        """The body the model gets: plain messages, memory before the conversation, our fields out."""
        if memory:
            at = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
            messages = [*messages[:at], {"role": "system", "content": memory}, *messages[at:]]
        body = {k: v for k, v in call.body.items() if k not in AGORA_FIELDS and k not in OUR_PARAMS}
        route = call.route
        for key, value in (route.upstream_params if route is not None else {}).items():
            if key not in OUR_PARAMS and key not in AGORA_FIELDS:
                body.setdefault(key, value)
        model = (route.upstream_model if route is not None else None) or self.settings.upstream_model
        if model:
            body["model"] = model
        body["messages"] = messages
        return body

    def _target(self, route: LlmRoute | None) -> Target:
        settings = self.settings
        if route is not None and route.upstream_base_url:
            return Target(route.upstream_base_url, route.upstream_api_key)
        return Target(
            settings.upstream_base_url or settings.openai_base_url or DEFAULT_UPSTREAM,
            settings.upstream_api_key or settings.openai_api_key,
        )

    async def complete(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/llm[/<route>]/chat/completions."""
        self.stats.requests += 1
        route = await self._authorise(request)
        if isinstance(route, web.Response):
            return route
        call = await self._read(request, route)
        if isinstance(call, web.Response):
            return call
        self._started(call)
        # A brief pair is recalled at once, right here: as a task it would first wait its turn
        # on the loop, behind every stream with a chunk ready. Another pair is recalled on a
        # reader thread while this one renders the messages.
        brief = (call.user_id, call.character_id) in self.brief
        found = await self._recall(call, brief=True) if brief else None
        recalling = None if brief else asyncio.ensure_future(self._recall(call, brief=False))
        try:
            messages = to_openai_messages(call.body["messages"])
        except InvalidField as exc:
            if recalling is not None:
                recalling.cancel()
            return self._bad(exc.message, "messages")
        if recalling is not None:
            found = await recalling
        memory, injected = "", 0
        if found is not None and found.memories:
            already = _normal(" ".join(_text_of(m.get("content")) for m in messages))
            memory, injected = memory_message(found.memories, already)
        self.stats.memories_injected += injected
        forwarded = dumps(self._forwarded(call, messages, memory)).encode()
        reply = Reply()
        task = self.disconnects.watch(request)
        try:
            return await self._relay(request, call, forwarded, reply, injected)
        except asyncio.CancelledError:
            # Cancelled by the watch, or by aiohttp itself when it runs with handler_cancellation.
            transport = request.transport
            if self.disconnects.unwatch(task) or transport is None or transport.is_closing():
                self._went_away(reply)
            raise
        except ConnectionResetError:
            # A write found the client gone before the watch did.
            self._went_away(reply)
            raise asyncio.CancelledError() from None
        finally:
            self.disconnects.unwatch(task)
            text = reply.text if call.window is not None else ""
            if reply.interrupted:
                log.info(
                    "custom LLM: the client went away (%d characters recorded); upstream closed", len(text)
                )
            if call.window is not None and call.agent_id is not None and text.strip():
                self._hold_reply(call.window, reply, text)

    def _went_away(self, reply: Reply) -> None:
        if reply.relayed_all:
            return  # it left after the answer's end: nothing was cut short
        reply.interrupted = True
        self.stats.cancelled += 1

    def _record(self, call: Call) -> None:
        """Merge the request's turns into its agent run, in the background."""
        if call.agent_id is None:
            self.stats.unrecorded += 1
            return
        keys = (self.settings.label_user_key, self.settings.label_character_key)
        call.window = window_of(call.body["messages"], call.agent_id, call.user_id, call.character_id, keys)
        self.replies.drop(call.agent_id)
        self.replies.merge(call.window)

    def _hold_reply(self, window: HistoryWindow, reply: Reply, text: str) -> None:
        # Placed in time when the caller got it: undated, it would sort at the run's start,
        # before the question it answers. Not dated as Agora's own copy will be (that copy,
        # in the next request or the 103, merges into this one).
        said = IncomingMessage(
            role="assistant",
            content=text,
            source=RELAYED,
            interrupted=reply.interrupted,
            seen_ms=reply.said_ms or now_ms(),
        )
        agent_id = window.agent_id
        held = HistoryWindow(
            agent_id=agent_id,
            messages=[*window.messages, said],
            labels=window.labels,
            labels_field=window.labels_field,
        )
        if self.settings.llm_reply_settle_s <= 0:
            self.replies.merge(held)
        else:
            self.replies.hold(agent_id, held)

    async def _relay(
        self, request: web.Request, call: Call, forwarded: bytes, reply: Reply, injected: int
    ) -> web.StreamResponse:
        try:
            answer = await self.upstream.open(self._target(call.route), forwarded)
        except UpstreamFailed as exc:
            self.stats.upstream_errors += 1
            log.warning("custom LLM: %s", exc.message)
            return openai_error(exc.status, exc.message, kind="upstream_error", code="upstream_unavailable")
        finally:
            # Once the request is on its way (while the model thinks), not between caller and model.
            self._record(call)
        headers = {"X-Agent-Memory-Memories": str(injected)}
        if call.agent_id is None:
            headers["X-Agent-Memory-Recorded"] = "no: no agent run named (route key or agent_id param)"
        try:
            content_type = answer.headers.get("Content-Type", "")
            if answer.status >= 400:
                return await self._upstream_error(answer.status, await answer.body(), answer.headers, headers)
            if not call.stream or "text/event-stream" not in content_type:
                body = await answer.body()
                if call.agent_id is not None:
                    reply.read_body(body)
                    reply.said_ms = now_ms()
                return web.Response(
                    status=answer.status,
                    body=body,
                    headers=headers,
                    content_type=content_type.split(";")[0] or "application/json",
                )
            return await self._stream(
                request, answer.events(), reply, headers, keep=call.agent_id is not None
            )
        except UpstreamFailed as exc:
            self.stats.upstream_errors += 1
            return openai_error(exc.status, exc.message, kind="upstream_error", code="upstream_unavailable")
        finally:
            answer.close()

    async def _upstream_error(
        self, status: int, body: bytes, upstream_headers: Mapping[str, str], headers: dict[str, str]
    ) -> web.Response:
        """The upstream's error with its status, in OpenAI's shape (kept as is when it already is)."""
        self.stats.upstream_errors += 1
        if "Retry-After" in upstream_headers:
            headers["Retry-After"] = upstream_headers["Retry-After"]
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        log.warning("custom LLM: the upstream answered %d", status)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            return web.Response(status=status, body=body, content_type="application/json", headers=headers)
        text = body.decode(errors="replace").strip()[:500] or f"the upstream LLM answered {status}"
        return openai_error(status, text, kind="upstream_error", code=str(status), headers=headers)

    async def _stream(
        self, request: web.Request, events: Any, reply: Reply, headers: dict[str, str], *, keep: bool
    ) -> web.StreamResponse:
        response: web.StreamResponse | None = None
        try:
            async for block in events:
                # Only a block that may carry an error is decoded on the way.
                error = first_error(block) if b'"error"' in block else None
                if error is not None:
                    if response is None and error[0] == 0:
                        # Before the first chunk an error is the answer's status.
                        self.stats.upstream_errors += 1
                        return openai_error(
                            502,
                            str(error[2]["error"].get("message") or error[2]["error"]),
                            kind="upstream_error",
                            code="upstream_error",
                        )
                    block = block[: error[1]]  # the error is the last event relayed
                if keep:
                    reply.blocks.append(block)
                if response is None:
                    reply.said_ms = now_ms()
                    response = await self._open_stream(request, headers)
                await response.write(block)
                if error is not None:
                    self.stats.upstream_errors += 1
                    break
                if not reply.relayed_all and _ANSWER_END.search(block) is not None:
                    reply.relayed_all = True
            else:
                reply.relayed_all = True  # the upstream's stream ended: its last chunk went out
        except UpstreamFailed as exc:
            self.stats.upstream_errors += 1
            if response is None:
                raise
            log.warning("custom LLM: %s (mid-stream)", exc.message)
            error_event = {
                "error": {
                    "message": exc.message,
                    "type": "upstream_error",
                    "param": None,
                    "code": "upstream_unavailable",
                }
            }
            await response.write(b"data: " + dumps(error_event).encode() + b"\n\n")
        if response is None:
            response = await self._open_stream(request, headers)
        await response.write_eof()
        return response

    async def _open_stream(self, request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
        self.stats.streamed += 1
        response = EventStream(
            headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        return response
