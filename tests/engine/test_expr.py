"""Expression semantics of `docs/semantics.md`: three-valued logic, arithmetic corners,
evaluation errors (and their laziness), strings, casts — evaluated through `CompiledMfp`."""

from __future__ import annotations

import math
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine.expr import CompiledMfp, like_regex
from twofold.engine.frames import frame_from_collection
from twofold.protocol import Call, Column, ColumnType, Expr, Literal, MapFilterProject
from twofold.testing.profiles import examples

B, INT, F, S = (ColumnType(s) for s in ("bool", "int", "float", "str"))
MAX, MIN = 2**63 - 1, -(2**63)


def c(i: int) -> Column:
    return Column(i)


def lit(v: Any) -> Literal:
    return Literal(v)


def call(f: str, *args: Expr) -> Call:
    return Call(f, list(args))  # type: ignore[arg-type]  # any name; Call checks it


def evaluate(expr: Expr, row: list[Any], types: list[ColumnType]) -> Any:
    """The value of `expr` on `row`, or `("error", message)`."""
    frame = frame_from_collection(types, [(row, 1)])
    out, errs = CompiledMfp(MapFilterProject(map=[expr], project=[len(row)]), types).apply(frame)
    if errs is not None and errs.height:
        return ("error", errs["error"][0])
    assert out.height == 1
    return out["c0"][0]


def ev(expr: Expr) -> Any:
    return evaluate(expr, [0], [INT])


@pytest.mark.parametrize("a", [True, False, None])
@pytest.mark.parametrize("b", [True, False, None])
def test_three_valued_logic(a: bool | None, b: bool | None) -> None:
    kleene_and = False if a is False or b is False else (None if None in (a, b) else True)
    kleene_or = True if a is True or b is True else (None if None in (a, b) else False)
    row, types = [a, b], [B, B]
    assert evaluate(call("and", c(0), c(1)), row, types) == kleene_and
    assert evaluate(call("or", c(0), c(1)), row, types) == kleene_or
    assert evaluate(call("not", c(0)), row, types) == (None if a is None else not a)
    assert evaluate(call("is_null", c(0)), row, types) == (a is None)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        (call("div", lit(-7), lit(2)), -3),
        (call("mod", lit(-7), lit(2)), -1),
        (call("mod", lit(7), lit(-2)), 1),
        (call("div", lit(7.0), lit(2)), 3.5),
        (call("mod", lit(-7.5), lit(2.0)), -1.5),
        (call("div", lit(1), lit(0)), ("error", "division by zero")),
        (call("mod", lit(1), lit(0)), ("error", "division by zero")),
        (call("div", lit(1.0), lit(0.0)), ("error", "division by zero")),
        (call("div", lit(None), lit(0)), None),
        (call("add", lit(MAX), lit(1)), ("error", "bigint out of range")),
        (call("sub", lit(MIN), lit(1)), ("error", "bigint out of range")),
        (call("mul", lit(2**32), lit(2**31)), ("error", "bigint out of range")),
        (call("neg", lit(MIN)), ("error", "bigint out of range")),
        (call("abs", lit(MIN)), ("error", "bigint out of range")),
        (call("div", lit(MIN), lit(-1)), ("error", "bigint out of range")),
        (call("abs", lit(-5)), 5),
        (call("add", lit(1), lit(0.5)), 1.5),
        (call("add", lit(None), lit(1)), None),
        (call("lt", lit(1), lit(1.5)), True),
        (call("lt", lit("a"), lit("é")), True),
        (call("lt", lit(False), lit(True)), True),
        (call("eq", lit(None), lit(None)), None),
        (call("coalesce", lit(None), lit(2), call("div", lit(1), lit(0))), 2),
        (call("coalesce", lit(None), call("div", lit(1), lit(0))), ("error", "division by zero")),
        (call("if", lit(True), lit(1), call("div", lit(1), lit(0))), 1),
        (call("if", lit(None), lit(1), lit(2)), 2),
        (call("if", lit(False), call("div", lit(1), lit(0)), lit(2)), 2),
        (call("and", lit(False), call("eq", call("div", lit(1), lit(0)), lit(1))), False),
        (call("or", lit(True), call("eq", call("div", lit(1), lit(0)), lit(1))), True),
        (
            call("and", lit(True), call("eq", call("div", lit(1), lit(0)), lit(1))),
            ("error", "division by zero"),
        ),
        (call("concat", lit("ab"), lit("c")), "abc"),
        (call("concat", lit("ab"), lit(None)), None),
        (call("lower", lit("ÀB")), "àb"),
        (call("upper", lit("straße")), "STRAßE"),  # PostgreSQL's simple mapping
        (call("lower", lit("ΟΔΟΣ İ")), "οδοσ i"),
        (call("length", lit("héllo")), 5),
        (call("like", lit("hello"), lit("h%o")), True),
        (call("like", lit("hello"), lit("h_llo")), True),
        (call("like", lit("hello"), lit("H%")), False),
        (call("like", lit("a.c"), lit("a.c")), True),
        (call("like", lit("abc"), lit("a.c")), False),
        (call("like", lit("a\nb"), lit("a%b")), True),
        (call("cast_int", lit(" -12 ")), -12),
        (call("cast_int", lit("+7")), 7),
        (call("cast_int", lit("1.5")), ("error", "invalid input for int")),
        (call("cast_int", lit("99999999999999999999")), ("error", "bigint out of range")),
        (call("cast_int", lit(-2.7)), -2),
        (call("cast_int", lit(float("nan"))), ("error", "bigint out of range")),
        (call("cast_int", lit(1e19)), ("error", "bigint out of range")),
        (call("cast_int", lit(True)), 1),
        (call("cast_float", lit(" 1e3")), 1000.0),
        (call("cast_float", lit("nan1")),
         ("error", 'invalid input syntax for type double precision: "nan1"')),
        (call("cast_float", lit(" -Infinity")), float("-inf")),
        (call("cast_float", lit("1e400")),
         ("error", '"1e400" is out of range for type double precision')),
        (call("cast_float", lit(3)), 3.0),
        (call("cast_str", lit(1e20)), "1e+20"),
        (call("cast_str", lit(0.1)), "0.1"),
        (call("cast_str", lit(1.0)), "1.0"),
        (call("cast_str", lit(1.5e-7)), "1.5e-07"),
        (call("cast_str", lit(False)), "false"),
        (call("cast_str", lit(-12)), "-12"),
    ],
)
def test_function_semantics(expr: Expr, want: Any) -> None:
    assert ev(expr) == want


