"""Random SQL over random tables, for differential tests against DuckDB.

`Tables` draws a few small tables (`r0`, `r1`, `r2`, each `k int, a int, f double, s text`)
with NULLs and duplicate rows; `query(rng)` draws one query using the features `spec/sql.md`
lists — expressions (arithmetic, CASE, COALESCE, NULLIF, GREATEST/LEAST, BETWEEN, IN lists,
LIKE, IS [NOT] DISTINCT FROM, three-valued logic), inner/outer/comma joins, GROUP BY/HAVING and
global aggregates (`string_agg` ordered by its value, `FILTER (WHERE ...)` too, `var_samp`,
`stddev_pop`), text functions (`replace`, `reverse`, `lpad`, `split_part`), DISTINCT,
subqueries (scalar, EXISTS, IN, NOT IN, correlated or not) and set operations. Only what both
engines define identically is drawn: no division by a column (PG raises where DuckDB gives
NULL), no LIMIT without a total order, integers small enough never to overflow. DuckDB runs
with `integer_division = true` so `/` truncates as in PostgreSQL.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

TABLES = ("r0", "r1", "r2")
COLUMNS = (("k", "INTEGER"), ("a", "INTEGER"), ("f", "DOUBLE PRECISION"), ("s", "TEXT"))
WORDS = ("", "a", "ab", "ba", "abc", "b", "Cab", "a b")


def random_row(rng: random.Random) -> tuple[Any, ...]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    return (maybe(rng.randint(0, 4)), maybe(rng.randint(-5, 5)),
            maybe(rng.choice([0.5, -1.25, 2.0, 3.75, 0.0, 1e3])), maybe(rng.choice(WORDS)))


def random_rows(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    rows = [random_row(rng) for _ in range(n)]
    return rows + [rng.choice(rows) for _ in range(n // 4)] if rows else rows


class Gen:
    """One query's generator: tables in scope and their aliases."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)

    # -- expressions ------------------------------------------------------------------------

    def int_expr(self, q: list[str], depth: int = 0) -> str:
        r = self.rng
        col = f"{r.choice(q)}.{r.choice(('k', 'a'))}"
        if depth > 2 or r.random() < 0.35:
            return col if r.random() < 0.8 else str(r.randint(-3, 3))
        a, b = self.int_expr(q, depth + 1), self.int_expr(q, depth + 1)
        return self.pick(
            f"({a} + {b})", f"({a} - {b})", f"({a} * {r.randint(-2, 3)})",
            f"({a} / {r.choice((2, 3, -2))})", f"({a} % {r.choice((2, 3, -3))})",
            f"abs({a})", f"coalesce({a}, {b})", f"nullif({a}, {b})",
            f"greatest({a}, {b})", f"least({a}, {b})",
            f"CASE WHEN {self.pred(q, depth + 1)} THEN {a} ELSE {b} END",
            f"CASE {a} WHEN 1 THEN {b} WHEN 2 THEN 7 END", f"-({a})")

    def num_expr(self, q: list[str], depth: int = 0) -> str:
        r = self.rng
        if r.random() < 0.6:
            return self.int_expr(q, depth)
        f = f"{r.choice(q)}.f"
        return self.pick(f, f"({f} + {self.int_expr(q, depth + 1)})", f"({f} * 2)",
                         f"abs({f})", f"coalesce({f}, 1.5)")

    def str_expr(self, q: list[str]) -> str:
        s = f"{self.rng.choice(q)}.s"
        return self.pick(s, f"lower({s})", f"upper({s})", f"({s} || 'x')", f"substr({s}, 2)",
                         f"coalesce({s}, 'z')", f"trim({s})", f"replace({s}, 'a', 'xy')",
                         f"reverse({s})", f"lpad({s}, 2, '*')", f"split_part({s}, 'a', 2)")

    def pred(self, q: list[str], depth: int = 0) -> str:
        r = self.rng
        if depth > 2 or r.random() < 0.5:
            a = self.num_expr(q, depth + 1)
            return self.pick(
                f"{a} {r.choice(('=', '<>', '<', '<=', '>', '>='))} {self.num_expr(q, depth + 1)}",
                f"{a} IS NULL", f"{a} IS NOT NULL", f"{a} BETWEEN -1 AND 2",
                f"{a} IN (0, 1, 3)", f"{a} NOT IN (1, 2)",
                f"{self.str_expr(q)} LIKE '{r.choice(('a%', '%b', '_b%', '%'))}'",
                f"{a} IS DISTINCT FROM {self.int_expr(q, depth + 1)}",
                f"{self.str_expr(q)} = '{r.choice(WORDS)}'")
        a, b = self.pred(q, depth + 1), self.pred(q, depth + 1)
        return self.pick(f"({a} AND {b})", f"({a} OR {b})", f"NOT ({a})")

    # -- queries ----------------------------------------------------------------------------

    def select_list(self, q: list[str]) -> str:
        n = self.rng.randint(1, 3)
        exprs = [self.pick(self.num_expr(q), self.str_expr(q), self.int_expr(q))
                 for _ in range(n)]
        return ", ".join(f"{e} AS c{j}" for j, e in enumerate(exprs))

    def from_clause(self) -> tuple[str, list[str]]:
        r = self.rng
        shape = r.randrange(5)
        t = list(TABLES)
        r.shuffle(t)
        if shape == 0:
            return f"{t[0]} AS x", ["x"]
        if shape == 1:
            kind = r.choice(("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"))
            extra = f" AND {self.pred(['x', 'y'], 2)}" if r.random() < 0.3 else ""
            return f"{t[0]} AS x {kind} {t[1]} AS y ON x.k = y.k{extra}", ["x", "y"]
        if shape == 2:
            return f"{t[0]} AS x, {t[1]} AS y", ["x", "y"]
        if shape == 3:
            return (f"{t[0]} AS x, {t[1]} AS y, {t[2]} AS z", ["x", "y", "z"])
        return f"{t[0]} AS x JOIN {t[1]} AS y USING (k)", ["x", "y"]

    def subquery_pred(self, q: list[str]) -> str:
        r = self.rng
        other = r.choice(TABLES)
        corr = f" AND w.k = {r.choice(q)}.k" if r.random() < 0.6 else ""
        inner = f"FROM {other} AS w WHERE {self.pred(['w'], 2)}{corr}"
        x = self.int_expr(q, 2)
        return self.pick(
            f"EXISTS (SELECT 1 {inner})", f"NOT EXISTS (SELECT 1 {inner})",
            f"{x} IN (SELECT w.a {inner})", f"{x} NOT IN (SELECT w.a {inner})",
            f"{x} > (SELECT max(w.a) {inner})", f"{x} = (SELECT count(*) {inner})")

    def query(self) -> str:
        r = self.rng
        shape = r.randrange(7)
        frm, q = self.from_clause()
        where = f" WHERE {self.pred(q)}" if r.random() < 0.7 else ""
        if shape == 0:
            distinct = "DISTINCT " if r.random() < 0.3 else ""
            return f"SELECT {distinct}{self.select_list(q)} FROM {frm}{where}"
        if shape == 1:
            g = self.int_expr(q, 2)
            agg = self.aggs(q)
            having = f" HAVING count(*) > {r.randint(0, 2)}" if r.random() < 0.3 else ""
            return f"SELECT {g} AS g, {agg} FROM {frm}{where} GROUP BY 1{having}"
        if shape == 2:
            return f"SELECT {self.aggs(q)} FROM {frm}{where}"
        if shape == 3:
            sub = self.subquery_pred(q)
            return f"SELECT {self.select_list(q)} FROM {frm} WHERE {sub}"
        if shape == 4:
            other = r.choice(TABLES)
            corr = f"w.k = {r.choice(q)}.k"
            sub = self.pick(f"(SELECT count(*) FROM {other} AS w WHERE {corr})",
                            f"(SELECT sum(w.a) FROM {other} AS w WHERE {corr})",
                            f"(SELECT max(w.f) FROM {other} AS w WHERE w.a > {q[0]}.a)")
            return f"SELECT {self.int_expr(q, 2)} AS c0, {sub} AS c1 FROM {frm}{where}"
        if shape == 5:
            op = r.choice(("UNION", "UNION ALL", "INTERSECT", "INTERSECT ALL", "EXCEPT",
                           "EXCEPT ALL"))
            a, b = r.choice(TABLES), r.choice(TABLES)
            return (f"SELECT {self.int_expr(['x'], 2)} AS c0 FROM {a} AS x WHERE "
                    f"{self.pred(['x'], 2)} {op} SELECT {self.int_expr(['y'], 2)} FROM {b} AS y")
        return (f"WITH c AS (SELECT {self.int_expr(q, 2)} AS v FROM {frm}{where}) "
                f"SELECT v, count(*) AS n FROM c GROUP BY v")

    def aggs(self, q: list[str]) -> str:
        r = self.rng
        out = []
        for j in range(r.randint(1, 3)):
            e = self.num_expr(q, 2)
            t = f"{r.choice(q)}.s"
            sep = r.choice(("','", "''", "' | '"))
            out.append(self.pick("count(*)", f"count({e})", f"sum({e})", f"min({e})",
                                 f"max({e})", f"avg({e})", f"count(DISTINCT {e})",
                                 f"bool_and({self.pred(q, 2)})",
                                 f"string_agg({t}, {sep} ORDER BY {t})",
                                 f"string_agg(DISTINCT {t}, {sep} ORDER BY {t} DESC)",
                                 f"count(*) FILTER (WHERE {self.pred(q, 2)})",
                                 f"sum({e}) FILTER (WHERE {self.pred(q, 2)})",
                                 f"var_samp({e})", f"stddev_pop({e})") + f" AS a{j}")
        return ", ".join(out)


def normalize(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    """Rows as a multiset with floats rounded to 9 significant digits (sums may differ in the
    last bits with the order of addition); integral floats and ints compare equal."""

    def norm(v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, float | int) and not isinstance(v, bool):
            fv = float(v)
            if math.isnan(fv) or math.isinf(fv):
                return repr(fv)
            if fv == 0:
                return 0.0
            digits = 9 - math.floor(math.log10(abs(fv)))
            return round(fv, digits)
        if type(v).__name__ == "Decimal":
            return norm(float(v))
        return v

    return Counter(tuple(norm(v) for v in r) for r in rows)
