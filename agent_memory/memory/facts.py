"""Facts by hand: a pair's facts read, said, edited (their history kept) and deleted."""

from __future__ import annotations

from dataclasses import dataclass

from agent_memory.core.domain import Fact, FactScope, FactVersion
from agent_memory.core.facts import clean_text
from agent_memory.errors import InvalidField, NotFound
from agent_memory.store import Store


@dataclass(frozen=True, slots=True)
class AddedFact:
    """A fact said by hand, and whether it is new (False: the same fact was already held)."""

    fact: Fact
    created: bool


class Facts:
    """A pair's facts, as the API and the console change them by hand."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def of_pair(self, user_id: str, character_id: str) -> list[Fact]:
        """The facts remembered for the pair, the user-wide ones included."""
        return await self.store.read(lambda view: view.facts.of_pair(user_id, character_id))

    async def add(
        self, user_id: str, character_id: str, text: str, scope: FactScope = "character"
    ) -> AddedFact:
        """Remember a fact said by hand: pinned, so condensing never changes or removes it."""
        cleaned = clean_text(text)
        fact, created = await self.store.write(
            lambda tx: tx.facts.add(user_id, character_id, cleaned, scope=scope, pinned=True, origin="manual")
        )
        return AddedFact(fact, created)

    async def edit(self, fact_id: int, *, text: str | None = None, pinned: bool | None = None) -> Fact:
        """Change a fact by hand: its text (the old one kept as its history) and whether it is
        pinned; a new text is said by hand, so it is pinned unless `pinned` says otherwise."""
        if text is None and pinned is None:
            raise InvalidField("give the fact's new text, pinned (true or false), or both")
        cleaned = None if text is None else clean_text(text)
        keep = pinned if pinned is not None or cleaned is None else True
        fact = await self.store.write(lambda tx: tx.facts.edit(fact_id, text=cleaned, pinned=keep))
        if fact is None:
            raise NotFound(f"no fact with id {fact_id}")
        return fact

    async def history(self, fact_id: int) -> list[FactVersion]:
        """Every text a fact had and when it held, oldest first (the current one last, valid_to None)."""
        versions = await self.store.read(lambda view: view.facts.history(fact_id))
        if not versions:
            raise NotFound(f"no fact with id {fact_id}")
        return versions

    async def delete(self, fact_id: int) -> None:
        """Forget one fact (and every text it had), or NotFound."""
        if not await self.store.write(lambda tx: tx.facts.delete(fact_id)):
            raise NotFound(f"no fact with id {fact_id}")
