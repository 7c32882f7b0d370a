"""One API for the commands, here or at --url: the in-process service and the HTTP client both speak it.

`MemoryApi` is what the reading commands call; `AsyncMemoryClient` (agent_memory.client) is it
over HTTP, `LocalApi` is it over a `Memory` on the database here, answering the same models the
routes answer (web/answers/), built from the domain objects without a trip through JSON.
`run_api` picks one from the arguments, so each command is written once.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from agent_memory.cli.common import settings_from, with_client, with_memory
from agent_memory.client import AsyncMemoryClient
from agent_memory.core.domain import JobStatus
from agent_memory.core.limits import USERS_LIMIT
from agent_memory.core.recall import DEFAULT_MAX_TOKENS as DEFAULT_RECALL_TOKENS
from agent_memory.core.recall import RecallScope
from agent_memory.core.search import SEARCH_KINDS, SearchKind
from agent_memory.core.styles import DEFAULT_STYLE
from agent_memory.errors import InvalidField
from agent_memory.memory.restore import file_source, text_source
from agent_memory.memory.service import Memory
from agent_memory.platforms.api.messages import MessagesBody, add_messages
from agent_memory.settings import Settings
from agent_memory.web.answers import (
    CharacterStats,
    Export,
    FactEdited,
    FactHistoryAnswer,
    FactOut,
    FactsAnswer,
    ForgetAnswer,
    ImportAnswer,
    JobOut,
    JobsAnswer,
    MessagesAdded,
    OverallStats,
    RecallAnswer,
    Style,
    SystemMessagesAnswer,
    UsersAnswer,
    UserSearchAnswer,
    UserStats,
)
from agent_memory.web.http import validation_message

T = TypeVar("T")
JOBS_LISTED = 100
SEARCH_LISTED = 20


class MemoryApi(Protocol):
    """What the commands ask of the service, wherever it runs."""

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
    ) -> SystemMessagesAnswer: ...

    async def recall(
        self,
        user_id: str,
        character_id: str,
        q: str,
        *,
        max_tokens: int | None = None,
        scope: RecallScope = "pair",
        exclude_agent_id: str | None = None,
    ) -> RecallAnswer: ...

    async def facts(self, user_id: str, character_id: str) -> FactsAnswer: ...

    async def add_messages(
        self, user_id: str, character_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> MessagesAdded: ...

    async def edit_fact(
        self, fact_id: int, *, text: str | None = None, pinned: bool | None = None
    ) -> FactEdited: ...

    async def fact_history(self, fact_id: int) -> FactHistoryAnswer: ...

    async def forget(self, user_id: str, character_id: str | None = None) -> ForgetAnswer: ...

    async def jobs(self, *, status: JobStatus | None = None, limit: int | None = None) -> JobsAnswer: ...

    async def search(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] | None = None,
        limit: int | None = None,
    ) -> UserSearchAnswer: ...

    async def user_stats(self, user_id: str) -> UserStats: ...

    async def users(
        self, *, q: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> UsersAnswer: ...

    async def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> CharacterStats: ...

    async def stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> OverallStats: ...

    async def export(self, user_id: str) -> Export: ...

    async def import_export(self, document: Path, *, force: bool = False) -> ImportAnswer: ...


class LocalApi:
    """`MemoryApi` over a `Memory` in this process: the use-cases the routes call, answered as they answer."""

    def __init__(self, memory: Memory, settings: Settings) -> None:
        self.memory = memory
        self.settings = settings

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
        """The pair's memory as system_messages."""
        context = await self.memory.reading.system_messages(
            user_id,
            character_id,
            max_tokens=max_tokens,
            persona=persona,
            style=style or DEFAULT_STYLE,
            exclude_agent_id=exclude_agent_id,
            query=query,
        )
        return SystemMessagesAnswer.model_validate(
            {"user_id": user_id, "character_id": character_id, **context.as_json()}
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
        """The memories that answer `q` (none of a running conversation's own, `exclude_agent_id`)."""
        budget = DEFAULT_RECALL_TOKENS if max_tokens is None else max_tokens
        recalled = await self.memory.reading.recall(
            user_id, character_id, q, max_tokens=budget, scope=scope, exclude_session=exclude_agent_id
        )
        return RecallAnswer.of(user_id, character_id, scope, recalled)

    async def facts(self, user_id: str, character_id: str) -> FactsAnswer:
        """The facts remembered for the pair."""
        held = await self.memory.facts.of_pair(user_id, character_id)
        return FactsAnswer(
            user_id=user_id, character_id=character_id, facts=[FactOut.of(fact) for fact in held]
        )

    async def add_messages(
        self, user_id: str, character_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> MessagesAdded:
        """Store messages of the app's own session, read as the route reads them."""
        try:
            body = MessagesBody.model_validate(
                {"session_id": session_id, "messages": [dict(message) for message in messages]}
            )
        except ValidationError as exc:
            raise InvalidField(validation_message(exc)) from None
        return await add_messages(self.memory, self.settings, user_id, character_id, body)

    async def edit_fact(
        self, fact_id: int, *, text: str | None = None, pinned: bool | None = None
    ) -> FactEdited:
        """Change a fact by hand (its old text kept as its history)."""
        return FactEdited(fact=FactOut.of(await self.memory.facts.edit(fact_id, text=text, pinned=pinned)))

    async def fact_history(self, fact_id: int) -> FactHistoryAnswer:
        """Every text a fact had, oldest first."""
        return FactHistoryAnswer.of(fact_id, await self.memory.facts.history(fact_id))

    async def forget(self, user_id: str, character_id: str | None = None) -> ForgetAnswer:
        """Forget a user, or a user with one character."""
        receipt = await self.memory.admin.forget(user_id, character_id)
        return ForgetAnswer(user_id=user_id, character_id=character_id, deleted=receipt)

    async def jobs(self, *, status: JobStatus | None = None, limit: int | None = None) -> JobsAnswer:
        """Background jobs, optionally of one status."""
        jobs = await self.memory.queue.list_jobs(status, JOBS_LISTED if limit is None else limit)
        return JobsAnswer(jobs=[JobOut.of(job) for job in jobs])

    async def search(
        self,
        user_id: str,
        q: str,
        *,
        character_id: str | None = None,
        kinds: Sequence[SearchKind] | None = None,
        limit: int | None = None,
    ) -> UserSearchAnswer:
        """A user's messages, facts and summaries matching `q`."""
        found = await self.memory.admin.search(
            user_id,
            q,
            character_id=character_id,
            kinds=kinds or SEARCH_KINDS,
            limit=SEARCH_LISTED if limit is None else limit,
        )
        return UserSearchAnswer.model_validate(found)

    async def users(
        self, *, q: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> UsersAnswer:
        """A page of users whose id contains `q`, in id order after `cursor`."""
        page = await self.memory.console.users(q, cursor, USERS_LIMIT[0] if limit is None else limit)
        return UsersAnswer.of(q or None, page)

    async def user_stats(self, user_id: str) -> UserStats:
        """One user's statistics."""
        return UserStats.model_validate(await self.memory.admin.user_stats(user_id))

    async def character_stats(
        self, character_id: str, *, since_ms: int | None = None, until_ms: int | None = None
    ) -> CharacterStats:
        """One character's statistics."""
        stats = await self.memory.admin.character_stats(character_id, since_ms=since_ms, until_ms=until_ms)
        return CharacterStats.model_validate(stats)

    async def stats(self, *, since_ms: int | None = None, until_ms: int | None = None) -> OverallStats:
        """The whole service's statistics."""
        return OverallStats.model_validate(
            await self.memory.admin.overall_stats(since_ms=since_ms, until_ms=until_ms)
        )

    async def export(self, user_id: str) -> Export:
        """Everything held about a user."""
        return Export.model_validate(await self.memory.admin.export(user_id))

    async def import_export(self, document: bytes | Path, *, force: bool = False) -> ImportAnswer:
        """Restore an export: a file is read as a stream (any size), twice (checked, then written)."""
        source = file_source(str(document)) if isinstance(document, Path) else text_source(document)
        report = await self.memory.admin.import_export(source, force=force)
        return ImportAnswer.model_validate(report.to_json())


def run_api(args: argparse.Namespace, use: Callable[[MemoryApi], Awaitable[T]]) -> T:
    """Run `use` on the service at --url, or on the database here: one code path for both."""
    if args.url:
        return with_client(args, use)
    settings = settings_from(args)
    return with_memory(args, lambda memory: use(LocalApi(memory, settings)), settings=settings)


def _speaks_it(client: AsyncMemoryClient, local: LocalApi) -> tuple[MemoryApi, MemoryApi]:
    """Both implement `MemoryApi` (checked by mypy here)."""
    return client, local
