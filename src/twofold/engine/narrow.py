"""PostgreSQL's narrow types over the engine's 64-bit ints and doubles (part of `engine.expr`).

Contract: the engine computes `smallint`/`integer` values as 64-bit ints and `real` values as
doubles; the SQL layer, which knows each expression's PostgreSQL type, wraps a result whose
type is int2, int4 or float4 in one of these functions, so it has PostgreSQL's range and
precision (whole columns in polars, no Python per row):

- `check_int2(x)`, `check_int4(x)`: `x` (an int) where it is in the type's range, else the
  evaluation error `smallint out of range` / `integer out of range` (22003).
- `round_float4(x)`: `x` (an int or a float) rounded to the nearest single-precision float
  (ties to even), as a double; a finite `x` whose rounding is infinite is `value out of range:
  overflow`, a nonzero one that rounds to zero `value out of range: underflow` (PostgreSQL's
  float4 checks; NaN and infinities are kept). For `+ - * /` of float4 values the double
  result rounded once is the single-precision operation's result (53 >= 2 * 24 + 2 bits), so
  this gives PostgreSQL's float4 arithmetic and its errors.
- `float4_text(x)`: a float (a float4 value) as PostgreSQL's `float4out` writes it: the
  fewest digits that read back as the same single-precision float, positional for decimal
  exponents -4..5 (`0.1`, `123456.7`, `1e+06`, `1.5e-40`), `NaN`, `Infinity`, `-Infinity`,
  `-0`. `float8_text(x)`: a double as `float8out` writes it (positional for -4..14:
  `1e+15`, `123456789012345`, `1e-05`).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from twofold.engine.functions import err_when, first_error

Compiled = tuple[pl.Expr, pl.Expr | None]

INT_BOUNDS: Final = {"check_int2": (-(2**15), 2**15 - 1, "smallint out of range"),
                     "check_int4": (-(2**31), 2**31 - 1, "integer out of range")}
OVERFLOW: Final = "value out of range: overflow"
UNDERFLOW: Final = "value out of range: underflow"
NARROW_FUNCTIONS: Final = frozenset({*INT_BOUNDS, "round_float4", "float4_text",
                                     "float8_text"})


def compile_narrow(func: str, v: pl.Expr, err: pl.Expr | None, scalar: str) -> Compiled:
    """(value, error) of one of `NARROW_FUNCTIONS` over the compiled argument `v` (of engine
    type `scalar`)."""
    if func in INT_BOUNDS:
        lo, hi, msg = INT_BOUNDS[func]
        i = v.cast(pl.Int64)
        bad = (i < lo) | (i > hi)
        return pl.when(bad).then(None).otherwise(i), first_error(err, err_when(bad, msg))
    f = v.cast(pl.Float64)
    if func == "round_float4":
        # IEEE round to nearest, ties to even; an int directly (through a double, a 64-bit
        # int would be rounded twice).
        src = v.cast(pl.Int64) if scalar == "int" else f
        r = src.cast(pl.Float32).cast(pl.Float64)
        range_err = (pl.when(r.is_infinite() & ~f.is_infinite()).then(pl.lit(OVERFLOW))
                     .when((r == 0.0) & (f != 0.0)).then(pl.lit(UNDERFLOW))
                     .otherwise(pl.lit(None, pl.String)))
        return r, first_error(err, range_err)
    if func == "float8_text":
        return float8_text(f), err
    assert func == "float4_text"
    return float4_text(f), err


_FIXED_LOW: Final = -4
_FIXED_HIGH: Final = 6  # float4out writes exponents -4..5 positionally (f2s.c, as %g)
_FIXED_HIGH8: Final = 15  # float8out: -4..14 (d2s.c)
_ZEROS: Final = "0" * 16


def float4_text(f: pl.Expr) -> pl.Expr:
    """PostgreSQL's float4out of float column `f` (its values single-precision floats): the
    shortest round-trip digits (`_shortest`), laid out as PostgreSQL's
    `float_to_shortest_decimal_buf` lays them out."""
    laid = f.map_batches(_text, return_dtype=pl.String)
    return _special(f, laid)


def float8_text(f: pl.Expr) -> pl.Expr:
    """PostgreSQL's float8out of float column `f` as the server's text encoder writes it
    (`server.types.float_text`): the shortest round-trip digits (Python's `repr`), positional
    for decimal exponents -4..14 (`1e+15`, `123456789012345`). Where that shortest decimal is
    exactly halfway to a neighbouring double (`4.452179831570002e+16`) PostgreSQL writes more
    digits (`4.4521798315700016e+16`); both here do not (docs/sql.md)."""
    laid = f.map_batches(lambda col: _layout(pl.Series(
        [None if v is None else repr(v) for v in col.to_list()], dtype=pl.String),
        _FIXED_HIGH8), return_dtype=pl.String)
    return _special(f, laid)


def _special(f: pl.Expr, laid: pl.Expr) -> pl.Expr:
    return (pl.when(f.is_null()).then(pl.lit(None, pl.String))
            .when(f.is_nan()).then(pl.lit("NaN"))
            .when(f == float("inf")).then(pl.lit("Infinity"))
            .when(f == float("-inf")).then(pl.lit("-Infinity"))
            .otherwise(laid))


def _shortest(col: pl.Series) -> pl.Series:
    """The fewest decimal digits that read back as each float32 value (polars' Ryu), except
    that a decimal exactly halfway between two floats does not count (PostgreSQL's float4out
    never writes one; polars' does): those values (about 0.2% of random bit patterns) get
    their digits one by one from Python's correctly rounded formatting."""
    f = col.cast(pl.Float64)
    s = f.cast(pl.Float32).cast(pl.String)
    back = s.cast(pl.Float64, strict=False)
    other = 2.0 * back - f  # the neighbour the decimal would be halfway to, when it is one
    halfway = ((back != f) & (other.cast(pl.Float32).cast(pl.Float64) == other)
               & ~f.is_nan() & ~f.is_infinite()).fill_null(False)
    if not halfway.any():
        return s
    idx = halfway.arg_true()
    fixed = [_digits(v) for v in f.gather(idx).to_list()]
    return s.scatter(idx, pl.Series(fixed, dtype=pl.String))


def _digits(v: float) -> str:
    import struct

    for p in range(1, 10):
        text = f"{v:.{p - 1}e}"
        back = float(text)
        if struct.unpack("<f", struct.pack("<f", back))[0] != v:
            continue
        other = 2.0 * back - v
        if back != v and struct.unpack("<f", struct.pack("<f", other))[0] == other:
            continue  # exactly halfway to a neighbour
        return text
    return f"{v:.8e}"


def _text(col: pl.Series) -> pl.Series:
    return _layout(_shortest(col))


def _layout(s: pl.Series, high: int = _FIXED_HIGH) -> pl.Series:
    """Digits of finite values (`123.45`, `1.5e-40`, `-0.0`) laid out as float4out does
    (in stages, each a column: a polars expression that repeats its parts is slow)."""
    c = pl.col
    df = pl.DataFrame({"s": s}).with_columns(
        neg=c("s").str.starts_with("-"),
        mant=c("s").str.extract(r"^-?([0-9.]+)", 1),
        x=c("s").str.extract(r"[eE]([+-]?[0-9]+)$", 1).cast(pl.Int64).fill_null(0),
    ).with_columns(
        ip=c("mant").str.extract(r"^([0-9]*)", 1),
        fp=c("mant").str.extract(r"\.([0-9]*)$", 1).fill_null(""),
    ).with_columns(all=c("ip") + c("fp")).with_columns(
        stripped=c("all").str.strip_chars_start("0"),
    ).with_columns(
        digits=c("stripped").str.strip_chars_end("0"),
        e=(c("ip").str.len_chars().cast(pl.Int64) - 1 - c("all").str.len_chars().cast(
            pl.Int64) + c("stripped").str.len_chars().cast(pl.Int64) + c("x")),
    ).with_columns(n=c("digits").str.len_chars().cast(pl.Int64))
    e, n, digits = c("e"), c("n"), c("digits")
    zeros = pl.lit(_ZEROS)
    # Every branch is evaluated on every row: slice bounds are clamped to be valid.
    head = _clamp(e + 1)
    # Positional, exponent >= 0: the first e + 1 digits (zero-padded), then any fraction.
    whole = digits.str.slice(0, head) + zeros.str.slice(0, _clamp(e + 1 - n))
    pos_big = pl.when(n > e + 1).then(whole + pl.lit(".") + digits.str.slice(head)
                                      ).otherwise(whole)
    # Positional, exponent < 0: 0.000ddd.
    pos_small = pl.lit("0.") + zeros.str.slice(0, _clamp(-e - 1)) + digits
    # Exponential: d[.ddd]e+XX (two exponent digits at least).
    mantissa = pl.when(n > 1).then(digits.str.slice(0, 1) + pl.lit(".") + digits.str.slice(1)
                                   ).otherwise(digits)
    sign = pl.when(e < 0).then(pl.lit("-")).otherwise(pl.lit("+"))
    expo = mantissa + pl.lit("e") + sign + e.abs().cast(pl.String).str.zfill(2)
    laid = (pl.when(n == 0).then(pl.lit("0"))
            .when((e >= _FIXED_LOW) & (e < 0)).then(pos_small)
            .when((e >= 0) & (e < high)).then(pos_big)
            .otherwise(expo))
    out = pl.when(c("neg")).then(pl.lit("-") + laid).otherwise(laid)
    return df.select(out.alias("out")).to_series()


def _clamp(n: pl.Expr) -> pl.Expr:
    return pl.max_horizontal(n, pl.lit(0, pl.Int64)).clip(0, len(_ZEROS))
