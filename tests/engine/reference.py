"""A naive, non-incremental evaluator of `Plan`s: the executable reading of docs/semantics.md.

Contract: `evaluate(plan, inputs)` returns the plan's collection (a consolidated multiset,
`{row tuple: count}` with no zero counts) over input collections given as multisets, computed
row by row in pure Python with no incremental state. `plan_types` / `expr_type` give the static
types the semantics assign. Any per-row evaluation error (division by zero, integer overflow,
bad cast) raises `EvalError`; an ill-typed plan raises `PlanTypeError`.

Invariant protected: this module is a second oracle, independent of DuckDB. It is written for
obviousness, never speed, and must track docs/semantics.md line by line; `test_sqlgen.py` checks
the DuckDB translation against it, so a disagreement there means one of the two misreads the
semantics.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twofold.engine.functions import case_tables
from twofold.protocol import (
    Call,
    Column,
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
    Threshold,
    TopK,
    UnionAll,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Pseudo-type of an untyped NULL literal: it unifies with any type.
NULL_TYPE = "null"
NUMERIC = frozenset({"int", "float"})

Multiset = dict[tuple[Any, ...], int]
"""A collection: row (as a tuple) -> multiplicity, zero counts absent."""

Types = list[str]


class EvalError(Exception):
    """A per-row evaluation error (the engine would put it in the dataflow's error collection)."""


class PlanTypeError(Exception):
    """The plan or expression is ill-typed for its inputs."""


# ---------------------------------------------------------------------------------------------
# Static types


def literal_type(value: object) -> str:
    if value is None:
        return NULL_TYPE
    for py, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(value, py):
            return name
    if isinstance(value, bytes):
        return "bytes"
    raise PlanTypeError(f"literal {value!r} has no scalar type")


def unify(types: Sequence[str], what: str) -> str:
    """The common type of `types` (int/float promote; NULL unifies with anything)."""
    real = {t for t in types if t != NULL_TYPE}
    if not real:
        return NULL_TYPE
    if len(real) == 1:
        return real.pop()
    if real == NUMERIC:
        return "float"
    raise PlanTypeError(f"{what}: incompatible types {sorted(real)}")


def expr_type(expr: Expr, cols: Sequence[str]) -> str:
    """The scalar type of `expr` over a row with column types `cols`."""
    match expr:
        case Column(index=i):
            if i >= len(cols):
                raise PlanTypeError(f"column {i} out of range for arity {len(cols)}")
            return cols[i]
        case Literal(value=v):
            return literal_type(v)
        case Call(func=f, args=args):
            ts = [expr_type(a, cols) for a in args]
            return _call_type(f, ts)
    raise PlanTypeError(f"not an Expr: {expr!r}")


def _need(f: str, ts: Sequence[str], allowed: frozenset[str]) -> None:
    for t in ts:
        if t != NULL_TYPE and t not in allowed:
            raise PlanTypeError(f"{f}: argument of type {t}, expected one of {sorted(allowed)}")


def _call_type(f: str, ts: list[str]) -> str:
    if f in ("eq", "ne", "lt", "le", "gt", "ge"):
        unify(ts, f)
        return "bool"
    if f in ("and", "or", "not"):
        _need(f, ts, frozenset({"bool"}))
        return "bool"
    if f in ("add", "sub", "mul", "div", "mod", "neg", "abs"):
        _need(f, ts, NUMERIC)
        t = unify(ts, f)
        return "int" if t == NULL_TYPE else t
    if f == "is_null":
        return "bool"
    if f == "coalesce":
        return unify(ts, f)
    if f == "if":
        _need(f, ts[:1], frozenset({"bool"}))
        return unify(ts[1:], f)
    if f in ("concat", "lower", "upper", "length", "like"):
        _need(f, ts, frozenset({"str"}))
        return {"length": "int", "like": "bool"}.get(f, "str")
    if f in ("cast_int", "cast_float", "cast_str"):
        _need(f, ts, frozenset({"bool", "int", "float", "str"}))
        return f.removeprefix("cast_")
    raise PlanTypeError(f"unknown function {f!r}")


def plan_types(plan: Plan, inputs: Mapping[GlobalId, Sequence[str]]) -> Types:
    """The column types of `plan`'s output."""
    match plan:
        case Get(id=gid):
            if gid not in inputs:
                raise PlanTypeError(f"Get({gid}) of an unknown collection")
            return list(inputs[gid])
        case Constant(rows=rows):
            if not rows:
                raise PlanTypeError("an empty Constant has no column types")
            arity = len(rows[0][0])
            if any(len(r) != arity for r, _ in rows):
                raise PlanTypeError("Constant rows differ in arity")
            out = [unify([literal_type(r[i]) for r, _ in rows], "Constant") for i in range(arity)]
            if NULL_TYPE in out:
                raise PlanTypeError("a Constant column holding only NULLs has no type")
            return out
        case Mfp(input=inp, map=maps, filter=filters, project=project):
            cols = plan_types(inp, inputs)
            for m in maps:
                cols.append(expr_type(m, cols))
            for p in filters:
                if expr_type(p, cols) not in ("bool", NULL_TYPE):
                    raise PlanTypeError(f"filter {p!r} is not boolean")
            if project is None:
                return cols
            _check_cols("Mfp.project", project, cols)
            return [cols[i] for i in project]
        case Join(left=left, right=right, left_key=lk, right_key=rk):
            lt, rt = plan_types(left, inputs), plan_types(right, inputs)
            _check_cols("Join.left_key", lk, lt)
            _check_cols("Join.right_key", rk, rt)
            for a, b in zip(lk, rk, strict=True):
                unify([lt[a], rt[b]], "Join key")
            return lt + rt
        case Reduce(input=inp, group_key=gk, aggregates=aggs):
            cols = plan_types(inp, inputs)
            _check_cols("Reduce.group_key", gk, cols)
            out = [cols[i] for i in gk]
            for agg in aggs:
                if agg.func == "count":
                    if agg.column is not None:
                        _check_cols("Aggregate.column", [agg.column], cols)
                    out.append("int")
                    continue
                assert agg.column is not None
                _check_cols("Aggregate.column", [agg.column], cols)
                t = cols[agg.column]
                if agg.func == "sum" and t not in NUMERIC:
                    raise PlanTypeError(f"sum over a {t} column")
                out.append(t)
            return out
        case TopK(input=inp, group_key=gk, order_by=ob):
            cols = plan_types(inp, inputs)
            _check_cols("TopK.group_key", gk, cols)
            _check_cols("TopK.order_by", [k.column for k in ob], cols)
            return cols
        case UnionAll(inputs=ins):
            all_types = [plan_types(i, inputs) for i in ins]
            if any(t != all_types[0] for t in all_types):
                raise PlanTypeError(f"UnionAll inputs differ in types: {all_types}")
            return all_types[0]
        case Negate(input=inp) | Threshold(input=inp) | Distinct(input=inp):
            return plan_types(inp, inputs)
    raise PlanTypeError(f"not a Plan: {plan!r}")


def _check_cols(what: str, idx: Iterable[int], cols: Sequence[str]) -> None:
    for i in idx:
        if i >= len(cols):
            raise PlanTypeError(f"{what}: column {i} out of range for arity {len(cols)}")


# ---------------------------------------------------------------------------------------------
# Expressions

Fn = Callable[[tuple[Any, ...]], Any]

_INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)


