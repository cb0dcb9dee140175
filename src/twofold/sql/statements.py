"""Executing statements: DDL and DML as the Python API's catalog operations and table writes.

Contract, per statement kind (`twofold.sql.execute` dispatches here):

- `CREATE TABLE` → `db.create_table(name, schema, nullable=, primary_key=)`, returns the
  `Table`; `IF NOT EXISTS` → `exist_ok=True`.
- `CREATE VIEW` → `db.create_view` (a durable named query, not maintained; planned inline
  where it is read, the statement's text kept for `SHOW CREATE`); `CREATE MATERIALIZED VIEW` →
  `db.create_materialized_view`; `CREATE [DEFAULT] INDEX` → `db.create_index` keyed by the
  named columns (every column for `DEFAULT`).
- `DROP TABLE|VIEW|MATERIALIZED VIEW|INDEX [IF EXISTS] name [CASCADE]` → `db.drop` (without
  `CASCADE` refused with `2BP01` naming the objects that read it).
- `INSERT INTO t [(cols)] VALUES ... | query` → `Table.insert` (missing columns are NULL);
  `UPDATE t SET c = e [WHERE p]` → `Table.update(set=, where=)`; `DELETE FROM t [WHERE p]` →
  `Table.delete(where=)`: the table's checked, serialised writes; each returns the row count
  (`writes`, re-exported here).

Nothing is half-applied: every name and type is checked before the first write or catalog
change, and the writes themselves are atomic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sqlglot import exp

from twofold.api.errors import DependencyError, ObjectExists, TwofoldError, UnknownObject
from twofold.sql.creation import check_first_contents
from twofold.sql.errors import (
    DependentObjects,
    DuplicateColumnName,
    DuplicateObject,
    FeatureNotSupported,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedObject,
    UndefinedTable,
    WrongObjectType,
)
from twofold.sql.planner import Planner
from twofold.sql.scope import Col, Rel, Scope
from twofold.sql.types import (
    ENGINE_PG,
    declared_type,
    sql_type,
)
from twofold.sql.writes import check_declared_rows as check_declared_rows
from twofold.sql.writes import declared_types as declared_types
from twofold.sql.writes import delete as delete
from twofold.sql.writes import insert as insert
from twofold.sql.writes import update as update

if TYPE_CHECKING:
    from twofold.api.session import AsyncDatabase


def _name(node: exp.Expr) -> str:
    table = node.this if isinstance(node, exp.Schema) else node
    if isinstance(table, exp.Table):
        if table.db and table.db not in ("public", "materialize"):
            raise FeatureNotSupported(f"schemas are not supported ({table.db}.{table.name})")
        return table.name
    return node.name


def create_table(db: AsyncDatabase, node: exp.Create) -> Any:
    schema = node.this
    if not isinstance(schema, exp.Schema):
        raise FeatureNotSupported("CREATE TABLE ... AS is not supported; create the table, "
                                  "then INSERT INTO ... SELECT")
    name = _name(schema)
    cols: dict[str, Any] = {}
    declared: list[str] = []
    nullable: list[str] = []
    pk: list[str] = []
    for d in schema.expressions:
        if isinstance(d, exp.ColumnDef):
            cname = d.name
            if cname in cols:
                raise DuplicateColumnName(f"column {cname!r} specified more than once")
            kind = d.args.get("kind")
            if kind is None:
                raise SqlSyntaxError(f"column {cname!r} needs a type")
            cols[cname] = sql_type(kind)
            declared.append(declared_type(kind))
            not_null = False
            for c in d.constraints:
                k = c.kind
                if isinstance(k, exp.NotNullColumnConstraint):
                    not_null = not k.args.get("allow_null")
                elif isinstance(k, exp.PrimaryKeyColumnConstraint):
                    pk.append(cname)
                    not_null = True
                elif isinstance(k, exp.DefaultColumnConstraint):
                    raise FeatureNotSupported("column DEFAULT values are not supported")
                else:
                    raise FeatureNotSupported(f"column constraint {c.sql()} is not supported")
            if not not_null:
                nullable.append(cname)
        elif isinstance(d, exp.PrimaryKey):
            if pk:
                raise SqlSyntaxError(f"multiple primary keys for table {name!r} are not "
                                     "allowed")
            pk = [str(e.name) for e in d.expressions]
        else:
            raise FeatureNotSupported(f"table constraint {d.sql()} is not supported")
    for key in pk:
        if key not in cols:
            raise UndefinedColumn(f"column {key!r} named in key does not exist")
        if key in nullable:
            nullable.remove(key)
    try:
        return db.create_table(name, cols, nullable=nullable, exist_ok=bool(node.args.get(
            "exists")), primary_key=pk or None, pg_types=declared)
    except ObjectExists as e:
        raise DuplicateObject(f'relation "{name}" already exists') from e


def _relation_of(planner: Planner, rel: Rel, visible: int, what: str) -> Any:
    from twofold.api.relation import Relation
    from twofold.api.schema import Schema

    cols = rel.cols[:visible]
    names = [c.name for c in cols]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DuplicateColumnName(f"{what}: column {sorted(dup)[0]!r} specified more than "
                                  "once; give the columns distinct aliases")
    plan = rel.plan
    if visible != len(rel.cols):
        from twofold.protocol import Mfp

        plan = Mfp(input=plan, project=list(range(visible)))
    from twofold.sql.flatten import flatten_plan

    return Relation(planner.db, flatten_plan(plan, rel.inputs),
                    Schema(tuple(names), tuple(c.column_type for c in cols)), rel.inputs,
                    planner.views_read)


async def create_view(db: AsyncDatabase, node: exp.Create, text: str, params: Any) -> Any:
    name = _name(node.this)
    query = node.expression
    if query is None:
        raise SqlSyntaxError(f"CREATE VIEW {name} needs AS <query>")
    props = node.args.get("properties")
    materialized = props is not None and any(isinstance(p, exp.MaterializedProperty)
                                             for p in props.expressions)
    exists = bool(node.args.get("exists"))
    if _exists(db, name):
        if exists:
            return db.get(name)
        if node.args.get("replace"):
            raise FeatureNotSupported(f"CREATE OR REPLACE of an existing object ({name!r}) is "
                                      "not supported; DROP it, then CREATE it")
        raise DuplicateObject(f'relation "{name}" already exists')
    alias_cols = None
    if isinstance(node.this, exp.Schema):
        alias_cols = [c.name for c in node.this.expressions]
    planner = Planner(db, params)
    rel = planner.plan_query(query)
    if alias_cols:
        rel = rel.with_qual(None, alias_cols)
    relation = _relation_of(planner, rel, len(rel.cols), f"CREATE VIEW {name}")
    pgs = recorded_types(rel.cols)
    try:
        if materialized:
            view = await db.create_materialized_view(
                name, relation, sql=text.strip().rstrip(";").strip(), pg_types=pgs)
            await check_first_contents(db, view)  # PostgreSQL runs the query: its errors
            return view
        return db.create_view(name, relation, sql=text.strip().rstrip(";").strip(),
                              pg_types=pgs)
    except ObjectExists as e:  # created by another session meanwhile
        raise DuplicateObject(f'relation "{name}" already exists') from e


def _exists(db: AsyncDatabase, name: str) -> bool:
    try:
        db.get(name)
    except UnknownObject:
        return False
    return True


async def create_index(db: AsyncDatabase, node: Any, params: Any) -> Any:
    on = node.args["table"].name
    planner = Planner(db, params)
    rel = planner.relation(on)
    scope = Scope(rel)
    keys: list[str] = []
    for e in node.expressions or []:
        if not isinstance(e, exp.Column):
            raise FeatureNotSupported("indexes on expressions are not supported; index "
                                      "columns (or a view that computes the expression)")
        keys.append(rel.cols[scope.lookup(None, e.name)[0]].name)
    if not keys:
        keys = [c.name for c in rel.cols]
    name = node.this.name if node.this is not None else (
        f"{on}_primary_idx" if node.args.get("default") else f"{on}_{'_'.join(keys)}_idx")
    if _exists(db, name):
        if node.args.get("exists"):
            return db.get(name)
        raise DuplicateObject(f'relation "{name}" already exists')
    source = db.get(on) if _exists(db, on) else _relation_of(planner, rel, len(rel.cols), on)
    return await db.create_index(name, source, key=keys, pg_types=recorded_types(rel.cols))


def recorded_types(cols: list[Col]) -> list[str]:
    """What a SQL view, materialized view or index records of its columns' declared types
    (`Entry.pg_types`): each column's, else its engine scalar's (`int8`, `text`, ...); a
    `numeric` column (a double that rounds as numeric) is recorded as `numeric`, so reads of
    the view round it as PostgreSQL's (`x::integer` of a view's 2.5 is 3)."""
    return [c.pg or ENGINE_PG.get(c.scalar, "text") for c in cols]


async def drop(db: AsyncDatabase, node: exp.Drop) -> int:
    kind = (node.args.get("kind") or "").upper()
    props = node.args.get("materialized")
    if props:
        kind = "MATERIALIZED VIEW"
    tables = node.args.get("tables") or [node.this]
    if any(t is None for t in tables):
        raise SqlSyntaxError("DROP needs the name of an object")
    cascade = bool(node.args.get("cascade"))
    # Every name is checked before anything is dropped; then all go in one catalog change.
    names: list[str] = []
    for t in tables:
        name = _name(t)
        if not _exists(db, name):
            if node.args.get("exists"):
                continue
            if kind == "INDEX":  # PostgreSQL: an index is an object, not a relation here
                raise UndefinedObject(f'index "{name}" does not exist')
            kind_name = kind.lower() if kind else "relation"
            raise UndefinedTable(f'{kind_name} "{name}" does not exist')
        obj = db.get(name)
        actual = _KIND_NAMES.get(type(obj).__name__, "").upper()
        if kind and actual and kind != actual and not (kind == "VIEW" and actual ==
                                                          "MATERIALIZED VIEW"):
            raise WrongObjectType(f"{name!r} is not a {kind.lower()} (it is a "
                                  f"{actual.lower()})")
        if name not in names:
            names.append(name)
    try:
        if len(names) == 1:
            await db.drop(names[0], cascade=cascade)
        elif names:
            await db.drop_all(names, cascade=cascade)
    except DependencyError as e:
        raise _dependents_error(db, names, e) from None
    return 0


_KIND_NAMES: Final = {"Table": "table", "Index": "index", "MaterializedView": "materialized view",
                      "View": "view"}


def _dependents_error(db: AsyncDatabase, names: list[str], e: DependencyError
                      ) -> DependentObjects:
    """PostgreSQL's 2BP01 for a DROP others depend on, with its HINT (the Python API's
    message names `cascade=True` instead); the dependents in the hint's place of DETAIL."""
    hint = "Use DROP ... CASCADE to drop the dependent objects too."
    name = e.name or names[0]
    if len(names) > 1:
        out = DependentObjects("cannot drop desired object(s) because other objects depend "
                               "on them", hint)
    else:
        kind = _KIND_NAMES.get(type(db.get(name)).__name__, "relation") \
            if _exists(db, name) else "relation"
        out = DependentObjects(f"cannot drop {kind} {name} because other objects depend on "
                               "it", hint)
    out.name, out.dependents = name, e.dependents
    return out


def translate_write_error(e: TwofoldError) -> TwofoldError:
    return e
