"""The expression DSL: `col`, `lit`, operators, string functions, casts, `coalesce`,
`when/then/otherwise`, and aggregates (`count`, `sum`, `min`, `max`, `n_unique`, `mean`).

Contract: an `Expr` is an immutable, unbound tree naming columns by name. `bind(expr, schema,
operation)` resolves the names against one relation's schema, infers the result type with the
rules of `docs/semantics.md` (the same rules the engine checks), and returns the protocol `Expr`
over column positions — or raises `ColumnNotFound` / `TypeMismatch` naming the column and the
operation. So an ill-typed query fails when it is built, never inside a runtime.

Naming follows polars: a column keeps its name, any other expression is named after its leftmost
column (or `literal`), and `.alias()` renames.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, cast

from twofold.api.errors import InvalidArgument, TypeMismatch
from twofold.api.schema import Schema, scalar_of
from twofold.protocol import Call, Column, ColumnType
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.protocol.expr import FuncName

NULL: Final = "null"  # the scalar "type" of an untyped NULL literal; fits any type
Ty: TypeAlias = tuple[str, bool]  # (scalar or NULL, nullable)
_NUMERIC: Final = frozenset({"int", "float", NULL})
_CASTABLE: Final = frozenset({"bool", "int", "float", "str", NULL})
_PY: Final = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

IntoExpr: TypeAlias = "Expr | str | int | float | bool | bytes | None"
"""Where an expression is expected, a `str` names a column (in `select`, `group_by`...) or is a
string literal (as an operand: `col("a") == "x"`); other scalars are literals."""


def to_column_type(ty: Ty) -> ColumnType:
    scalar, nullable = ty
    # An untyped NULL column needs some scalar type; the engine also calls it int.
    return ColumnType("int" if scalar == NULL else scalar, nullable)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Bound:
    """An expression resolved against a schema: the protocol expression, its type and name."""

    expr: PExpr
    ty: Ty
    name: str

    @property
    def column_type(self) -> ColumnType:
        return to_column_type(self.ty)


class Expr:
    """An unbound scalar expression. Build with `col`, `lit`, operators and methods."""

    __slots__ = ("_args", "_kind", "_name", "_payload")
    __hash__ = None  # type: ignore[assignment]  # == builds an expression, as in polars

    def __init__(self, kind: str, args: tuple[Expr, ...] = (), payload: Any = None,
                 name: str | None = None) -> None:
        self._kind = kind
        self._args = args
        self._payload = payload
        self._name = name

    # -- construction -------------------------------------------------------------------------

    def _call(self, op: str, *others: IntoExpr) -> Expr:
        return Expr("call", (self, *(_operand(o) for o in others)), op)

    def _rcall(self, op: str, other: IntoExpr) -> Expr:
        return Expr("call", (_operand(other), self), op)

    def alias(self, name: str) -> Expr:
        """The same expression under the output name `name`."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"alias: a column name must be a non-empty string, "
                                  f"got {name!r}")
        return Expr(self._kind, self._args, self._payload, name)

    def __add__(self, o: IntoExpr) -> Expr:
        return self._call("+", o)

    def __radd__(self, o: IntoExpr) -> Expr:
        return self._rcall("+", o)

    def __sub__(self, o: IntoExpr) -> Expr:
        return self._call("-", o)

    def __rsub__(self, o: IntoExpr) -> Expr:
        return self._rcall("-", o)

    def __mul__(self, o: IntoExpr) -> Expr:
        return self._call("*", o)

    def __rmul__(self, o: IntoExpr) -> Expr:
        return self._rcall("*", o)

    def __truediv__(self, o: IntoExpr) -> Expr:
        return self._call("/", o)

    def __rtruediv__(self, o: IntoExpr) -> Expr:
        return self._rcall("/", o)

    def __floordiv__(self, o: IntoExpr) -> Expr:
        return self._call("//", o)

    def __rfloordiv__(self, o: IntoExpr) -> Expr:
        return self._rcall("//", o)

    def __mod__(self, o: IntoExpr) -> Expr:
        return self._call("%", o)

    def __rmod__(self, o: IntoExpr) -> Expr:
        return self._rcall("%", o)

    def __neg__(self) -> Expr:
        return self._call("neg")

    def __abs__(self) -> Expr:
        return self._call("abs")

    def abs(self) -> Expr:
        return self._call("abs")

    def __eq__(self, o: IntoExpr) -> Expr:  # type: ignore[override]
        return self._call("==", o)

    def __ne__(self, o: IntoExpr) -> Expr:  # type: ignore[override]
        return self._call("!=", o)

    def __lt__(self, o: IntoExpr) -> Expr:
        return self._call("<", o)

    def __le__(self, o: IntoExpr) -> Expr:
        return self._call("<=", o)

    def __gt__(self, o: IntoExpr) -> Expr:
        return self._call(">", o)

    def __ge__(self, o: IntoExpr) -> Expr:
        return self._call(">=", o)

    def __and__(self, o: IntoExpr) -> Expr:
        return self._call("&", o)

    def __rand__(self, o: IntoExpr) -> Expr:
        return self._rcall("&", o)

    def __or__(self, o: IntoExpr) -> Expr:
        return self._call("|", o)

    def __ror__(self, o: IntoExpr) -> Expr:
        return self._rcall("|", o)

    def __invert__(self) -> Expr:
        return self._call("~")

    def __bool__(self) -> bool:
        raise TypeError("an Expr has no truth value; combine predicates with & | ~, "
                        "not `and`/`or`/`not`")

    def is_null(self) -> Expr:
        return self._call("is_null")

    def is_not_null(self) -> Expr:
        return self._call("is_null")._call("~")

    def is_in(self, values: Sequence[IntoExpr]) -> Expr:
        """True when equal to one of `values` (a non-empty list of literals or expressions)."""
        if isinstance(values, str | bytes) or not values:
            raise InvalidArgument(f"is_in: expected a non-empty list of values, got {values!r}")
        out: Expr | None = None
        for v in values:
            term = self == v
            out = term if out is None else out | term
        assert out is not None
        return out

    def fill_null(self, value: IntoExpr) -> Expr:
        return coalesce(self, value)

    def cast(self, dtype: type | str) -> Expr:
        """Convert to `int`, `float` or `str` (see `docs/semantics.md` for each conversion)."""
        target = scalar_of(dtype, "cast")
        if target not in ("int", "float", "str"):
            raise InvalidArgument(f"cast: can cast to int, float or str, not {target}")
        return Expr("call", (self,), f"cast_{target}")

    @property
    def str(self) -> StringFunctions:
        """String functions: `lower`, `upper`, `len`, `concat`, `like`, `starts_with`, ..."""
        return StringFunctions(self)

    # -- aggregates -----------------------------------------------------------------------------

    def sum(self) -> Agg:
        return Agg("sum", self)

    def min(self) -> Agg:
        return Agg("min", self)

    def max(self) -> Agg:
        return Agg("max", self)

    def count(self) -> Agg:
        return Agg("count", self)

    def n_unique(self) -> Agg:
        return Agg("count", self, distinct=True)

    def mean(self) -> Agg:
        return Agg("mean", self)

    def __repr__(self) -> builtins.str:
        if self._kind == "col":
            text = f"col({self._payload!r})"
        elif self._kind == "lit":
            text = f"lit({self._payload[0]!r})"
        else:
            text = f"{self._payload}({', '.join(map(repr, self._args))})"
        return text if self._name is None else f"{text}.alias({self._name!r})"


