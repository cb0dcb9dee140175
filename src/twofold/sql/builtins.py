"""Binding PostgreSQL's math and string functions (part of `exprs.Binder`).

Contract: each method binds one sqlglot function node to `(expr, scalar, nullable)` over the
engine's functions (`twofold.engine.functions`, which holds their semantics and errors) or
raises a typed `SqlError`. Argument types follow PostgreSQL's resolution: the math functions
(`sqrt`, `cbrt`, `power`/`pow`, `ln`, `log`/`log10`, `exp`, `sign`, `trunc`, `degrees`,
`radians`, `sin`, `cos`, `tan`, `cot`, `asin`, `acos`, `atan`, `atan2` and the degree forms
`sind` ... `atan2d`) take `double precision`, an integer argument is converted, the result
is a double; the text functions (`replace`, `position`/`strpos`, `split_part`, `lpad`/`rpad`,
`repeat`, `reverse`, `initcap`, `md5`) take text and integer counts; a quoted literal takes
the type the argument needs (`sqrt('4')`), anything else of the wrong type is `42883`. Forms
PostgreSQL answers only in `numeric` (`log(b, x)`, `trunc(x, d)`) are refused (`0A000`),
never approximated, and so is `md5(bytea)`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from sqlglot import exp

from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import FeatureNotSupported, UndefinedFunction
from twofold.sql.scope import NULL
from twofold.sql.types import type_name

if TYPE_CHECKING:
    from twofold.sql.planner import Planner

B = tuple[PExpr, str, bool]
_RADIANS_PER_DEGREE: Final = 0.0174532925199432957692  # PostgreSQL's constant


class BuiltinBinders:
    """Math and string functions; mixed into `exprs.Binder`."""

    planner: Planner

    if TYPE_CHECKING:
        def bind(self, node: exp.Expr) -> B: ...
        def _retype(self, lit: exp.Literal, scalar: str) -> B: ...

    def _typed(self, func: str, nodes: list[exp.Expr], want: list[str]) -> list[B]:
        """Bind `nodes` as arguments of types `want` ("float" accepts ints, converted)."""
        out: list[B] = []
        for node, w in zip(nodes, want, strict=True):
            b = self.bind(node)
            if b[1] == "str" and w != "str" and isinstance(node, exp.Literal):
                b = self._retype(node, w)
            ok = b[1] == w or b[1] == NULL or (w == "float" and b[1] == "int")
            if not ok:
                got = ", ".join(type_name(self.bind(n)[1]) for n in nodes)
                raise UndefinedFunction(f"function {func}({got}) does not exist")
            out.append(b)
        return out

    def _apply(self, engine_func: str, bs: list[B], scalar: str) -> B:
        from twofold.sql.exprs import call

        return call(engine_func, *(b[0] for b in bs)), scalar, any(b[2] for b in bs)

    def _math1(self, node: exp.Expr, func: str, engine_func: str | None = None) -> B:
        return self._apply(engine_func or func, self._typed(func, [node.this], ["float"]),
                           "float")

    def _Sqrt(self, node: exp.Sqrt) -> B:
        return self._math1(node, "sqrt")

    def _Cbrt(self, node: exp.Cbrt) -> B:
        return self._math1(node, "cbrt")

    def _Ln(self, node: exp.Ln) -> B:
        return self._math1(node, "ln")

    def _Exp(self, node: exp.Exp) -> B:
        return self._math1(node, "exp")

    def _Sign(self, node: exp.Sign) -> B:
        return self._math1(node, "sign")

    def _Log(self, node: exp.Log) -> B:
        # sqlglot reads log(x) as Log(x) and log10(x) as Log(10, x).
        value, base = node.expression, node.this
        if value is None:
            return self._math1(node, "log", "log10")
        if isinstance(base, exp.Literal) and not base.is_string and base.this == "10":
            return self._apply("log10", self._typed("log10", [value], ["float"]), "float")
        raise FeatureNotSupported("log(b, x) is not supported (PostgreSQL computes it in "
                                  "numeric); use ln(x) / ln(b)")

    def _Trunc(self, node: exp.Trunc) -> B:
        if node.args.get("decimals") is not None:
            raise FeatureNotSupported("trunc(x, d) is not supported (PostgreSQL computes it in "
                                      "numeric); trunc(x) is")
        return self._math1(node, "trunc")

    def _Pow(self, node: exp.Pow) -> B:
        bs = self._typed("power", [node.this, node.expression], ["float", "float"])
        return self._apply("power", bs, "float")

    # PostgreSQL's trigonometric functions, in radians (sqlglot has a node for each).
    def _Sin(self, node: exp.Sin) -> B:
        return self._math1(node, "sin")

    def _Cos(self, node: exp.Cos) -> B:
        return self._math1(node, "cos")

    def _Tan(self, node: exp.Tan) -> B:
        return self._math1(node, "tan")

    def _Cot(self, node: exp.Cot) -> B:
        return self._math1(node, "cot")

    def _Asin(self, node: exp.Asin) -> B:
        return self._math1(node, "asin")

    def _Acos(self, node: exp.Acos) -> B:
        return self._math1(node, "acos")

    def _Atan(self, node: exp.Atan) -> B:
        if node.args.get("expression") is not None:
            got = ", ".join(type_name(self.bind(n)[1]) for n in (node.this, node.expression))
            raise UndefinedFunction(f"function atan({got}) does not exist; atan2(y, x) is")
        return self._math1(node, "atan")

    def _Atan2(self, node: exp.Atan2) -> B:
        bs = self._typed("atan2", [node.this, node.expression], ["float", "float"])
        return self._apply("atan2", bs, "float")

    # PostgreSQL's hyperbolic functions (float8 -> float8).
    def _Sinh(self, node: exp.Expr) -> B:
        return self._math1(node, "sinh")

    def _Cosh(self, node: exp.Expr) -> B:
        return self._math1(node, "cosh")

    def _Tanh(self, node: exp.Expr) -> B:
        return self._math1(node, "tanh")

    def _Asinh(self, node: exp.Expr) -> B:
        return self._math1(node, "asinh")

    def _Acosh(self, node: exp.Expr) -> B:
        return self._math1(node, "acosh")

    def _Atanh(self, node: exp.Expr) -> B:
        return self._math1(node, "atanh")

    def degree_function(self, node: exp.Anonymous, name: str) -> B:
        """`sind`, `cosd`, `tand`, `cotd`, `asind`, `acosd`, `atand` (one double) and
        `atan2d` (two): sqlglot reads them as anonymous calls."""
        want = ["float", "float"] if name == "atan2d" else ["float"]
        if len(node.expressions) != len(want):
            raise UndefinedFunction(f"function {name} takes {len(want)} argument(s)")
        return self._apply(name, self._typed(name, list(node.expressions), want), "float")

    def _Pi(self, node: exp.Pi) -> B:
        return PLiteral(value=math.pi), "float", False

    def _degrees(self, node: exp.Expr, func: str) -> B:
        from twofold.sql.exprs import call

        (e, _, n), = self._typed(func, [node.this], ["float"])
        f = call("cast_float", e)
        k = PLiteral(value=_RADIANS_PER_DEGREE)
        return (call("div", f, k) if func == "degrees" else call("mul", f, k)), "float", n

    def _Degrees(self, node: exp.Degrees) -> B:
        return self._degrees(node, "degrees")

    def _Radians(self, node: exp.Radians) -> B:
        return self._degrees(node, "radians")

    # -- text -------------------------------------------------------------------------------

    def _Replace(self, node: exp.Replace) -> B:
        args = [node.this, node.expression, node.args.get("replacement")]
        if args[2] is None:
            raise UndefinedFunction("function replace(text, text) does not exist")
        return self._apply("replace", self._typed("replace", args, ["str"] * 3), "str")

    def _StrPosition(self, node: exp.StrPosition) -> B:
        if node.args.get("position") is not None or node.args.get("occurrence") is not None:
            raise FeatureNotSupported("position with a start or an occurrence is not supported")
        bs = self._typed("strpos", [node.this, node.args["substr"]], ["str", "str"])
        from twofold.sql.pgtypes import typed

        return typed(self._apply("strpos", bs, "int"), "int4")  # an integer in PostgreSQL

    def _SplitPart(self, node: exp.SplitPart) -> B:
        args = [node.this, node.args.get("delimiter"), node.args.get("part_index")]
        if any(a is None for a in args):
            raise UndefinedFunction("split_part takes three arguments: split_part(text, "
                                    "delimiter, n)")
        return self._apply("split_part",
                           self._typed("split_part", args, ["str", "str", "int"]), "str")

    def _Pad(self, node: exp.Pad) -> B:
        func = "lpad" if node.args.get("is_left") else "rpad"
        fill = node.args.get("fill_pattern")
        bs = self._typed(func, [node.this, node.expression], ["str", "int"])
        fb = self._typed(func, [fill], ["str"])[0] if fill is not None else (
            PLiteral(value=" "), "str", False)
        return self._apply(func, [*bs, fb], "str")

    def _Repeat(self, node: exp.Repeat) -> B:
        bs = self._typed("repeat", [node.this, node.args["times"]], ["str", "int"])
        return self._apply("repeat", bs, "str")

    def _Reverse(self, node: exp.Reverse) -> B:
        return self._apply("reverse", self._typed("reverse", [node.this], ["str"]), "str")

    def _MD5(self, node: exp.MD5) -> B:
        if self.bind(node.this)[1] == "bytes":
            raise FeatureNotSupported("md5(bytea) is not supported; md5(text) is")
        return self._apply("md5", self._typed("md5", [node.this], ["str"]), "str")

    def _Initcap(self, node: exp.Initcap) -> B:
        return self._apply("initcap", self._typed("initcap", [node.this], ["str"]), "str")
