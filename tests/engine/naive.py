"""A naive, row-at-a-time evaluator of plans and expressions, written straight from
`docs/semantics.md`: the from-scratch oracle the engine's incremental results are checked
against. Slow by design; only for small test inputs."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

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

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
Coll = Counter[tuple[Any, ...]]


class NaiveError(Exception):
    pass


def _int(v: int) -> int:
    if not I64_MIN <= v <= I64_MAX:
        raise NaiveError("integer out of range")
    return v


def _is_int(*vals: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in vals)


def _try(e: Expr, row: tuple[Any, ...]) -> tuple[Any, NaiveError | None]:
    try:
        return eval_expr(e, row), None
    except NaiveError as err:
        return None, err


def like(s: str, p: str) -> bool:
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in p)
    return re.fullmatch(rx, s, flags=re.S) is not None


def eval_expr(e: Expr, row: tuple[Any, ...]) -> Any:
    if isinstance(e, Column):
        return row[e.index]
    if isinstance(e, Literal):
        return e.value
    assert isinstance(e, Call)
    f, args = e.func, e.args
    if f in ("and", "or"):
        (a, ea), (b, eb) = _try(args[0], row), _try(args[1], row)
        decided = f == "or"
        if (ea is None and a is decided) or (eb is None and b is decided):
            return decided
        if ea or eb:
            raise ea or eb  # type: ignore[misc]
        if a is None or b is None:
            return None
        return (a and b) if f == "and" else (a or b)
    if f == "coalesce":
        for a in args:
            v = eval_expr(a, row)
            if v is not None:
                return float(v) if _mixed(args, row) and isinstance(v, int) else v
        return None
    if f == "if":
        c = eval_expr(args[0], row)
        return eval_expr(args[1] if c is True else args[2], row)
    vals = [eval_expr(a, row) for a in args]
    if f == "is_null":
        return vals[0] is None
    if any(v is None for v in vals):
        return None
    a = vals[0]
    b = vals[1] if len(vals) > 1 else None
    if f in ("add", "sub", "mul"):
        r = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b}[f]()
        return _int(r) if _is_int(a, b) else float(r)
    if f == "neg":
        return _int(-a) if _is_int(a) else -a
    if f == "abs":
        return _int(abs(a)) if _is_int(a) else abs(a)
    if f in ("div", "mod"):
        if b == 0:
            raise NaiveError("division by zero")
        if _is_int(a, b):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return _int(q) if f == "div" else a - b * q
        return a / b if f == "div" else math.fmod(a, b)
    if f in ("eq", "ne", "lt", "le", "gt", "ge"):
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[f]
    if f == "not":
        return not a
    if f == "concat":
        return a + b
    if f == "lower":
        return a.lower()
    if f == "upper":
        return a.upper()
    if f == "length":
        return len(a)
    if f == "like":
        return like(a, b)
    if f == "cast_int":
        if isinstance(a, str):
            if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", a):
                raise NaiveError("invalid input for int")
            return _int(int(a))
        if isinstance(a, float):
            if math.isnan(a) or math.isinf(a) or not -(2.0**63) <= a < 2.0**63:
                raise NaiveError("integer out of range")
            return int(a)
        return int(a)
    if f == "cast_float":
        if isinstance(a, str) and not re.fullmatch(
            r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*", a
        ):
            raise NaiveError("invalid input for float")
        return float(a)
    if f == "cast_str":
        if isinstance(a, bool):
            return "true" if a else "false"
        return repr(a) if isinstance(a, float) else str(a)
    raise AssertionError(f)


def _mixed(args: list[Expr], row: tuple[Any, ...]) -> bool:
    kinds = set()
    for a in args:
        try:
            v = eval_expr(a, row)
        except NaiveError:
            continue
        if v is not None:
            kinds.add(type(v))
    return int in kinds and float in kinds


def sort_key(row: tuple[Any, ...], order: list[OrderKey]) -> tuple[Any, ...]:
    key: list[Any] = []
    for o in order:
        v = row[o.column]
        null_rank = (1 if o.nulls_last else 0) if v is None else (0 if o.nulls_last else 1)
        key.append((null_rank, _Desc(v) if o.desc and v is not None else v))
    for v in row:
        key.append((1, 0) if v is None else (0, v))
    return tuple(key)


class _Desc:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(self.v > other.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v


def eval_plan(plan: Plan, colls: Mapping[GlobalId, Coll], errors: Coll) -> Coll:
    """The plan's output collection; evaluation errors are added to `errors` (keys 1-tuples)."""
    out: Coll = Counter()
    if isinstance(plan, Get):
        return Counter(colls[plan.id])
    if isinstance(plan, Constant):
        for r, d in plan.rows:
            out[tuple(r)] += d
        return +out if all(v >= 0 for v in out.values()) else out
    if isinstance(plan, Mfp):
        for row, d in eval_plan(plan.input, colls, errors).items():
            try:
                full = list(row)
                for m in plan.map:
                    full.append(eval_expr(m, tuple(full)))
                keep = [eval_expr(f, tuple(full)) for f in plan.filter]
            except NaiveError as e:
                errors[(str(e),)] += d
                continue
            if all(k is True for k in keep):
                proj = plan.project if plan.project is not None else range(len(full))
                out[tuple(full[c] for c in proj)] += d
        return out
    if isinstance(plan, Join):
        left = eval_plan(plan.left, colls, errors)
        right = eval_plan(plan.right, colls, errors)
        for lr, ld in left.items():
            for rr, rd in right.items():
                lk = [lr[c] for c in plan.left_key]
                rk = [rr[c] for c in plan.right_key]
                pairs = zip(lk, rk, strict=True)
                if all(a is not None and b is not None and a == b for a, b in pairs):
                    out[lr + rr] += ld * rd
        return out
    if isinstance(plan, UnionAll):
        for p in plan.inputs:
            for r, d in eval_plan(p, colls, errors).items():
                out[r] += d
        return out
    if isinstance(plan, Negate):
        return Counter({r: -d for r, d in eval_plan(plan.input, colls, errors).items()})
    inp = Counter({r: d for r, d in eval_plan(plan.input, colls, errors).items() if d != 0})
    if isinstance(plan, Threshold):
        return Counter({r: d for r, d in inp.items() if d > 0})
    if isinstance(plan, Distinct):
        return Counter({r: 1 for r, d in inp.items() if d > 0})
    groups: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = {}
    for r, d in inp.items():
        if d > 0:
            groups.setdefault(tuple(r[c] for c in plan.group_key), []).append((r, d))
    if isinstance(plan, TopK):
        for rows in groups.values():
            rows.sort(key=lambda rd: sort_key(rd[0], plan.order_by))
            rank = 0
            hi = None if plan.limit is None else plan.offset + plan.limit
            for r, d in rows:
                lo_r, hi_r = rank, rank + d
                rank = hi_r
                n = min(hi_r, hi if hi is not None else hi_r) - max(lo_r, plan.offset)
                if n > 0:
                    out[r] += n
        return out
    assert isinstance(plan, Reduce)
    for key, rows in groups.items():
        vals: list[Any] = []
        failed = False
        for agg in plan.aggregates:
            if agg.column is None:
                vals.append(sum(d for _, d in rows))
                continue
            items = [(r[agg.column], d) for r, d in rows if r[agg.column] is not None]
            if agg.distinct:
                items = [(v, 1) for v in sorted({v for v, _ in items})]
            if agg.func == "count":
                vals.append(sum(d for _, d in items))
            elif agg.func == "sum":
                total = sum(v * d for v, d in items) if items else None
                if (
                    isinstance(total, int)
                    and not isinstance(total, bool)
                    and not (I64_MIN <= total <= I64_MAX)
                ):
                    failed = True
                vals.append(total)
            else:
                vs = [v for v, _ in items]
                vals.append((min(vs) if agg.func == "min" else max(vs)) if vs else None)
        if failed:
            errors[("integer out of range",)] += 1
        else:
            out[key + tuple(vals)] += 1
    return out


def collections_at(updates: list[tuple[list[Any], int, int]], t: int) -> Coll:
    out: Coll = Counter()
    for r, time, d in updates:
        if time <= t:
            out[tuple(r)] += d
    return Counter({r: d for r, d in out.items() if d != 0})


def naive_at(
    plan: Plan, inputs: Mapping[GlobalId, tuple[Any, list[tuple[list[Any], int, int]]]], t: int
) -> list[tuple[list[Any], int]] | str:
    """What `run_plan_at_times` must return for `t`."""
    colls = {gid: collections_at(ups, t) for gid, (_, ups) in inputs.items()}
    errors: Coll = Counter()
    out = eval_plan(plan, colls, errors)
    errs = sorted(m for (m,), d in errors.items() if d != 0)
    if errs:
        return errs[0]
    rows = [(list(r), d) for r, d in out.items() if d != 0]
    rows.sort(key=lambda rd: tuple((1, 0) if v is None else (0, v) for v in rd[0]))
    return rows
