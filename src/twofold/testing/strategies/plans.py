"""Strategies for scalar expressions (`protocol/expr.py`) and plans (`protocol/plan.py`):
recursive values of bounded depth, well-formed but not type-checked against their inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from hypothesis import strategies as st

from twofold.protocol import (
    FUNCTION_ARITY,
    Aggregate,
    Call,
    Column,
    Constant,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    Literal,
    MapFilterProject,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    RowSetFinishing,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.testing.strategies._common import (
    MAX_COLUMN,
    S,
    _columns,
    _memo,
    _small_lists,
)
from twofold.testing.strategies.values import (
    global_ids,
    scalars,
    updates,
)

# --- expressions ---------------------------------------------------------------------------

_FUNCTIONS = sorted(FUNCTION_ARITY)


def _call_of(func: str) -> Callable[[list[Expr]], Expr]:
    return lambda args: Call(func=func, args=args)  # type: ignore[arg-type]


@_memo
def columns(max_column: int = MAX_COLUMN) -> S[Column]:
    """`Column` references to indexes in `[0, max_column]`."""
    return st.builds(Column, _columns(max_column))


@_memo
def literals() -> S[Literal]:
    return st.builds(Literal, scalars())


@_memo
def calls(args: S[Expr] | None = None) -> S[Call]:
    """A `Call` of every function with arguments from `args` (leaves when `None`), each with
    its arity (`coalesce`: one to three arguments)."""
    arg = st.one_of(columns(), literals()) if args is None else args
    by_func = []
    for func in _FUNCTIONS:
        arity = FUNCTION_ARITY[func]
        lo, hi = (1, 3) if arity is None else (arity, arity)
        by_func.append(st.lists(arg, min_size=lo, max_size=hi).map(_call_of(func)))
    return cast(S[Call], st.one_of(by_func))


@_memo
def exprs(max_depth: int = 3, *, max_column: int = MAX_COLUMN) -> S[Expr]:
    """Scalar expressions of depth at most `max_depth` (a leaf has depth 0); every `Call` has
    the arity `FUNCTION_ARITY` gives its function (`coalesce`: one to three arguments)."""
    leaves: S[Expr] = st.one_of(columns(max_column), literals())
    levels = [leaves]
    for _ in range(max_depth):
        levels.append(st.one_of(leaves, calls(levels[-1])))
    # The depth is drawn first: with one `one_of(leaves, calls)` per level, Hypothesis's draws
    # went to `Call` 298 times in 300 once there were ~60 functions, so top-level leaves
    # (and the shrinks toward them) were almost never tried.
    return st.integers(0, max_depth).flatmap(lambda d: levels[d])


# --- plans ---------------------------------------------------------------------------------


@_memo
def order_keys(max_column: int = MAX_COLUMN) -> S[OrderKey]:
    return st.builds(OrderKey, _columns(max_column), st.booleans(), st.booleans())


@_memo
def aggregates(max_column: int = MAX_COLUMN) -> S[Aggregate]:
    """`Aggregate`s; only `count` goes without a column."""
    funcs = st.sampled_from(["count", "sum", "min", "max"])
    return st.one_of(
        st.builds(Aggregate, st.just("count"), st.none(), st.booleans()),
        st.builds(Aggregate, funcs, _columns(max_column), st.booleans()),
    )


@_memo
def _projects(max_column: int) -> S[list[int] | None]:
    return st.one_of(st.none(), _small_lists(_columns(max_column), 4))


@_memo
def map_filter_projects(max_column: int = MAX_COLUMN, expr_depth: int = 2) -> S[MapFilterProject]:
    e = exprs(expr_depth, max_column=max_column)
    return st.builds(
        MapFilterProject, _small_lists(e, 2), _small_lists(e, 2), _projects(max_column)
    )


@_memo
def row_set_finishings(max_column: int = MAX_COLUMN) -> S[RowSetFinishing]:
    return st.builds(
        RowSetFinishing,
        _small_lists(order_keys(max_column), 3),
        st.one_of(st.none(), st.integers(0, 10)),
        st.integers(0, 10),
        _projects(max_column),
    )


# Every plan-node strategy takes the strategy of its inputs (`plan_leaves()` when `None`), so
# `plans()` can stack them level by level into a tree of bounded depth.


@_memo
def gets(ids: S[GlobalId] | None = None) -> S[Get]:
    return st.builds(Get, global_ids() if ids is None else ids)


@_memo
def constants() -> S[Constant]:
    return st.builds(Constant, _small_lists(updates(), 3))


@_memo
def plan_leaves(ids: S[GlobalId] | None = None) -> S[Plan]:
    """`Get` (of `ids`, any id when `None`) and `Constant` plans."""
    return st.one_of(gets(ids), constants())


@_memo
def mfps(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Mfp]:
    e = exprs(2, max_column=max_column)
    return st.builds(
        Mfp,
        plan_leaves() if inputs is None else inputs,
        _small_lists(e, 2),
        _small_lists(e, 2),
        _projects(max_column),
    )


def _join(left: Plan, right: Plan, keys: list[tuple[int, int]]) -> Join:
    return Join(left, right, [k for k, _ in keys], [k for _, k in keys])


@_memo
def joins(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Join]:
    """`Join`s of two `inputs` on keys of equal length."""
    i = plan_leaves() if inputs is None else inputs
    cols = _columns(max_column)
    return st.builds(_join, i, i, _small_lists(st.tuples(cols, cols), 3))


@_memo
def reduces(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Reduce]:
    return st.builds(
        Reduce,
        plan_leaves() if inputs is None else inputs,
        _small_lists(_columns(max_column), 3),
        _small_lists(aggregates(max_column), 3),
    )


@_memo
def top_ks(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[TopK]:
    return st.builds(
        TopK,
        plan_leaves() if inputs is None else inputs,
        _small_lists(_columns(max_column), 2),
        _small_lists(order_keys(max_column), 2),
        st.one_of(st.none(), st.integers(0, 10)),
        st.integers(0, 5),
    )


@_memo
def union_alls(inputs: S[Plan] | None = None) -> S[UnionAll]:
    """`UnionAll`s of one to three inputs."""
    i = plan_leaves() if inputs is None else inputs
    return st.builds(UnionAll, _small_lists(i, 3, min_size=1))


@_memo
def negates(inputs: S[Plan] | None = None) -> S[Negate]:
    return st.builds(Negate, plan_leaves() if inputs is None else inputs)


@_memo
def thresholds(inputs: S[Plan] | None = None) -> S[Threshold]:
    return st.builds(Threshold, plan_leaves() if inputs is None else inputs)


@_memo
def distincts(inputs: S[Plan] | None = None) -> S[Distinct]:
    return st.builds(Distinct, plan_leaves() if inputs is None else inputs)


@_memo
def _plan_nodes(inputs: S[Plan], max_column: int) -> S[Plan]:
    return st.one_of(
        mfps(inputs, max_column),
        joins(inputs, max_column),
        reduces(inputs, max_column),
        top_ks(inputs, max_column),
        union_alls(inputs),
        negates(inputs),
        thresholds(inputs),
        distincts(inputs),
    )


@_memo
def plans(
    max_depth: int = 3, *, ids: S[GlobalId] | None = None, max_column: int = MAX_COLUMN
) -> S[Plan]:
    """Plans of every node type, of depth at most `max_depth` (a leaf has depth 0). `Get`s name
    ids drawn from `ids` (any id when `None`)."""
    leaves = plan_leaves(ids)
    level = leaves
    for _ in range(max_depth):
        level = st.one_of(leaves, _plan_nodes(level, max_column))
    return level
