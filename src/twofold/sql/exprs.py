"""Binding scalar SQL expressions to protocol `Expr`s with PostgreSQL's typing rules.

Contract: `Binder.bind(node)` returns `(expr, scalar, nullable)` — the protocol expression over
the scope's relation, its scalar type (`null` for an untyped NULL) and nullability — or raises a
typed `SqlError`: `UndefinedColumn`/`AmbiguousColumn` for names, `UndefinedFunction` (42883)
for an operator or function that does not exist for its argument types, `DatatypeMismatch`
(42804) for a non-boolean condition or CASE branches of different types, `GroupingError`
(42803) for a column outside GROUP BY, `FeatureNotSupported` (0A000) for what the engine cannot
express. A string literal takes the type its context asks for (`a = '5'` compares integers),
as PostgreSQL's `unknown` literals do. Integer division truncates toward zero and `%` takes the
dividend's sign (the engine's `div`/`mod`); `||` casts non-text operands to text. Subqueries are
handed to `twofold.sql.subqueries`, which extends the scope's relation with the joins that
compute them (never evaluated per row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from sqlglot import exp

from twofold.api.joins import typed_null
from twofold.engine.boolinput import parse_bool
from twofold.engine.functions import parse_float_text
from twofold.protocol import Call, Column
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.protocol.expr import FuncName
from twofold.sql.builtins import BuiltinBinders
from twofold.sql.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    GroupingError,
    InvalidParameter,
    InvalidTextRepresentation,
    NumericValueOutOfRange,
    UndefinedFunction,
)
from twofold.sql.functions import FunctionBinders
from twofold.sql.pgtypes import (
    Typed,
    arith_pg,
    base,
    fits_int4,
    narrow,
    narrow_literal,
    negated_text,
    numeric_literal_text,
    pg_of,
)
from twofold.sql.scope import NULL, Scope
from twofold.sql.types import DECLARED_NAMES, type_name

if TYPE_CHECKING:
    from twofold.sql.planner import Planner

B = tuple[PExpr, str, bool]  # (expression, scalar type or NULL, nullable)
_NUMERIC: Final = frozenset({"int", "float", NULL})
_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)
_CMP: Final = {exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt",
               exp.GTE: "ge"}
_ARITH: Final = {exp.Add: ("add", "+"), exp.Sub: ("sub", "-"), exp.Mul: ("mul", "*"),
                 exp.Div: ("div", "/"), exp.Mod: ("mod", "%")}
AGGREGATES: Final = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.LogicalAnd,
                     exp.LogicalOr, exp.GroupConcat, exp.AggFunc)
_NEGATABLE: Final = (exp.Is, exp.Like, exp.ILike, exp.In, exp.Between, exp.Exists)
_PY: Final = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}


_NON_STRICT: Final = frozenset({"and", "or", "is_null", "coalesce", "if", "error"})
_NARROWING: Final = frozenset({"check_int2", "check_int4", "round_float4"})
_COMPARE: Final = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
                   "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
                   "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def null_constant(e: PExpr) -> bool:
    """Whether `e` is a NULL constant: a NULL literal or `typed_null`'s form."""
    if isinstance(e, PLiteral):
        return e.value is None
    return (isinstance(e, Call) and e.func == "if" and isinstance(e.args[0], PLiteral)
            and e.args[0].value is True and isinstance(e.args[1], PLiteral)
            and e.args[1].value is None)


def _constant_node(node: exp.Expr) -> bool:
    """Whether `node` is a written constant (a literal, negated or parenthesized), not a
    parameter or anything computed."""
    while isinstance(node, exp.Paren | exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal)


def _constant_comparison(e: Call) -> bool | None:
    """The value of a comparison of two non-NULL literals of one kind (numbers, texts or
    booleans; not NaN, whose order is PostgreSQL's, not Python's), else None."""
    a, b = e.args
    if not isinstance(a, PLiteral) or not isinstance(b, PLiteral):
        return None
    x, y = a.value, b.value
    numbers = all(type(v) in (int, float) for v in (x, y))
    if numbers and type(x) is not type(y):
        x, y = float(x), float(y)  # as the engine compares an int with a float
    if type(x) is not type(y) or type(x) not in (int, float, str, bool):
        return None
    if isinstance(x, float) and (x != x or y != y):
        return None
    return bool(_COMPARE[e.func](x, y))


