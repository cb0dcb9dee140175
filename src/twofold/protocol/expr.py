"""Scalar expressions (`Expr`): `Column`, `Literal` and `Call` of a named function.

Evaluation (in the engine) follows SQL three-valued logic; here we only fix the vocabulary and
the arity of every function, so a structurally impossible call is refused when it is built or
decoded, before anything tries to run it.
"""

from __future__ import annotations

from typing import Any, Final
from typing import Literal as TypeLiteral

from twofold.protocol.base import Tagged, check_scalar

FuncName = TypeLiteral[
    "eq", "ne", "lt", "le", "gt", "ge",
    "and", "or", "not",
    "add", "sub", "mul", "div", "fdiv", "mod", "floordiv", "floormod", "neg",
    "is_null", "coalesce", "if",
    "concat", "lower", "upper", "length", "like",
    "abs", "cast_int", "cast_float", "cast_str",
    "check_int2", "check_int4", "round_float4", "float4_text", "float8_text",
    "round", "floor", "ceil", "substr", "trim", "ltrim", "rtrim", "error",
    "sqrt", "cbrt", "power", "ln", "log10", "exp", "sign", "trunc", "rint",
    "sin", "cos", "tan", "cot", "asin", "acos", "atan", "atan2",
    "sind", "cosd", "tand", "cotd", "asind", "acosd", "atand", "atan2d",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "replace", "strpos", "split_part", "lpad", "rpad", "repeat", "reverse", "initcap", "md5",
    "trim_chars", "ltrim_chars", "rtrim_chars",
]  # fmt: skip

# Number of arguments per function; `None` means "one or more".
FUNCTION_ARITY: Final[dict[str, int | None]] = {
    "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2,
    "and": 2, "or": 2, "not": 1,
    "add": 2, "sub": 2, "mul": 2, "div": 2, "fdiv": 2, "mod": 2, "floordiv": 2, "floormod": 2,
    "neg": 1,
    "is_null": 1, "coalesce": None, "if": 3,
    "concat": 2, "lower": 1, "upper": 1, "length": 1, "like": 2,
    "abs": 1, "cast_int": 1, "cast_float": 1, "cast_str": 1,
    "check_int2": 1, "check_int4": 1, "round_float4": 1, "float4_text": 1, "float8_text": 1,
    "round": 2, "floor": 1, "ceil": 1, "substr": 3, "trim": 1, "ltrim": 1, "rtrim": 1,
    "error": 1,
    "sqrt": 1, "cbrt": 1, "power": 2, "ln": 1, "log10": 1, "exp": 1, "sign": 1, "trunc": 1,
    "rint": 1,
    "sin": 1, "cos": 1, "tan": 1, "cot": 1, "asin": 1, "acos": 1, "atan": 1, "atan2": 2,
    "sind": 1, "cosd": 1, "tand": 1, "cotd": 1, "asind": 1, "acosd": 1, "atand": 1, "atan2d": 2,
    "sinh": 1, "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "replace": 3, "strpos": 2, "split_part": 3, "lpad": 3, "rpad": 3, "repeat": 2,
    "reverse": 1, "initcap": 1, "md5": 1,
    "trim_chars": 2, "ltrim_chars": 2, "rtrim_chars": 2,
}  # fmt: skip


class Column(Tagged, frozen=True):
    """The column at `index` of the input row."""

    index: int

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"Column index must be >= 0, got {self.index}")


class Literal(Tagged, frozen=True):
    """A constant scalar."""

    value: Any

    def __post_init__(self) -> None:
        check_scalar(self.value, "Literal.value")


class Call(Tagged, frozen=True):
    """`func(*args)`; `func` is one of `FUNCTION_ARITY`'s names."""

    func: FuncName
    args: list[Expr]

    def __post_init__(self) -> None:
        arity = FUNCTION_ARITY.get(self.func, -1)
        if arity == -1:
            raise ValueError(f"unknown function {self.func!r}")
        if arity is None:
            if not self.args:
                raise ValueError(f"{self.func} takes at least one argument, got none")
        elif len(self.args) != arity:
            raise ValueError(f"{self.func} takes {arity} argument(s), got {len(self.args)}")


Expr = Column | Literal | Call