def _int_checked(v: int) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise EvalError("bigint out of range")
    return v


def _arith(f: str, a: Any, b: Any, is_int: bool) -> Any:
    if f == "add":
        r = a + b
    elif f == "sub":
        r = a - b
    elif f == "mul":
        r = a * b
    elif f == "div":
        if b == 0:
            if not is_int and math.isnan(a):
                return math.nan  # PostgreSQL: NaN / 0 is NaN
            raise EvalError("division by zero")
        if is_int:
            q = abs(a) // abs(b)
            r = q if (a < 0) == (b < 0) else -q
        else:
            r = float(a) / float(b)
    elif f == "mod":
        if b == 0:
            raise EvalError("division by zero")
        if is_int:
            r = abs(a) % abs(b)
            r = -r if a < 0 else r
        else:
            r = math.fmod(float(a), float(b))
    else:  # pragma: no cover - guarded by the caller
        raise AssertionError(f)
    return _int_checked(r) if is_int else _float_checked(f, float(a), float(b), float(r))


def _float_checked(f: str, a: float, b: float, r: float) -> float:
    """PostgreSQL's float8 range checks of `a f b = r` (docs/semantics.md, `add` ... `div`)."""
    if math.isinf(r) and not math.isinf(a) and (f == "div" or not math.isinf(b)):
        raise EvalError("value out of range: overflow")
    if r == 0 and a != 0 and ((f == "mul" and b != 0) or (f == "div" and not math.isinf(b))):
        raise EvalError("value out of range: underflow")
    return r


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def _compare(f: str, a: Any, b: Any) -> bool:
    return bool(_COMPARISONS[f](a, b))


