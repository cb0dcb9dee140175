"""The output names of SELECT items, PostgreSQL's: an alias, else a column's name, else a
function's name (`var_samp` as written, which sqlglot reads as `variance`), else
`?column?`."""

from __future__ import annotations

from sqlglot import exp


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
