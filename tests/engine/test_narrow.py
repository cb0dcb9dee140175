"""The engine's narrow-type functions (`twofold.engine.narrow`): `check_int2`/`check_int4`
range checks, `round_float4` (single-precision rounding and its overflow/underflow errors) and
`float4_text` (PostgreSQL's float4out), over whole columns."""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import polars as pl
import pytest

from twofold.engine.expr import compile_expr
from twofold.protocol import Call, Column, ColumnType
from twofold.server.types import float4_text as float4_text_reference
from twofold.server.types import float_text as float8_text_reference


def _eval(func: str, values: list[object], scalar: str) -> list[tuple[object, object]]:
    value, err = compile_expr(Call(func=func, args=[Column(index=0)]),  # type: ignore[arg-type]
                              [ColumnType(scalar, True)])  # type: ignore[arg-type]
    dtype = pl.Int64 if scalar == "int" else pl.Float64
    frame = pl.DataFrame({"c0": pl.Series(values, dtype=dtype)})
    out = frame.select(value.alias("v"), (err if err is not None else pl.lit(None)).alias("e"))
    return list(zip(out["v"].to_list(), out["e"].to_list(), strict=True))


@pytest.mark.parametrize(("func", "lo", "hi", "msg"), [
    ("check_int2", -(2**15), 2**15 - 1, "smallint out of range"),
    ("check_int4", -(2**31), 2**31 - 1, "integer out of range")])
def test_integer_checks_at_the_bounds(func: str, lo: int, hi: int, msg: str) -> None:
    values = [lo - 1, lo, 0, hi, hi + 1, None, -(2**63), 2**63 - 1]
    got = _eval(func, values, "int")
    want = [(None, msg) if v is not None and not lo <= v <= hi else (v, None) for v in values]
    assert got == want


def test_round_float4_rounds_once_and_checks_the_range() -> None:
    f4max = float(np.finfo(np.float32).max)
    values = [0.1, -0.0, 1e39, -1e39, 1e-46, -1e-46, 1e-45, f4max, math.inf, -math.inf, None]
    got = _eval("round_float4", values, "float")
    assert got[0] == (float(np.float32(0.1)), None)
    assert math.copysign(1.0, got[1][0]) == -1.0 and got[1][1] is None  # type: ignore[arg-type]
    assert [e for _, e in got[2:6]] == ["value out of range: overflow"] * 2 + [
        "value out of range: underflow"] * 2
    assert got[6:] == [(float(np.float32(1e-45)), None), (f4max, None), (math.inf, None),
                       (-math.inf, None), (None, None)]
    nan = _eval("round_float4", [math.nan], "float")[0]
    assert math.isnan(nan[0]) and nan[1] is None  # type: ignore[arg-type]
    # An int is rounded once, directly: through a double this one would round to 2^60.
    big = 2**60 + 2**36 + 1
    assert _eval("round_float4", [big], "int") == [(float(2**60 + 2**37), None)]


def test_float4_text_is_float4out() -> None:
    """Equal to the server's float4 text encoder (itself checked against PostgreSQL 15's
    `::real::text` over ~50k values) over random float32 bit patterns — halfway ties among
    them — integers, [0, 1) and the edge values."""
    rng = random.Random(7)
    values = [struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0]
              for _ in range(30_000)]
    values += [float(rng.randint(-10**9, 10**9)) for _ in range(5_000)]
    values += [rng.random() for _ in range(5_000)]
    values += [0.1, 1e6, 123456.7, 1.5e-40, 0.0, -0.0, 1e-5, 1e-4, 999999.0, 1e5, 34110952.0,
               float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny), 1e-45]
    values = [float(np.float32(v)) for v in values if not math.isnan(v)]
    values += [math.nan, math.inf, -math.inf, None]  # type: ignore[list-item]
    got = [t for t, _ in _eval("float4_text", values, "float")]
    want = [None if v is None else float4_text_reference(v) for v in values]
    assert got == want


def test_float8_text_is_float8out() -> None:
    """Equal to the server's float8 text encoder (PostgreSQL's float8out: `1e+15`, where
    Python's repr is positional up to 1e16) over random bit patterns and scaled values."""
    rng = random.Random(11)
    values: list[float | None] = [
        struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    values += [rng.random() * 10.0 ** rng.randint(-20, 20) for _ in range(20_000)]
    values += [1e15, 999999999999999.9, 123456789012345.0, 1e16, 1e-5, 1e-4, 1.0, 0.1, -0.0,
               2.0**53, 1e22, 1e23]
    values = [v for v in values if v is None or not math.isnan(v)]
    values += [math.nan, math.inf, -math.inf, None]
    got = [t for t, _ in _eval("float8_text", values, "float")]
    assert got == [None if v is None else float8_text_reference(v) for v in values]
