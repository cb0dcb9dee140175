"""Columnar math and string functions with PostgreSQL's semantics (part of `engine.expr`).

Contract: `compile_function(func, vals, errs)` gives the (value, error) pair of polars
expressions for one call of a function in `MATH_FUNCTIONS` or `STRING_FUNCTIONS`, its arguments
already compiled. Every function is strict (a NULL argument gives NULL) and evaluated in polars
over whole columns, no Python per row. Results and errors are PostgreSQL 15's for `double
precision` and `text`:

- `sqrt` of a negative number is an error (`2201F`), `ln`/`log10` of zero or a negative number
  (`2201E`); `power(x, y)` follows POSIX for NaN and infinities (`NaN ^ 0 = 1 ^ NaN = 1`), `0 ^
  y` with `y < 0` and a negative `x` to a non-integer `y` are errors (`2201F`); `exp` and
  `power` of finite arguments whose result overflows to infinity, or underflows to zero from a
  nonzero base, are `22003` (`value out of range: overflow` / `underflow`); `sign` is -1, 0
  or 1 (0 for NaN), `trunc` rounds toward zero; all take ints as doubles and give doubles.
- `replace(s, from, to)` replaces every non-overlapping occurrence, left to right (an empty
  `from` changes nothing); `strpos(s, sub)` is the 1-based character position of the first
  occurrence, 0 if none, 1 for an empty `sub`; `split_part(s, sep, n)` is the `n`-th field
  (negative `n` counts from the end, a field past the end is empty, `n = 0` is `22023`, an
  empty `sep` makes the whole string the only field); `lpad`/`rpad(s, n, fill)` truncate to
  `n` characters or pad with `fill` repeated (nothing with an empty `fill`); `repeat(s, n)`
  (empty for `n <= 0`); a result over `MAX_LENGTH` characters is `54000` (PostgreSQL's limit
  is 1 GB); `reverse` reverses code points; `initcap` upper-cases every letter that follows a
  character that is not a letter or digit (or starts the string) and lower-cases the rest
  (by the simple mappings of `case_map`: `ß` stays `ß`); `trim_chars`/`ltrim_chars`/
  `rtrim_chars(s, chars)` (PostgreSQL's `btrim`/`ltrim`/`rtrim(s, chars)`) remove the longest
  prefix and suffix / prefix / suffix of characters in the set `chars` (nothing for an empty
  `chars`).
  Lengths and positions count characters (code points).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import polars as pl

from twofold.engine import degrees
from twofold.engine.md5 import md5_hex

Compiled = tuple[pl.Expr, pl.Expr | None]

SQRT_NEGATIVE: Final = "cannot take square root of a negative number"
LOG_ZERO: Final = "cannot take logarithm of zero"
LOG_NEGATIVE: Final = "cannot take logarithm of a negative number"
POWER_ZERO: Final = "zero raised to a negative power is undefined"
POWER_COMPLEX: Final = "a negative number raised to a non-integer power yields a complex result"
INPUT_RANGE: Final = "input is out of range"
OVERFLOW: Final = "value out of range: overflow"
UNDERFLOW: Final = "value out of range: underflow"
FIELD_ZERO: Final = "field position must not be zero"
TOO_LONG: Final = "requested length too large"
MAX_LENGTH: Final = 1 << 26
"""The longest text `repeat`, `lpad` and `rpad` build, in characters."""

MATH_FUNCTIONS: Final = frozenset({"sqrt", "cbrt", "power", "ln", "log10", "exp", "sign",
                                   "trunc", "rint", "sin", "cos", "tan", "cot", "asin", "acos",
                                   "atan", "atan2", "sind", "cosd", "tand", "cotd", "asind",
                                   "acosd", "atand", "atan2d", "sinh", "cosh", "tanh", "asinh",
                                   "acosh", "atanh"})
"""Functions of ints or floats giving a float."""

STRING_FUNCTIONS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "replace": (("str", "str", "str"), "str"),
    "strpos": (("str", "str"), "int"),
    "split_part": (("str", "str", "int"), "str"),
    "lpad": (("str", "int", "str"), "str"),
    "rpad": (("str", "int", "str"), "str"),
    "repeat": (("str", "int"), "str"),
    "reverse": (("str",), "str"),
    "initcap": (("str",), "str"),
    "md5": (("str",), "str"),
    "trim_chars": (("str", "str"), "str"),
    "ltrim_chars": (("str", "str"), "str"),
    "rtrim_chars": (("str", "str"), "str"),
}
"""Text functions: (argument scalars, result scalar)."""

_NULL_STR: Final = pl.lit(None, pl.String)
_TRIG: Final = {"sin": degrees.sin, "cos": degrees.cos, "tan": degrees.tan, "cot": degrees.tan,
                "asin": degrees.asin, "acos": degrees.acos, "atan": degrees.atan,
                "sind": degrees.sind,
                "cosd": degrees.cosd, "tand": degrees.tand, "cotd": degrees.cotd,
                "asind": degrees.asind, "acosd": degrees.acosd, "atand": degrees.atand}
# Marks Unicode 15 made Alphabetic, which glibc's (Unicode 14) `iswalnum` does not count.
_NEWER_ALPHABETIC: Final = (r"\x{363}-\x{36F}\x{C04}\x{F82}\x{F83}\x{1DD3}-\x{1DE6}"
                             r"\x{11080}\x{11081}")


def err_when(cond: pl.Expr, msg: str) -> pl.Expr:
    """The error column that holds `msg` where `cond` is true (NULL elsewhere and where `cond`
    is NULL)."""
    return pl.when(cond).then(pl.lit(msg)).otherwise(_NULL_STR)


def first_error(*errs: pl.Expr | None) -> pl.Expr | None:
    """The first non-NULL of several error columns (None when none can hold an error)."""
    present = [e for e in errs if e is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else pl.coalesce(present)


def compile_function(func: str, vals: Sequence[pl.Expr], errs: Sequence[pl.Expr | None]
                     ) -> Compiled:
    if func in MATH_FUNCTIONS:
        value, err = _math(func, [v.cast(pl.Float64) for v in vals])
    else:
        value, err = _string(func, vals)
    return value, first_error(*errs, err)


def _finite(f: pl.Expr) -> pl.Expr:
    return f.is_finite().fill_null(False)


def _math(func: str, f: list[pl.Expr]) -> tuple[pl.Expr, pl.Expr | None]:
    # polars orders NaN above every number (NaN > 0 holds), so each comparison that a NaN
    # reaches excludes it explicitly, as C's (and PostgreSQL's) comparisons do.
    x = f[0]
    num = ~x.is_nan()
    if func == "sqrt":
        return x.sqrt(), err_when(num & (x < 0), SQRT_NEGATIVE)
    if func == "cbrt":
        return _numpy(x, degrees.cbrt), None
    if func in ("ln", "log10"):
        err = pl.when(x == 0).then(pl.lit(LOG_ZERO)).when(num & (x < 0)).then(
            pl.lit(LOG_NEGATIVE)).otherwise(_NULL_STR)
        return (x.log() if func == "ln" else _numpy(x, degrees.log10)), err
    if func == "exp":
        out = pl.when(x == float("-inf")).then(0.0).otherwise(x.exp())
        return out, _range_error(out, _finite(x), x.is_not_null())
    if func == "sign":
        return pl.when(num & (x > 0)).then(1.0).when(x < 0).then(-1.0).when(
            x.is_not_null()).then(0.0).otherwise(None), None
    if func == "trunc":
        return pl.when(x < 0).then(x.ceil()).otherwise(x.floor()), None
    if func == "rint":  # the nearest integer, ties to even, keeping a zero's sign (C's rint)
        return x.round(0, mode="half_to_even"), None
    if func in _TRIG:
        out = _numpy(x, _TRIG[func])
        if func in ("asin", "acos", "asind", "acosd"):
            return out, err_when(num & (x.abs() > 1), INPUT_RANGE)
        if func in ("atan", "atand"):
            return out, None
        if func == "cot":
            out = float_div(pl.lit(1.0), out)  # cot(0) is infinity, unchecked in PostgreSQL
        return out, err_when(x.is_infinite(), INPUT_RANGE)
    if func in _HYPERBOLIC:
        return _hyperbolic(func, x, num)
    if func in ("atan2", "atan2d"):
        return _numpy2(x, f[1], degrees.atan2 if func == "atan2" else degrees.atan2d), None
    assert func == "power"
    y = f[1]
    xn, yn = x.is_nan(), y.is_nan()
    out = (pl.when(x.is_null() | y.is_null()).then(None)
           .when(xn & ~yn & (y == 0)).then(1.0)
           .when(yn & ~xn & (x == 1)).then(1.0)
           .when(xn | yn).then(float("nan"))
           .otherwise(x.pow(y)))
    both = ~xn & ~yn
    err = (pl.when(both & (x == 0) & (y < 0)).then(pl.lit(POWER_ZERO))
           .when(both & (x < 0) & _finite(y) & (y.floor() != y)).then(pl.lit(POWER_COMPLEX))
           .otherwise(_NULL_STR))
    finite = _finite(x) & _finite(y)
    return out, first_error(err, _range_error(out, finite, x != 0))


_HYPERBOLIC: Final = {"sinh": degrees.sinh, "cosh": degrees.cosh, "tanh": degrees.tanh,
                      "asinh": degrees.asinh, "acosh": degrees.acosh, "atanh": degrees.atanh}


def _hyperbolic(func: str, x: pl.Expr, num: pl.Expr) -> tuple[pl.Expr, pl.Expr | None]:
    """PostgreSQL's float8 `sinh` ... `atanh` (float.c): the C library's value (through
    `math`, `degrees.py`); sinh/cosh past the range are +-infinity, not an error; acosh below
    1 and atanh outside [-1, 1] (NaN excepted) fail with "input is out of range"; atanh(+-1)
    is +-infinity."""
    out = _numpy(x, _HYPERBOLIC[func])
    if func == "acosh":
        return out, err_when(num & (x < 1.0), INPUT_RANGE)
    if func == "atanh":
        return out, err_when(num & (x.abs() > 1.0), INPUT_RANGE)
    return out, None


def _numpy(x: pl.Expr, kernel: Any) -> pl.Expr:
    """`kernel` (an array function) over a float column: polars' own `cbrt` and `log10`, and
    numpy's, differ from the C library's (which PostgreSQL uses) in the last bit for many
    inputs, so the kernels call it (`degrees.py`)."""

    def apply(s: pl.Series) -> pl.Series:
        with np.errstate(all="ignore"):
            return pl.Series(kernel(s.to_numpy()), dtype=pl.Float64)

    return pl.when(x.is_null()).then(None).otherwise(
        x.map_batches(apply, return_dtype=pl.Float64))


def _numpy2(x: pl.Expr, y: pl.Expr, kernel: Any) -> pl.Expr:
    """A binary numpy ufunc over two float columns (NULL where either is)."""

    def apply(s: Sequence[pl.Series]) -> pl.Series:
        with np.errstate(all="ignore"):
            return pl.Series(kernel(s[0].to_numpy(), s[1].to_numpy()), dtype=pl.Float64)

    return pl.when(x.is_null() | y.is_null()).then(None).otherwise(
        pl.map_batches([x, y], apply, return_dtype=pl.Float64))


def _range_error(out: pl.Expr, finite_args: pl.Expr, nonzero: pl.Expr) -> pl.Expr:
    """PostgreSQL's float overflow/underflow checks of a result from finite arguments."""
    return (pl.when(finite_args & out.is_infinite()).then(pl.lit(OVERFLOW))
            .when(finite_args & nonzero & (out == 0)).then(pl.lit(UNDERFLOW))
            .otherwise(_NULL_STR))


