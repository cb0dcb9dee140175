"""The pure compaction planner: which parts merge, decided from metadata alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import Frontier
from twofold.storage import PartInfo
from twofold.storage.compaction import FACTOR, behind, plan_compaction, settled
from twofold.testing.profiles import examples


def parts_from(widths: list[int], counts: list[int], settled_upto: int) -> list[PartInfo]:
    """Adjacent parts; the first `settled_upto` were produced by an earlier compaction."""
    out, lower = [], 0
    for i, (w, n) in enumerate(zip(widths, counts, strict=False)):
        upper = lower + w
        out.append(PartInfo(i, lower, Frontier.at(upper), upper if i < settled_upto else 0, n))
        lower = upper
    return out


def test_nothing_behind_since_means_no_plan() -> None:
    parts = parts_from([5, 5], [10, 10], 0)
    assert plan_compaction(parts, Frontier.at(4)) == []
    assert plan_compaction(parts, Frontier.at(5)) == [0]


def test_a_fresh_run_absorbs_small_settled_parts_only() -> None:
    parts = parts_from([1, 1, 1, 1], [1000, 10, 5, 5], 2)
    # Fresh parts 2 and 3 (10 updates) absorb part 1 (10 <= 2 * 10), not part 0 (1000).
    assert plan_compaction(parts, Frontier.at(4)) == [1, 2, 3]


def test_settled_parts_alone_are_left_alone() -> None:
    parts = parts_from([1, 1], [10, 10], 2)
    assert plan_compaction(parts, Frontier.at(50)) == []


def test_empty_since_makes_every_closed_part_eligible() -> None:
    parts = [*parts_from([1, 1], [10, 10], 0), PartInfo(9, 2, Frontier.empty(), 0, 3)]
    assert plan_compaction(parts, Frontier.empty()) == [0, 1]
    assert behind(parts[0], Frontier.empty()) and not behind(parts[2], Frontier.empty())


@settings(max_examples=examples(200))
@given(
    widths=st.lists(st.integers(1, 5), min_size=1, max_size=12),
    counts=st.lists(st.integers(0, 100), min_size=12, max_size=12),
    settled_upto=st.integers(0, 12),
    since=st.integers(0, 70),
)
def test_plan_is_a_contiguous_run_of_parts_behind_since(
    widths: list[int], counts: list[int], settled_upto: int, since: int
) -> None:
    parts = parts_from(widths, counts, settled_upto)
    plan = plan_compaction(parts, Frontier.at(since))
    if not plan:
        eligible = [p for p in parts if behind(p, Frontier.at(since))]
        assert all(settled(p) for p in eligible)
        return
    ids = [p.part_id for p in parts]
    first = ids.index(plan[0])
    assert plan == ids[first:first + len(plan)], "adjacent parts only"
    assert all(behind(parts[i], Frontier.at(since)) for i in range(first, first + len(plan)))
    last = first + len(plan)
    assert last == len(parts) or not behind(parts[last], Frontier.at(since)), "runs to the end"
    assert any(not settled(parts[i]) for i in range(first, last)), "never rewrites for nothing"
    if first > 0:  # stopped absorbing because the next older part is much larger
        run = sum(parts[i].count for i in range(first, last))
        assert parts[first - 1].count > FACTOR * run or not behind(parts[first - 1],
                                                                   Frontier.at(since))