def folded(out: B) -> B:
    """`out` after PostgreSQL's plan-time simplifications that decide which arguments are
    evaluated at all (`eval_const_expressions`), so which errors count: a strict function of
    a NULL constant is NULL (`sqrt(f) + NULL` is NULL over f = -1, a smallint/integer/real
    result's range check included); AND with a FALSE constant argument is FALSE and OR with a
    TRUE one TRUE, wherever it stands (`sqrt(f) > 1 AND false`). (A comparison of two
    constants is folded by `Binder._compare`, which tells a constant from a parameter: a
    prepared statement's plan must not fold its stand-in values.)"""
    e = out[0]
    if not isinstance(e, Call):
        return out
    new: PExpr | None = None
    if e.func in ("and", "or"):
        decided = e.func == "or"
        if any(isinstance(a, PLiteral) and a.value is decided for a in e.args):
            new = PLiteral(value=decided)
    elif e.func in _NARROWING and isinstance(e.args[0], Call):
        inner = folded((e.args[0], out[1], out[2]))[0]
        if null_constant(inner):
            new = inner
    elif e.func not in _NON_STRICT and any(null_constant(a) for a in e.args):
        new = typed_null(out[1]) if out[1] != NULL else PLiteral(value=None)
    if new is None:
        return out
    return Typed(new, out[1], out[2], getattr(out, "pg", None))


def node_key(node: exp.Expr) -> Any:
    """A structural key of a syntax tree: equal for equal expressions, cheap to compute
    (generating SQL text for every bound node cost a few ms per statement)."""
    return node  # sqlglot expressions hash and compare structurally


def call(func: str, *args: PExpr) -> Call:
    return Call(func=cast(FuncName, func), args=list(args))


@dataclass
class AggContext:
    """How an aggregating query's SELECT/HAVING/ORDER BY see its groups: grouped columns of the
    input (`cols`: input index → output index), grouped expressions and aggregate calls by
    their SQL text (`exprs`), over the aggregated relation."""

    pre: Scope
    cols: dict[int, int] = field(default_factory=dict)
    exprs: dict[Any, int] = field(default_factory=dict)


