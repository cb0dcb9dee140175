"""Property tests: the DSL's build-time types agree with the engine's type checker on random
expressions, and a maintained aggregate answers like a direct computation over random histories
of inserts and deletes."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold import coalesce, col, count, lit, sum, when
from twofold.api.binding import bind
from twofold.api.expr import Expr
from twofold.api.schema import parse_schema
from twofold.engine.typecheck import typecheck_expr
from twofold.testing.profiles import examples

SCHEMA = parse_schema({"i": int, "f": float, "s": str, "b": bool, "n": int},
                      nullable=["n", "s"])

leaves = st.one_of(
    st.sampled_from([col(c) for c in SCHEMA.names]),
    st.integers(-5, 5).map(lit), st.floats(-5, 5, allow_nan=False).map(lit),
    st.sampled_from(["x", "", "ab"]).map(lit), st.booleans().map(lit), st.just(lit(None)),
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.sampled_from(["__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__",
                              "__mod__", "__eq__", "__ne__", "__lt__", "__ge__", "__and__",
                              "__or__"])
    unary = st.sampled_from(["__neg__", "__invert__", "is_null", "is_not_null", "abs"])
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: getattr(t[0], t[1])(t[2])),
        st.tuples(children, unary).map(lambda t: getattr(t[0], t[1])()),
        st.tuples(children, st.sampled_from(["lower", "len_chars"])).map(
            lambda t: getattr(t[0].str, t[1])()),
        st.tuples(children, st.sampled_from([int, float, str])).map(lambda t: t[0].cast(t[1])),
        st.tuples(children, children).map(lambda t: coalesce(t[0], t[1])),
        st.tuples(children, children, children).map(
            lambda t: when(t[0]).then(t[1]).otherwise(t[2])),
    )


exprs = st.recursive(leaves, _extend, max_leaves=6)


@settings(max_examples=examples(300), deadline=None)
@given(exprs)
def test_dsl_types_agree_with_the_engine(e: Expr) -> None:
    try:
        bound = bind(e, SCHEMA, "select")
    except twofold.TypeMismatch:
        return
    engine = typecheck_expr(bound.expr, list(SCHEMA.types))
    assert engine == bound.column_type, (e, bound.expr)


rows = st.tuples(st.integers(0, 3), st.integers(-50, 50))
histories = st.lists(st.tuples(st.booleans(), st.lists(rows, min_size=1, max_size=4)),
                     min_size=1, max_size=6)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=list(HealthCheck))
@given(histories)
def test_maintained_aggregate_matches_direct_computation(
        history: list[tuple[bool, list[tuple[int, int]]]]) -> None:
    present: Counter[tuple[int, int]] = Counter()
    with twofold.open(tick_interval=0.01, timeout=20) as db:
        t = db.create_table("t", {"k": int, "v": int}, nullable=False)
        idx = db.create_index("agg", t.group_by("k").agg(sum("v").alias("total"), count()),
                              key="k", retain_history=60)
        times: list[tuple[int, dict[int, tuple[Any, ...]]]] = []
        for insert, batch in history:
            if not insert:
                batch = [r for r in batch if present[r] > 0][:1] or batch[:0]
                if not batch:
                    continue
                ts = t.delete(batch).timestamp
                present.subtract(batch)
            else:
                ts = t.insert(batch).timestamp
                present.update(batch)
            want: dict[int, list[int]] = defaultdict(list)
            for (k, v), n in present.items():
                want[k].extend([v] * n)
            times.append((ts, {k: (k, sum_(vs), len(vs)) for k, vs in want.items() if vs}))
        for ts, want_at in times:
            got = {r[0]: r for r in idx.collect(as_of=ts).rows}
            assert got == want_at
            assert {r[0]: r for r in idx.lookup(0, 1, 2, 3, as_of=ts).rows} == want_at


def sum_(values: list[int]) -> int:
    total = 0
    for v in values:
        total += v
    return total
