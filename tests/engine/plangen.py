"""Hypothesis strategies for differential testing: random input histories and well-typed plans.

Contract:
- `input_sets()` draws 1-3 user collections (`GlobalId.user(n)`) with random `RelationDesc`s
  (bool/int/float/str columns, some nullable) and `(row, time, diff)` histories over times
  `0..max_time` whose accumulated multiplicities are non-negative at every time (only present
  rows are retracted). Values come from small pools so joins, groups and duplicates hit; ints
  stay below 1000 in magnitude and floats are dyadic (multiples of 1/4), so sums are exact in
  any order and no integer overflow happens in ordinary plans.
- `plans(env)` draws a plan, well typed under docs/semantics.md for `env` (id -> column types),
  using every operator and every expression function.
- `scenarios()` draws both: a `Scenario(inputs, plan, times)`.

Invariants the generated plans keep (what the oracles require):
- Reduce, TopK, Distinct and Threshold only ever see non-negative multiplicities: `Negate`
  appears only as `Threshold(UnionAll([a, Negate(b)]))` (possibly under a linear `Mfp`).
- No evaluation errors by construction: int `div`/`mod` divide by non-zero literals or by
  `if(eq(y, 0), 1, y)`; float division is by non-zero powers of two (exact); strings are cast
  only from digit literals or `cast_str` of ints; floats are never cast to strings. Residual
  risk (integer overflow through deep multiplication chains) is detected by the reference
  evaluator, and tests discard those examples.
- No untyped values: a NULL literal appears only as an argument whose sibling fixes the call's
  type (`coalesce(NULL, x)`, `if(c, NULL, x)`, `eq(x, NULL)`, `add(x, NULL)`), never as a whole
  column; no empty or all-NULL-column `Constant`s, since the protocol gives them no type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st
from reference import expr_type, plan_types

from twofold.protocol import (
    Aggregate,
    Call,
    Column,
    ColumnType,
    Constant,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    Literal,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    RelationDesc,
    ScalarType,
    Threshold,
    TopK,
    UnionAll,
)

T = TypeVar("T")
Draw = Callable[[st.SearchStrategy[Any]], Any]
Update = tuple[list[Any], int, int]
Inputs = dict[GlobalId, tuple[RelationDesc, list[Update]]]

SCALARS: tuple[ScalarType, ...] = ("bool", "int", "float", "str")
POOLS: dict[str, list[Any]] = {
    "bool": [True, False],
    "int": [0, 1, 2, 3, -1, -2, 7, -8, 999, -999],
    "float": [0.0, 1.0, -1.0, 0.5, 2.25, -3.75, 10.0, 0.25, 512.5],
    # Small alphabet (with one non-ASCII letter whose case maps agree in Python and DuckDB).
    "str": ["", "a", "b", "ab", "ba", "A", "aB", "é", "Éa", "a b"],
}
LIKE_PATTERNS = ["a%", "%b", "_", "%", "a_", "", "%é%", "A%", "_b%", "%a%"]
DIGIT_INT_STRINGS = ["0", "12", "-7", "+3", " 42 ", "007"]
DIGIT_FLOAT_STRINGS = ["1.5", "-2.25", "3e2", " 0.5 ", "+4", "-0"]
INT_DIVISORS = [1, 2, 3, -2, 7, -5]
FLOAT_DIVISORS = [2.0, 0.5, -4.0, 0.25, 1.0]
FLOAT_MODULI = [1.5, -2.0, 0.75, 4.0]


def pick(draw: Draw, options: Sequence[T]) -> T:
    return draw(st.sampled_from(options))  # type: ignore[no-any-return]


def values(typ: str, nullable: bool) -> st.SearchStrategy[Any]:
    # Mostly the first few pool values, so joins match, groups collide and rows repeat.
    pool = POOLS[typ]
    choices = [st.sampled_from(pool[:3]), st.sampled_from(pool)]
    return st.one_of(st.none(), *choices) if nullable else st.one_of(*choices)


def rows(types: Sequence[ColumnType]) -> st.SearchStrategy[list[Any]]:
    return st.tuples(*(values(t.scalar, t.nullable) for t in types)).map(list)


@st.composite
def relation_descs(draw: Draw) -> RelationDesc:
    n = draw(st.integers(1, 4))
    types = [ColumnType(pick(draw, SCALARS), nullable=draw(st.booleans())) for _ in range(n)]
    return RelationDesc([f"c{i}" for i in range(n)], types)


@st.composite
def histories(draw: Draw, desc: RelationDesc, max_time: int, max_inserts: int = 4) -> list[Update]:
    """Updates at times `0..max_time` (up to `max_inserts` new rows per time); the accumulation
    is non-negative at every time."""
    present: Counter[tuple[Any, ...]] = Counter()
    out: list[Update] = []
    row_strategy = rows(desc.types)
    for t in range(max_time + 1):
        for _ in range(draw(st.integers(0, max_inserts))):
            row = draw(row_strategy)
            d = draw(st.integers(1, 3))
            out.append((row, t, d))
            present[tuple(row)] += d
            if draw(st.integers(0, 9)) == 0:
                # An insert and retraction at the same time: nets to zero within the step.
                out.append((list(row), t, -d))
                present[tuple(row)] -= d
        live = sorted((r for r, m in present.items() if m > 0), key=repr)
        if live:
            for row in draw(st.lists(st.sampled_from(live), max_size=3, unique=True)):
                d = draw(st.integers(1, present[row]))
                out.append((list(row), t, -d))
                present[row] -= d
    # Update order within the list must not matter to anyone.
    return draw(st.permutations(out)) if len(out) <= 12 else out


@st.composite
def input_sets(draw: Draw, max_time: int | None = None, max_inserts: int = 4) -> Inputs:
    """1-3 input collections with histories over times `0..max_time`."""
    if max_time is None:
        max_time = draw(st.integers(0, 6))
    out: Inputs = {}
    for n in range(1, draw(st.integers(1, 3)) + 1):
        desc = draw(relation_descs())
        out[GlobalId.user(n)] = (desc, draw(histories(desc, max_time, max_inserts)))
    return out


# ---------------------------------------------------------------------------------------------
# Expressions


def _call(func: str, *args: Expr) -> Call:
    return Call(func, list(args))  # type: ignore[arg-type]


def _leaf(draw: Draw, cols: Sequence[str], want: str) -> Expr:
    matching = [i for i, t in enumerate(cols) if t == want]
    if matching and draw(st.integers(0, 3)) > 0:
        return Column(pick(draw, matching))
    return Literal(pick(draw, POOLS[want]))


def exprs(draw: Draw, cols: Sequence[str], want: str, depth: int) -> Expr:
    """A random expression of exactly type `want` over columns typed `cols`."""
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, cols, want)
    d = depth - 1
    builder = pick(draw, _BUILDERS[want])
    expr = builder(draw, cols, d)
    assert expr_type(expr, cols) == want, (expr, want)
    return expr


def _or_null(draw: Draw, expr: Expr) -> Expr:
    """Sometimes an untyped NULL literal instead of `expr`, used only where a sibling argument
    fixes the call's type (so the expression keeps its type)."""
    return Literal(None) if draw(st.integers(0, 7)) == 0 else expr


