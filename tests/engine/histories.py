"""Hypothesis strategies for random, valid update histories (multiplicities never negative)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from twofold.protocol import ColumnType, GlobalId, RelationDesc

INT = ColumnType("int")
STR = ColumnType("str")
FLOAT = ColumnType("float")
A = GlobalId.user(1)
B = GlobalId.user(2)
DESC_A = RelationDesc(["k", "v"], [INT, INT])
DESC_B = RelationDesc(["k", "s"], [INT, STR])

Update = tuple[list[Any], int, int]


@st.composite
def history(draw: st.DrawFn, row: st.SearchStrategy[list[Any]], max_time: int = 4) -> list[Update]:
    """Inserts and retractions of live rows at times 0..max_time, several per time."""
    live: list[list[Any]] = []
    out: list[Update] = []
    for t in range(max_time + 1):
        for _ in range(draw(st.integers(0, 4))):
            if live and draw(st.booleans()) and draw(st.booleans()):
                r = live.pop(draw(st.integers(0, len(live) - 1)))
                out.append((r, t, -1))
            else:
                r = draw(row)
                live.append(r)
                out.append((r, t, 1))
    return out


small_int = st.one_of(st.none(), st.integers(-3, 3))
rows_a = st.lists(small_int, min_size=2, max_size=2)
rows_b = st.tuples(st.integers(-3, 3), st.sampled_from(["a", "b", "ab", "", "é"])).map(list)


@st.composite
def inputs_ab(draw: st.DrawFn) -> dict[GlobalId, tuple[RelationDesc, list[Update]]]:
    return {A: (DESC_A, draw(history(rows_a))), B: (DESC_B, draw(history(rows_b)))}
