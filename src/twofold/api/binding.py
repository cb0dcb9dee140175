"""Binding expressions to a schema: names to column positions, and type inference.

Contract: `bind(expr, schema, operation)` resolves an `Expr`'s column names against one
relation's schema, infers the result type with the rules of `docs/semantics.md` (the same rules
the engine's type checker applies; a property test keeps them in step), and returns the protocol
`Expr` over column positions — or raises `ColumnNotFound` / `TypeMismatch` naming the column and
the operation. So an ill-typed query fails when it is built, never inside a runtime.

Naming follows polars: a column keeps its name, any other expression is named after its leftmost
column (or `literal`), and `.alias()` renames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias, cast

from twofold.api.errors import TypeMismatch
from twofold.api.expr import NULL, Expr
from twofold.api.schema import Schema
from twofold.protocol import Call, Column, ColumnType
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.protocol.expr import FuncName

Ty: TypeAlias = tuple[str, bool]  # (scalar or NULL, nullable)
_NUMERIC: Final = frozenset({"int", "float", NULL})
_CASTABLE: Final = frozenset({"bool", "int", "float", "str", NULL})


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


# -- binding -------------------------------------------------------------------------------------

_BINARY: Final = {
    # `//` and `%` floor, as in Python and polars (the protocol's `div`/`mod` truncate, as SQL).
    "+": "add", "-": "sub", "*": "mul", "%": "floormod", "//": "floordiv",
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
