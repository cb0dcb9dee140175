"""PostgreSQL's trigonometric functions in degrees (`sind`, `cosd`, `tand`, `cotd`, `asind`,
`acosd`, `atand`, `atan2d`), as numpy kernels over float arrays.

Contract: each function maps an array of doubles to PostgreSQL 15's results bit for bit — its
algorithm (`float.c`), not `sin(radians(x))`: the angle is reduced to the first quadrant with
exact operations (`fmod`, reflections), evaluated by `sin`/`cos` on [0, 30] or [0, 60] degrees
scaled by the exact values at 30 and 60 degrees, so that `sind(30)` is exactly 0.5, `tand(45)`
exactly 1 and `cosd(90)` exactly 0. NaN gives NaN; infinities and arguments outside [-1, 1]
are the caller's to refuse (`twofold.engine.functions` raises `input is out of range`); `tand`
of +-90 and `cotd` of 0 are infinities, and a zero `tand`/`cotd` is +0.0.

The kernels are the C library's (`sin`, `cos`, `tan`, `asin`, `acos`, `atan`, `atan2`: Python's
`math` module calls them), as PostgreSQL's are, applied elementwise by numpy (`np.frompyfunc`,
~0.1 us a value): numpy's own float64 kernels are SIMD implementations on some CPUs
(AVX-512), which differ from glibc by one ulp on a few percent of inputs (`atan2(-705, -704)`).
Outside a function's domain (infinite angles; `asin`/`acos` beyond [-1, 1]) the result is NaN,
as numpy's, for the caller to refuse.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np


def _libm(fn: Callable[[float], float],
          domain: Callable[[np.ndarray], np.ndarray] | None) -> Callable[[np.ndarray], np.ndarray]:
    """`fn` (a C library function through `math`) over a float array; NaN outside `domain`
    (where `math` would raise)."""
    each = np.frompyfunc(fn, 1, 1)

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if domain is None:
            return np.asarray(each(x), dtype=np.float64)
        ok = domain(x)
        if ok.all():
            return np.asarray(each(x), dtype=np.float64)
        out = np.full(x.shape, np.nan)
        out[ok] = np.asarray(each(x[ok]), dtype=np.float64)
        return out

    return apply


def _libm_or(fn: Callable[[float], float], domain: Callable[[np.ndarray], np.ndarray],
             other: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """`fn` through `math` inside `domain`, `other` (numpy) outside it: for where `math`
    raises but the value is still defined (an overflow to infinity, a pole)."""
    each = np.frompyfunc(fn, 1, 1)

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        ok = domain(x)
        if ok.all():
            return np.asarray(each(x), dtype=np.float64)
        with np.errstate(all="ignore"):
            out = np.asarray(other(x), dtype=np.float64)
        out[ok] = np.asarray(each(x[ok]), dtype=np.float64)
        return out

    return apply


def _in_unit(x: np.ndarray) -> np.ndarray:
    ok: np.ndarray = ~(np.abs(x) > 1.0)  # NaN in: math gives NaN for it
    return ok


# numpy's own kernels for these differ from the C library's (which PostgreSQL calls) in the
# last bit for many inputs (cbrt on ~45% of uniform doubles, asinh ~4.5%, log10 ~3.8%, sinh and
# cosh ~1%, tanh ~0.4%, numpy 2.4.6 here); polars' exp, ln and pow agree with it.
cbrt: Final = _libm(math.cbrt, None)
log10: Final = _libm(math.log10, lambda x: ~(x <= 0.0))  # NaN in; 0 and below: the caller's error
_SINH_MAX: Final = 710.4758600739439  # the largest |x| with a finite sinh/cosh (math raises past)
sinh: Final = _libm_or(math.sinh, lambda x: ~(np.abs(x) > _SINH_MAX), np.sinh)  # past it: +-inf
cosh: Final = _libm_or(math.cosh, lambda x: ~(np.abs(x) > _SINH_MAX), np.cosh)
tanh: Final = _libm(math.tanh, None)
asinh: Final = _libm(math.asinh, None)
acosh: Final = _libm(math.acosh, lambda x: ~(x < 1.0))  # below 1: the caller's error
atanh: Final = _libm_or(math.atanh, lambda x: ~(np.abs(x) >= 1.0), np.arctanh)  # +-1: +-inf
sin: Final = _libm(math.sin, np.isfinite)
cos: Final = _libm(math.cos, np.isfinite)
tan: Final = _libm(math.tan, np.isfinite)
asin: Final = _libm(math.asin, _in_unit)
acos: Final = _libm(math.acos, _in_unit)
atan: Final = _libm(math.atan, None)
_atan2_each = np.frompyfunc(math.atan2, 2, 1)


def atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The C library's `atan2` elementwise (it is defined everywhere, NaN for NaN)."""
    return np.asarray(_atan2_each(np.asarray(y, dtype=np.float64),
                                  np.asarray(x, dtype=np.float64)), dtype=np.float64)

