"""Where a result column comes from: the table OID and attribute number a RowDescription
carries for it, as PostgreSQL sends them.

Contract: `sourced(db, sql, cols)` is `cols` (a query's visible result columns, `columns_of`)
with each column that is a plain reference to a column of a table, view or materialized view
(through aliases, parentheses, subqueries in FROM and CTEs; as PostgreSQL's parser marks target
list origins) made a `portals.Sourced` carrying that object's OID and the column's number - the
`pg_class.oid` and `pg_attribute.attnum` twofold's own catalog relations show for it
(`catalog.oid_of`, columns numbered from 1 in the object's order), so a client joining a
RowDescription to `pg_attribute` (JDBC's getTableName, BI tools) finds the column. Computed
columns, set operations, VALUES, SUBSCRIBE and anything not worked out stay plain (0/0 on the
wire). What it works out is checked against `cols` (count, and the name of every sourced
column): a mismatch leaves every column plain, never a wrong origin. Kept per database and text
until the catalog's version moves.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

from sqlglot import exp

from twofold.server.portals import Column, Sourced
from twofold.sql.names import output_name

Origin = tuple[int, int]
_NONE: Origin = (0, 0)
_KEPT = 1024
_kept: weakref.WeakKeyDictionary[Any, collections.OrderedDict[str, tuple[int, Any]]] = \
    weakref.WeakKeyDictionary()


class _Unknown(Exception):
    """The query's columns cannot be traced (they stay plain)."""


def sourced(db: Any, sql: str, cols: list[Column]) -> list[Column]:
    if not cols:
        return cols
    from twofold.sql.prepared import catalog_version

    version = catalog_version(db)
    try:
        kept = _kept.setdefault(db, collections.OrderedDict())
    except TypeError:  # a database that cannot be weakly referenced: worked out each time
        kept = collections.OrderedDict()
    hit = kept.get(sql)
    if hit is not None and hit[0] == version:
        origins = hit[1]
    else:
        origins = _origins(db, sql)
        kept[sql] = (version, origins)
        if len(kept) > _KEPT:
            kept.popitem(last=False)
    if origins is None or len(origins) != len(cols):
        return cols
    out: list[Column] = []
    for (name, scalar), (traced, origin) in zip(cols, origins, strict=True):
        if origin == _NONE:
            out.append((name, scalar))
        elif traced != name:
            return cols
        else:
            out.append(Sourced(name, scalar, *origin))
    return out


def _origins(db: Any, sql: str) -> list[tuple[str, Origin]] | None:
    from twofold.sql.parser import AsOf, parse

    try:
        node = parse(sql)
        if isinstance(node, AsOf):
            node = node.this
        return _query(db, node, {}, {})
    except Exception:  # _Unknown, or anything the SQL layer will report itself
        return None


_Cols = list[tuple[str, Origin]]