def float_div(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """`a / b` of float columns, IEEE's correctly rounded quotient in every row. polars (2.1)
    divides a column by a scalar as a multiplication by the scalar's reciprocal, which is off
    in the last bit for some dividends (`825148017516063.0 / 1e-10`); numpy divides."""
    return _numpy2(a, b, np.divide)


def float_arith_error(func: str, out: pl.Expr, a: pl.Expr, b: pl.Expr | None) -> pl.Expr | None:
    """PostgreSQL's range checks of float8 `+ - * /` (`float8_pl` ... `float8_div`): a result
    that is infinite from finite operands (a finite dividend) is `overflow`; a zero product of
    nonzero operands, or a zero quotient of a nonzero dividend by a finite divisor, is
    `underflow`. Infinite and NaN operands give IEEE's results unchecked; `neg`/`abs` never
    fail. Where an operand is NULL the condition is NULL, so no error."""
    if b is None:
        return None
    if func in ("add", "sub", "mul"):
        over = out.is_infinite() & ~a.is_infinite() & ~b.is_infinite()
        if func != "mul":
            return err_when(over, OVERFLOW)
        under = (out == 0) & (a != 0) & (b != 0)
    else:  # div
        over = out.is_infinite() & ~a.is_infinite()
        under = (out == 0) & (a != 0) & ~b.is_infinite()
    return pl.when(over).then(pl.lit(OVERFLOW)).when(under).then(pl.lit(UNDERFLOW)).otherwise(
        _NULL_STR)


FLOAT_TEXT: Final = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
"""A decimal float literal (`text_to_float` also takes `inf`/`infinity`/`nan`)."""
FLOAT_WORD: Final = r"^[+-]?(inf|infinity|nan)$"
_NONZERO_MANTISSA: Final = r"^[^eE]*[1-9]"
BAD_FLOAT_TEXT: Final = "invalid input syntax for type double precision"
FLOAT_TEXT_RANGE: Final = "is out of range for type double precision"


def text_to_float(s: pl.Expr) -> Compiled:
    """PostgreSQL's `text::double precision` (`float8in`) of a stripped text column: a decimal
    literal or, in any case, `inf`, `infinity` or `nan` with an optional sign; anything else is
    `invalid input syntax` (22P02); a number whose nearest double is infinite, or zero although
    its digits are not all zero, is `"..." is out of range` (22003). Hexadecimal input, which
    C's `strtod` (so PostgreSQL) also reads, is refused as invalid."""
    number = s.str.contains(FLOAT_TEXT)
    word = s.str.contains("(?i)" + FLOAT_WORD)
    value = s.cast(pl.Float64, strict=False)
    out_of_range = number & (value.is_infinite() | (
        (value == 0) & s.str.contains(_NONZERO_MANTISSA)))
    err = (pl.when(s.is_not_null() & ~number & ~word)
           .then(pl.format('{}: "{}"', pl.lit(BAD_FLOAT_TEXT), s))
           .when(out_of_range).then(pl.format('"{}" {}', s, pl.lit(FLOAT_TEXT_RANGE)))
           .otherwise(_NULL_STR))
    return pl.when(number | word).then(value).otherwise(None), err


def parse_float_text(text: str) -> float:
    """`text_to_float` of one stripped string (a SQL literal): the double, or `ValueError`
    whose message is the evaluation error's."""
    if re.fullmatch(FLOAT_WORD, text, re.I):
        return float(text)
    if not re.fullmatch(FLOAT_TEXT, text):
        raise ValueError(f'{BAD_FLOAT_TEXT}: "{text}"')
    value = float(text)
    if math.isinf(value) or (value == 0 and re.match(_NONZERO_MANTISSA, text)):
        raise OverflowError(f'"{text}" {FLOAT_TEXT_RANGE}')
    return value


def case_map(s: pl.Expr, upper: bool) -> pl.Expr:
    """PostgreSQL's `upper`/`lower` of a text column under a libc UTF-8 locale (`C.UTF-8`):
    each character by its *simple* case mapping (`towupper`/`towlower`, one character to one):
    `ß`, `ŉ` and the like stay, `İ` lowers to `i`, `ᾳ` uppers to `ᾼ`, `Σ` always lowers to
    `σ` (no final-sigma rule). ASCII-only strings use polars' kernel; a string with another
    character goes through the whole table (`case_tables`)."""

    def apply(col: pl.Series) -> pl.Series:
        fast = col.str.to_uppercase() if upper else col.str.to_lowercase()
        other = col.str.contains(r"[^\x00-\x7F]").fill_null(False)
        if not other.any():
            return fast
        ups, lows = case_tables()
        table = ups if upper else lows
        fixed = col.filter(other).str.replace_many(list(table), list(table.values()))
        return fast.scatter(other.arg_true(), fixed)

    return s.map_batches(apply, return_dtype=pl.String)


@functools.cache
def case_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(upper, lower): every character (ASCII included) that its simple case mapping changes,
    to its image. Python's tables are the full mappings, so a character whose full upper case
    is several characters takes its title case when that is one character (`ᾳ` -> `ᾼ`, as
    UnicodeData's simple mapping says), else stays; a lower case of several characters keeps
    its first (`İ` -> `i`). Equal to glibc's C.UTF-8 `towupper`/`towlower` (PostgreSQL's) at
    every code point (Unicode 14, checked against PostgreSQL 15). Cased characters all lie
    below U+20000."""
    ups: dict[str, str] = {}
    lows: dict[str, str] = {}
    for n in range(1, 0x20000):
        if 0xD800 <= n <= 0xDFFF:
            continue
        c = chr(n)
        u = c.upper()
        if len(u) != 1:
            u = c.title() if len(c.title()) == 1 else c
        if u != c:
            ups[c] = u
        low = c.lower()[:1]
        if low != c:
            lows[c] = low
    return ups, lows


@functools.cache
def word_char_pattern() -> str:
    """The regex of one character `iswalnum` counts (PostgreSQL's `initcap` word characters
    under glibc's C.UTF-8): Unicode's Alphabetic property or a decimal digit — as of Unicode
    14, so less the marks made Alphabetic later and the code points Python's (Unicode 14)
    tables leave unassigned (polars' regex knows a newer Unicode)."""
    gaps: list[str] = []
    start = None
    for n in range(0x40001):  # above U+3FFFF nothing is alphabetic
        unassigned = n < 0x40000 and unicodedata.category(chr(n)) == "Cn"
        if unassigned and start is None:
            start = n
        elif not unassigned and start is not None:
            gaps.append(f"\\x{{{start:X}}}-\\x{{{n - 1:X}}}")
            start = None
    return rf"^[[\p{{Alphabetic}}\p{{Nd}}]--[{_NEWER_ALPHABETIC}{''.join(gaps)}]]$"


def _any_null(vals: Sequence[pl.Expr]) -> pl.Expr:
    return pl.any_horizontal([v.is_null() for v in vals])


def _string(func: str, vals: Sequence[pl.Expr]) -> tuple[pl.Expr, pl.Expr | None]:
    s = vals[0].cast(pl.String)
    null = _any_null(vals)
    err: pl.Expr | None = None
    if func == "md5":
        out = s.map_batches(md5_hex, return_dtype=pl.String)
    elif func == "reverse":
        out = s.str.split("").list.reverse().list.join("")
    elif func == "initcap":
        ch = pl.element()
        after_word = ch.shift(1).str.contains(word_char_pattern()).fill_null(False)
        # PostgreSQL maps one character to one (towupper/towlower, the simple mappings).
        ups, lows = case_tables()
        upper, lower = ch.replace(ups), ch.replace(lows)
        out = s.str.split("").list.eval(
            pl.when(after_word).then(lower).otherwise(upper)).list.join("")
    elif func in ("trim_chars", "ltrim_chars", "rtrim_chars"):
        # (a NULL set would strip whitespace in polars: NULL rows are NULL below)
        chars = vals[1].cast(pl.String)
        out = {"trim_chars": s.str.strip_chars(chars),
               "ltrim_chars": s.str.strip_chars_start(chars),
               "rtrim_chars": s.str.strip_chars_end(chars)}[func]
    elif func == "replace":
        old, new = vals[1].cast(pl.String), vals[2].cast(pl.String)
        out = pl.when((old == "") | (s == "")).then(s).otherwise(s.str.split(old).list.join(new))
    elif func == "strpos":
        sub = vals[1].cast(pl.String)
        parts = s.str.split(sub)
        found = parts.list.len() > 1
        out = (pl.when(sub == "").then(1).when(s == "").then(0)
               .when(found).then(parts.list.first().str.len_chars().cast(pl.Int64) + 1)
               .otherwise(0))
    elif func == "split_part":
        sep, n = vals[1].cast(pl.String), vals[2].cast(pl.Int64)
        index = pl.when(n > 0).then(n - 1).otherwise(n)
        field = s.str.split(sep).list.get(index, null_on_oob=True).fill_null("")
        out = (pl.when(s == "").then(pl.lit(""))
               .when(sep == "").then(pl.when(n.abs() == 1).then(s).otherwise(pl.lit("")))
               .otherwise(field))
        err = err_when(~null & (n == 0), FIELD_ZERO)
    elif func == "repeat":
        n = pl.max_horizontal(vals[1].cast(pl.Int64), pl.lit(0, pl.Int64))
        big = s.str.len_chars().cast(pl.Int64) * n > MAX_LENGTH
        safe = pl.when(big).then(0).otherwise(n)
        out = s.repeat_by(safe).list.join("")
        err = err_when(~null & big, TOO_LONG)
    else:  # lpad, rpad
        n = pl.max_horizontal(vals[1].cast(pl.Int64), pl.lit(0, pl.Int64))
        fill = vals[2].cast(pl.String)
        big = n > MAX_LENGTH
        n = pl.when(big).then(0).otherwise(n)
        kept = s.str.slice(0, n)
        fill_len = fill.str.len_chars().cast(pl.Int64)
        need = pl.when(fill_len == 0).then(0).otherwise(n - kept.str.len_chars().cast(pl.Int64))
        times = pl.when(need > 0).then((need + fill_len - 1) // fill_len).otherwise(0)
        pad = fill.repeat_by(times).list.join("").str.slice(0, need)
        out = pad + kept if func == "lpad" else kept + pad
        err = err_when(~null & big, TOO_LONG)
    return pl.when(null).then(None).otherwise(out), err
