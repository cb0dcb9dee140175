"""Columnar evaluation of scalar expressions and MapFilterProject, per `docs/semantics.md`.

`compile_expr` turns an `Expr` into a pair of polars expressions over a frame whose columns are
`c0..`: the *value* and the *error* (a String that is NULL where the row evaluated cleanly,
else the message of its first evaluation error). Errors follow evaluation order and laziness:
`if` only sees the taken branch's error; `coalesce` only the errors of arguments it reached;
`and`/`or` ignore errors when the other side decides the result (`false and err = false`).
Integer arithmetic runs in Int128 and is checked back into the 64-bit range.

`CompiledMfp.apply` splits a frame into the rows that pass (mapped, filtered, projected) and an
error frame: a row with an error in any map or filter expression goes to the error collection
(with its time and diff) and never to the output — nothing is silently dropped.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import numpy as np
import polars as pl

from twofold.engine.frames import DTYPES, ERROR
from twofold.engine.functions import (
    MATH_FUNCTIONS,
    STRING_FUNCTIONS,
    case_map,
    compile_function,
    err_when,
    first_error,
    float_arith_error,
    float_div,
    text_to_float,
)
from twofold.engine.narrow import NARROW_FUNCTIONS, compile_narrow
from twofold.engine.typecheck import expr_type, typecheck_expr
from twofold.protocol import Call, Column, ColumnType, Expr, Literal, MapFilterProject
from twofold.protocol.codec import encode

Compiled = tuple[pl.Expr, pl.Expr | None]

DIV_ZERO: Final = "division by zero"
OUT_OF_RANGE: Final = "bigint out of range"
BAD_INT: Final = "invalid input for int"
_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1
_INT_RE: Final = r"^[+-]?[0-9]+$"
_NULL_STR: Final = pl.lit(None, pl.String)


_err = err_when
_first = first_error


def _like_body(pattern: str) -> str:
    """The regex of a `like` pattern: `%` any run, `_` one character, and PostgreSQL's default
    escape character `\\`: the character after it matches itself (`'a\\%'` only `a%`). A
    pattern ending in a lone `\\` matches nothing (PostgreSQL: false, or `22025` where the
    match reaches it)."""
    out = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, None)
            out.append(r"[^\s\S]" if nxt is None else re.escape(nxt))
        else:
            out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return "".join(out)


def like_regex(pattern: str) -> str:
    """The anchored (Rust-syntax, for polars) regex of a SQL `like` pattern (`_like_body`)."""
    return r"(?s)\A" + _like_body(pattern) + r"\z"


def _like_elementwise(cols: pl.Series) -> pl.Series:
    strings, patterns = cols.struct.field("s"), cols.struct.field("p")
    out = [
        None if s is None or p is None else re.fullmatch(_like_body(p), s, re.S) is not None
        for s, p in zip(strings.to_list(), patterns.to_list(), strict=True)
    ]
    return pl.Series(out, dtype=pl.Boolean)


def _float_repr(col: pl.Series) -> pl.Series:
    return pl.Series([None if v is None else repr(v) for v in col.to_list()], dtype=pl.String)


def _checked_int(wide: pl.Expr) -> Compiled:
    bad = (wide < _I64_MIN) | (wide > _I64_MAX)
    value = pl.when(bad).then(None).otherwise(wide).cast(pl.Int64, strict=False)
    return value, _err(bad, OUT_OF_RANGE)


class _Compiler:
    def __init__(self, types: Sequence[ColumnType]) -> None:
        self.types = list(types)

    def scalar(self, expr: Expr) -> str:
        return expr_type(expr, self.types, "expr")[0]

    def compile(self, expr: Expr) -> Compiled:
        match expr:
            case Column(index=i):
                return pl.col(f"c{i}"), None
            case Literal(value=v):
                if v is None:
                    return pl.lit(None), None
                return pl.lit(v, DTYPES[self.scalar(expr)]), None
            case Call(func=func, args=args):
                return self.call(func, args)
        raise TypeError(f"not an expression: {expr!r}")

    def call(self, func: str, args: list[Expr]) -> Compiled:
        comp = [self.compile(a) for a in args]
        vals = [v for v, _ in comp]
        errs = [e for _, e in comp]
        scalars = [self.scalar(a) for a in args]
        is_int = all(s in ("int", "null") for s in scalars)
        if func in ("add", "sub", "mul", "neg", "abs"):
            if not is_int:
                f = [v.cast(pl.Float64) for v in vals]
                out = {
                    "add": lambda: f[0] + f[1],
                    "sub": lambda: f[0] - f[1],
                    "mul": lambda: f[0] * f[1],
                    "neg": lambda: -f[0],
                    "abs": lambda: f[0].abs(),
                }[func]()
                rhs = f[1] if len(f) > 1 else None
                return out, _first(*errs, float_arith_error(func, out, f[0], rhs))
            w = [v.cast(pl.Int128) for v in vals]
            wide = {
                "add": lambda: w[0] + w[1],
                "sub": lambda: w[0] - w[1],
                "mul": lambda: w[0] * w[1],
                "neg": lambda: pl.lit(0, pl.Int128) - w[0],
                "abs": lambda: pl.when(w[0] < 0).then(pl.lit(0, pl.Int128) - w[0]).otherwise(w[0]),
            }[func]()
            value, err = _checked_int(wide)
            return value, _first(*errs, err)
        if func in ("div", "fdiv", "mod", "floordiv", "floormod"):
            return self.divmod(func, vals, errs, is_int and func != "fdiv")
        if func in ("eq", "ne", "lt", "le", "gt", "ge"):
            if set(scalars) - {"null"} == {"int", "float"}:
                vals = [v.cast(pl.Float64) for v in vals]
            a, b = vals
            out = {
                "eq": a == b,
                "ne": a != b,
                "lt": a < b,
                "le": a <= b,
                "gt": a > b,
                "ge": a >= b,
            }[func]
            return out, _first(*errs)
        if func in ("and", "or"):
            a, b = (v.cast(pl.Boolean) for v in vals)
            decided = pl.lit(False) if func == "and" else pl.lit(True)
            out = (a & b) if func == "and" else (a | b)
            # PostgreSQL's order: the left side's error always counts, the right side's only
            # where the left one does not decide (false for AND, true for OR). A failed side's
            # value is no value: log(-1) = 'NaN' OR log(-1) = 1 fails, though NaN "matches".
            err_b = errs[1]
            if err_b is not None:
                err_b = pl.when(a == decided).then(_NULL_STR).otherwise(err_b)
            return out, _first(errs[0], err_b)
        if func == "not":
            return ~vals[0].cast(pl.Boolean), errs[0]
        if func == "is_null":
            return vals[0].is_null(), errs[0]
        if func == "coalesce":
            target = DTYPES[self._unified(scalars)]
            casted = [v.cast(target) for v in vals]
            lazy_errs: list[pl.Expr | None] = []
            for j, e in enumerate(errs):
                if e is None:
                    lazy_errs.append(None)
                elif j == 0:
                    lazy_errs.append(e)
                else:
                    reached = pl.all_horizontal([c.is_null() for c in casted[:j]])
                    lazy_errs.append(pl.when(reached).then(e).otherwise(_NULL_STR))
            return pl.coalesce(casted), _first(*lazy_errs)
        if func == "if":
            target = DTYPES[self._unified(scalars[1:])]
            cond = vals[0].cast(pl.Boolean).fill_null(False)
            out = pl.when(cond).then(vals[1].cast(target)).otherwise(vals[2].cast(target))
            branch = None
            if errs[1] is not None or errs[2] is not None:
                e1 = errs[1] if errs[1] is not None else _NULL_STR
                e2 = errs[2] if errs[2] is not None else _NULL_STR
                branch = pl.when(cond).then(e1).otherwise(e2)
            return out, _first(errs[0], branch)
        if func == "concat":
            return vals[0].cast(pl.String) + vals[1].cast(pl.String), _first(*errs)
        if func in ("lower", "upper"):
            return case_map(vals[0].cast(pl.String), func == "upper"), errs[0]
        if func == "length":
            return vals[0].cast(pl.String).str.len_chars().cast(pl.Int64), errs[0]
        if func == "like":
            return self.like(args, vals), _first(*errs)
        if func in ("cast_int", "cast_float", "cast_str"):
            value, err = self.cast(func, vals[0], scalars[0])
            return value, _first(errs[0], err)
        if func in MATH_FUNCTIONS or func in STRING_FUNCTIONS:
            return compile_function(func, vals, errs)
        if func in NARROW_FUNCTIONS:
            return compile_narrow(func, vals[0], errs[0], scalars[0])
        if func in ("round", "floor", "ceil", "substr", "trim", "ltrim", "rtrim", "error"):
            return self.sql_function(func, args, vals, errs, scalars)
        raise TypeError(f"unknown function {func!r}")

    def _unified(self, scalars: Sequence[str]) -> str:
        real = set(scalars) - {"null"}
        if not real:
            return "int"
        return "float" if real == {"int", "float"} else real.pop()

    def divmod(
        self, func: str, vals: list[pl.Expr], errs: list[pl.Expr | None], is_int: bool
    ) -> Compiled:
        a, b = vals
        zero = a.is_not_null() & (b == 0)
        if not is_int:
            fa, fb = a.cast(pl.Float64), b.cast(pl.Float64)
            if func in ("div", "fdiv"):
                # PostgreSQL: NaN / 0 is NaN; any other dividend over zero fails.
                zero_err = _err(zero & ~fa.is_nan(), DIV_ZERO)
                q = pl.when((fb == 0) & ~fa.is_nan()).then(None).otherwise(float_div(fa, fb))
                range_err = float_arith_error("div", q, fa, fb) if func == "div" else None
                return q, _first(*errs, zero_err, range_err)
            zero_err = _err(zero, DIV_ZERO)
            safe_b = pl.when(fb == 0).then(pl.lit(1.0)).otherwise(fb)
            # fmod (C, truncating), or Python's float // and % (numpy's floor_divide and
            # remainder are Python's: 1 // 0.1 == 9.0, -7.5 % 2 == 0.5).
            kernel = {"mod": np.fmod, "floordiv": np.floor_divide, "floormod": np.remainder}[func]

            def apply(s: Sequence[pl.Series]) -> pl.Series:
                with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are the answer
                    return pl.Series(kernel(s[0].to_numpy(), s[1].to_numpy()))

            fm = pl.map_batches(
                [fa.fill_null(0.0), safe_b.fill_null(1.0)], apply, return_dtype=pl.Float64
            )
            return pl.when(fa.is_null() | fb.is_null()).then(None).otherwise(fm), _first(
                *errs, zero_err
            )
        zero_err = _err(zero, DIV_ZERO)
        wa = a.cast(pl.Int128)
        wb = pl.when(b == 0).then(pl.lit(1, pl.Int128)).otherwise(b.cast(pl.Int128))
        floor_q = wa // wb  # polars' integer // floors, as Python's
        if func == "floordiv":
            value, err = _checked_int(floor_q)  # int64 min // -1 is out of range
            return value, _first(*errs, zero_err, err)
        if func == "floormod":
            return (wa - wb * floor_q).cast(pl.Int64), _first(*errs, zero_err)
        inexact = (wa - floor_q * wb) != 0
        trunc_q = pl.when(inexact & ((wa < 0) != (wb < 0))).then(floor_q + 1).otherwise(floor_q)
        if func == "div":
            value, err = _checked_int(trunc_q)
            return value, _first(*errs, zero_err, err)
        value = (wa - wb * trunc_q).cast(pl.Int64)
        return value, _first(*errs, zero_err)

    def sql_function(self, func: str, args: list[Expr], vals: list[pl.Expr],
                     errs: list[pl.Expr | None], scalars: list[str]) -> Compiled:
        """`round` (half away from zero, to `digits` places: PostgreSQL's `numeric` rule;
        `rint` is double precision's ties to even), `floor`, `ceil`, `substr`
        (1-based start, SQL's clipping), `trim`/`ltrim`/`rtrim` (spaces) and `error` (the
        message as an evaluation error wherever it is evaluated)."""
        if func == "error":
            message = args[0].value if isinstance(args[0], Literal) else None
            msg = str(message) if message is not None else "error"
            return pl.lit(None), _first(errs[0], pl.lit(msg, pl.String))
        if func in ("floor", "ceil"):
            if scalars[0] in ("int", "null"):
                return vals[0].cast(pl.Int64), errs[0]
            f = vals[0].cast(pl.Float64)
            return (f.floor() if func == "floor" else f.ceil()), errs[0]
        if func == "round":
            f = vals[0].cast(pl.Float64)
            scale = pl.lit(10.0) ** vals[1].cast(pl.Float64)
            # The whole part, and one more where the fraction is at least a half: exact where
            # `floor(x + 0.5)` is not (0.49999999999999994 + 0.5 rounds to 1.0, and an odd
            # integer beyond 2^52 plus 0.5 to the even one above it).
            scaled = f.abs() * scale
            whole = scaled.floor()
            up = pl.when(scaled - whole >= 0.5).then(whole + 1.0).otherwise(whole)
            rounded = float_div(up, scale)
            out = pl.when(f < 0).then(-rounded).otherwise(rounded)
            # (a finite value whose scaled one overflows has no digits to round there)
            keep = f.is_infinite() | f.is_nan() | scaled.is_infinite()
            return pl.when(keep).then(f).otherwise(out), _first(*errs)
        s = vals[0].cast(pl.String)
        if func in ("trim", "ltrim", "rtrim"):
            strip = {"trim": s.str.strip_chars(" "), "ltrim": s.str.strip_chars_start(" "),
                     "rtrim": s.str.strip_chars_end(" ")}[func]
            return strip, errs[0]
        start = vals[1].cast(pl.Int64)
        length = vals[2].cast(pl.Int64)
        offset = pl.max_horizontal(start - 1, pl.lit(0, pl.Int64))
        end = pl.max_horizontal(start - 1 + pl.min_horizontal(length, pl.lit(2**62)), offset)
        value = s.str.slice(offset, end - offset)
        null = s.is_null() | start.is_null() | length.is_null()
        bad = _err(~null & (length < 0), "negative substring length not allowed")
        return pl.when(null).then(None).otherwise(value), _first(*errs, bad)

    def like(self, args: list[Expr], vals: list[pl.Expr]) -> pl.Expr:
        pattern = args[1]
        if isinstance(pattern, Literal):
            if pattern.value is None:
                return pl.lit(None, pl.Boolean)
            return vals[0].cast(pl.String).str.contains(like_regex(pattern.value))
        both = pl.struct(vals[0].cast(pl.String).alias("s"), vals[1].cast(pl.String).alias("p"))
        return both.map_batches(_like_elementwise, return_dtype=pl.Boolean)

    def cast(self, func: str, v: pl.Expr, src: str) -> Compiled:
        if func == "cast_int":
            if src in ("int", "null"):
                return v.cast(pl.Int64), None
            if src == "bool":
                return v.cast(pl.Int64), None
            if src == "float":
                f = v.cast(pl.Float64)
                bad = f.is_nan() | f.is_infinite() | (f < -(2.0**63)) | (f >= 2.0**63)
                value = pl.when(bad).then(None).otherwise(f).cast(pl.Int64, strict=False)
                return value, _err(bad, OUT_OF_RANGE)
            s = v.cast(pl.String).str.strip_chars()
            ok = s.str.contains(_INT_RE)
            parsed = s.cast(pl.Int64, strict=False)
            err = (
                pl.when(s.is_not_null() & ~ok)
                .then(pl.lit(BAD_INT))
                .when(ok & parsed.is_null())
                .then(pl.lit(OUT_OF_RANGE))
                .otherwise(_NULL_STR)
            )
            return parsed, err
        if func == "cast_float":
            if src == "str":
                return text_to_float(v.cast(pl.String).str.strip_chars())
            return v.cast(pl.Float64), None
        if src == "bool":
            b = v.cast(pl.Boolean)
            return pl.when(b.is_null()).then(_NULL_STR).when(b).then(pl.lit("true")).otherwise(
                pl.lit("false")
            ), None
        if src == "float":
            return v.cast(pl.Float64).map_batches(_float_repr, return_dtype=pl.String), None
        return v.cast(pl.String), None


def compile_expr(expr: Expr, types: Sequence[ColumnType]) -> Compiled:
    """(value, error) polars expressions of `expr` over a frame with columns `c0..` of `types`;
    the value is cast to the expression's type."""
    ty = typecheck_expr(expr, types)
    value, err = _Compiler(types).compile(expr)
    return value.cast(DTYPES[ty.scalar], strict=False), err


class CompiledMfp:
    """A MapFilterProject compiled against input column types. `apply` keeps every column of
    the frame after the relation's (e.g. `time`, `diff`) on both outputs. Compiling is a pure
    function of `(mfp, types)`, so the polars expressions (immutable) are cached: a query run
    again, or a peek with the same map/filter/project, skips building them."""

    def __init__(self, mfp: MapFilterProject, types: Sequence[ColumnType]) -> None:
        self.arity_in = len(types)
        key = b"".join([encode(mfp), *(encode(t) for t in types)])
        with _MFP_LOCK:
            parts = _MFP_CACHE.get(key)
            if parts is not None:
                _MFP_CACHE.move_to_end(key)
        if parts is None:
            parts = _compile_mfp(mfp, types)
            with _MFP_LOCK:
                _MFP_CACHE[key] = parts
                if len(_MFP_CACHE) > _MFP_CACHE_SIZE:
                    _MFP_CACHE.popitem(last=False)
        self.maps, self.preds, self.error, out_types = parts  # shared: never mutated
        self.out_types = list(out_types)
        self.project = list(mfp.project) if mfp.project is not None else list(
            range(len(types) + len(mfp.map)))
        self.is_identity = (
            not mfp.map and not mfp.filter and self.project == list(range(self.arity_in))
        )

    def apply(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        """(passing rows projected to `c0..`, error rows `error` + extra columns or None)."""
        if self.is_identity:
            return frame, None
        extra = frame.columns[self.arity_in :]
        lf = frame.lazy()
        for name, value in self.maps:
            lf = lf.with_columns(value.alias(name))
        errors = None
        if self.error is not None:
            lf = lf.with_columns(self.error.alias(ERROR))
            computed = lf.collect()
            bad = computed[ERROR].is_not_null()
            if bad.any():
                errors = computed.filter(bad).select([ERROR, *extra])
                computed = computed.filter(~bad)
            lf = computed.lazy()
        if self.preds:
            lf = lf.filter(*self.preds)
        out = lf.select(
            [pl.col(f"c{c}").alias(f"c{j}") for j, c in enumerate(self.project)]
            + [pl.col(x) for x in extra]
        ).collect()
        return out, errors


_MfpParts = tuple[list[tuple[str, pl.Expr]], list[pl.Expr], pl.Expr | None, list[ColumnType]]
_MFP_CACHE: OrderedDict[bytes, _MfpParts] = OrderedDict()
_MFP_CACHE_SIZE: Final = 1024
_MFP_LOCK: Final = threading.Lock()


def _compile_mfp(mfp: MapFilterProject, types: Sequence[ColumnType]) -> _MfpParts:
    """(named map values, filter predicates, first error or None, output types)."""
    all_types = list(types)
    maps: list[tuple[str, pl.Expr]] = []
    errs: list[pl.Expr | None] = []
    for m in mfp.map:
        value, err = compile_expr(m, all_types)
        maps.append((f"c{len(all_types)}", value))
        errs.append(err)
        all_types.append(typecheck_expr(m, all_types))
    preds: list[pl.Expr] = []
    for f in mfp.filter:
        value, err = _Compiler(all_types).compile(f)
        preds.append(value.cast(pl.Boolean, strict=False).fill_null(False))
        errs.append(err)
    # A row's error counts only where it is reached, as PostgreSQL evaluates a scan's quals in
    # order and the select list after them: filter k's (and the maps only it reads) where
    # filters 0..k-1 hold, the output's maps where every filter does.
    stages = [*_map_stages(mfp, len(types)), *range(len(mfp.filter))]
    reached = [e if e is None or not k else
               pl.when(pl.all_horizontal(preds[:k])).then(e).otherwise(_NULL_STR)
               for e, k in zip(errs, stages, strict=True)]
    project = list(mfp.project) if mfp.project is not None else list(range(len(all_types)))
    return maps, preds, _first(*reached), [all_types[c] for c in project]


def _map_stages(mfp: MapFilterProject, width: int) -> list[int]:
    """For each map of `mfp`, the first filter that reads it (through other maps too), or the
    number of filters where only the output (or nothing) does."""
    stage = [len(mfp.filter)] * len(mfp.map)
    for k in reversed(range(len(mfp.filter))):
        for c in columns_of(mfp.filter[k]):
            if c >= width:
                stage[c - width] = min(stage[c - width], k)
    for j in reversed(range(len(mfp.map))):
        for c in columns_of(mfp.map[j]):
            if c >= width:
                stage[c - width] = min(stage[c - width], stage[j])
    return stage


def columns_of(*exprs: Expr) -> set[int]:
    """The input columns `exprs` read (the indices of their `Column`s)."""
    out: set[int] = set()
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if isinstance(e, Column):
            out.add(e.index)
        elif isinstance(e, Call):
            stack.extend(e.args)
    return out