def _query(db: Any, node: exp.Expr, ctes: dict[str, exp.Expr], types: dict[Origin, str]
           ) -> _Cols:
    """`node`'s output columns and their origins; `types` gets each traced column's
    PostgreSQL type (`int4`, `varchar(5)`, ...) by origin."""
    if isinstance(node, exp.Subquery):
        return _query(db, node.this, ctes, types)
    if not isinstance(node, exp.Select):
        raise _Unknown  # set operations (PostgreSQL: 0/0), VALUES, anything else
    with_ = node.args.get("with_")
    if with_ is not None:
        if with_.args.get("recursive"):
            raise _Unknown
        ctes = dict(ctes)
        for cte in with_.expressions:
            ctes[cte.alias] = cte.this
    sources: list[tuple[str, _Cols | None]] = []
    from_ = node.args.get("from_")
    items = ([from_.this] if from_ is not None else []) + [j.this for j in
                                                           node.args.get("joins") or []]
    merged = any(j.args.get("using") or j.args.get("method") or j.args.get("kind") == "NATURAL"
                 for j in node.args.get("joins") or [])
    for item in items:
        sources.append(_source(db, item, ctes, types))
    out: _Cols = []
    for e in node.expressions:
        inner = e.this if isinstance(e, exp.Alias) else e
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                           and isinstance(inner.this, exp.Star)):
            qual = inner.table if isinstance(inner, exp.Column) else ""
            chosen = [cols for alias, cols in sources if not qual or alias == qual]
            if not chosen or any(c is None for c in chosen) or (merged and not qual):
                raise _Unknown  # USING/NATURAL merge columns under `*`
            for cols in chosen:
                assert cols is not None
                out.extend(cols)
            continue
        name = output_name(e)
        if isinstance(inner, exp.Column):
            out.append((name, _lookup(sources, inner.table, inner.name)))
        elif isinstance(inner, exp.Cast) and isinstance(of := _unwrap(inner.this), exp.Column):
            # a cast to the column's own type is no cast: PostgreSQL keeps the column
            origin = _lookup(sources, of.table, of.name)
            same = _CAST_TYPES.get(inner.to.this) if not inner.to.expressions else None
            declared = types.get(origin)
            out.append((name, origin if same is not None and declared is not None and
                        declared.split("(")[0] == same else _NONE))
        else:
            out.append((name, _NONE))
    return out


def _unwrap(e: exp.Expr) -> exp.Expr:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


_T = exp.DataType.Type
_CAST_TYPES = {_T.BIGINT: "int8", _T.INT: "int4", _T.SMALLINT: "int2", _T.DOUBLE: "float8",
               _T.FLOAT: "float4", _T.TEXT: "text", _T.VARCHAR: "varchar", _T.BOOLEAN: "bool",
               _T.VARBINARY: "bytea"}
_SCALAR_TYPES = {"int": "int8", "float": "float8", "str": "text", "bool": "bool",
                 "bytes": "bytea"}



def _source(db: Any, item: exp.Expr, ctes: dict[str, exp.Expr], types: dict[Origin, str]
            ) -> tuple[str, _Cols | None]:
    alias = item.args.get("alias")
    renames = [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
    cols: _Cols | None
    if isinstance(item, exp.Table) and isinstance(item.this, exp.Identifier):
        name = item.name
        schema = item.args.get("db")
        if schema is None and name in ctes:
            try:
                cols = _query(db, ctes[name], {k: v for k, v in ctes.items() if k != name},
                              types)
            except _Unknown:
                cols = None
        elif schema is None or schema.name == "public":
            cols = _object(db, name, types)
        else:
            cols = None
    elif isinstance(item, exp.Subquery):
        try:
            cols = _query(db, item.this, ctes, types)
        except _Unknown:
            cols = None
        name = item.alias
    else:
        return item.alias_or_name, None
    if cols is not None and renames:
        cols = [(renames[i] if i < len(renames) else c, o) for i, (c, o) in enumerate(cols)]
    return (item.alias or name), cols


def _object(db: Any, name: str, types: dict[Origin, str]) -> _Cols:
    from twofold.server.catalog import oid_of

    schema = db.get(name).schema  # a table's, view's or materialized view's columns
    oid = oid_of(name)
    entry = getattr(db, "_entries", {}).get(name)
    declared = list(getattr(entry, "pg_types", None) or [])
    if len(declared) != len(schema.names):
        declared = [""] * len(schema.names)
    for i, (t, pg) in enumerate(zip(schema.types, declared, strict=True), 1):
        types[(oid, i)] = pg or _SCALAR_TYPES.get(t.scalar, "")
    return [(c, (oid, i)) for i, c in enumerate(schema.names, 1)]


def _lookup(sources: list[tuple[str, _Cols | None]], qual: str, name: str) -> Origin:
    found: list[Origin] = []
    for alias, cols in sources:
        if qual and alias != qual:
            continue
        if cols is None:  # untraced: found once elsewhere, it is not (or the query fails)
            if qual:
                return _NONE
            continue
        found.extend(o for c, o in cols if c == name)
    return found[0] if len(found) == 1 else _NONE
