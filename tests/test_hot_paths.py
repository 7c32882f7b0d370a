"""The endpoint's hot paths give what their plain forms give (issue 28: cut the work, not the answers)."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence

from agent_memory.core import recall
from agent_memory.core.alignment import MAX_POSITIONS_PER_FINGERPRINT, Key, align, same_message
from agent_memory.core.domain import Summary
from agent_memory.core.terms import cached_terms


def plain_align(stored: Sequence[Key | str], window: Sequence[Key | str]) -> int | None:
    """`align` with every vote checked by `same_message`, as it was written first."""
    if not stored or not window:
        return None
    positions: dict[str, list[int]] = defaultdict(list)
    for index, item in enumerate(stored):
        positions[item if isinstance(item, str) else item[0]].append(index)
    votes: Counter[int] = Counter()
    for j, item in enumerate(window):
        fp = item if isinstance(item, str) else item[0]
        for p in positions.get(fp, ())[-MAX_POSITIONS_PER_FINGERPRINT:]:
            if same_message(stored[p], item):
                votes[p - j] += 1
    for offset, _ in sorted(votes.items(), key=lambda item: (-item[1], -item[0])):
        start, stop = max(0, offset), min(len(stored), offset + len(window))
        if all(same_message(stored[p], window[p - offset]) for p in range(start, stop)):
            return offset
    return None


def test_align_votes_as_same_message_does(rounds: Callable[[int], int]) -> None:
    rng = random.Random(3)
    placed = 0
    for _ in range(rounds(20_000)):
        keys, weights = KEYS[rng.randint(1, 4)]
        stored = rng.choices(keys, cum_weights=weights, k=rng.randint(0, 8))
        window = rng.choices(keys, cum_weights=weights, k=rng.randint(0, 5))
        found = align(stored, window)
        assert found == plain_align(stored, window), (stored, window)
        placed += found is not None
    assert placed > rounds(5_000)


def key_space(count: int) -> tuple[list[Key | str], list[float]]:
    """Every key over `count` fingerprints, with cumulative weights: a bare fingerprint one time in
    ten, else a (fingerprint, turn, position, role) tuple, each equally likely within its kind
    (drawn with one `choices` per list: drawing each field apart took most of the test's time)."""
    fps = [f"f{i}" for i in range(count)]
    roles = ["user", "~user", "assistant", "~assistant"]
    tuples: list[Key | str] = [
        (fp, turn, position, role)
        for fp in fps
        for turn in (None, 1, 2)
        for position in (None, 1, 2)
        for role in roles
    ]
    weights = [0.1 / len(fps)] * len(fps) + [0.9 / len(tuples)] * len(tuples)
    return [*fps, *tuples], list(itertools.accumulate(weights))


KEYS = {count: key_space(count) for count in range(1, 5)}


def plain_scored(summaries: Sequence[Summary], idfs: Mapping[str, float]) -> list[recall.Scored]:
    """Every statement of every summary scored, as `_scored` did first."""
    scored: list[recall.Scored] = []
    for summary in summaries:
        for text, at_ms in recall.summary_lines(summary):
            score = recall.bm25(text, idfs, 7.0)
            if score > 0:
                scored.append((score, at_ms, text, summary))
    return scored


def test_a_summary_scores_only_its_statements_that_hold_a_term_of_the_question(
    rounds: Callable[[int], int],
) -> None:
    rng = random.Random(5)
    words = [
        "dog",
        "Biscuit",
        "trip",
        "Valencia",
        "ran",
        "morning",
        "heating",
        "fridge",
        "Thursday",
        "sister",
        "我",
        "昨天",
        "跑了",
        "马拉松",
    ]
    found = 0
    for _ in range(rounds(500)):
        lines = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.15:
                lines.append(f"## 2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}")
            lines.append("- " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
        summary = Summary("u", "luna", "\n".join(lines), 1, 1_700_000_000_000, 5, "offline", None, 1,
                          1_700_000_000_000, {})  # fmt: skip
        question = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        weighted = recall.weighted_terms(question)
        idfs = recall.weighted_idfs(weighted, {term: rng.randint(0, 50) for term, _ in weighted}, 100,
                                    max_frequency=1000)  # fmt: skip
        expected = plain_scored([summary], idfs)
        assert recall._scored([], [], [summary], idfs, 7.0) == expected
        found += len(expected)
    assert found > rounds(500)


def plain_diverse(found: list[recall.Scored]) -> list[recall.Scored]:
    """Near repeats weighed pair by pair on bit sets of their words, as `_diverse` did first."""
    bits: dict[str, int] = {}
    held: list[tuple[int, int]] = []
    out: list[recall.Scored] = []
    for score, at_ms, text, source in found[: recall.DIVERSE_TOP]:
        said = 0
        for term in cached_terms(text):
            said |= 1 << bits.setdefault(term, len(bits))
        size = said.bit_count()
        near = max(
            (
                (said & other).bit_count() / (size + count - (said & other).bit_count())
                for other, count in held
            ),
            default=0.0,
        )
        if len(held) < recall.DIVERSE_HELD:
            held.append((said, size))
        out.append((round(score * (1 - recall.REPEAT_DISCOUNT * near), 4), at_ms, text, source))
    out.sort(key=lambda entry: (-entry[0], -entry[1]))
    return out + found[recall.DIVERSE_TOP :]


def test_near_repeats_are_weighed_as_pair_by_pair_comparison_weighs_them(
    rounds: Callable[[int], int],
) -> None:
    rng = random.Random(7)
    words = [
        "dog",
        "Biscuit",
        "walk",
        "walked",
        "park",
        "rain",
        "Valencia",
        "trip",
        "June",
        "sister",
        "Ana",
        "knee",
        "run",
        "我",
        "昨天",
        "跑了",
        "马拉松",
        "the",
        "and",
    ]
    discounted = 0
    for _ in range(rounds(2_000)):
        found: list[recall.Scored] = []
        for index in range(rng.randint(0, recall.DIVERSE_TOP + 10)):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) + f" w{rng.randint(0, 3)}"
            # Few distinct scores and times: ties must keep their order as before.
            found.append(
                (
                    round(rng.choice((1.0, 2.5, 3.25, rng.random() * 4)), 4),
                    rng.choice((1, 2, index)),
                    text,
                    None,
                )
            )
        found.sort(key=lambda entry: (-entry[0], -entry[1]))
        expected = plain_diverse(found)
        assert recall._diverse(found) == expected
        discounted += sum(entry not in found for entry in expected)
    assert discounted > rounds(10_000)


def test_two_turns_without_a_word_to_match_are_not_a_division_by_zero() -> None:
    # Semantic hits need not share a word with the question: "Yes." and "Okay!" have no terms at all.
    found: list[recall.Scored] = [(1.0, 2, "Yes.", None), (0.5, 1, "Okay!", None)]
    assert recall._diverse(found) == found
