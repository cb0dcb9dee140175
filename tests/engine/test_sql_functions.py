"""The scalar functions SQL needs beyond the DSL's (`round`, `rint`, `floor`, `ceil`, `substr`,
`trim`, `ltrim`, `rtrim`, `error`), evaluated by the engine against DuckDB over random values."""

from __future__ import annotations

import math
import struct
from decimal import ROUND_HALF_UP, Decimal, localcontext

import duckdb
import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine.expr import CompiledMfp
from twofold.protocol import Call, Column, ColumnType, Literal, MapFilterProject
from twofold.testing.profiles import examples

FLOATS = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 3)))
TEXT = st.one_of(st.none(), st.text(alphabet=" abcé", max_size=6))
INTS = st.one_of(st.none(), st.integers(0, 8))  # DuckDB counts negative starts from the end


def _eval(expr: Call, types: list[ColumnType], rows: list[tuple[object, ...]]) -> list[object]:
    frame = pl.DataFrame(rows, schema={f"c{j}": {"float": pl.Float64, "int": pl.Int64,
                                                 "str": pl.String}[t.scalar]
                                       for j, t in enumerate(types)}, orient="row")
    out, errors = CompiledMfp(MapFilterProject(map=[expr], project=[len(types)]),
                              types).apply(frame)
    assert errors is None
    return out["c0"].to_list()


def _duck(sql: str, rows: list[tuple[object, ...]], cols: str) -> list[object]:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE v ({cols})")
    if rows:
        con.executemany(f"INSERT INTO v VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return [r[0] for r in con.execute(f"SELECT {sql} FROM v").fetchall()]


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(FLOATS, st.integers(0, 3)), min_size=1, max_size=20))
def test_round_floor_ceil(rows: list[tuple[object, ...]]) -> None:
    types = [ColumnType("float"), ColumnType("int", False)]
    f, d = Column(index=0), Column(index=1)
    for expr, sql in ((Call(func="round", args=[f, d]), "round(f, d)"),
                      (Call(func="floor", args=[f]), "floor(f)"),
                      (Call(func="ceil", args=[f]), "ceil(f)")):
        got = _eval(expr, types, rows)
        want = _duck(sql, rows, "f DOUBLE, d INTEGER")
        for (f_, d_), g, w in zip(rows, got, want, strict=True):
            if f_ is not None and abs(abs(f_ * 10**d_) % 1 - 0.5) < 1e-6:  # type: ignore[operator]
                continue  # a tie as written: twofold rounds it away from zero, DuckDB the double
            assert (g is None and w is None) or abs(g - w) <= 1e-9 * max(1.0, abs(w)), (sql, g, w)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(TEXT, INTS, st.integers(0, 5)), min_size=1, max_size=20))
def test_substr_and_trims(rows: list[tuple[object, ...]]) -> None:
    types = [ColumnType("str"), ColumnType("int"), ColumnType("int", False)]
    s, a, n = Column(index=0), Column(index=1), Column(index=2)
    for expr, sql in ((Call(func="substr", args=[s, a, n]), "substr(s, a, n)"),
                      (Call(func="trim", args=[s]), "trim(s)"),
                      (Call(func="ltrim", args=[s]), "ltrim(s)"),
                      (Call(func="rtrim", args=[s]), "rtrim(s)")):
        assert _eval(expr, types, rows) == _duck(sql, rows, "s TEXT, a INTEGER, n INTEGER"), sql


def test_substr_negative_start_is_postgresql_clipping() -> None:
    # PostgreSQL: the characters at positions [start, start + n) that exist.
    types = [ColumnType("str"), ColumnType("int"), ColumnType("int")]
    rows = [("hello", -1, 3), ("hello", -1, 1), ("hello", 0, 2)]
    expr = Call(func="substr", args=[Column(index=0), Column(index=1), Column(index=2)])
    assert _eval(expr, types, rows) == ["h", "", "h"]


def test_error_is_an_evaluation_error_only_where_evaluated() -> None:
    types = [ColumnType("int")]
    frame = pl.DataFrame({"c0": [0, 1, 2]})
    expr = Call(func="if", args=[Call(func="gt", args=[Column(index=0), Literal(value=1)]),
                                 Call(func="error", args=[Literal(value="boom")]),
                                 Column(index=0)])
    out, errors = CompiledMfp(MapFilterProject(map=[expr]), types).apply(frame)
    assert out["c1"].to_list() == [0, 1]
    assert errors is not None and errors["error"].to_list() == ["boom"]


EDGE_FLOATS = [0.5, -0.5, 1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994,
               4503599627370497.0, -4503599627370497.0, 2.0**53 + 2, 1e300, -0.0, 0.0, -0.4,
               math.inf, -math.inf, math.nan]


def _bits(v: object) -> object:
    if not isinstance(v, float):
        return v
    return "nan" if math.isnan(v) else struct.pack("<d", v)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(), st.sampled_from(EDGE_FLOATS)), min_size=1,
                max_size=30))
def test_rint_is_ties_to_even_and_round_half_away(values: list[float | None]) -> None:
    """`rint` is C's rint bit for bit (ties to even, a zero's sign kept: PostgreSQL's
    round(double precision)); `round(x, 0)` is the exact double rounded half away from zero
    (no `floor(x + 0.5)` error at 0.49999999999999994 or odd integers beyond 2^53)."""
    types = [ColumnType("float")]
    rint = _eval(Call(func="rint", args=[Column(index=0)]), types, [(v,) for v in values])
    assert [_bits(g) for g in rint] == [
        _bits(None if v is None else float(np.rint(v))) for v in values]
    rounded = _eval(Call(func="round", args=[Column(index=0), Literal(value=0)]), types,
                    [(v,) for v in values])
    for v, g in zip(values, rounded, strict=True):
        if v is None or not math.isfinite(v):
            assert _bits(g) == _bits(v)
            continue
        with localcontext() as ctx:
            ctx.prec = 400  # every double's integer part exactly
            want = float(Decimal(v).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        assert g == want, (v, g, want)
