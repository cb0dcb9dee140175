"""TopK where random search is a coin flip: NULLs and ties in the order key, both directions
and both NULL placements, pages at every edge (empty, one row, splitting a tie, straddling a
multiplicity, past the end), grouped by a key that is NULL in some rows — each at every time of
a history that inserts and retracts, engine against DuckDB (`test_differential.check`).

The tie-break (after the order keys, every column ascending with NULLs last,
`docs/semantics.md`) decides which of several rows with the same order key a page keeps; the
random differential caught a NULLS-FIRST tie-break mutant in only half its runs. Here every
window boundary falls inside a group of ties whose tie-break column holds NULLs and values.
"""

from __future__ import annotations

import pytest
from plangen import Scenario
from test_differential import U1, Update, _desc, check

from twofold.protocol import Get, OrderKey, RelationDesc, TopK

# (k, s): k ties among NULLs and among 1s; s (the tie-break) mixes NULLs and strings; (None,
# "b") and (2, "a") carry multiplicities > 1, so a page edge can cut through one row.
_ROWS: tuple[RelationDesc, list[Update]] = (
    _desc("int", "str"),
    [
        ([1, "a"], 0, 1), ([None, "b"], 0, 2), ([None, None], 0, 1), ([2, "c"], 0, 1),
        ([1, None], 0, 1), ([None, "a"], 0, 1),
        ([2, "a"], 1, 2), ([None, "b"], 1, -1),
        ([1, "a"], 2, -1), ([3, None], 2, 1), ([1, "b"], 2, 1),
        ([None, None], 3, -1), ([2, "a"], 3, -1),
    ],
)  # fmt: skip
TIMES = [0, 1, 2, 3]

PAGES = [
    (None, 0),  # everything
    (0, 0),  # nothing
    (1, 0),  # the first row only: which of the tied rows is first
    (2, 0),  # cuts the first group of ties
    (3, 1),  # an offset inside the ties
    (2, 3),  # a page in the middle, across a multiplicity
    (1, 6),  # the last row
    (None, 2),  # no limit, an offset
    (4, 8),  # past the end
    (None, 9),  # nothing left after the offset
]


def _scenario(plan: TopK) -> Scenario:
    return Scenario({U1: _ROWS}, plan, TIMES)


@pytest.mark.parametrize(("limit", "offset"), PAGES)
@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("nulls_last", [False, True], ids=["nulls_first", "nulls_last"])
def test_topk_page_over_nulls_and_ties(
    desc: bool, nulls_last: bool, limit: int | None, offset: int
) -> None:
    plan = TopK(Get(U1), [], [OrderKey(0, desc=desc, nulls_last=nulls_last)], limit=limit,
                offset=offset)  # fmt: skip
    check(_scenario(plan), None)


@pytest.mark.parametrize("desc", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("nulls_last", [False, True], ids=["nulls_first", "nulls_last"])
@pytest.mark.parametrize("steps", [None, [2, 4]], ids=["step_per_time", "multi_time_steps"])
def test_topk_per_group_with_a_null_group_and_nullable_order(
    desc: bool, nulls_last: bool, steps: list[int] | None
) -> None:
    # Grouped by k (NULL is a group of its own), ordered by the nullable s.
    plan = TopK(Get(U1), [0], [OrderKey(1, desc=desc, nulls_last=nulls_last)], limit=1, offset=1)
    check(_scenario(plan), steps)


@pytest.mark.parametrize("second_nulls_last", [False, True])
def test_topk_two_order_keys_with_opposite_null_placement(second_nulls_last: bool) -> None:
    plan = TopK(Get(U1), [], [OrderKey(0, nulls_last=False),
                              OrderKey(1, desc=True, nulls_last=second_nulls_last)],
                limit=3, offset=1)  # fmt: skip
    check(_scenario(plan), None)
