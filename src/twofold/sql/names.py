"""The output names of SELECT items, PostgreSQL's: an alias, else a column's name, else a
function's name (`var_samp` as written, which sqlglot reads as `variance`), else
`?column?`. `position_of`: an output column named by its position (ORDER BY / GROUP BY /
DISTINCT ON `k`)."""

from __future__ import annotations

import re

from sqlglot import exp

from twofold.sql.errors import InvalidColumnReference, SqlSyntaxError


def output_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Paren):
        return output_name(node.this)
    if isinstance(node, exp.Cast | exp.TryCast):
        inner = output_name(node.this)
        return inner if inner != "?column?" else sql_name_of(node.args["to"])
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.Exists):
        return "exists"
    if isinstance(node, exp.Subquery):
        sel = node.this
        if isinstance(sel, exp.Select) and len(sel.expressions) == 1:
            return output_name(sel.expressions[0])
    if isinstance(node, exp.Filter):
        return output_name(node.this)
    if isinstance(node, exp.GroupConcat):
        return "string_agg"
    if isinstance(node, exp.Variance | exp.VariancePop):
        return node.meta.get("name", "variance") if isinstance(node, exp.Variance) else "var_pop"
    if isinstance(node, exp.Trim):  # trim(...) is PostgreSQL's btrim/ltrim/rtrim
        where = str(node.args.get("position") or "BOTH").upper()
        return {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(where, "btrim")
    if isinstance(node, exp.LogicalAnd) and node.meta.get("name"):
        return str(node.meta["name"])  # every(x)
    if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous):
        name = node.sql_name().lower()
        return {"logical_and": "bool_and", "logical_or": "bool_or"}.get(name, name)
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return "?column?"


def sql_name_of(dt: exp.Expr) -> str:
    return dt.sql(dialect="postgres").lower().split("(")[0]


def position_of(e: exp.Expr, n: int, what: str) -> int | None:
    """The 0-based output column an ORDER BY / GROUP BY / DISTINCT ON item names by position
    (an integer literal, 1..n), or None when `e` is no constant. As PostgreSQL: another
    constant (`1.5`, `'a'`, NULL) is 42601 "non-integer constant", a position outside the
    list (`0`, `-1`) 42P10."""
    inner = e.this if isinstance(e, exp.Neg) else e
    if isinstance(e, exp.Null) or (isinstance(e, exp.Literal) and e.is_string):
        raise SqlSyntaxError(f"non-integer constant in {what}")
    if not isinstance(inner, exp.Literal) or inner.is_string:
        return None
    if not re.fullmatch(r"[0-9]+", str(inner.this)):
        raise SqlSyntaxError(f"non-integer constant in {what}")
    k = -int(inner.this) if inner is not e else int(inner.this)
    if not 1 <= k <= n:
        raise InvalidColumnReference(f"{what} position {k} is not in select list")
    return k - 1
