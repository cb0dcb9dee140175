"""The PostgreSQL type of each bound scalar expression, and the checks that give the engine's
64-bit ints and doubles PostgreSQL's `smallint`/`integer`/`real` results.

Contract: the binder's results (`exprs.B`, `(expr, scalar, nullable)`) may be `Typed` — the
same triple carrying `pg`, the expression's PostgreSQL type (`int2`, `int4`, `int8`,
`float4`, `float8`, `text`, `varchar(n)`, ...). `pg_of(b)` is that type, or the engine
scalar's (`int8`, `float8`, `text`, ...) for a plain triple: an expression the binder does
not type is taken at the engine's width, which never fails where PostgreSQL would not. Typed
are: column references (their declared type), integer literals (`int4` if they fit, as in
PostgreSQL), arithmetic (`arith_pg`: int2 with int2 is int2, with int4 int4, anything with
int8 int8; float4 with float4 float4, with anything else float8), unary minus and `abs`, casts
(their target), CASE/COALESCE/NULLIF/GREATEST/LEAST (`types.unify_declared`), `length`/
`strpos` (int4), aggregates over them (`aggregate.py`). `narrow(e, pg)` wraps an expression
whose PostgreSQL type is int2/int4/float4 in the engine's `check_int2`/`check_int4`/
`round_float4` (`twofold.engine.narrow`), so its value is PostgreSQL's and a value out of the
type's range fails the statement (22003) as PostgreSQL's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from twofold.sql.types import ENGINE_PG, INT_RANGES

if TYPE_CHECKING:
    from twofold.protocol import Expr as PExpr

_INTS: Final = ("int2", "int4", "int8")
_NARROW: Final = {"int2": "check_int2", "int4": "check_int4", "float4": "round_float4"}


class Typed(tuple[Any, str, bool]):
    """A bound `(expr, scalar, nullable)` with its PostgreSQL type `pg`."""

    pg: str | None
    numeric_text: str | None = None
    """A decimal literal's (or its negation's) text as PostgreSQL's numeric writes it, scale
    kept (`1.50`, `1000` for `1e3`, `0.0015` for `1.5e-3`): what `::text`, `||` and
    `concat` give of it. The value itself is the nearest double."""

    def __new__(cls, expr: PExpr, scalar: str, nullable: bool, pg: str | None,
                numeric_text: str | None = None) -> Typed:
        self = super().__new__(cls, (expr, scalar, nullable))
        self.pg = pg
        if numeric_text is not None:
            self.numeric_text = numeric_text
        return self


def numeric_literal_text(text: str) -> str:
    """PostgreSQL's numeric output of the numeric literal `text`: its digits without
    exponent, leading zeros dropped, the scale as written (`1.50e1` is `15.0`)."""
    from decimal import Decimal

    return f"{Decimal(text):f}"


def negated_text(text: str | None) -> str | None:
    """The numeric text of `-x` for numeric text `text` (numeric has no negative zero)."""
    if text is None or text.strip("-0.") == "":
        return text
    return text[1:] if text.startswith("-") else f"-{text}"


def typed(b: tuple[Any, str, bool], pg: str | None) -> Typed:
    """`b` (a bound triple) with PostgreSQL type `pg`."""
    return Typed(b[0], b[1], b[2], pg)


def pg_of(b: Any) -> str | None:
    """The PostgreSQL type of bound `b`: its `Typed.pg`, else its engine scalar's (None for an
    untyped NULL)."""
    pg = getattr(b, "pg", None)
    if pg is not None:
        return pg  # type: ignore[no-any-return]
    return None if b[1] == "null" else ENGINE_PG.get(b[1])


def col_pg(b: Any) -> str | None:
    """`pg_of(b)` as a `Col.pg`: None where it is the engine scalar's own type. A column of
    `numeric` (a double: `is_numeric`) keeps it — a subquery's, a CTE's, VALUES' or a view's
    column of decimal literals rounds as numeric where it is read — but is a
    double in results (announced as `double precision`); views record it
    (`statements.recorded_types`), so their reads keep it too."""
    pg = pg_of(b)
    return None if pg == ENGINE_PG.get(b[1]) else pg


def is_numeric(b: Any) -> bool:
    """Whether bound `b` is what PostgreSQL types `numeric`: a decimal literal (`2.5`, `1e3`),
    its negation or `abs`, arithmetic of one with integers or another, `round(x, d)`. Its
    value is the engine's double, but it rounds as numeric does — half away from zero in
    `round` and casts to integers (`round(2.5)` and `2.5::integer` are 3), where a double
    rounds ties to even (`round(2.5::float8)` is 2)."""
    return base(pg_of(b)) == "numeric"


def base(pg: str | None) -> str | None:
    return None if pg is None else pg.split("(")[0]


def arith_pg(a: str | None, b: str | None) -> str | None:
    """PostgreSQL's result type of `+ - * / %` over operands of types `a`, `b` (None: an
    untyped NULL, which takes the other's type); None where that is not int2/int4/int8/float4
    or numeric (the engine's float8)."""
    a, b = base(a) or base(b), base(b) or base(a)
    if a in _INTS and b in _INTS:
        return a if _INTS.index(a) >= _INTS.index(b) else b
    if {a, b} <= {"numeric", *_INTS} and "numeric" in (a, b):
        return "numeric"  # PostgreSQL's numeric with integer or numeric is numeric
    if a == b == "float4":
        return "float4"
    return None


_WIDER: Final = {"int2": ("int2",), "int4": ("int2", "int4"), "float4": ("float4",)}


def fits(source: str | None, target: str | None) -> bool:
    """Whether every value of PostgreSQL type `source` is one of `target` (no check or
    rounding needed: smallint to integer, real to real, anything to bigint or double)."""
    t = base(target)
    return t not in _WIDER or base(source) in _WIDER[t]


def narrow(e: PExpr, pg: str | None) -> PExpr:
    """`e` checked (int2/int4) or rounded (float4) to PostgreSQL type `pg`; else `e`."""
    func = _NARROW.get(base(pg) or "")
    if func is None:
        return e
    from twofold.sql.exprs import call

    return call(func, e)


def clamp_float(e: PExpr, pg: str | None) -> PExpr:
    """Double `e` about to be converted to PostgreSQL integer type `pg` (then `narrow`ed):
    beyond 2^40 — NaN and infinities too, NaN sorting above every number — it is clamped to
    2^40, out of the int2/int4 range anyway, so that the check names the target type
    (`1e19::float8::integer` is `integer out of range`, as in PostgreSQL) and not the 64-bit
    conversion's `bigint`. Other types: `e`."""
    if base(pg) not in ("int2", "int4"):
        return e
    from twofold.protocol import Literal as PLiteral
    from twofold.sql.exprs import call

    big = PLiteral(value=2.0**40)
    return call("if", call("ge", call("abs", e), big), big, e)


_CHAR_NAMES: Final = {"varchar": "character varying", "bpchar": "character"}


def char_limit(pg: str | None) -> tuple[str, int] | None:
    """`("varchar", n)` / `("bpchar", n)` for PostgreSQL type `varchar(n)` / `bpchar(n)`,
    else None (`text`, a `varchar` without a length, anything else)."""
    if pg is None or "(" not in pg:
        return None
    kind, _, rest = pg.partition("(")
    length = rest.rstrip(")")
    if kind not in _CHAR_NAMES or not length.isdigit():
        return None
    return kind, int(length)


def too_long(kind: str, n: int) -> str:
    return f"value too long for type {_CHAR_NAMES[kind]}({n})"


def char_assign(e: PExpr, pg: str | None) -> PExpr:
    """Text `e` as it is written into a column of type `pg`, PostgreSQL's assignment to a
    `varchar(n)`/`char(n)`: at most `n` characters, else its first `n` where the rest are all
    spaces, else the evaluation error `value too long for type character varying(n)` (22001);
    a `char(n)` value without its trailing spaces (PostgreSQL ignores them: `docs/sql.md`).
    Other types: `e`. Built of the engine's `length`, `rtrim`, `substr` and a lazy `if`
    around `error`, so whole columns at a time."""
    limit = char_limit(pg)
    if limit is None:
        return e
    from twofold.protocol import Literal as PLiteral
    from twofold.sql.exprs import call

    kind, n = limit
    if isinstance(e, PLiteral):
        return PLiteral(value=check_chars([e.value], pg)[0])
    longer = call("gt", call("length", call("rtrim", e)), PLiteral(value=n))
    return call("if", longer, call("error", PLiteral(value=too_long(kind, n))),
                char_cast(e, pg))


def char_cast(e: PExpr, pg: str | None) -> PExpr:
    """Text `e` cast explicitly to `pg`: to `varchar(n)` its first `n` characters (never an
    error, as in PostgreSQL), to `char(n)` those without trailing spaces; else `e`."""
    limit = char_limit(pg)
    if limit is None:
        return e
    from twofold.protocol import Literal as PLiteral
    from twofold.sql.exprs import call

    kind, n = limit
    if isinstance(e, PLiteral):
        v = e.value if e.value is None else e.value[:n]
        return PLiteral(value=v.rstrip(" ") if kind == "bpchar" and v is not None else v)
    kept = call("substr", e, PLiteral(value=1), PLiteral(value=n))
    return call("rtrim", kept) if kind == "bpchar" else kept


def check_chars(values: list[Any], pg: str | None) -> list[Any]:
    """`values` (texts or None) as a column of type `pg` (`varchar(n)`/`bpchar(n)`) stores
    them (`char_assign`'s rule, over the whole list in polars: `types.check_declared_series`):
    `StringDataRightTruncation` (22001) if one is too long."""
    if pg is None or char_limit(pg) is None or not values:
        return values
    import polars as pl

    from twofold.sql.types import check_declared_series

    return check_declared_series(pl.Series(values, dtype=pl.String), pg).to_list()


def narrow_literal(value: Any, pg: str | None, text: str) -> Any:
    """A constant `value` (read from the quoted literal `text`) as type `pg` stores it:
    `NumericValueOutOfRange` (22003, PostgreSQL's message) outside an int2/int4 range, a
    float4 rounded (22003 when it overflows or underflows)."""
    from twofold.sql.errors import NumericValueOutOfRange

    b = base(pg)
    if b == "numeric" and value == 0 and isinstance(value, float):
        return 0.0  # numeric has no negative zero: '-0' as numeric is 0
    if value is None or b not in ("int2", "int4", "float4"):
        return value
    if b in INT_RANGES:
        lo, hi, name = INT_RANGES[b]
        if not lo <= value <= hi:
            raise NumericValueOutOfRange(f'value "{text}" is out of range for type {name}')
        return value
    from twofold.sql.types import check_declared

    try:
        return check_declared([value], "float4")[0]
    except NumericValueOutOfRange:
        raise NumericValueOutOfRange(f'"{text}" is out of range for type real') from None


def fits_int4(value: Any) -> bool:
    return type(value) is int and INT_RANGES["int4"][0] <= value <= INT_RANGES["int4"][1]


__all__ = ["Typed", "arith_pg", "base", "char_assign", "char_cast", "char_limit",
           "check_chars", "clamp_float", "col_pg", "fits", "fits_int4", "is_numeric", "narrow",
           "narrow_literal", "negated_text", "numeric_literal_text", "pg_of", "typed"]
