"""Plan -> DuckDB SQL: the differential oracle for `twofold.engine` (a test utility).

Contract: `plan_to_sql(plan, sources)` returns one SQL query whose result, read as rows
`(c0, ..., c{n-1}, __m)`, is exactly the plan's consolidated collection (row, multiplicity
`__m != 0`) per docs/semantics.md, given for every `Get` id a table or view with columns
`c0.., __m` (the input multiset, one row per (row, multiplicity) piece, not necessarily
consolidated). `DuckOracle` loads `(row, time, diff)` histories and evaluates a plan at any time.

Invariant protected: multiplicities are carried explicitly in `__m` through every operator, so
`Negate`, `Threshold`, `UnionAll` and bag semantics are exact, and no operator depends on DuckDB's
row order. Every relation in the generated SQL has columns named `c0..c{n-1}` then `__m`.

Where DuckDB differs from docs/semantics.md the translation compensates: literals are cast
(DuckDB reads `1.5` as DECIMAL and `1` as INTEGER), float -> int casts truncate (DuckDB rounds),
`||` is used for `concat` (DuckDB's `concat()` skips NULLs), float `mod` is DuckDB's `%` (its
`fmod()` takes the divisor's sign). Not translatable: `cast_str` of a float (Python `repr`
formatting) raises `Untranslatable`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa
from reference import NULL_TYPE, Types, expr_type, literal_type, plan_types

from twofold.protocol import (
    Aggregate,
    Call,
    Column,
    Constant,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    Literal,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    Threshold,
    TopK,
    UnionAll,
)

SQL_TYPES: dict[str, str] = {
    "bool": "BOOLEAN",
    "int": "BIGINT",
    "float": "DOUBLE",
    "str": "VARCHAR",
    "bytes": "BLOB",
}
ARROW_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bytes": pa.binary(),
}

_COMPARE = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*"}


class Untranslatable(Exception):
    """The plan uses something DuckDB cannot express with the exact semantics."""


def sql_literal(value: Any, typ: str | None = None) -> str:
    """A typed SQL literal for a protocol scalar (`typ` forces the column type, e.g. for NULL)."""
    t = typ or literal_type(value)
    if value is None:
        return "NULL" if t == NULL_TYPE else f"CAST(NULL AS {SQL_TYPES[t]})"
    if t == "bool":
        return "TRUE" if value else "FALSE"
    if t == "int":
        return f"CAST({int(value)} AS BIGINT)"
    if t == "float":
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if t == "str":
        return "'" + str(value).replace("'", "''") + "'"
    if t == "bytes":
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    raise Untranslatable(f"no SQL literal for {value!r}")


def _cols(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}c{i}" for i in range(n)]


def _select_list(items: Sequence[str]) -> str:
    return ", ".join([*items, "__m"])


class _Translator:
    def __init__(self, sources: Mapping[GlobalId, tuple[str, Sequence[str]]]) -> None:
        self.sources = sources
        self.types = {gid: list(t) for gid, (_, t) in sources.items()}
        self._alias = itertools.count()

    def alias(self) -> str:
        return f"t{next(self._alias)}"

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: Expr, cols: Types) -> str:
        """SQL over columns named `c{i}`; the expression's type is `expr_type(e, cols)`."""
        match e:
            case Column(index=i):
                return f"c{i}"
            case Literal(value=v):
                return sql_literal(v)
            case Call(func=f, args=args):
                pass
            case _:
                raise Untranslatable(f"not an Expr: {e!r}")
        result = expr_type(e, cols)
        arg_types = [expr_type(a, cols) for a in args]
        a = [self.expr(x, cols) for x in args]
        if f in _COMPARE:
            return f"({a[0]} {_COMPARE[f]} {a[1]})"
        if f in ("and", "or"):
            return f"({a[0]} {f.upper()} {a[1]})"
        if f == "not":
            return f"(NOT {a[0]})"
        if f in _ARITH:
            return f"({self._as(a[0], result)} {_ARITH[f]} {self._as(a[1], result)})"
        if f == "div":
            if result == "int":
                return f"({a[0]} // {a[1]})"  # DuckDB's `//` on integers truncates toward zero
            return f"(CAST({a[0]} AS DOUBLE) / CAST({a[1]} AS DOUBLE))"
        if f == "mod":
            if result == "int":
                return f"({a[0]} % {a[1]})"  # C semantics: sign of the dividend
            # DuckDB's `fmod()` takes the divisor's sign; its `%` on doubles is C fmod.
            return f"(CAST({a[0]} AS DOUBLE) % CAST({a[1]} AS DOUBLE))"
        if f == "neg":
            return f"(-({a[0]}))"
        if f == "abs":
            return f"abs({a[0]})"
        if f == "is_null":
            return f"({a[0]} IS NULL)"
        if f == "coalesce":
            return "COALESCE(" + ", ".join(self._as(x, result) for x in a) + ")"
        if f == "if":
            # A NULL condition is not TRUE, so it picks the else branch, as specified.
            return (
                f"(CASE WHEN {a[0]} THEN {self._as(a[1], result)} "
                f"ELSE {self._as(a[2], result)} END)"
            )
        if f == "concat":
            return f"({a[0]} || {a[1]})"
        if f in ("lower", "upper", "length"):
            return f"{f}({a[0]})"
        if f == "like":
            return f"({a[0]} LIKE {a[1]})"  # DuckDB LIKE has no escape character by default
        if f == "cast_int":
            if arg_types[0] == "float":
                return f"CAST(trunc({a[0]}) AS BIGINT)"  # DuckDB's CAST rounds
            if arg_types[0] == "str":
                return f"CAST(trim({a[0]}) AS BIGINT)"
            return f"CAST({a[0]} AS BIGINT)"
        if f == "cast_float":
            return f"CAST({a[0]} AS DOUBLE)"
        if f == "cast_str":
            if arg_types[0] == "float":
                raise Untranslatable("cast_str of a float (Python repr) has no DuckDB equivalent")
            if arg_types[0] == "bool":
                return f"(CASE WHEN {a[0]} THEN 'true' WHEN NOT {a[0]} THEN 'false' END)"
            return f"CAST({a[0]} AS VARCHAR)"
        raise Untranslatable(f"unknown function {f!r}")

    @staticmethod
    def _as(sql: str, typ: str) -> str:
        return f"CAST({sql} AS DOUBLE)" if typ == "float" else sql

    # -- plans ------------------------------------------------------------------------------

    def plan(self, p: Plan) -> tuple[str, Types]:
        """SQL producing `c0.., __m` (not necessarily consolidated), and the column types."""
        match p:
            case Get(id=gid):
                table, types = self.sources[gid]
                return f"SELECT {_select_list(_cols(len(types)))} FROM {table}", list(types)
            case Constant(rows=rows):
                types = plan_types(p, self.types)
                values = ", ".join(
                    "(" + ", ".join([*map(sql_literal, r, types), sql_literal(d, "int")]) + ")"
                    for r, d in rows
                )
                names = _select_list(_cols(len(types)))
                return f"SELECT * FROM (VALUES {values}) AS {self.alias()}({names})", types
            case Mfp():
                return self.mfp(p)
            case Join():
                return self.join(p)
            case Reduce():
                return self.reduce(p)
            case TopK():
                return self.topk(p)
            case UnionAll(inputs=ins):
                types = plan_types(p, self.types)
                parts = [f"SELECT * FROM ({self.plan(i)[0]}) AS {self.alias()}" for i in ins]
                return " UNION ALL ".join(parts), types
            case Negate(input=inp):
                sql, types = self.plan(inp)
                cols = _cols(len(types))
                negated = ", ".join([*cols, "-__m AS __m"])
                return f"SELECT {negated} FROM ({sql}) AS {self.alias()}", types
            case Threshold(input=inp):
                sql, types = self.plan(inp)
                return self.consolidate(sql, len(types), "> 0"), types
            case Distinct(input=inp):
                sql, types = self.plan(inp)
                cols = _cols(len(types))
                return (
                    f"SELECT {', '.join([*cols, 'CAST(1 AS BIGINT) AS __m'])} "
                    f"FROM ({sql}) AS {self.alias()}{self._group_by(cols)} HAVING sum(__m) > 0",
                    types,
                )
        raise Untranslatable(f"not a Plan: {p!r}")

    @staticmethod
    def _group_by(cols: Sequence[str]) -> str:
        return f" GROUP BY {', '.join(cols)}" if cols else ""

    def consolidate(self, sql: str, arity: int, having: str = "<> 0") -> str:
        """`sql` with one row per distinct row (NULLs equal, as in GROUP BY) and its net count."""
        cols = _cols(arity)
        return (
            f"SELECT {', '.join([*cols, 'CAST(sum(__m) AS BIGINT) AS __m'])} "
            f"FROM ({sql}) AS {self.alias()}{self._group_by(cols)} HAVING sum(__m) {having}"
        )

    def mfp(self, p: Mfp) -> tuple[str, Types]:
        sql, types = self.plan(p.input)
        # One subquery layer per map expression: later expressions refer to earlier outputs by
        # name, so nothing is inlined twice.
        for m in p.map:
            sql = f"SELECT *, {self.expr(m, types)} AS c{len(types)} FROM ({sql}) AS {self.alias()}"
            types = [*types, expr_type(m, types)]
        if p.filter:
            where = " AND ".join(f"({self.expr(f, types)}) IS TRUE" for f in p.filter)
            sql = f"SELECT * FROM ({sql}) AS {self.alias()} WHERE {where}"
        proj = list(range(len(types))) if p.project is None else p.project
        items = [f"c{j} AS c{i}" for i, j in enumerate(proj)]
        return f"SELECT {_select_list(items)} FROM ({sql}) AS {self.alias()}", [
            types[j] for j in proj
        ]

    def join(self, p: Join) -> tuple[str, Types]:
        lsql, lt = self.plan(p.left)
        rsql, rt = self.plan(p.right)
        la, ra = self.alias(), self.alias()
        items = [f"{la}.c{i} AS c{i}" for i in range(len(lt))]
        items += [f"{ra}.c{i} AS c{len(lt) + i}" for i in range(len(rt))]
        items.append(f"{la}.__m * {ra}.__m AS __m")
        # `=` is never TRUE for a NULL key, which is exactly "NULL keys never match".
        on = " AND ".join(
            f"{la}.c{a} = {ra}.c{b}" for a, b in zip(p.left_key, p.right_key, strict=True)
        )
        return (
            f"SELECT {', '.join(items)} FROM ({lsql}) AS {la} JOIN ({rsql}) AS {ra} "
            f"ON {on or 'TRUE'}",
            lt + rt,
        )

    def _aggregate(self, agg: Aggregate, types: Types) -> str:
        if agg.func == "count" and agg.column is None:
            return "CAST(coalesce(sum(__m), 0) AS BIGINT)"
        col = agg.column
        assert col is not None  # only count(*) has no column
        c = f"c{col}"
        if agg.distinct:
            inner = f"{agg.func}(DISTINCT {c})"
            # DuckDB sums BIGINTs into HUGEINT; the semantics say int.
            is_int = agg.func == "count" or (agg.func == "sum" and types[col] == "int")
            return f"CAST({inner} AS BIGINT)" if is_int else inner
        if agg.func == "count":
            return f"CAST(coalesce(sum(CASE WHEN {c} IS NULL THEN 0 ELSE __m END), 0) AS BIGINT)"
        if agg.func == "sum":
            if types[col] == "int":
                return f"CAST(sum({c} * __m) AS BIGINT)"
            return f"sum({c} * CAST(__m AS DOUBLE))"
        return f"{agg.func}({c})"  # min/max ignore multiplicity and NULLs

    def reduce(self, p: Reduce) -> tuple[str, Types]:
        sql, types = self.plan(p.input)
        out_types = plan_types(p, self.types)
        base = self.consolidate(sql, len(types))
        items = [f"c{k} AS c{i}" for i, k in enumerate(p.group_key)]
        n = len(items)
        items += [f"{self._aggregate(a, types)} AS c{n + i}" for i, a in enumerate(p.aggregates)]
        items.append("CAST(1 AS BIGINT) AS __m")
        # With a group key, HAVING drops groups whose rows all cancelled; without one, SQL's
        # single row over no input is the semantics too.
        having = " HAVING count(*) > 0" if p.group_key else ""
        if not p.group_key and not p.aggregates:
            return "SELECT CAST(1 AS BIGINT) AS __m", out_types  # not an aggregate query
        return (
            f"SELECT {', '.join(items)} FROM ({base}) AS {self.alias()}"
            f"{self._group_by([f'c{k}' for k in p.group_key])}{having}",
            out_types,
        )

    @staticmethod
    def order_clause(order_by: Sequence[OrderKey], arity: int) -> str:
        keys = [
            f"c{k.column} {'DESC' if k.desc else 'ASC'} NULLS {'LAST' if k.nulls_last else 'FIRST'}"
            for k in order_by
        ]
        keys += [f"c{i} ASC NULLS LAST" for i in range(arity)]
        return ", ".join(keys)

    def topk(self, p: TopK) -> tuple[str, Types]:
        sql, types = self.plan(p.input)
        cols = _cols(len(types))
        base = self.consolidate(sql, len(types))
        window = []
        if p.group_key:
            window.append("PARTITION BY " + ", ".join(f"c{k}" for k in p.group_key))
        order = self.order_clause(p.order_by, len(types))
        if order:
            window.append("ORDER BY " + order)
        window.append("ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
        # A row of multiplicity m occupies ranks [cum - m, cum); keep its overlap with the page.
        hi = "__cum" if p.limit is None else f"LEAST(__cum, {p.offset + p.limit})"
        keep = f"GREATEST(0, {hi} - GREATEST(__cum - __m, {p.offset}))"
        ranked = (
            f"SELECT *, CAST(sum(__m) OVER ({' '.join(window)}) AS BIGINT) AS __cum "
            f"FROM ({base}) AS {self.alias()}"
        )
        kept = f"SELECT {', '.join([*cols, f'{keep} AS __m'])} FROM ({ranked}) AS {self.alias()}"
        return f"SELECT * FROM ({kept}) AS {self.alias()} WHERE __m > 0", types


def plan_to_sql(plan: Plan, sources: Mapping[GlobalId, tuple[str, Sequence[str]]]) -> str:
    """One query giving `plan`'s consolidated collection as rows `(c0.., __m)`, `__m != 0`.

    `sources` maps every id the plan reads to `(table, column types)`; the table has columns
    `c0..c{n-1}, __m`.
    """
    t = _Translator(sources)
    sql, types = t.plan(plan)
    return t.consolidate(sql, len(types))


class DuckOracle:
    """Input histories loaded into DuckDB; `at(t)` evaluates the plan over inputs as of `t`.

    Each input `u{n}` lives in table `upd_u{n}(c0.., __time, __diff)`, read through a view that
    keeps `__time <= now`, where `now` is a one-row table updated by `at`; so the plan's SQL is
    generated and planned once and only the time changes.
    """

    def __init__(
        self,
        plan: Plan,
        inputs: Mapping[GlobalId, tuple[Sequence[str], Sequence[tuple[Sequence[Any], int, int]]]],
    ) -> None:
        self.con = duckdb.connect(":memory:")
        self.con.execute("CREATE TABLE __now (t BIGINT)")
        self.con.execute("INSERT INTO __now VALUES (0)")
        sources: dict[GlobalId, tuple[str, Sequence[str]]] = {}
        for gid, (types, updates) in inputs.items():
            name = f"upd_{gid}"
            fields = [pa.field(f"c{i}", ARROW_TYPES[t]) for i, t in enumerate(types)]
            fields += [pa.field("__time", pa.int64()), pa.field("__diff", pa.int64())]
            columns: list[list[Any]] = [[] for _ in fields]
            for row, t, d in updates:
                for col, v in zip(columns, [*row, t, d], strict=True):
                    col.append(v)
            table = pa.Table.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(columns, fields, strict=True)],
                schema=pa.schema(fields),
            )
            self.con.register(f"arrow_{gid}", table)
            self.con.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow_{gid}")
            self.con.unregister(f"arrow_{gid}")
            cols = ", ".join([*_cols(len(types)), "__diff AS __m"])
            self.con.execute(
                f"CREATE VIEW in_{gid} AS SELECT {cols} FROM {name} "
                "WHERE __time <= (SELECT t FROM __now)"
            )
            sources[gid] = (f"in_{gid}", types)
        self.types = plan_types(plan, {g: t for g, (_, t) in sources.items()})
        self.sql = plan_to_sql(plan, sources)

    def at(self, time: int) -> list[tuple[tuple[Any, ...], int]]:
        """The plan's consolidated collection at `time`: (row, count) pairs, unordered."""
        self.con.execute("UPDATE __now SET t = ?", [time])
        return [(tuple(r[:-1]), int(r[-1])) for r in self.con.execute(self.sql).fetchall()]

    def close(self) -> None:
        self.con.close()