class StringFunctions:
    """`expr.str.*`: functions of a `str` expression."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def to_lowercase(self) -> Expr:
        return self._e._call("lower")

    def to_uppercase(self) -> Expr:
        return self._e._call("upper")

    lower = to_lowercase
    upper = to_uppercase

    def len_chars(self) -> Expr:
        """Length in characters (code points)."""
        return self._e._call("length")

    len = len_chars

    def concat(self, other: IntoExpr) -> Expr:
        return self._e._call("concat", other)

    def like(self, pattern: str) -> Expr:
        """SQL LIKE over the whole string: `%` any run, `_` one character; case-sensitive."""
        return self._e._call("like", _str_lit(pattern, "str.like"))

    def starts_with(self, prefix: str) -> Expr:
        return self._e._call("like", _str_lit(_plain(prefix, "str.starts_with") + "%", ""))

    def ends_with(self, suffix: str) -> Expr:
        return self._e._call("like", _str_lit("%" + _plain(suffix, "str.ends_with"), ""))

    def contains(self, text: str) -> Expr:
        """Contains `text` literally (no pattern characters allowed)."""
        return self._e._call("like", _str_lit("%" + _plain(text, "str.contains") + "%", ""))


def _str_lit(value: object, what: str) -> Expr:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what}: expected a string, got {value!r}")
    return Expr("lit", (), (value, "str"))


def _plain(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidArgument(f"{what}: expected a string, got {text!r}")
    if "%" in text or "_" in text:
        # LIKE has no escape character in twofold; refusing beats silently matching more.
        raise InvalidArgument(f"{what}: {text!r} contains % or _, which LIKE treats as "
                              "wildcards; use .str.like() with an explicit pattern")
    return text


def col(name: str) -> Expr:
    """The column called `name`."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"col: a column name must be a non-empty string, got {name!r}")
    return Expr("col", (), name)


