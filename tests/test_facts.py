"""One fact key, one limit, one sanitiser: the API, the store, the LLM's and the offline condenser agree."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import stored_message
from sqlite_utils import Database

from agent_memory.condense.base import CondenseInput, CondenseOutput, FactAdd, FactIn, FactUpdate, sanitize
from agent_memory.condense.offline import condense_offline
from agent_memory.core.facts import MAX_FACT_CHARS, clean_text, fact_key
from agent_memory.errors import InvalidField
from agent_memory.store.sqlite import SQLiteStore
from agent_memory.store.sqlite.migrations import migrations

pytestmark = pytest.mark.postgres

PAIR = "/v1/users/u-keys/characters/luna"

# Pairs the two former keys disagreed on, each in one direction: all are one fact now.
SAME = [
    ("ＣＡＴ", "cat"),  # full-width compatibility forms
    ("Ｍｉｓｏ is ２ years old", "miso is 2 years old"),
    ("e-mail", "e mail"),  # inner punctuation
    ("The user's e-mail is alice@example.com", "the user s e mail is alice example com"),
    ("Likes tea.", "likes tea"),  # edge punctuation
    ("The user’s name is Alice", "The user's name is Alice!"),  # curly and straight quotes
    ("Straße", "STRASSE"),  # full case folding
    ("  lives\tin   Lisbon ", "Lives in Lisbon"),  # spacing
    ("我叫小雨。", "我叫小雨"),  # CJK punctuation
]
DIFFERENT = [
    ("email", "e mail"),  # a word split is a different text
    ("Likes C++", "Likes C"),  # symbols carry meaning
    ("Owes $5", "Owes 5"),
    ("Loves 🐱", "Loves 🐶"),
    ("café", "cafe"),  # accents are letters
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_one_key_for_texts_that_say_the_same(one: str, other: str) -> None:
    assert fact_key(one) == fact_key(other) != ""


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_different_keys_for_texts_that_differ(one: str, other: str) -> None:
    assert fact_key(one) != fact_key(other)


def test_key_of_punctuation_only_is_empty() -> None:
    assert fact_key(" …!?—「」 ") == ""


def test_clean_text_collapses_spacing_and_keeps_the_one_limit() -> None:
    assert clean_text("  has\n a   cat ") == "has a cat"
    assert clean_text("x" * MAX_FACT_CHARS) == "x" * MAX_FACT_CHARS
    with pytest.raises(InvalidField, match=str(MAX_FACT_CHARS)):
        clean_text("x" * (MAX_FACT_CHARS + 1))
    for empty in ("", "   ", "...", "——"):
        with pytest.raises(InvalidField):
            clean_text(empty)


def test_the_llm_may_say_what_the_api_accepts() -> None:
    longest = "y" * MAX_FACT_CHARS
    output = CondenseOutput(summary="s", add_facts=[FactAdd(text=longest, scope="user")])
    assert sanitize(output, []).add_facts[0].text == longest


# -- the condensers use the key ------------------------------------------------------------------
@pytest.mark.parametrize(("one", "other"), SAME)
def test_sanitize_drops_an_addition_equal_by_the_key(one: str, other: str) -> None:
    known = [FactIn(id=1, text=one, scope="user")]
    output = CondenseOutput(summary="s", add_facts=[FactAdd(text=other, scope="user")])
    assert sanitize(output, known).add_facts == []


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_sanitize_keeps_an_addition_that_differs(one: str, other: str) -> None:
    known = [FactIn(id=1, text=one, scope="user")]
    output = CondenseOutput(summary="s", add_facts=[FactAdd(text=other, scope="user")])
    assert [fact.text for fact in sanitize(output, known).add_facts] == [other]


def test_sanitize_cleans_texts_and_drops_what_is_no_fact() -> None:
    known = [FactIn(id=1, text="Works nights", scope="user")]
    output = CondenseOutput(
        summary="s",
        add_facts=[FactAdd(text="has  a\ncat", scope="user"), FactAdd(text="…", scope="user")],
        update_facts=[FactUpdate(id=1, text="?!")],
    )
    clean = sanitize(output, known)
    assert [fact.text for fact in clean.add_facts] == ["has a cat"]
    assert clean.update_facts == []


def test_offline_condenser_does_not_repeat_a_fact_equal_by_the_key() -> None:
    said = stored_message(1, "user", "My name is Alice.", at_ms=1_793_736_900_000)
    fresh = CondenseInput(user_id="u", character_id="c", messages=[said])
    (added,) = condense_offline(fresh).add_facts
    known = [FactIn(id=1, text="ＴＨＥ ＵＳＥＲ’Ｓ ＮＡＭＥ ＩＳ ＡＬＩＣＥ…", scope="user")]
    assert fact_key(known[0].text) == fact_key(added.text)
    again = CondenseInput(user_id="u", character_id="c", messages=[said], facts=known)
    assert condense_offline(again).add_facts == []


# -- the store is unique by the key ---------------------------------------------------------------
async def test_the_api_stores_one_fact_per_key(service) -> None:
    status, body = await service.api("POST", f"{PAIR}/facts", json={"text": "My e-mail is alice@example.com"})
    assert status == 201
    first = body["fact"]["id"]
    for same in ("my e mail is alice example com", "ＭＹ Ｅ-ＭＡＩＬ ＩＳ alice@example.com."):
        status, body = await service.api("POST", f"{PAIR}/facts", json={"text": same})
        assert (status, body["created"], body["fact"]["id"]) == (200, False, first)
    status, body = await service.api("POST", f"{PAIR}/facts", json={"text": "My email is alice@example.com"})
    assert status == 201 and body["fact"]["id"] != first


async def test_the_api_accepts_the_one_limit(service) -> None:
    status, _ = await service.api("POST", f"{PAIR}/facts", json={"text": "z" * MAX_FACT_CHARS})
    assert status == 201
    status, body = await service.api("POST", f"{PAIR}/facts", json={"text": "z" * (MAX_FACT_CHARS + 1)})
    assert status in (400, 422) and "error" in body


# -- existing databases are re-keyed ---------------------------------------------------------------
def old_key(text: str) -> str:
    """The key facts were stored under before the one key (NFKC, casefold, edge punctuation)."""
    import re
    import unicodedata

    folded = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold())
    return folded.strip(" .。!！?？,，;；:：-—\"'“”‘’")


def test_migration_rekeys_facts_and_merges_those_the_key_finds_equal(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    migrations.apply(Database(conn), stop_before="m010_fact_keys")
    facts = [
        # (id, character, text, pinned, updated_ms)
        (1, "luna", "Has an e-mail address", 0, 100),
        (2, "luna", "has an e mail address", 0, 200),  # newest of the two: kept
        (3, "luna", "Likes the cat-café", 1, 100),  # pinned: kept though older
        (4, "luna", "likes the cat café", 0, 300),
        (5, "kai", "has an e mail address", 0, 50),  # another character: not a duplicate
        (6, "luna", "#", 0, 100),  # no key under the new rules: keeps its old one
        (7, "luna", "Lives in Lisbon", 0, 100),  # already keyed alike
    ]
    conn.executemany(
        "INSERT INTO facts (id, user_id, character_id, text, norm, pinned, origin, created_ms, "
        "updated_ms) VALUES (?, 'u-old', ?, ?, ?, ?, 'llm', ?, ?)",
        [(i, c, text, old_key(text), p, at, at) for i, c, text, p, at in facts],
    )
    conn.commit()
    conn.close()

    store = SQLiteStore(path)
    store.open()
    try:
        found = store.read_now(lambda view: view.search.user("u-old", "address"))
        assert sorted(r["text"] for r in found["results"]) == [
            "has an e mail address", "has an e mail address",
        ]  # fmt: skip
    finally:
        store.close()

    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT id, norm, pinned FROM facts ORDER BY id").fetchall()
    assert rows == [
        (2, "has an e mail address", 0),
        (3, "likes the cat café", 1),
        (5, "has an e mail address", 0),
        (6, "#", 0),
        (7, "lives in lisbon", 0),
    ]
    assert conn.execute(
        "SELECT count(*) FROM _sqlite_migrations WHERE name = 'm010_fact_keys'"
    ).fetchone() == (1,)


def test_an_ascii_fact_key_keeps_letters_digits_and_symbols_and_spaces_the_rest() -> None:
    from agent_memory.core.facts import fact_key

    every = "".join(chr(code) for code in range(32, 127))
    assert (
        fact_key(every) == "$ + 0123456789 <=> abcdefghijklmnopqrstuvwxyz ^ `abcdefghijklmnopqrstuvwxyz | ~"
    )
    assert fact_key("E-mail\tme!\n") == "e mail me"
