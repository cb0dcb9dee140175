"""Binding SQL's CASE, casts and scalar functions (part of `exprs.Binder`).

Contract: the same as `twofold.sql.exprs` — each method binds one node kind to `(expr, scalar,
nullable)` or raises a typed `SqlError`. PostgreSQL's rules: CASE branches unify (int with
float makes float, a NULL takes the others' type); COALESCE/NULLIF/GREATEST/LEAST unify their
arguments, GREATEST/LEAST ignore NULLs and `concat()`/`concat_ws()` skip them; `abs` keeps an
integer's type, `floor`/`ceil`/`round` work on doubles (of an integer: the integer as a
double, as PostgreSQL's resolve to the double precision forms); `round` of a double rounds
ties to even (`rint`), of a `numeric` expression (`pgtypes.is_numeric`: a decimal literal and
arithmetic over it) and to `d` places away from zero, as PostgreSQL's numeric round;
string functions take text; `left`/`right`/`starts_with` are spelled with `substr`/`length`
(a negative count drops that many characters from the other end, as in PostgreSQL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.api.joins import typed_null
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import FeatureNotSupported, UndefinedFunction
from twofold.sql.pgtypes import (
    Typed,
    base,
    char_cast,
    char_limit,
    clamp_float,
    fits,
    is_numeric,
    narrow,
    pg_of,
)
from twofold.sql.scope import NULL
from twofold.sql.types import (
    FUNCTIONS_UNSUPPORTED,
    declared_type,
    sql_type,
    type_name,
    unify_declared,
)

if TYPE_CHECKING:
    from twofold.sql.planner import Planner

B = tuple[PExpr, str, bool]
_NUMERIC = frozenset({"int", "float", NULL})
DEGREE_FUNCTIONS = frozenset({"sind", "cosd", "tand", "cotd", "asind", "acosd", "atand",
                              "atan2d"})


class FunctionBinders:
    """CASE, CAST and function calls; mixed into `exprs.Binder`."""

    planner: Planner

    if TYPE_CHECKING:
        def bind(self, node: exp.Expr) -> B: ...
        def condition(self, node: exp.Expr, what: str) -> PExpr: ...
        def _retype(self, lit: exp.Literal, scalar: str) -> B: ...
        def degree_function(self, node: exp.Anonymous, name: str) -> B: ...
        def retype_pg(self, lit: exp.Literal, scalar: str, pg: str | None) -> B: ...

    def unified(self, bs: list[B], scalar: str) -> tuple[list[PExpr], str | None]:
        """The expressions of `bs` coerced to their common `scalar` and PostgreSQL type (int2
        with int4 is int4, integer with real real: `unify_declared`), and that type: a value
        made real is rounded to single precision, as PostgreSQL's cast does."""
        pg = unify_declared([pg_of(b) if b[1] != NULL else None for b in bs],
                            [b[1] for b in bs])
        known = [b for b in bs if b[1] != NULL]
        if pg is None and any(is_numeric(b) for b in known) and all(
                is_numeric(b) or b[1] == "int" for b in known):
            pg = "numeric"  # numeric with integers is numeric (COALESCE(2.5, 1)::int is 3)
        out = []
        for b in bs:
            e = self.planner.coerce(b, scalar)
            if pg == "float4" and b[1] != NULL and base(pg_of(b)) != "float4":
                e = narrow(b[0] if b[1] == "int" else e, pg)  # an int rounded once
            out.append(e)
        return out, pg

    def text_of(self, b: B) -> PExpr:
        """`b`'s value as text, as PostgreSQL's output function writes it (a real's
        float4out: `0.1`, not the double's digits)."""
        if b[1] == "float" and base(pg_of(b)) == "float4":
            out: PExpr = call("float4_text", b[0])
            return out
        numeric = getattr(b, "numeric_text", None)
        if numeric is not None:  # a decimal literal: numeric's text, its scale kept
            return PLiteral(value=numeric)
        return b[0] if b[1] in ("str", NULL) else self.planner.cast_expr(b[0], b[1], "str")

    # -- CASE, casts, functions ---------------------------------------------------------------

    def bind_resolved(self, nodes: list[exp.Expr], what: str) -> list[B]:
        """`nodes` bound as one CASE/COALESCE/NULLIF/GREATEST/LEAST set, by PostgreSQL's rule
        for its quoted literals (type `unknown`): they take the type the other arguments
        resolve to (`coalesce(f, 'NaN')` is double precision, `nullif(i, '2')` integer,
        range-checked), and are text only when nothing else has a type."""
        bs = [self.bind(n) for n in nodes]
        unknown = [isinstance(n, exp.Literal) and n.is_string and b[1] == "str"
                   for n, b in zip(nodes, bs, strict=True)]
        known = [b for b, u in zip(bs, unknown, strict=True) if not u]
        typed_ = {b[1] for b in known} - {NULL}
        if not any(unknown) or not typed_ or typed_ == {"str"}:
            return bs
        scalar = unify(self, [b[1] for b in known], what)
        pg = unify_declared([pg_of(b) if b[1] != NULL else None for b in known],
                            [b[1] for b in known])
        return [self.retype_pg(n, scalar, pg) if u and isinstance(n, exp.Literal) else b
                for n, b, u in zip(nodes, bs, unknown, strict=True)]

    def _Case(self, node: exp.Case) -> B:
        subject = node.this
        conds: list[PExpr] = []
        result_nodes: list[exp.Expr] = []
        for when in node.args.get("ifs") or []:
            cond_node = when.this
            if subject is not None:
                cond_node = exp.EQ(this=subject, expression=cond_node)
            conds.append(self.condition(cond_node, "CASE/WHEN"))
            result_nodes.append(when.args["true"])
        default = node.args.get("default")
        bound = self.bind_resolved(result_nodes + ([default] if default is not None else []),
                                   "CASE")
        branches = list(zip(conds, bound[:len(conds)], strict=True))
        otherwise: B = bound[-1] if default is not None else (
            PLiteral(value=None), NULL, True)
        scalar = unify(self, [b[1] for _, b in branches] + [otherwise[1]], "CASE")
        results, pg = self.unified([*(b for _, b in branches), otherwise], scalar)
        out = results[-1]
        nullable = otherwise[2]
        for (cond, b), e in zip(reversed(branches), reversed(results[:-1]), strict=True):
            out = call("if", cond, e, out)
            nullable = nullable or b[2]
        return Typed(out, scalar, nullable, pg)

    def _If(self, node: exp.If) -> B:
        return self._Case(exp.Case(ifs=[node], default=node.args.get("false")))

    def _Cast(self, node: exp.Cast) -> B:
        """PostgreSQL's cast to the target type: to smallint/integer range-checked (22003),
        to real rounded to single precision (22003 on overflow/underflow), of a real to text
        float4out's digits; the result has the target's PostgreSQL type."""
        b = self.bind(node.this)
        e, s, n = b
        to = node.args["to"]
        target = sql_type(to)
        pg: str | None = declared_type(to)
        if target == "str" and pg not in ("varchar", "text") and char_limit(pg) is None:
            pg = "text"  # a char/varchar without a length
        if s == "str" and isinstance(node.this, exp.Literal) and target != "str":
            return self.retype_pg(node.this, target, pg)
        from twofold.sql.exprs import null_constant

        if s != NULL and null_constant(e):
            # a cast of a NULL constant is a NULL constant of the target type, as PostgreSQL
            # folds it (so `x > NULL::float8::integer` is a NULL constant in turn)
            return Typed(typed_null(target), target, True, pg)
        if target == "str" and s != NULL:
            # to varchar(n) the first n characters, to char(n) without trailing spaces
            # (PostgreSQL's explicit cast: never an error); the same type again is as it is
            same = pg_of(b) == pg or (base(pg) == "varchar" and base(pg_of(b)) == "varchar"
                                      and char_limit(pg) is None)
            text = self.text_of(b)
            return Typed(text if same else char_cast(text, pg), target, n, pg)
        if pg == "float4" and s == "int":
            return Typed(narrow(e, pg), target, n, pg)  # rounded once, from the integer
        if s == "float":
            e = clamp_float(e, pg)  # named as the target's overflow, not bigint's
        out = self.planner.cast_expr(e, s, target, numeric=is_numeric(b))
        if s != NULL and not fits(pg_of(b), pg):
            out = narrow(out, pg)
        return Typed(out, target, n, pg)

    _TryCast = _Cast

    def _arg_nodes(self, node: exp.Expr) -> list[exp.Expr]:
        args = [node.this, *node.expressions] if node.this is not None else node.expressions
        if node.args.get("expression") is not None:
            args.append(node.args["expression"])
        if node.args.get("decimals") is not None:
            args.append(node.args["decimals"])
        return list(args)

    def _args(self, node: exp.Expr) -> list[B]:
        return [self.bind(a) for a in self._arg_nodes(node)]

    def _variadic(self, node: exp.Expr, what: str) -> tuple[list[PExpr], str, list[B]]:
        bs = self.bind_resolved(self._arg_nodes(node), what)
        scalar = unify(self, [b[1] for b in bs], what)
        return [self.planner.coerce(b, scalar) for b in bs], scalar, bs

    def _Coalesce(self, node: exp.Coalesce) -> B:
        _, scalar, bs = self._variadic(node, "COALESCE")
        es, pg = self.unified(bs, scalar)
        return Typed(call("coalesce", *es), scalar, all(b[2] for b in bs), pg)

    def _Nullif(self, node: exp.Nullif) -> B:
        _, scalar, bs = self._variadic(node, "NULLIF")
        (a, b), pg = self.unified(bs, scalar)
        # NULL where the arguments are equal, whatever their nullability.
        return Typed(call("if", call("eq", a, b), typed_null(scalar), a), scalar, True, pg)

    def _extreme(self, node: exp.Expr, func: str) -> B:
        _, scalar, bs = self._variadic(node, func.upper())
        es, pg = self.unified(bs, scalar)
        # PostgreSQL's GREATEST/LEAST ignore NULL arguments (NULL only when all are).
        out = es[0]
        for e in es[1:]:
            better = call("gt" if func == "greatest" else "lt", e, out)
            out = call("if", call("or", call("is_null", out), better), e, out)
        return Typed(out, scalar, all(b[2] for b in bs), pg)

    def _Greatest(self, node: exp.Greatest) -> B:
        return self._extreme(node, "greatest")

    def _Least(self, node: exp.Least) -> B:
        return self._extreme(node, "least")

    def _numeric_fn(self, node: exp.Expr, func: str, keep_int: bool) -> B:
        bs = self._args(node)
        e, s, n = bs[0]
        if s not in _NUMERIC:
            raise UndefinedFunction(f"function {func}({type_name(s)}) does not exist")
        if func == "abs":  # abs(integer) is an integer: abs(-2147483648) is out of range
            pg = pg_of(bs[0]) if s != NULL else None
            return Typed(narrow(call("abs", e), pg), s, n, pg)
        if s in ("int", NULL) and keep_int:
            # PostgreSQL's floor/ceil/round of an integer are double precision's (floor(7) / 2
            # is 3.5): the integer converted, which is its own floor.
            return call("cast_float", e), "float", n
        digits: PExpr = PLiteral(value=0)
        if len(bs) > 1:
            digits = bs[1][0]
            if bs[1][1] not in ("int", NULL):
                raise UndefinedFunction(f"function {func}(.., {type_name(bs[1][1])}) does "
                                        "not exist")
        f = e if s == "float" else call("cast_float", e)
        if func == "round" and len(bs) == 1 and not is_numeric(bs[0]):
            # round(double precision) is rint's: ties to even, a zero's sign kept
            return call("rint", f), "float", n
        if func == "round":
            # numeric's round: ties away from zero (PostgreSQL has no round(double, int);
            # twofold rounds a double to `d` places as round(x::numeric, d) would)
            nullable = n or any(b[2] for b in bs[1:])
            return Typed(call("round", f, digits), "float", nullable, "numeric")
        return call(func, f), "float", n

    def _Abs(self, node: exp.Abs) -> B:
        return self._numeric_fn(node, "abs", True)

    def _Round(self, node: exp.Round) -> B:
        return self._numeric_fn(node, "round", node.args.get("decimals") is None)

    def _Floor(self, node: exp.Floor) -> B:
        return self._numeric_fn(node, "floor", True)

    def _Ceil(self, node: exp.Ceil) -> B:
        return self._numeric_fn(node, "ceil", True)

    def _string_fn(self, node: exp.Expr, func: str) -> B:
        e, s, n = self.bind(node.this)
        if s not in ("str", NULL):
            raise UndefinedFunction(f"function {func}({type_name(s)}) does not exist")
        if func == "length":  # PostgreSQL's length is an integer
            return Typed(call(func, e), "int", n, "int4")
        return call(func, e), "str", n

    def _Length(self, node: exp.Length) -> B:
        return self._string_fn(node, "length")

    def _Lower(self, node: exp.Lower) -> B:
        return self._string_fn(node, "lower")

    def _Upper(self, node: exp.Upper) -> B:
        return self._string_fn(node, "upper")

    def _Trim(self, node: exp.Trim) -> B:
        """`trim([BOTH|LEADING|TRAILING] [chars] FROM s)`, `btrim`/`ltrim`/`rtrim(s
        [, chars])`: without `chars` spaces are removed, with them the longest prefix and/or
        suffix of characters in that set (a NULL set makes the result NULL)."""
        where = (node.args.get("position") or "BOTH").upper()
        func = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(where, "trim")
        if node.expression is None:
            return self._string_fn(node, func)
        bs = [self.bind(node.this), self.bind(node.expression)]
        if any(b[1] not in ("str", NULL) for b in bs):
            name = {"trim": "btrim"}.get(func, func)
            raise UndefinedFunction(f"function {name}({type_name(bs[0][1])}, "
                                    f"{type_name(bs[1][1])}) does not exist")
        es = [self.text_of(b) for b in bs]
        return call(f"{func}_chars", *es), "str", bs[0][2] or bs[1][2]

    def _Substring(self, node: exp.Substring) -> B:
        e, s, n = self.bind(node.this)
        if s not in ("str", NULL):
            raise UndefinedFunction(f"function substr({type_name(s)}) does not exist")
        start = self.bind(node.args["start"]) if node.args.get("start") else (
            PLiteral(value=1), "int", False)
        length = self.bind(node.args["length"]) if node.args.get("length") else (
            PLiteral(value=2**62), "int", False)
        for b in (start, length):
            if b[1] not in ("int", NULL):
                raise UndefinedFunction(f"substr needs integer positions, got {type_name(b[1])}")
        return call("substr", e, start[0], length[0]), "str", n or start[2] or length[2]

    def _Concat(self, node: exp.Concat) -> B:
        bs = self._args(node)
        parts = [self.text_of(b) for b in bs]
        # PostgreSQL's concat() skips NULL arguments.
        out: PExpr = PLiteral(value="")
        for p in parts:
            out = call("concat", out, call("coalesce", p, PLiteral(value="")))
        return out, "str", False

    def _ConcatWs(self, node: exp.ConcatWs) -> B:
        bs = [self.bind(a) for a in node.expressions]
        if len(bs) < 2:
            raise UndefinedFunction("function concat_ws() needs a separator and a value")
        parts = [self.text_of(b) for b in bs]
        sep, values = parts[0], parts[1:]
        # PostgreSQL's concat_ws skips NULL values; a NULL separator makes the result NULL.
        acc: PExpr = typed_null("str")
        for v in values:
            joined = call("if", call("is_null", acc), v, call("concat", call("concat", acc, sep),
                                                               v))
            acc = call("if", call("is_null", v), acc, joined)
        out = call("if", call("is_null", sep), typed_null("str"),
                   call("coalesce", acc, PLiteral(value="")))
        return out, "str", bs[0][2]

    def _text_and_count(self, node: exp.Expr, func: str) -> tuple[B, B]:
        s, n = self.bind(node.this), self.bind(node.expression)
        if s[1] not in ("str", NULL) or n[1] not in ("int", NULL):
            raise UndefinedFunction(f"function {func}({type_name(s[1])}, {type_name(n[1])}) "
                                    "does not exist")
        return s, n

    def _Left(self, node: exp.Left) -> B:
        (s, _, sn), (n, _, nn) = self._text_and_count(node, "left")
        zero = PLiteral(value=0)
        rest = call("add", call("length", s), n)  # n < 0: all but the last -n characters
        count = call("if", call("ge", n, zero), n,
                     call("if", call("lt", rest, zero), zero, rest))
        return call("substr", s, PLiteral(value=1), count), "str", sn or nn

    def _Right(self, node: exp.Right) -> B:
        (s, _, sn), (n, _, nn) = self._text_and_count(node, "right")
        one = PLiteral(value=1)
        last = call("substr", s, call("add", call("sub", call("length", s), n), one), n)
        # n < 0: all but the first -n characters.
        rest = call("substr", s, call("sub", one, n), PLiteral(value=2**62))
        return call("if", call("ge", n, PLiteral(value=0)), last, rest), "str", sn or nn

    def _StartsWith(self, node: exp.StartsWith) -> B:
        s, p = self.bind(node.this), self.bind(node.expression)
        if s[1] not in ("str", NULL) or p[1] not in ("str", NULL):
            raise UndefinedFunction(f"function starts_with({type_name(s[1])}, "
                                    f"{type_name(p[1])}) does not exist")
        prefix = call("substr", s[0], PLiteral(value=1), call("length", p[0]))
        return call("eq", prefix, p[0]), "bool", s[2] or p[2]

    def _CurrentTimestamp(self, node: exp.Expr) -> B:
        # now(), current_timestamp, current_date, ...: refused by name, with the reason.
        what = {"CurrentDate": "current_date", "CurrentTime": "current_time",
                "Localtimestamp": "localtimestamp", "Localtime": "localtime"}.get(
            type(node).__name__, "now() / current_timestamp")
        raise FeatureNotSupported(f"{what} is not supported: twofold has no date or time "
                                  "types (its types are bigint, double precision, text, "
                                  "boolean and bytea)")

    _CurrentDate = _CurrentTime = _Localtimestamp = _Localtime = _CurrentTimestamp

    def _Anonymous(self, node: exp.Anonymous) -> B:
        name = node.name.lower()
        if name in DEGREE_FUNCTIONS:
            return self.degree_function(node, name)
        if name in FUNCTIONS_UNSUPPORTED:
            raise FeatureNotSupported(f"function {name}() is not supported")
        raise UndefinedFunction(f"function {name}() does not exist")


def call(func: str, *args: PExpr) -> Any:
    from twofold.sql.exprs import call as make

    return make(func, *args)


def unify(binder: Any, scalars: list[str], what: str) -> str:
    from twofold.sql.exprs import unify as common

    return common(binder, scalars, what)