def lit(value: Any, dtype: type | str | None = None) -> Expr:
    """A constant. `lit(None, str)` is a typed NULL; plain `lit(None)` fits any type."""
    scalar: str
    if dtype is not None:
        scalar = scalar_of(dtype, "lit")
    elif value is None:
        scalar = NULL
    else:
        found = _PY.get(type(value))
        if found is None:
            raise InvalidArgument(f"lit: {value!r} ({type(value).__name__}) is not a scalar; "
                                  "use bool, int, float, str, bytes or None")
        scalar = found
    if value is not None and _PY.get(type(value)) != scalar and not (
        scalar == "float" and type(value) is int
    ):
        raise TypeMismatch("lit", f"{value!r} is not a {scalar}")
    if scalar == "float" and type(value) is int:
        value = float(value)
    if type(value) is int and not -(2**63) <= value < 2**63:
        raise InvalidArgument(f"lit: {value} is outside the 64-bit signed int range")
    return Expr("lit", (), (value, scalar))


def coalesce(*exprs: IntoExpr) -> Expr:
    """The first non-NULL argument."""
    if not exprs:
        raise InvalidArgument("coalesce: needs at least one argument")
    args = [_operand(e) for e in exprs]
    return Expr("call", tuple(args), "coalesce")


def _operand(value: IntoExpr) -> Expr:
    return value if isinstance(value, Expr) else lit(value)


def into_expr(value: IntoExpr) -> Expr:
    """A column name (str) or an expression; used where a column is expected."""
    return col(value) if isinstance(value, str) else _operand(value)


class When:
    """`when(cond).then(a)[.when(c2).then(b)...].otherwise(z)`."""

    def __init__(self, branches: tuple[tuple[Expr, Expr], ...], cond: Expr) -> None:
        self._branches = branches
        self._cond = cond

    def then(self, value: IntoExpr) -> Then:
        return Then((*self._branches, (self._cond, _operand(value))))