class Binder(FunctionBinders, BuiltinBinders):
    """Binds expressions over `scope` (see the module docstring)."""

    def __init__(self, planner: Planner, scope: Scope, agg: AggContext | None = None,
                 clause: str = "expression") -> None:
        self.planner = planner
        self.scope = scope
        self.agg = agg
        self.clause = clause
        self.base: Any = None  # the relation before the first subquery (subqueries._source)

    # -- entry points -----------------------------------------------------------------------

    def bind(self, node: exp.Expr) -> B:
        if self.agg is not None:
            slot = self.agg.exprs.get(node_key(node))
            if slot is not None:
                c = self.scope.rel.cols[slot]
                return Typed(Column(index=slot), c.scalar, c.nullable, c.pg)
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is not None:
            out = cast(B, method(node))
            if node.args.get("negate") and isinstance(node, _NEGATABLE):
                # `x IS NOT NULL`, `s NOT LIKE p`: sqlglot marks the negation on the node.
                e, s, n = out
                out = call("not", e), s, n
            return folded(out)
        if isinstance(node, exp.Window):
            raise FeatureNotSupported("window functions are not supported")
        if isinstance(node, AGGREGATES):
            name = type(node).__name__.lower()
            if isinstance(node, exp.GroupConcat):
                name = "string_agg"
            raise GroupingError(f"aggregate function {name} is not allowed in {self.clause}")
        if isinstance(node, exp.Func):
            fname = node.sql_name().lower() if not isinstance(node, exp.Anonymous) else node.name
            raise FeatureNotSupported(f"function {fname.lower()}() is not supported")
        raise FeatureNotSupported(f"{node.sql(dialect='postgres')[:60]!r} "
                                  f"({type(node).__name__}) is not supported")

    def condition(self, node: exp.Expr, what: str) -> PExpr:
        e, s, _ = self.bind(node)
        if s not in ("bool", NULL):
            raise DatatypeMismatch(f"argument of {what} must be type boolean, not type "
                                   f"{type_name(s)}")
        return e

    # -- leaves -----------------------------------------------------------------------------

    def _Column(self, node: exp.Column) -> B:
        if isinstance(node.this, exp.Star):
            raise FeatureNotSupported("* is only allowed in a SELECT list or count(*)")
        qual = node.table or None
        if self.agg is not None:
            i, col = self.agg.pre.lookup(qual, node.name)
            if i == -1:
                return Typed(typed_null(col.scalar), col.scalar, True, col.pg)
            out = self.agg.cols.get(i)
            if out is None:
                label = f"{qual}.{node.name}" if qual else node.name
                raise GroupingError(f"column {label!r} must appear in the GROUP BY clause or "
                                    "be used in an aggregate function")
            c = self.scope.rel.cols[out]
            return Typed(Column(index=out), c.scalar, c.nullable, c.pg)
        i, col = self.scope.lookup(qual, node.name)
        if i == -1:  # a correlated reference while the subquery's correlation is found
            return Typed(typed_null(col.scalar), col.scalar, True, col.pg)
        return Typed(Column(index=i), col.scalar, col.nullable, col.pg)

    def _Literal(self, node: exp.Literal) -> B:
        if node.is_string:
            return PLiteral(value=node.this), "str", False
        text = node.this
        try:
            value: Any = int(text)
        except ValueError:
            value = float(text)
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            value = float(value)  # PostgreSQL makes it numeric; the nearest double here
        if isinstance(value, int):  # integer if it fits, else bigint (PostgreSQL's rule)
            return Typed(PLiteral(value=value), "int", False,
                         "int4" if fits_int4(value) else "int8")
        # a decimal literal is PostgreSQL's numeric: a double here that rounds as numeric does
        # (and is written as numeric's text, its scale kept: `1.50::text` is '1.50')
        return Typed(PLiteral(value=value), "float", False, "numeric",
                     numeric_literal_text(text))

    def _Null(self, node: exp.Null) -> B:
        return PLiteral(value=None), NULL, True

    def _Boolean(self, node: exp.Boolean) -> B:
        return PLiteral(value=bool(node.this)), "bool", False

    def _HexString(self, node: exp.HexString) -> B:
        return PLiteral(value=bytes.fromhex(node.this)), "bytes", False

    def _Parameter(self, node: exp.Parameter) -> B:
        return self.planner.parameter(node.this.name if node.this else node.name)

    def _Placeholder(self, node: exp.Placeholder) -> B:
        return self.planner.parameter(node.name)

    def _Paren(self, node: exp.Paren) -> B:
        return self.bind(node.this)

    def _Alias(self, node: exp.Alias) -> B:
        return self.bind(node.this)

    # -- operators --------------------------------------------------------------------------

    def _pair(self, a: exp.Expr, b: exp.Expr, op: str) -> tuple[B, B]:
        """Bind two operands, giving a string literal the other operand's type (its
        PostgreSQL type too: `int_col = '3000000000'` is 22003, `real_col = '0.1'` compares
        with the float4 0.1)."""
        ba, bb = self.bind(a), self.bind(b)
        if ba[1] == "str" and bb[1] not in ("str", NULL) and isinstance(a, exp.Literal):
            ba = self.retype_as(a, bb)
        elif bb[1] == "str" and ba[1] not in ("str", NULL) and isinstance(b, exp.Literal):
            bb = self.retype_as(b, ba)
        elif ba[1] == bb[1] == "str" and op == "=":
            # A quoted literal with a char(n) value is a char(n): its trailing spaces do not
            # count (`c = 'a  '` is `c = 'a'`; char(n) values are kept without them).
            if base(pg_of(bb)) == "bpchar" and isinstance(a, exp.Literal) and a.is_string:
                ba = Typed(PLiteral(value=str(a.this).rstrip(" ")), "str", False, pg_of(bb))
            elif base(pg_of(ba)) == "bpchar" and isinstance(b, exp.Literal) and b.is_string:
                bb = Typed(PLiteral(value=str(b.this).rstrip(" ")), "str", False, pg_of(ba))
        return ba, bb

    def retype_as(self, lit: exp.Literal, other: B) -> B:
        """The quoted literal `lit` as a constant of `other`'s type (scalar and PostgreSQL
        type: range-checked for int2/int4, rounded for float4)."""
        return self.retype_pg(lit, other[1], pg_of(other))

    def retype_pg(self, lit: exp.Literal, scalar: str, pg: str | None) -> B:
        e, s, n = self._retype(lit, scalar, pg)
        if isinstance(e, PLiteral):
            e = PLiteral(value=narrow_literal(e.value, pg, str(lit.this).strip()))
        return Typed(e, s, n, pg)

    def _retype(self, lit: exp.Literal, scalar: str, pg: str | None = None) -> B:
        if scalar == "bytes":
            data = _bytea_input(str(lit.this))
            if data is not None:
                return PLiteral(value=data), "bytes", False
        text = str(lit.this).strip()
        if scalar == "int" and _INT_TEXT.fullmatch(text):
            value = int(text)
            if not -(2**63) <= value < 2**63:
                name = DECLARED_NAMES.get(base(pg) or "", "bigint")
                raise NumericValueOutOfRange(f'value "{text}" is out of range for type {name}')
            return PLiteral(value=value), "int", False
        if scalar == "float":
            try:
                return PLiteral(value=parse_float_text(text)), "float", False
            except OverflowError as e:
                raise NumericValueOutOfRange(str(e)) from None
            except ValueError:
                pass
        if scalar == "bool" and (b := parse_bool(str(lit.this))) is not None:
            return PLiteral(value=b), "bool", False  # PostgreSQL's: 'yes', 'on', 't', '1' ...
        name = DECLARED_NAMES.get(base(pg) or "", type_name(scalar))
        raise InvalidTextRepresentation(f'invalid input syntax for type {name}: "{lit.this}"')

    def _operator_error(self, op: str, a: str, b: str | None = None) -> UndefinedFunction:
        if b is None:
            return UndefinedFunction(f"operator does not exist: {op} {type_name(a)}")
        return UndefinedFunction(f"operator does not exist: {type_name(a)} {op} {type_name(b)}")

    def _arith(self, node: exp.Binary) -> B:
        func, op = _ARITH[type(node)]
        ba, bb = self._pair(node.this, node.expression, op)
        (ea, sa, na), (eb, sb, nb) = ba, bb
        if sa not in _NUMERIC or sb not in _NUMERIC:
            raise self._operator_error(op, sa, sb)
        scalar = "float" if "float" in (sa, sb) else "int"
        # PostgreSQL's result type (integer + integer is integer): checked or rounded to it.
        pg = arith_pg(pg_of(ba), pg_of(bb))
        e = call(func, ea, eb)
        return Typed(e if func == "mod" else narrow(e, pg), scalar, na or nb, pg)

    _Add = _Sub = _Mul = _Div = _Mod = _arith

    def _Neg(self, node: exp.Neg) -> B:
        b = self.bind(node.this)
        e, s, n = b
        if s not in _NUMERIC:
            raise self._operator_error("-", s)
        pg = pg_of(b) if s != NULL else None
        if (isinstance(node.this, exp.Literal) and not node.this.is_string
                and _INT_TEXT.fullmatch(str(node.this.this))
                and int(node.this.this) == 2**63):
            # PostgreSQL folds the sign into the constant: -9223372036854775808 is a bigint.
            return Typed(PLiteral(value=-(2**63)), "int", False, "int8")
        if isinstance(e, PLiteral) and e.value is not None:
            v = -e.value
            if type(v) is int and isinstance(node.this, exp.Literal):
                pg = "int4" if fits_int4(v) else "int8"  # -2147483648 is an integer
            if base(pg) == "numeric" and v == 0:
                v = 0.0  # numeric has no negative zero: -0.0 is 0
            return Typed(PLiteral(value=v), s, n, pg, negated_text(getattr(b, "numeric_text",
                                                                            None)))
        return Typed(narrow(call("neg", e), pg), "int" if s == NULL else s, n, pg)

    def _compare(self, node: exp.Binary) -> B:
        (ea, sa, na), (eb, sb, nb) = self._pair(node.this, node.expression, "=")
        unify(self, [sa, sb], _CMP_SYMBOL[type(node)])
        out = call(_CMP[type(node)], ea, eb)
        if _constant_node(node.this) and _constant_node(node.expression):
            # PostgreSQL folds a comparison of constants (`0 BETWEEN sqrt(f) AND -1` is
            # false, sqrt never taken); never of a parameter, whose value a kept plan varies.
            value = _constant_comparison(out)
            if value is not None:
                return PLiteral(value=value), "bool", False
        return out, "bool", na or nb

    _EQ = _NEQ = _LT = _LTE = _GT = _GTE = _compare

    def _NullSafeEQ(self, node: exp.Binary) -> B:
        (ea, sa, _), (eb, sb, _) = self._pair(node.this, node.expression, "=")
        unify(self, [sa, sb], "IS NOT DISTINCT FROM")
        # Built of `if`s, whose conditions are always evaluated: an error of either operand
        # fails the row, as PostgreSQL's operator evaluates both (an `and` whose other side
        # is false would drop it: `f::integer IS DISTINCT FROM 5` over an infinite f).
        a_null, b_null = call("is_null", ea), call("is_null", eb)
        return call("if", a_null, b_null, call("if", b_null, PLiteral(value=False),
                                               call("eq", ea, eb))), "bool", False

    def _NullSafeNEQ(self, node: exp.Binary) -> B:
        e, _, _ = self._NullSafeEQ(node)
        return call("not", e), "bool", False

    def _logic(self, node: exp.Binary) -> B:
        what = "AND" if isinstance(node, exp.And) else "OR"
        a = self.condition(node.this, what)
        b = self.condition(node.expression, what)
        return call("and" if what == "AND" else "or", a, b), "bool", True

    _And = _Or = _logic

    def _Not(self, node: exp.Not) -> B:
        return call("not", self.condition(node.this, "NOT")), "bool", True

    def _Is(self, node: exp.Is) -> B:
        e, s, _ = self.bind(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return call("is_null", e), "bool", False
        if isinstance(target, exp.Boolean):
            if s not in ("bool", NULL):
                raise DatatypeMismatch(f"argument of IS TRUE must be type boolean, not "
                                       f"{type_name(s)}")
            value = bool(target.this)
            return call("coalesce", call("eq", e, PLiteral(value=value)),
                        PLiteral(value=False)), "bool", False
        raise FeatureNotSupported(f"IS {target.sql()} is not supported")

    def _Between(self, node: exp.Between) -> B:
        low, high = node.args["low"], node.args["high"]
        lo = exp.GTE(this=node.this, expression=low)
        hi = exp.LTE(this=node.this, expression=high)
        both = exp.And(this=lo, expression=hi)
        if node.args.get("symmetric"):
            # PostgreSQL's BETWEEN SYMMETRIC: either order of the bounds.
            swapped = exp.And(this=exp.GTE(this=node.this.copy(), expression=high.copy()),
                              expression=exp.LTE(this=node.this.copy(), expression=low.copy()))
            return self._logic(exp.Or(this=both, expression=swapped))
        return self._logic(both)

    def _In(self, node: exp.In) -> B:
        if node.args.get("query") is not None:
            from twofold.sql.subqueries import in_subquery

            return in_subquery(self, node.this, node.args["query"])
        if node.args.get("unnest") or node.args.get("field"):
            raise FeatureNotSupported("IN UNNEST/field is not supported")
        values = list(node.expressions)
        if not values:
            raise FeatureNotSupported("IN () with no values")
        # PostgreSQL's `x IN (...)` (transformAExprIn): the items without a column, when
        # there are two or more, are one `x = ANY (ARRAY[...])` of x's and their common type
        # (a quoted literal takes it: `i IN (1.5, '2.5')` and `i IN ('NaN', 1e0)` compare as
        # double precision), evaluating x on every row - a NULL item is no NULL constant to
        # fold away (`g::integer IN (NULL, NULL)` fails where g::integer does); each other
        # item is `x = item` of its own, OR-ed after.
        consts = [v for v in values if not v.find(exp.Column)]
        if len(consts) < 2:
            consts = []
        others = [v for v in values if all(v is not c for c in consts)]
        subject = node.this
        group = [subject, *consts]
        unknown = [isinstance(n, exp.Literal) and n.is_string for n in group]
        if consts and any(unknown) and not any(
                n.find(exp.Select, exp.Subquery) for n in group):  # bound once
            scalars = [self.bind(n)[1] for n, u in zip(group, unknown, strict=True) if not u]
            if set(scalars) - {NULL} == {"int", "float"}:
                to = exp.DataType.build("double precision")
                subject, *consts = [exp.Cast(this=n, to=to.copy()) if u else n
                                    for n, u in zip(group, unknown, strict=True)]
        out: PExpr | None = None
        for lhs, v in [*((subject, c) for c in consts), *((node.this, o) for o in others)]:
            term = self._compare(exp.EQ(this=lhs, expression=v))[0]
            out = term if out is None else call("or", out, term)
        assert out is not None
        return out, "bool", True

    def _Like(self, node: exp.Like) -> B:
        if node.args.get("escape") is not None:
            raise FeatureNotSupported("LIKE ... ESCAPE is not supported")
        (ea, sa, na), (eb, sb, nb) = self._pair(node.this, node.expression, "~~")
        if sa not in ("str", NULL) or sb not in ("str", NULL):
            raise self._operator_error("~~", sa, sb)
        return call("like", ea, eb), "bool", na or nb

    def _ILike(self, node: exp.ILike) -> B:
        ea, sa, na = self.bind(node.this)
        eb, sb, nb = self.bind(node.expression)
        if sa not in ("str", NULL) or sb not in ("str", NULL):
            raise self._operator_error("~~*", sa, sb)
        return call("like", call("lower", ea), call("lower", eb)), "bool", na or nb

    def _DPipe(self, node: exp.DPipe) -> B:
        parts = []
        nullable = False
        for side in (node.this, node.expression):
            b = self.bind(side)
            nullable = nullable or b[2]
            parts.append(self.text_of(b))
        return call("concat", *parts), "str", nullable

    # -- subqueries -------------------------------------------------------------------------

    def _Subquery(self, node: exp.Subquery) -> B:
        from twofold.sql.subqueries import scalar_subquery

        return scalar_subquery(self, node.this)

    def _Select(self, node: exp.Select) -> B:
        from twofold.sql.subqueries import scalar_subquery

        return scalar_subquery(self, node)

    def _Exists(self, node: exp.Exists) -> B:
        from twofold.sql.subqueries import exists_subquery

        return exists_subquery(self, node.this)


_CMP_SYMBOL: Final = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">",
                      exp.GTE: ">="}


