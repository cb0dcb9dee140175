"""The expression DSL: `col`, `lit`, operators, string functions, casts, `coalesce`,
`when/then/otherwise`, and aggregates (`count`, `sum`, `min`, `max`, `n_unique`, `mean`).

Contract: an `Expr` is an immutable, unbound tree naming columns by name; building one checks
only what needs no schema (literal values, argument shapes). Resolving names and types against a
relation is `twofold.api.binding`'s job.

Naming follows polars: a column keeps its name, any other expression is named after its leftmost
column (or `literal`), and `.alias()` renames.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias

from twofold.api.errors import InvalidArgument, TypeMismatch
from twofold.api.schema import scalar_of

NULL: Final = "null"  # the scalar "type" of an untyped NULL literal; fits any type
_PY: Final = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

IntoExpr: TypeAlias = "Expr | str | int | float | bool | bytes | None"
"""Where an expression is expected, a `str` names a column (in `select`, `group_by`...) or is a
string literal (as an operand: `col("a") == "x"`); other scalars are literals."""


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

    __slots__ = ("descending", "distinct", "func", "input", "name", "separator")

    def __init__(self, func: Literal["count", "sum", "min", "max", "mean", "string_agg"],
                 input: Expr | None, *, distinct: bool = False, name: str | None = None,
                 separator: str | None = None, descending: bool = False) -> None:
        self.func = func
        self.input = input
        self.distinct = distinct
        self.name = name
        self.separator = separator
        self.descending = descending

    def alias(self, name: str) -> Agg:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"alias: a column name must be a non-empty string, "
                                  f"got {name!r}")
        return Agg(self.func, self.input, distinct=self.distinct, name=name,
                   separator=self.separator, descending=self.descending)

    def __repr__(self) -> str:
        arg = "" if self.input is None else repr(self.input)
        if self.separator is not None:
            arg += f", {self.separator!r}"
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


def string_agg(column: IntoExpr, separator: str, *, descending: bool = False,
               distinct: bool = False) -> Agg:
    """A text column's non-NULL values joined with `separator`, in ascending order (descending
    with `descending=True`), each as often as it occurs (once with `distinct=True`); NULL when
    there is none. SQL's `string_agg(x, sep ORDER BY x)`."""
    if not isinstance(separator, str):
        raise InvalidArgument(f"string_agg: separator must be a str, got {separator!r}")
    return Agg("string_agg", _agg_input(column, "string_agg"), distinct=distinct,
               separator=separator, descending=bool(descending))
