"""`AsyncMemoryClient`: every documented route of the HTTP API as one typed coroutine.

Each call answers the pydantic model the API documents (web/answers.py, the models of the
OpenAPI document), so a caller reads `answer.facts[0].text`, not a dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agent_memory.client.transport import DEFAULT_BACKOFF, Params, Transport, path
from agent_memory.core.clock import Backoff
from agent_memory.core.domain import FactScope, JobStatus
from agent_memory.core.recall import RecallScope
from agent_memory.core.search import MentionRole, SearchKind
from agent_memory.errors import ApiError
from agent_memory.web.answers import (
    ChannelBindingAnswer,
    ChannelBound,
    ChannelUnbound,
    CharacterStats,
    CondenseAnswer,
    Export,
    FactAdded,
    FactDeleted,
    FactEdited,
    FactHistoryAnswer,
    FactsAnswer,
    ForgetAnswer,
    Health,
    ImportAnswer,
    JobAnswer,
    JobsAnswer,
    MentionsAnswer,
    MessagesAdded,
    MessagesAnswer,
    OverallStats,
    RecallAnswer,
    SessionAnswer,
    Style,
    SummaryAnswer,
    SystemMessagesAnswer,
    UsersAnswer,
    UserSearchAnswer,
    UserStats,
)

AnswerT = TypeVar("AnswerT", bound=BaseModel)


def read_answer(model: type[AnswerT], data: Any) -> AnswerT:
    """`data` (the API's JSON) as `model`.

    A field this client does not know yet (a newer server) is ignored rather than refused; the
    free-form reports (statistics, export) keep every field they were sent.
    """
    if model.model_config.get("extra") == "forbid":
        return model.model_validate(data, extra="ignore")
    return model.model_validate(data)


class AsyncMemoryClient:
    """The agent-memory HTTP API, typed. Use `async with`, or call `aclose()` when done.

    `api_key` is sent as the bearer token (AGENT_MEMORY_API_TOKEN, or a key made with
    `agent-memory keys create`). Answers of 429 and 503 are retried up to `retries` times,
    waiting by `backoff` and never sooner than the server's Retry-After; any other error
    answer, or none at all, raises `agent_memory.errors.ApiError`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.transport = Transport(
            base_url, api_key=api_key, timeout_s=timeout, retries=retries, backoff=backoff
        )

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.close()

    async def call(
        self,
        model: type[AnswerT],
        method: str,
        route: str,
        *,
        params: Params | None = None,
        body: dict[str, Any] | bytes | None = None,
    ) -> AnswerT:
        """Any route: its JSON answer read as `model` (what every method below does)."""
        data = await self.transport.request(method, route, params=params, body=body)
        try:
            return read_answer(model, data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the answer"
            raise ApiError(
                502,
                "bad_answer",
                f"{method} {route} answered a {model.__name__} this client cannot read ({where}: {first['msg']}): "
                "is that an agent-memory service of this version?",
            ) from None

    # the pair's memory

    async def health(self) -> Health:
        """`GET /healthz`: the service and its database answer."""
        return await self.call(Health, "GET", "/healthz")

    async def system_messages(
        self,
        user_id: str,
        character_id: str,
        *,
        max_tokens: int | None = None,
        persona: str | None = None,
        style: Style | None = None,
        exclude_agent_id: str | None = None,
        query: str | None = None,
    ) -> SystemMessagesAnswer:
        """The pair's memory as system_messages for an agent's join, within `max_tokens`."""
        params = {
            "max_tokens": max_tokens,
            "persona": persona,
            "style": style,
            "exclude_agent_id": exclude_agent_id,
            "query": query,
        }
        return await self.call(
            SystemMessagesAnswer, "GET", pair(user_id, character_id, "system-messages"), params=params
        )

    async def recall(
        self,
        user_id: str,
        character_id: str,
        q: str,
        *,
        max_tokens: int | None = None,
        scope: RecallScope = "pair",
        exclude_agent_id: str | None = None,
    ) -> RecallAnswer:
        """The memories that answer `q`, best first, and the system message carrying them;
        `exclude_agent_id` leaves out a running conversation's own turns (`api:<session_id>`)."""
        params = {"q": q, "max_tokens": max_tokens, "scope": scope, "exclude_agent_id": exclude_agent_id}
        return await self.call(RecallAnswer, "GET", pair(user_id, character_id, "recall"), params=params)

    async def messages(self, user_id: str, character_id: str, *, limit: int | None = None) -> MessagesAnswer:
        """The pair's latest messages, oldest first."""
        route = pair(user_id, character_id, "messages")
        return await self.call(MessagesAnswer, "GET", route, params={"limit": limit})

    async def add_messages(
        self, user_id: str, character_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> MessagesAdded:
        """Store messages of the app's own session: each `{"role": "user"|"assistant", "content",
        "timestamp" (epoch ms or s, or ISO 8601 with offset), "id"?}`; posting them again stores
        nothing new (`already_held`)."""
        body = {"session_id": session_id, "messages": [dict(message) for message in messages]}
        return await self.call(MessagesAdded, "POST", pair(user_id, character_id, "messages"), body=body)

    async def summary(self, user_id: str, character_id: str) -> SummaryAnswer:
        """The pair's rolling summary and how many messages it does not cover yet."""
        return await self.call(SummaryAnswer, "GET", pair(user_id, character_id, "summary"))

    async def facts(self, user_id: str, character_id: str) -> FactsAnswer:
        """The facts remembered for the pair, the user-wide ones included."""
        return await self.call(FactsAnswer, "GET", pair(user_id, character_id, "facts"))

    async def add_fact(
        self, user_id: str, character_id: str, text: str, *, scope: FactScope = "character"
    ) -> FactAdded:
        """Remember a fact said by hand (pinned); `created` is false when it was already held."""
        body = {"text": text, "scope": scope}
        return await self.call(FactAdded, "POST", pair(user_id, character_id, "facts"), body=body)

    async def edit_fact(
        self, fact_id: int, *, text: str | None = None, pinned: bool | None = None
    ) -> FactEdited:
        """Change a fact by hand: its text (the old one kept as history) and/or whether it is pinned."""
        body: dict[str, Any] = {}
        if text is not None:
            body["text"] = text
        if pinned is not None:
            body["pinned"] = pinned
        return await self.call(FactEdited, "PATCH", path("v1", "facts", fact_id), body=body)

    async def fact_history(self, fact_id: int) -> FactHistoryAnswer:
        """Every text a fact had and when it held, oldest first."""
        return await self.call(FactHistoryAnswer, "GET", path("v1", "facts", fact_id, "history"))

    async def delete_fact(self, fact_id: int) -> FactDeleted:
        """Forget one fact."""
        return await self.call(FactDeleted, "DELETE", path("v1", "facts", fact_id))

    async def condense(self, user_id: str, character_id: str) -> CondenseAnswer:
        """Make the pair's condense job due now."""
        return await self.call(CondenseAnswer, "POST", pair(user_id, character_id, "condense"))

    async def forget(self, user_id: str, character_id: str | None = None) -> ForgetAnswer:
        """Delete everything held about a user, or about one of its pairs; answers what went."""
        route = path("v1", "users", user_id) if character_id is None else pair(user_id, character_id)
        return await self.call(ForgetAnswer, "DELETE", route)

    # sessions, bindings and jobs

    async def session(self, agent_id: str) -> SessionAnswer:
        """One agent run's session."""
        return await self.call(SessionAnswer, "GET", path("v1", "sessions", agent_id))

    async def bind(self, agent_id: str, user_id: str, character_id: str) -> SessionAnswer:
        """Tie an agent run to a pair (its messages move there)."""
        body = {"user_id": user_id, "character_id": character_id}
        return await self.call(SessionAnswer, "POST", path("v1", "sessions", agent_id, "bind"), body=body)

    async def bind_channel(self, channel: str, user_id: str, character_id: str) -> ChannelBound:
        """Tie a channel to a pair: later calls there, and its unidentified earlier ones, go to it."""
        body = {"user_id": user_id, "character_id": character_id}
        return await self.call(ChannelBound, "POST", path("v1", "channels", channel, "bind"), body=body)

    async def channel_binding(self, channel: str) -> ChannelBindingAnswer:
        """Which pair a channel is bound to (ApiError 404 when none)."""
        return await self.call(ChannelBindingAnswer, "GET", path("v1", "channels", channel, "bind"))

    async def unbind_channel(self, channel: str) -> ChannelUnbound:
        """Remove a channel's binding."""
        return await self.call(ChannelUnbound, "DELETE", path("v1", "channels", channel, "bind"))

    async def jobs(self, *, status: JobStatus | None = None, limit: int | None = None) -> JobsAnswer:
        """Condense and embed jobs, optionally of one status."""
        return await self.call(
            JobsAnswer, "GET", path("v1", "jobs"), params={"status": status, "limit": limit}
        )

    async def retry_job(self, job_id: int) -> JobAnswer:
        """Make a dead job pending again."""
        return await self.call(JobAnswer, "POST", path("v1", "jobs", job_id, "retry"))

    # search, statistics, export

    async def search(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] | None = None,
        limit: int | None = None,
    ) -> UserSearchAnswer:
        """A user's messages, facts and summaries matching `q`, best first."""
        params = {
            "q": q,
            "character_id": character_id,
            "kinds": ",".join(kinds) if kinds else None,
            "limit": limit,
        }
        return await self.call(UserSearchAnswer, "GET", path("v1", "users", user_id, "search"), params=params)

    async def mentions(
        self,
        q: str,
        *,
        role: MentionRole | None = None,
        character_id: str | None = None,
        limit: int | None = None,
    ) -> MentionsAnswer:
        """Operators: which users said `q`, how often, first and last."""
        params = {"q": q, "role": role, "character_id": character_id, "limit": limit}
        return await self.call(MentionsAnswer, "GET", path("v1", "search", "mentions"), params=params)

    async def users(
        self, *, q: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> UsersAnswer:
        """Operators: a page of users whose id contains `q`, in id order after `cursor` (the
        previous page's next_cursor)."""
        params = {"q": q, "cursor": cursor, "limit": limit}
        return await self.call(UsersAnswer, "GET", path("v1", "users"), params=params)

    async def user_stats(self, user_id: str) -> UserStats:
        """One user's sessions, messages, talk time, favourite characters and rates."""
        return await self.call(UserStats, "GET", path("v1", "users", user_id, "stats"))

    async def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> CharacterStats:
        """One character's active users, sessions, rates and latencies."""
        route = path("v1", "characters", character_id, "stats")
        return await self.call(
            CharacterStats, "GET", route, params={"since_ms": since_ms, "until_ms": until_ms}
        )

    async def stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> OverallStats:
        """The whole service: latency percentiles, failed and partial callbacks."""
        params = {"since_ms": since_ms, "until_ms": until_ms}
        return await self.call(OverallStats, "GET", path("v1", "stats"), params=params)

    async def export(self, user_id: str) -> Export:
        """Everything held about a user, as one document."""
        return await self.call(Export, "GET", path("v1", "users", user_id, "export"))

    async def import_export(self, document: bytes | Path, *, force: bool = False) -> ImportAnswer:
        """Restore an export (its bytes, or a file holding them), within the service's body limit;
        `force`: restore a user forgotten since the export was taken."""
        body = document.read_bytes() if isinstance(document, Path) else document
        params = {"force": "true"} if force else None
        return await self.call(ImportAnswer, "POST", path("v1", "import"), params=params, body=body)


def pair(user_id: str, character_id: str, *rest: str) -> str:
    """`/v1/users/{user_id}/characters/{character_id}/…`."""
    return path("v1", "users", user_id, "characters", character_id, *rest)