_RPD: Final = 0.0174532925199432957692  # PostgreSQL's RADIANS_PER_DEGREE
_SIN_30: Final = math.sin(30.0 * _RPD)
_ONE_MINUS_COS_60: Final = 1.0 - math.cos(60.0 * _RPD)
_ASIN_0_5: Final = math.asin(0.5)
_ACOS_0_5: Final = math.acos(0.5)
_ATAN_1_0: Final = math.atan(1.0)


def _sind_0_to_30(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (sin(x * _RPD) / _SIN_30) / 2.0
    return out


def _cosd_0_to_60(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 - ((1.0 - cos(x * _RPD)) / _ONE_MINUS_COS_60) / 2.0
    return out


def _sind_q1(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 30.0, _sind_0_to_30(x), _cosd_0_to_60(90.0 - x))


def _cosd_q1(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 60.0, _cosd_0_to_60(x), _sind_0_to_30(90.0 - x))


_FORTY_FIVE: Final = np.array([45.0])
_TAN_45: Final = float((_sind_q1(_FORTY_FIVE) / _cosd_q1(_FORTY_FIVE))[0])
_COT_45: Final = float((_cosd_q1(_FORTY_FIVE) / _sind_q1(_FORTY_FIVE))[0])


def _reduce(a: np.ndarray, fold_sign: bool) -> tuple[np.ndarray, np.ndarray]:
    """`a` reduced to [0, 90] degrees and the sign to apply: `fmod` by 360, then reflections
    at 0, 180 and 90 (the last flips the sign only when `fold_sign`: tan, cot)."""
    a = np.fmod(a, 360.0)
    sign = np.ones_like(a)
    neg = a < 0.0
    a, sign = np.where(neg, -a, a), np.where(neg, -sign, sign)
    big = a > 180.0
    a, sign = np.where(big, 360.0 - a, a), np.where(big, -sign, sign)
    obtuse = a > 90.0
    a = np.where(obtuse, 180.0 - a, a)
    if fold_sign:
        sign = np.where(obtuse, -sign, sign)
    return a, sign


def sind(a: np.ndarray) -> np.ndarray:
    q, sign = _reduce(a, False)
    out: np.ndarray = sign * _sind_q1(q)
    return out


def cosd(a: np.ndarray) -> np.ndarray:
    q = np.abs(np.fmod(a, 360.0))
    q = np.where(q > 180.0, 360.0 - q, q)
    obtuse = q > 90.0
    out: np.ndarray = np.where(obtuse, -1.0, 1.0) * _cosd_q1(np.where(obtuse, 180.0 - q, q))
    return out


def tand(a: np.ndarray) -> np.ndarray:
    q, sign = _reduce(a, True)
    out: np.ndarray = sign * ((_sind_q1(q) / _cosd_q1(q)) / _TAN_45) + 0.0
    return out


def cotd(a: np.ndarray) -> np.ndarray:
    q, sign = _reduce(a, True)
    out: np.ndarray = sign * ((_cosd_q1(q) / _sind_q1(q)) / _COT_45) + 0.0
    return out


def _asind_q1(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x <= 0.5, (asin(x) / _ASIN_0_5) * 30.0,
                               90.0 - (acos(x) / _ACOS_0_5) * 60.0)
    return out


def _acosd_q1(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x <= 0.5, 90.0 - (asin(x) / _ASIN_0_5) * 30.0,
                               (acos(x) / _ACOS_0_5) * 60.0)
    return out


def asind(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x >= 0.0, _asind_q1(x), -_asind_q1(-x))
    return out


def acosd(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(x >= 0.0, _acosd_q1(x), 90.0 + _asind_q1(-x))
    return out


def atand(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (atan(x) / _ATAN_1_0) * 45.0
    return out


def atan2d(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (atan2(y, x) / _ATAN_1_0) * 45.0
    return out