@functools.lru_cache(maxsize=512)
def _like_regex(pattern: str) -> re.Pattern[str]:
    parts = [".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


def _cast(f: str, v: Any, src: str) -> Any:
    if f == "cast_int":
        if src == "bool":
            return int(v)
        if src == "int":
            return v
        if src == "float":
            if math.isnan(v) or math.isinf(v):
                raise EvalError("bigint out of range")
            return _int_checked(int(v))
        if not _INT_RE.fullmatch(v):
            raise EvalError("invalid input for int")
        return _int_checked(int(v))
    if f == "cast_float":
        if src == "str":
            text = v.strip()
            if re.fullmatch(r"[+-]?(inf|infinity|nan)", text, re.IGNORECASE):
                return float(text)
            if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", text):
                raise EvalError(f'invalid input syntax for type double precision: "{text}"')
            out = float(text)
            if math.isinf(out) or (out == 0 and re.search(r"[1-9]", text.split("e")[0].split(
                    "E")[0])):
                raise EvalError(f'"{text}" is out of range for type double precision')
            return out
        return float(v)
    # cast_str
    if src == "bool":
        return "true" if v else "false"
    if src == "float":
        return repr(float(v))
    return str(v)


def compile_expr(expr: Expr, cols: Sequence[str]) -> tuple[Fn, str]:
    """A function evaluating `expr` on one row, and the expression's static type."""
    t = expr_type(expr, cols)
    fn = _compile(expr, cols)
    if t == "float":
        # int/float promotion: a float-typed expression yields a float even when the value
        # came from an int branch (`coalesce`, `if`).
        inner = fn

        def fn(row: tuple[Any, ...]) -> Any:
            v = inner(row)
            return None if v is None else float(v)

    return fn, t


def _compile(expr: Expr, cols: Sequence[str]) -> Fn:
    match expr:
        case Column(index=i):
            return lambda row: row[i]
        case Literal(value=v):
            return lambda row: v
        case Call(func=f, args=args):
            pass
        case _:
            raise PlanTypeError(f"not an Expr: {expr!r}")
    arg_fns = [compile_expr(a, cols) for a in args]
    fns = [a for a, _ in arg_fns]
    arg_types = [t for _, t in arg_fns]
    result = _call_type(f, list(arg_types))

    if f == "and":
        a_fn, b_fn = fns

        def and_(row: tuple[Any, ...]) -> Any:
            a, b = a_fn(row), b_fn(row)
            if a is False or b is False:
                return False
            return None if a is None or b is None else True

        return and_
    if f == "or":
        a_fn, b_fn = fns

        def or_(row: tuple[Any, ...]) -> Any:
            a, b = a_fn(row), b_fn(row)
            if a is True or b is True:
                return True
            return None if a is None or b is None else False

        return or_
    if f == "is_null":
        return lambda row: fns[0](row) is None
    if f == "coalesce":

        def coalesce(row: tuple[Any, ...]) -> Any:
            for g in fns:
                v = g(row)
                if v is not None:
                    return v
            return None

        return coalesce
    if f == "if":
        c_fn, a_fn, b_fn = fns
        return lambda row: a_fn(row) if c_fn(row) is True else b_fn(row)

    # Every remaining function is NULL-strict: all arguments are evaluated (so an error in
    # any of them surfaces), then a NULL argument gives NULL.
    def strict(op: Callable[..., Any]) -> Fn:
        def run(row: tuple[Any, ...]) -> Any:
            vals = [g(row) for g in fns]
            if any(v is None for v in vals):
                return None
            return op(*vals)

        return run

    is_int = result == "int"
    if f in ("eq", "ne", "lt", "le", "gt", "ge"):
        return strict(lambda a, b: _compare(f, a, b))
    if f == "not":
        return strict(lambda a: not a)
    if f in ("add", "sub", "mul", "div", "mod"):
        return strict(lambda a, b: _arith(f, a, b, is_int))
    if f == "neg":
        return strict(lambda a: _int_checked(-a) if is_int else -float(a))
    if f == "abs":
        return strict(lambda a: _int_checked(abs(a)) if is_int else abs(float(a)))
    if f == "concat":
        return strict(lambda a, b: a + b)
    if f in ("lower", "upper"):
        # Simple one-to-one mappings (PostgreSQL's towlower/towupper; the engine's tables are
        # checked against PostgreSQL at every code point in tests/sql/test_case_mapping.py).
        table = case_tables()[f == "lower"]
        return strict(lambda a: "".join(table.get(c, c) for c in a))
    if f == "length":
        return strict(len)
    if f == "like":
        return strict(lambda s, p: _like_regex(p).fullmatch(s) is not None)
    if f in ("cast_int", "cast_float", "cast_str"):
        src = arg_types[0]
        return strict(lambda v: _cast(f, v, src))
    raise PlanTypeError(f"unknown function {f!r}")


# ---------------------------------------------------------------------------------------------
# Plans


def consolidate(pairs: Iterable[tuple[tuple[Any, ...], int]]) -> Multiset:
    out: dict[tuple[Any, ...], int] = defaultdict(int)
    for row, m in pairs:
        out[row] += m
    return {r: m for r, m in out.items() if m != 0}


def accumulate(updates: Iterable[tuple[Sequence[Any], int, int]], time: int) -> Multiset:
    """The collection at `time`: the sum of all updates with `time <= t`."""
    return consolidate((tuple(r), d) for r, t, d in updates if t <= time)


def evaluate(plan: Plan, inputs: Mapping[GlobalId, tuple[Sequence[str], Multiset]]) -> Multiset:
    """`plan`'s collection over `inputs` (`id -> (column types, multiset)`)."""
    types = {gid: t for gid, (t, _) in inputs.items()}
    return _eval(plan, {gid: ms for gid, (_, ms) in inputs.items()}, types)


def _nonneg(ms: Multiset, what: str) -> Multiset:
    if any(m < 0 for m in ms.values()):
        raise PlanTypeError(f"{what} input has negative multiplicities")
    return ms


def _eval(
    plan: Plan, data: Mapping[GlobalId, Multiset], types: Mapping[GlobalId, Sequence[str]]
) -> Multiset:
    match plan:
        case Get(id=gid):
            return dict(data[gid])
        case Constant(rows=rows):
            plan_types(plan, types)
            return consolidate((tuple(r), d) for r, d in rows)
        case Mfp(input=inp, map=maps, filter=filters, project=project):
            cols = plan_types(inp, types)
            map_fns = []
            for map_expr in maps:
                fn, t = compile_expr(map_expr, cols)
                map_fns.append(fn)
                cols.append(t)
            filter_fns = [compile_expr(p, cols)[0] for p in filters]
            out: list[tuple[tuple[Any, ...], int]] = []
            for row, m in _eval(inp, data, types).items():
                full = list(row)
                for fn in map_fns:
                    full.append(fn(tuple(full)))
                frow = tuple(full)
                # Every predicate is evaluated (so its errors surface) before deciding.
                verdicts = [p(frow) for p in filter_fns]
                if all(v is True for v in verdicts):
                    out.append((frow if project is None else tuple(frow[i] for i in project), m))
            return consolidate(out)
        case Join(left=left, right=right, left_key=lk, right_key=rk):
            lt, rt = plan_types(left, types), plan_types(right, types)
            float_keys = [lt[a] == "float" or rt[b] == "float" for a, b in zip(lk, rk, strict=True)]

            def key(row: tuple[Any, ...], idx: list[int]) -> tuple[Any, ...] | None:
                vals = tuple(
                    float(row[i]) if f and row[i] is not None else row[i]
                    for i, f in zip(idx, float_keys, strict=True)
                )
                return None if any(v is None for v in vals) else vals

            index: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = defaultdict(list)
            for row, m in _eval(right, data, types).items():
                k = key(row, rk)
                if k is not None:
                    index[k].append((row, m))
            out = []
            for row, m in _eval(left, data, types).items():
                k = key(row, lk)
                if k is not None:
                    out.extend((row + r, m * rm) for r, rm in index.get(k, ()))
            return consolidate(out)
        case Reduce(input=inp, group_key=gk, aggregates=aggs):
            plan_types(plan, types)
            cols = plan_types(inp, types)
            groups: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = defaultdict(list)
            for row, m in _nonneg(_eval(inp, data, types), "Reduce").items():
                groups[tuple(row[i] for i in gk)].append((row, m))
            if not gk:
                groups[()]  # no group key: one row even over no rows (counts 0, others NULL)
            return {
                k + tuple(_aggregate(a, members, cols) for a in aggs): 1
                for k, members in groups.items()
            }
        case TopK(input=inp, group_key=gk, order_by=ob, limit=limit, offset=offset):
            buckets: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = defaultdict(list)
            for row, m in _nonneg(_eval(inp, data, types), "TopK").items():
                buckets[tuple(row[i] for i in gk)].append((row, m))
            return consolidate(
                kept
                for members in buckets.values()
                for kept in rank_window(members, ob, offset, limit)
            )
        case UnionAll(inputs=ins):
            plan_types(plan, types)
            return consolidate(p for i in ins for p in _eval(i, data, types).items())
        case Negate(input=inp):
            return {r: -m for r, m in _eval(inp, data, types).items()}
        case Threshold(input=inp):
            return {r: m for r, m in _eval(inp, data, types).items() if m > 0}
        case Distinct(input=inp):
            return {r: 1 for r, m in _nonneg(_eval(inp, data, types), "Distinct").items() if m > 0}
    raise PlanTypeError(f"not a Plan: {plan!r}")


def _aggregate(agg: Any, members: list[tuple[tuple[Any, ...], int]], cols: Types) -> Any:
    if agg.func == "count" and agg.column is None:
        return sum(m for _, m in members)
    col = agg.column
    present = [(row[col], m) for row, m in members if row[col] is not None]
    if agg.distinct:
        present = [(v, 1) for v in {v for v, _ in present}]
    if agg.func == "count":
        return sum(m for _, m in present)
    if not present:
        return None
    if agg.func == "min":
        return min(v for v, _ in present)
    if agg.func == "max":
        return max(v for v, _ in present)
    if cols[col] == "int":
        return _int_checked(sum(v * m for v, m in present))
    return math.fsum(v * m for v, m in present)


def _cmp_values(a: Any, b: Any, desc: bool, nulls_last: bool) -> int:
    if a is None or b is None:
        if a is None and b is None:
            return 0
        # NULL placement is independent of the direction, as in SQL `DESC NULLS LAST`.
        return (1 if nulls_last else -1) * (1 if a is None else -1)
    c = int(a > b) - int(a < b)
    return -c if desc else c


def row_order(order_by: Sequence[OrderKey], arity: int) -> Callable[[Any, Any], int]:
    """A comparator of rows: the order keys, then every column ascending with NULLs last."""
    keys = [(k.column, k.desc, k.nulls_last) for k in order_by]
    keys += [(i, False, True) for i in range(arity)]

    def cmp(r1: tuple[Any, ...], r2: tuple[Any, ...]) -> int:
        for col, desc, nulls_last in keys:
            c = _cmp_values(r1[col], r2[col], desc, nulls_last)
            if c:
                return c
        return 0

    return cmp


def rank_window(
    members: list[tuple[tuple[Any, ...], int]],
    order_by: Sequence[OrderKey],
    offset: int,
    limit: int | None,
) -> list[tuple[tuple[Any, ...], int]]:
    """The rows (with multiplicity) ranked `[offset, offset + limit)`; a row with multiplicity
    `n` occupies `n` consecutive ranks."""
    if not members:
        return []
    cmp = row_order(order_by, len(members[0][0]))
    ordered = sorted(members, key=lambda rm: functools.cmp_to_key(cmp)(rm[0]))
    hi = math.inf if limit is None else offset + limit
    out = []
    start = 0
    for row, m in ordered:
        keep = min(start + m, hi) - max(start, offset)
        if keep > 0:
            out.append((row, int(keep)))
        start += m
    return out


# ---------------------------------------------------------------------------------------------
# Comparison


def _canonical_value(v: Any, typ: str) -> Any:
    if v is None:
        return None
    if typ == "float" and not isinstance(v, bool):
        # 12 significant digits: absorbs summation-order noise in float aggregates, and maps
        # -0.0 to 0.0 (the two are equal under the semantics' comparisons).
        return float(f"{float(v):.12g}") + 0.0
    return v


def canonical(pairs: Iterable[tuple[Sequence[Any], int]], types: Sequence[str]) -> Multiset:
    """A multiset fit for equality checks: floats rounded, duplicates merged, zeros dropped."""
    return consolidate(
        (tuple(_canonical_value(v, t) for v, t in zip(row, types, strict=True)), m)
        for row, m in pairs
    )


def type_mismatches(pairs: Iterable[tuple[Sequence[Any], int]], types: Sequence[str]) -> list[str]:
    """Descriptions of values whose Python type is not their column's scalar type."""
    py = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes}
    out = []
    for row, _ in pairs:
        if len(row) != len(types):
            out.append(f"row {list(row)} has arity {len(row)}, expected {len(types)}")
            continue
        for i, (v, t) in enumerate(zip(row, types, strict=True)):
            if v is not None and type(v) is not py.get(t, object):
                out.append(f"row {list(row)} column {i}: {type(v).__name__}, expected {t}")
    return out


# ---------------------------------------------------------------------------------------------
# Results as the engine's test driver reports them


def naive_at(
    plan: Plan,
    inputs: Mapping[GlobalId, tuple[Any, Sequence[tuple[Sequence[Any], int, int]]]],
    t: int,
) -> list[tuple[list[Any], int]] | str:
    """What `twofold.engine.testing.run_plan_at_times` must return for time `t`: the plan's
    rows over the inputs (`id -> (RelationDesc, updates)`) accumulated to `t`, sorted with NULLs
    last, or the message of the evaluation error."""
    colls = {
        gid: ([c.scalar for c in desc.types], accumulate(ups, t))
        for gid, (desc, ups) in inputs.items()
    }
    try:
        out = evaluate(plan, colls)
    except EvalError as e:
        return str(e)
    rows = [(list(r), m) for r, m in out.items()]
    rows.sort(key=lambda rm: tuple((1, 0) if v is None else (0, v) for v in rm[0]))
    return rows