def _any_type_expr(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    return exprs(draw, cols, pick(draw, SCALARS), d)


def _bool_compare(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    func = pick(draw, ["eq", "ne", "lt", "le", "gt", "ge"])
    typ = pick(draw, [*SCALARS, "mixed"])
    if typ == "mixed":  # int vs float compares numerically
        return _call(func, exprs(draw, cols, "int", d), exprs(draw, cols, "float", d))
    return _call(func, exprs(draw, cols, typ, d), _or_null(draw, exprs(draw, cols, typ, d)))


def _bool_logic(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    func = pick(draw, ["and", "or", "not"])
    if func == "not":
        return _call("not", exprs(draw, cols, "bool", d))
    return _call(func, exprs(draw, cols, "bool", d), exprs(draw, cols, "bool", d))


def _bool_misc(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    kind = pick(draw, ["is_null", "like", "like_expr"])
    if kind == "is_null":
        return _call("is_null", _any_type_expr(draw, cols, d))
    pattern: Expr = Literal(pick(draw, LIKE_PATTERNS))
    if kind == "like_expr":
        pattern = _call("concat", exprs(draw, cols, "str", d), Literal("%"))
    return _call("like", exprs(draw, cols, "str", d), pattern)


def _if(want: str) -> Callable[[Draw, Sequence[str], int], Expr]:
    def build(draw: Draw, cols: Sequence[str], d: int) -> Expr:
        a_type = b_type = want
        if want == "float":  # an int branch is promoted
            a_type, b_type = pick(draw, [("float", "float"), ("int", "float"), ("float", "int")])
        branches = [exprs(draw, cols, a_type, d), exprs(draw, cols, b_type, d)]
        if want != "float":  # a float `if` needs its float branch typed
            i = draw(st.integers(0, 1))
            branches[i] = _or_null(draw, branches[i])
        return _call("if", exprs(draw, cols, "bool", d), *branches)

    return build


def _coalesce(want: str) -> Callable[[Draw, Sequence[str], int], Expr]:
    def build(draw: Draw, cols: Sequence[str], d: int) -> Expr:
        n = draw(st.integers(1, 3))
        types = [want] * n
        if want == "float" and n > 1:
            types[draw(st.integers(0, n - 1))] = "int"
            types[draw(st.integers(0, n - 1))] = "float"
        args = [exprs(draw, cols, t, d) for t in types]
        if want != "float" and n > 1:
            args[0] = _or_null(draw, args[0])
        return _call("coalesce", *args)

    return build


def _int_arith(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    func = pick(draw, ["add", "sub", "mul", "div", "mod", "neg", "abs"])
    a = exprs(draw, cols, "int", d)
    if func in ("neg", "abs"):
        return _call(func, a)
    if func == "mul":  # one side a leaf: keeps products far from the 64-bit range
        return _call(func, a, _leaf(draw, cols, "int"))
    if func in ("div", "mod"):
        if draw(st.booleans()):
            return _call(func, a, Literal(pick(draw, INT_DIVISORS)))
        y = exprs(draw, cols, "int", d)
        guarded = _call("if", _call("eq", y, Literal(0)), Literal(1), y)
        return _call(func, a, guarded)
    return _call(func, a, _or_null(draw, exprs(draw, cols, "int", d)))


def _int_misc(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    kind = pick(draw, ["length", "cast_bool", "cast_float", "cast_str", "cast_lit"])
    if kind == "length":
        return _call("length", exprs(draw, cols, "str", d))
    if kind == "cast_bool":
        return _call("cast_int", exprs(draw, cols, "bool", d))
    if kind == "cast_float":
        return _call("cast_int", exprs(draw, cols, "float", d))
    if kind == "cast_str":
        return _call("cast_int", _call("cast_str", exprs(draw, cols, "int", d)))
    return _call("cast_int", Literal(pick(draw, DIGIT_INT_STRINGS)))


def _float_arith(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    func = pick(draw, ["add", "sub", "mul", "div", "mod", "neg", "abs"])
    if func in ("neg", "abs"):
        return _call(func, exprs(draw, cols, "float", d))
    if func == "div":
        a_type = pick(draw, ["float", "int"])
        return _call(func, exprs(draw, cols, a_type, d), Literal(pick(draw, FLOAT_DIVISORS)))
    if func == "mod":
        return _call(func, exprs(draw, cols, "float", d), Literal(pick(draw, FLOAT_MODULI)))
    a_type, b_type = pick(draw, [("float", "float"), ("int", "float"), ("float", "int")])
    b = _leaf(draw, cols, b_type) if func == "mul" else exprs(draw, cols, b_type, d)
    return _call(func, exprs(draw, cols, a_type, d), b)


def _float_cast(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    kind = pick(draw, ["int", "bool", "float", "lit"])
    if kind == "lit":
        return _call("cast_float", Literal(pick(draw, DIGIT_FLOAT_STRINGS)))
    return _call("cast_float", exprs(draw, cols, kind, d))


def _str_ops(draw: Draw, cols: Sequence[str], d: int) -> Expr:
    func = pick(draw, ["concat", "lower", "upper", "cast_int", "cast_bool", "cast_str"])
    if func == "concat":
        return _call("concat", exprs(draw, cols, "str", d), exprs(draw, cols, "str", d))
    if func in ("lower", "upper"):
        return _call(func, exprs(draw, cols, "str", d))
    src = {"cast_int": "int", "cast_bool": "bool", "cast_str": "str"}[func]
    return _call("cast_str", exprs(draw, cols, src, d))


_BUILDERS: dict[str, list[Callable[[Draw, Sequence[str], int], Expr]]] = {
    "bool": [_bool_compare, _bool_logic, _bool_misc, _if("bool"), _coalesce("bool")],
    "int": [_int_arith, _int_arith, _int_misc, _if("int"), _coalesce("int")],
    "float": [_float_arith, _float_arith, _float_cast, _if("float"), _coalesce("float")],
    "str": [_str_ops, _str_ops, _if("str"), _coalesce("str")],
}


# ---------------------------------------------------------------------------------------------
# Plans


@dataclass
class PlanGen:
    """Draws plans over `env`; `max_depth` bounds operator nesting."""

    draw: Draw
    env: dict[GlobalId, list[str]]
    expr_depth: int = 2
    stats: Counter[str] = field(default_factory=Counter)

    def plan(self, depth: int, *, root: bool = False) -> tuple[Plan, list[str]]:
        """A plan of at most `depth` operators deep; the root is never a bare leaf."""
        if depth <= 0 or (not root and self.draw(st.integers(0, 4)) == 0):
            return self.leaf()
        kind = pick(
            self.draw,
            ["mfp", "mfp", "join", "reduce", "topk", "union", "except", "distinct", "threshold"],
        )
        self.stats[kind] += 1
        builders: dict[str, Callable[[int], Plan]] = {
            "mfp": self.mfp,
            "join": self.join,
            "reduce": self.reduce,
            "topk": self.topk,
            "union": self.union,
            "except": self.except_,
            "distinct": self.distinct,
            "threshold": self.threshold,
        }
        plan = builders[kind](depth - 1)
        return plan, plan_types(plan, self.env)

    def leaf(self) -> tuple[Plan, list[str]]:
        if self.draw(st.integers(0, 5)) == 0:
            return self.constant()
        gid = pick(self.draw, sorted(self.env))
        return Get(gid), list(self.env[gid])

    def constant(self) -> tuple[Plan, list[str]]:
        draw = self.draw
        scalars = [pick(draw, SCALARS) for _ in range(draw(st.integers(1, 3)))]
        types: list[str] = list(scalars)
        descs = [ColumnType(t) for t in scalars]
        body = draw(st.lists(rows(descs), min_size=1, max_size=3))
        for i, t in enumerate(types):
            if all(r[i] is None for r in body):  # keep every column typed by some value
                body[0][i] = POOLS[t][0]
        return Constant([(r, draw(st.integers(1, 2))) for r in body]), types

    def expr(self, cols: Sequence[str], want: str) -> Expr:
        return exprs(self.draw, cols, want, self.draw(st.integers(0, self.expr_depth)))

    def mfp(self, depth: int, inp: tuple[Plan, list[str]] | None = None) -> Plan:
        draw = self.draw
        plan, cols = inp if inp is not None else self.plan(depth)
        cols = list(cols)
        maps = []
        for _ in range(draw(st.integers(0, 3))):
            e = self.expr(cols, pick(draw, SCALARS))
            maps.append(e)
            cols.append(expr_type(e, cols))
        filters = [self.expr(cols, "bool") for _ in range(draw(st.integers(0, 2)))]
        project = None
        if draw(st.booleans()):
            idx = list(range(len(cols)))
            project = draw(st.lists(st.sampled_from(idx), max_size=4)) if idx else []
        return Mfp(plan, map=maps, filter=filters, project=project)

    def join(self, depth: int) -> Plan:
        draw = self.draw
        (left, lt), (right, rt) = self.plan(depth), self.plan(depth)
        if draw(st.integers(0, 9)) == 0:
            return Join(left, right, [], [])  # a cross join
        pairs = [(i, j) for i, a in enumerate(lt) for j, b in enumerate(rt) if a == b]
        if not pairs and lt:
            # No column types in common: derive a right-hand key column of a left key's type.
            i = draw(st.integers(0, len(lt) - 1))
            right = Mfp(right, map=[exprs(draw, rt, lt[i], draw(st.integers(0, 1)))])
            pairs = [(i, len(rt))]
        keys = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=2)) if pairs else []
        return Join(left, right, [a for a, _ in keys], [b for _, b in keys])

    def reduce(self, depth: int) -> Plan:
        draw = self.draw
        plan, cols = self.plan(depth)
        idx = list(range(len(cols)))
        group_key = draw(st.lists(st.sampled_from(idx), max_size=2)) if idx else []
        aggs = []
        for _ in range(pick(draw, [1, 2, 3, 0, 1, 2])):
            func = pick(draw, ["count", "sum", "min", "max"])
            usable = [i for i in idx if func != "sum" or cols[i] in ("int", "float")]
            if func == "count" and (not usable or draw(st.booleans())):
                aggs.append(Aggregate("count", None))
                continue
            if not usable:
                continue
            aggs.append(Aggregate(func, pick(draw, usable), distinct=draw(st.booleans())))  # type: ignore[arg-type]
        return Reduce(plan, group_key, aggs)

    def topk(self, depth: int) -> Plan:
        draw = self.draw
        plan, cols = self.plan(depth)
        idx = list(range(len(cols)))
        group_key = draw(st.lists(st.sampled_from(idx), max_size=2)) if idx else []
        order_by = [
            OrderKey(pick(draw, idx), desc=draw(st.booleans()), nulls_last=draw(st.booleans()))
            for _ in range(draw(st.integers(0, 2)) if idx else 0)
        ]
        limit = pick(draw, [1, 2, None, 0, 3])
        return TopK(plan, group_key, order_by, limit=limit, offset=draw(st.integers(0, 2)))

    def aligned(self, depth: int, want: list[str]) -> Plan:
        """A random plan projected/mapped onto exactly the column types `want`."""
        plan, cols = self.plan(depth)
        if cols == want and self.draw(st.booleans()):
            return plan
        maps = [exprs(self.draw, cols, t, self.draw(st.integers(0, 1))) for t in want]
        return Mfp(plan, map=maps, project=list(range(len(cols), len(cols) + len(want))))

    def union(self, depth: int) -> Plan:
        first, types = self.plan(depth)
        rest = [self.aligned(depth, types) for _ in range(self.draw(st.integers(1, 2)))]
        return UnionAll([first, *rest])

    def except_(self, depth: int) -> Plan:
        """`Threshold(a - b)`: the only place a negative collection appears."""
        draw = self.draw
        a, types = self.plan(depth)
        b = self.aligned(depth, types)
        neg: Plan = Negate(b)
        if draw(st.booleans()):  # linear operators over negative multiplicities
            neg = Mfp(neg, filter=[self.expr(types, "bool")])
        parts = [a, neg] if draw(st.booleans()) else [neg, a]
        return Threshold(UnionAll(parts))

    def distinct(self, depth: int) -> Plan:
        return Distinct(self.plan(depth)[0])

    def threshold(self, depth: int) -> Plan:
        return Threshold(self.plan(depth)[0])


@st.composite
def plans(draw: Draw, env: dict[GlobalId, list[str]], max_depth: int = 3) -> Plan:
    """A well-typed, error-free, non-negative-where-required plan over `env`."""
    return PlanGen(draw, env).plan(max_depth, root=True)[0]


@dataclass(frozen=True)
class Scenario:
    inputs: Inputs
    plan: Plan
    times: list[int]

    @property
    def env(self) -> dict[GlobalId, list[str]]:
        return {gid: [t.scalar for t in desc.types] for gid, (desc, _) in self.inputs.items()}


@st.composite
def scenarios(draw: Draw, max_depth: int = 3, max_inserts: int = 4) -> Scenario:
    """Inputs, a plan over them, and every time from 0 to one past the last update time."""
    max_time = draw(st.integers(0, 6))
    inputs = draw(input_sets(max_time, max_inserts))
    env = {gid: [t.scalar for t in desc.types] for gid, (desc, _) in inputs.items()}
    plan = draw(plans(env, max_depth))
    return Scenario(inputs, plan, list(range(max_time + 2)))