class Then(Expr):
    """A finished `when ... then` chain: usable as an expression (NULL when nothing matched),
    or continued with `.when()` / `.otherwise()`."""

    __slots__ = ("_branches",)

    def __init__(self, branches: tuple[tuple[Expr, Expr], ...]) -> None:
        self._branches = branches
        built = _chain(branches, lit(None))
        super().__init__(built._kind, built._args, built._payload)

    def when(self, cond: IntoExpr) -> When:
        return When(self._branches, _operand(cond))

    def otherwise(self, value: IntoExpr) -> Expr:
        return _chain(self._branches, _operand(value))


def _chain(branches: tuple[tuple[Expr, Expr], ...], default: Expr) -> Expr:
    out = default
    for cond, value in reversed(branches):
        out = Expr("call", (cond, value, out), "if")
    return out


def when(cond: IntoExpr) -> When:
    """Start a conditional: `when(col("x") > 0).then("pos").otherwise("non-pos")`."""
    return When((), _operand(cond))


# -- aggregates ----------------------------------------------------------------------------------


class Agg:
    """An aggregate for `group_by(...).agg(...)`."""

    __slots__ = ("distinct", "func", "input", "name")

    def __init__(self, func: Literal["count", "sum", "min", "max", "mean"], input: Expr | None,
                 *, distinct: bool = False, name: str | None = None) -> None:
        self.func = func
        self.input = input
        self.distinct = distinct
        self.name = name

    def alias(self, name: str) -> Agg:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"alias: a column name must be a non-empty string, "
                                  f"got {name!r}")
        return Agg(self.func, self.input, distinct=self.distinct, name=name)

    def __repr__(self) -> str:
        arg = "" if self.input is None else repr(self.input)
        text = f"{self.func}({arg}{', distinct' if self.distinct else ''})"
        return text if self.name is None else f"{text}.alias({self.name!r})"


def _agg_input(column: IntoExpr | None, func: str) -> Expr:
    if column is None:
        raise InvalidArgument(f"{func}: needs a column")
    return into_expr(column)


def count(column: IntoExpr | None = None, *, distinct: bool = False) -> Agg:
    """`count()` counts rows; `count("x")` counts non-NULL values (distinct ones if asked)."""
    if column is None:
        if distinct:
            raise InvalidArgument("count: distinct=True needs a column")
        return Agg("count", None, name="count")
    return Agg("count", into_expr(column), distinct=distinct)


def n_unique(column: IntoExpr) -> Agg:
    """The number of distinct non-NULL values."""
    return Agg("count", _agg_input(column, "n_unique"), distinct=True)


def sum(column: IntoExpr) -> Agg:
    return Agg("sum", _agg_input(column, "sum"))


def min(column: IntoExpr) -> Agg:
    return Agg("min", _agg_input(column, "min"))


def max(column: IntoExpr) -> Agg:
    return Agg("max", _agg_input(column, "max"))


def mean(column: IntoExpr) -> Agg:
    """The average of non-NULL values (a float; NULL when there is none)."""
    return Agg("mean", _agg_input(column, "mean"))


# -- binding -------------------------------------------------------------------------------------

_BINARY: Final = {
    "+": "add", "-": "sub", "*": "mul", "%": "mod", "//": "div",
    "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge",
    "&": "and", "|": "or",
}  # fmt: skip
_UNARY: Final = {"neg": "neg", "abs": "abs", "~": "not", "is_null": "is_null",
                 "lower": "lower", "upper": "upper", "length": "length"}


def output_name(expr: Expr) -> str:
    """The polars-style output name: the alias, else the leftmost column, else `literal`."""
    if expr._name is not None:
        return expr._name
    if expr._kind == "col":
        return str(expr._payload)
    for a in expr._args:
        name = output_name(a)
        if name != "literal":
            return name
    return "literal"


def _first_column(expr: Expr) -> str | None:
    if expr._kind == "col":
        return str(expr._payload)
    for a in expr._args:
        found = _first_column(a)
        if found is not None:
            return found
    return None


