"""What every condenser shares: the job it gets, the update it gives, the protocol, the sanitiser.

A condenser turns one (user, character) memory (previous summary, remembered facts) and
the messages since its watermark into an update: a new rolling summary and fact changes.
`sanitize` is the one gate every update passes before it is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent_memory.core.domain import Message
from agent_memory.core.facts import MAX_FACT_CHARS, clean_text, fact_key
from agent_memory.errors import InvalidField

# Any condenser's summary, at most (the offline one stops at 5,600: ~1,400 tokens of English).
SUMMARY_MAX_CHARS = 6000

Scope = Literal["user", "character"]
Method = Literal["llm", "offline"]
FactText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_FACT_CHARS)]
SummaryText = Annotated[str, StringConstraints(strip_whitespace=True, max_length=SUMMARY_MAX_CHARS)]


# -- what goes in --------------------------------------------------------------------------
class FactIn(BaseModel):
    """A fact already remembered, as the condenser sees it."""

    id: int
    text: str
    scope: Scope = "user"
    pinned: bool = False


class CondenseInput(BaseModel):
    """One condensing job: the memory so far and the messages since the watermark."""

    user_id: str
    character_id: str
    previous_summary: str | None = None
    facts: list[FactIn] = Field(default_factory=list)
    # The stored turns since the watermark, in conversation order.
    messages: list[Message] = Field(default_factory=list)
    # How many of the pair's indexed turns use each term of these messages and of the previous
    # summary, and how many turns the index holds: what is common talk in this pair's history.
    term_turns: dict[str, int] = Field(default_factory=dict)
    indexed_turns: int = 0


# -- what comes out ------------------------------------------------------------------------
class FactAdd(BaseModel):
    """A new fact to remember."""

    text: FactText = Field(description="One durable fact, a short standalone sentence.")
    scope: Scope = Field(
        description='"user" for facts true about the user everywhere; '
        '"character" for facts about the relationship with this character.'
    )


class FactUpdate(BaseModel):
    """A new text for a remembered, unpinned fact."""

    id: int = Field(description="The id of a remembered fact that is not pinned.")
    text: FactText = Field(description="The corrected fact.")


class CondenseOutput(BaseModel):
    """The update to a memory: the new summary and the fact changes."""

    summary: SummaryText = Field(
        description="The updated rolling summary, in the language of the conversation."
    )
    add_facts: list[FactAdd] = Field(default_factory=list, description="New facts to remember.")
    update_facts: list[FactUpdate] = Field(
        default_factory=list, description="Remembered facts whose text changed."
    )
    remove_facts: list[int] = Field(
        default_factory=list, description="Ids of remembered facts that are no longer true."
    )

    def change_count(self) -> int:
        """How many fact changes the update makes."""
        return len(self.add_facts) + len(self.update_facts) + len(self.remove_facts)


class CondenseResult(BaseModel):
    """A condenser's answer: the update plus how it was made."""

    model_config = ConfigDict(frozen=True)

    output: CondenseOutput
    method: Method
    model: str
    tokens_sent: int = 0
    fallback_reason: str | None = None
    # The model's fact decisions by kind (add, update, delete, none) and those it made that
    # could not be used (ignored: malformed, or aimed at an unknown or pinned fact).
    fact_decisions: dict[str, int] = Field(default_factory=dict)

    # Shortcuts, so callers can read `result.summary` as well as `result.output.summary`.
    @property
    def summary(self) -> str:
        """The new rolling summary."""
        return self.output.summary

    @property
    def add_facts(self) -> list[FactAdd]:
        """Facts to add."""
        return self.output.add_facts

    @property
    def update_facts(self) -> list[FactUpdate]:
        """Facts to rewrite."""
        return self.output.update_facts

    @property
    def remove_facts(self) -> list[int]:
        """Ids of facts to delete."""
        return self.output.remove_facts


@runtime_checkable
class Condenser(Protocol):
    """Anything that turns a job into a memory update."""

    # Whether it reads the pair's word counts (`CondenseInput.term_turns`): only then does the
    # job read them from the recall index.
    reads_history: bool

    async def condense(self, job: CondenseInput) -> CondenseResult:
        """Condense `job`; raise an `LLMError` rather than return half an update."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


# -- helpers every condenser uses --------------------------------------------------------------
def unchanged(job: CondenseInput) -> CondenseOutput:
    """The update when nothing new was said: the memory stays as it is."""
    return CondenseOutput(summary=(job.previous_summary or "")[:SUMMARY_MAX_CHARS])


def _clean(text: str) -> str | None:
    """A fact text as `core.facts` stores it, or None when it is not a fact."""
    try:
        return clean_text(text)
    except InvalidField:
        return None


def sanitize(output: CondenseOutput, facts: Sequence[FactIn]) -> CondenseOutput:
    """Drop changes aimed at pinned or unknown facts, no-op updates and duplicate additions.

    Fact texts are cleaned as the API cleans them and compared by `core.facts.fact_key`,
    the key the store keeps them unique by.
    """
    by_id = {fact.id: fact for fact in facts}
    editable = {fact.id for fact in facts if not fact.pinned}

    removed: list[int] = []
    for fact_id in output.remove_facts:
        if fact_id in editable and fact_id not in removed:
            removed.append(fact_id)

    updated: list[FactUpdate] = []
    seen_updates: set[int] = set()
    for update in output.update_facts:
        # A fact both updated and removed is removed: deleting is the model's stronger claim.
        if update.id not in editable or update.id in removed or update.id in seen_updates:
            continue
        text = _clean(update.text)
        if text is None or fact_key(text) == fact_key(by_id[update.id].text):
            continue
        seen_updates.add(update.id)
        updated.append(FactUpdate(id=update.id, text=text))

    known = {fact_key(fact.text) for fact in facts if fact.id not in removed}
    known.update(fact_key(update.text) for update in updated)
    added: list[FactAdd] = []
    for fact in output.add_facts:
        text = _clean(fact.text)
        key = fact_key(text) if text is not None else ""
        if text is not None and key not in known:
            known.add(key)
            added.append(FactAdd(text=text, scope=fact.scope))

    return CondenseOutput(summary=output.summary, add_facts=added, update_facts=updated, remove_facts=removed)