def test_like_with_column_pattern() -> None:
    types = [S, S]
    assert evaluate(call("like", c(0), c(1)), ["abc", "a%"], types) is True
    assert evaluate(call("like", c(0), c(1)), ["abc", "b%"], types) is False
    assert evaluate(call("like", c(0), c(1)), ["abc", None], types) is None
    assert like_regex("a%") == r"(?s)\Aa.*\z"


def test_mfp_routes_error_rows_to_the_error_collection_with_their_diffs() -> None:
    frame = frame_from_collection([INT], [([0], 3), ([2], 1), ([None], 1)])
    mfp = MapFilterProject(
        map=[call("div", lit(10), c(0))], filter=[call("gt", c(1), lit(1))], project=[1]
    )
    out, errs = CompiledMfp(mfp, [INT]).apply(frame)
    assert out.rows() == [(5, 1)]
    assert errs is not None and errs.rows() == [("division by zero", 3)]


def test_filter_null_drops_row() -> None:
    frame = frame_from_collection([B], [([None], 1), ([True], 1), ([False], 1)])
    out, errs = CompiledMfp(MapFilterProject(filter=[c(0)]), [B]).apply(frame)
    assert out.rows() == [(True, 1)]
    assert errs is None


def test_map_columns_refer_to_earlier_maps() -> None:
    frame = frame_from_collection([INT], [([2], 1)])
    mfp = MapFilterProject(map=[call("mul", c(0), c(0)), call("add", c(1), lit(1))])
    out, _ = CompiledMfp(mfp, [INT]).apply(frame)
    assert out.rows() == [(2, 4, 5, 1)]
    assert out.schema["c1"] == pl.Int64


INTS = st.one_of(
    st.integers(MIN, MAX), st.sampled_from([MIN, MIN + 1, -7, -2, -1, 0, 1, 2, 7, MAX])
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-7.5, 7.5, -2.0, 2.0, 0.1, 1.0, -0.0, 0.0, 1e308, 5e-324]),
)


def python_floor(f: str, a: Any, b: Any) -> Any:
    """Python's `//` and `%` (the DSL's), with a zero divisor an evaluation error."""
    if b == 0:
        return ("error", "division by zero")
    q = a // b if f == "floordiv" else a % b
    if isinstance(q, int) and not MIN <= q <= MAX:
        return ("error", "bigint out of range")
    return q


def same_value(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return (math.isnan(got) and math.isnan(want)) or (
            got == want and math.copysign(1, got) == math.copysign(1, want)
        )
    return bool(got == want)


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(["floordiv", "floormod"]), INTS, INTS)
def test_floor_division_of_ints_is_pythons(f: str, a: int, b: int) -> None:
    assert evaluate(call(f, c(0), c(1)), [a, b], [INT, INT]) == python_floor(f, a, b)


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(["floordiv", "floormod"]), FLOATS, FLOATS)
def test_floor_division_of_floats_is_pythons(f: str, a: float, b: float) -> None:
    try:
        want = python_floor(f, a, b)
    except (OverflowError, ValueError):
        return  # Python raises where IEEE gives inf/NaN (e.g. inf // 1); no Python answer
    got = evaluate(call(f, c(0), c(1)), [a, b], [F, F])
    assert same_value(got, want), (a, b, got, want)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        (call("floordiv", lit(-7), lit(2)), -4),
        (call("floormod", lit(-7), lit(2)), 1),
        (call("floormod", lit(7), lit(-2)), -1),
        (call("floordiv", lit(MIN), lit(-1)), ("error", "bigint out of range")),
        (call("floordiv", lit(1), lit(0)), ("error", "division by zero")),
        (call("floormod", lit(-7.5), lit(2.0)), 0.5),
        (call("floordiv", lit(1.0), lit(0.1)), 9.0),
        (call("floordiv", lit(-7), lit(2.0)), -4.0),
        (call("floormod", lit(None), lit(2)), None),
        # The truncating pair stays (SQL's / and % on ints).
        (call("div", lit(-7), lit(2)), -3),
        (call("mod", lit(-7), lit(2)), -1),
    ],
)
def test_flooring_and_truncating_division(expr: Expr, want: Any) -> None:
    assert ev(expr) == want