def bind(expr: Expr, schema: Schema, operation: str) -> Bound:
    """Resolve `expr` against `schema` for `operation` (named in errors)."""
    pexpr, ty = _bind(expr, schema, operation)
    return Bound(pexpr, ty, output_name(expr))


def _call(func: str, args: list[PExpr]) -> Call:
    return Call(func=cast(FuncName, func), args=args)


def _bind(e: Expr, schema: Schema, operation: str) -> tuple[PExpr, Ty]:
    if e._kind == "col":
        i = schema.index(e._payload, operation)
        t = schema.types[i]
        return Column(index=i), (t.scalar, t.nullable)
    if e._kind == "lit":
        value, scalar = e._payload
        return PLiteral(value=value), (scalar, value is None)
    op: str = e._payload
    bound = [_bind(a, schema, operation) for a in e._args]
    args = [b for b, _ in bound]
    tys = [t for _, t in bound]
    nullable = any(n for _, n in tys)

    def fail(message: str, arg: int | None = None) -> TypeMismatch:
        culprit = _first_column(e._args[arg]) if arg is not None else _first_column(e)
        return TypeMismatch(f"{operation} ({op!r})", message, culprit)

    def require(allowed: frozenset[str] | set[str], what: str) -> None:
        for j, (s, _) in enumerate(tys):
            if s not in allowed and s != NULL:
                raise fail(f"expected {what}, got {s} ({e._args[j]!r})", j)

    def unify(what: str) -> str:
        scalars = {s for s, _ in tys} - {NULL}
        if not scalars:
            return NULL
        if len(scalars) == 1:
            return scalars.pop()
        if scalars == {"int", "float"}:
            return "float"
        raise fail(f"{what} must have one type, got {' and '.join(sorted(scalars))} "
                   f"({', '.join(map(repr, e._args))})")

    if op == "+" and {s for s, _ in tys} - {NULL} == {"str"}:
        return Call(func="concat", args=args), ("str", nullable)
    if op in ("+", "-", "*", "%", "//", "neg", "abs"):
        require(_NUMERIC, "int or float")
        scalar = "float" if any(s == "float" for s, _ in tys) else "int"
        return _call(_BINARY.get(op) or _UNARY[op], args), (scalar, nullable)
    if op == "/":
        require(_NUMERIC, "int or float")
        # True division, as in polars and Python: ints are divided as floats.
        fargs: list[PExpr] = [a if s == "float" else Call(func="cast_float", args=[a])
                              for a, (s, _) in zip(args, tys, strict=True)]
        return Call(func="div", args=fargs), ("float", nullable)
    if op in ("==", "!=", "<", "<=", ">", ">="):
        unify("compared values")
        return _call(_BINARY[op], args), ("bool", nullable)
    if op in ("&", "|", "~"):
        require({"bool"}, "bool")
        return _call(_BINARY.get(op) or "not", args), ("bool", nullable)
    if op == "is_null":
        return Call(func="is_null", args=args), ("bool", False)
    if op == "coalesce":
        return Call(func="coalesce", args=args), (unify("coalesce arguments"),
                                                  all(n for _, n in tys))
    if op == "if":
        c, a, b = tys
        if c[0] not in ("bool", NULL):
            raise fail(f"the condition must be bool, got {c[0]} ({e._args[0]!r})", 0)
        tys = [a, b]
        return Call(func="if", args=args), (unify("when/then/otherwise branches"),
                                            a[1] or b[1])
    if op in ("concat", "lower", "upper", "length", "like"):
        require({"str"}, "str")
        out = {"length": "int", "like": "bool"}.get(op, "str")
        return _call(op, args), (out, nullable)
    if op in ("cast_int", "cast_float", "cast_str"):
        require(_CASTABLE, "bool, int, float or str")
        target = op.removeprefix("cast_")
        if tys[0][0] == target:
            return args[0], tys[0]
        return _call(op, args), (target, nullable)
    raise AssertionError(f"unknown operation {op!r}")