def unify(binder: Binder | None, scalars: list[str], what: str) -> str:
    """The common type of `scalars` (int and float make float), or a typed error."""
    real = {s for s in scalars if s != NULL}
    if not real:
        return NULL
    if len(real) == 1:
        return real.pop()
    if real == {"int", "float"}:
        return "float"
    names = " and ".join(type_name(s) for s in sorted(real))
    if what in _CMP_SYMBOL.values() or what.startswith("IS"):
        raise UndefinedFunction(f"operator does not exist: {names} ({what})")
    raise DatatypeMismatch(f"{what} types {names} cannot be matched")


def parameter_value(params: Any, name: str) -> B:
    """The `$n` parameter as a typed literal."""
    try:
        n = int(name)
        value = params[n - 1] if params is not None and n >= 1 else None
        if params is None or n < 1 or n > len(params):
            raise IndexError
    except (ValueError, IndexError, TypeError):
        raise InvalidParameter(f"there is no parameter ${name}") from None
    if value is None:
        return PLiteral(value=None), NULL, True
    scalar = _PY.get(type(value))
    if scalar is None:
        raise InvalidParameter(f"parameter ${name} is a {type(value).__name__}; use bool, "
                               "int, float, str, bytes or None")
    return PLiteral(value=value), scalar, False


def _bytea_input(text: str) -> bytes | None:
    """PostgreSQL's bytea input: hex (`\\x` then digit pairs, whitespace between pairs) or the
    escape format (`\\\\` a backslash, `\\nnn` an octal byte, other characters as UTF-8);
    None for text neither format reads."""
    if text.startswith("\\x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            return None
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif len(text) >= i + 4 and all(ch in "01234567" for ch in text[i + 1:i + 4]) \
                and text[i + 1] in "0123":
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            return None
    return bytes(out)
