"""`twofold.sql`: SQL text to the catalog operations and protocol plans the Python API uses.

    with twofold.open() as db:
        db.sql("CREATE TABLE t (k int PRIMARY KEY, v double precision)")
        db.sql("INSERT INTO t VALUES (1, 2.5), (2, NULL)")
        db.sql("SELECT k, v FROM t WHERE v IS NOT NULL").rows       # [(1, 2.5)]
        db.sql("SELECT * FROM t WHERE k = $1", [2]).rows            # [(2, None)]

Contract of `execute(db, text, params)` (what `db.sql` runs), one statement per call:

- a query (`SELECT`, set operations, `VALUES`, `WITH`, `... AS OF t`) returns the same
  `Result` as the DSL's `db.query` — rows, column names, types, `.to_polars()` — ordered by its
  ORDER BY; a column of a declared smallint/integer/real type (`twofold.sql.types.wire_type`)
  has a `ColumnType` subclass in `result.schema` (its scalar is still `int`/`float`);
- `INSERT`/`UPDATE`/`DELETE` return the number of rows written;
- `CREATE TABLE|VIEW|MATERIALIZED VIEW|INDEX` return the created object (`Table`, `View`,
  `MaterializedView`, `Index`), each a durable catalog object; `DROP` returns 0;
- `SUBSCRIBE` returns an `AsyncSubscription` (a `SyncSubscription` from `Database.sql`);
  `subscribe_rows(batch)` gives a batch as Materialize's rows `(mz_timestamp, mz_diff, *cols)`;
- `SHOW ...` and `EXPLAIN ...` return a `Result` of text rows;
- `$1, $2, ...` are replaced by `params[0], params[1], ...` (Python scalars), as typed
  constants.

Every failure is a `TwofoldError`; `twofold.sql.errors.sqlstate_of(e)` gives its SQLSTATE.
Parsing is `parser`, name/type binding `scope` + `exprs`, planning `planner` (set operations,
VALUES, CTEs) + `from_` (joins and their order) + `select` (WHERE, GROUP BY, ORDER BY, LIMIT) +
`subqueries` (decorrelation), point queries as index lookups `lookup`, statements
`statements`, introspection `show` + `explain`.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from twofold.api.errors import TwofoldError
from twofold.api.relation import Relation
from twofold.api.results import Result
from twofold.api.schema import Schema
from twofold.sql.errors import (
    FeatureNotSupported,
    InternalError,
    SqlError,
    SqlSyntaxError,
    sqlstate_of,
)
from twofold.sql.flatten import flatten_plan
from twofold.sql.parser import AsOf, CreateIndex, Explain, Show, Subscribe, parse
from twofold.sql.planner import Planned, Planner
from twofold.sql.show import subscribe_rows
from twofold.sql.types import declared_column_type

__all__ = ["SqlError", "compile_query", "execute", "parse", "sqlstate_of",
           "subscribe_rows"]

_QUERIES = (exp.Select, exp.SetOperation, exp.Values, exp.Subquery)


def _as_of(planner: Planner, node: exp.Expr) -> int:
    from twofold.protocol import Literal as PLiteral
    from twofold.sql.exprs import Binder
    from twofold.sql.planner import one_row
    from twofold.sql.scope import Scope

    e, _, _ = Binder(planner, Scope(one_row()), clause="AS OF").bind(node)
    if not isinstance(e, PLiteral) or type(e.value) is not int or e.value < 0:
        raise FeatureNotSupported("AS OF takes a non-negative integer timestamp constant")
    return int(e.value)


def compile_query(db: Any, node: exp.Expr, params: Any = None) -> tuple[Relation, int]:
    """A query tree as a `Relation` of `db` (its read order set) and how many of its leading
    columns are visible (the rest order the read and are dropped from results)."""
    planner = Planner(db, params)
    return _relation(db, planner, planner.plan_top(node))


def _relation(db: Any, planner: Planner, planned: Planned) -> tuple[Relation, int]:
    rel = planned.rel
    # Declared int2/int4/float4 columns carry their type in the result schema (for a wire
    # server's type OIDs: `types.wire_type`); the plan's own types stay the engine's.
    schema = Schema(tuple(c.name for c in rel.cols),
                    tuple(declared_column_type(c.column_type.scalar, c.nullable, c.pg)
                          for c in rel.cols))
    relation = Relation(db, flatten_plan(rel.plan, rel.inputs), schema, rel.inputs,
                        planner.views_read)
    relation.order = list(planned.order)
    return relation, planned.visible


async def run_query(db: Any, planner: Planner, node: exp.Expr, as_of: int | None) -> Result:
    return await run_planned(db, planner, planner.plan_top(node), as_of)


async def run_planned(db: Any, planner: Planner, planned: Planned, as_of: int | None
                      ) -> Result:
    """The rows of a planned query (`Planner.plan_top`), its visible columns."""
    from twofold.sql.lookup import find_lookup, run_lookup

    relation, visible = _relation(db, planner, planned)
    found = find_lookup(db, relation)
    fast = None if found is None else await run_lookup(db, relation, found, as_of)
    result: Result = fast if fast is not None else await db.query(relation, as_of=as_of)
    if visible == len(relation.schema):
        return result
    schema = Schema(relation.schema.names[:visible], relation.schema.types[:visible])
    return Result(schema, result.timestamp, [r[:visible] for r in result.rows])


async def execute(db: Any, text: str, params: Any = None, *, as_of: int | None = None) -> Any:
    """Run one SQL statement against `db` (an `AsyncDatabase`); see the module docstring.
    `as_of`: the time a query without its own `AS OF` reads at (a transaction's timestamp)."""
    try:
        return await _execute(db, text, params, as_of)
    except SqlError:
        raise
    except TwofoldError as e:
        raise _typed(e) from e
    except RecursionError:
        raise FeatureNotSupported("the statement is nested too deeply") from None
    except (AttributeError, KeyError, IndexError, TypeError, ValueError, AssertionError) as e:
        # A construct the planner does not expect (sqlglot accepts more than PostgreSQL):
        # refused as a typed error naming it, never a traceback.
        raise InternalError(f"cannot plan this statement ({type(e).__name__}: {e}); "
                            f"statement: {text[:200]!r}") from e


def _typed(e: TwofoldError) -> TwofoldError:
    """API errors pass through unchanged (their SQLSTATE via `sqlstate_of`), except the few
    whose SQL meaning needs a different class."""
    from twofold.sql.errors import SUBQUERY_ROWS, CardinalityViolation

    if SUBQUERY_ROWS in str(e):
        return CardinalityViolation(str(e))
    return e


async def _execute(db: Any, text: str, params: Any, as_of: int | None = None) -> Any:
    from twofold.sql import show as show_mod
    from twofold.sql import statements as st

    node = parse(text)
    planner = Planner(db, params)
    if isinstance(node, AsOf):
        return await run_query(db, planner, node.this, _as_of(planner, node.expression))
    if isinstance(node, _QUERIES):
        return await run_query(db, planner, node, as_of)
    if isinstance(node, exp.Insert):
        return await st.insert(db, node, params)
    if isinstance(node, exp.Update):
        return await st.update(db, node, params)
    if isinstance(node, exp.Delete):
        return await st.delete(db, node, params)
    if isinstance(node, CreateIndex):
        return await st.create_index(db, node, params)
    if isinstance(node, exp.Create):
        kind = (node.args.get("kind") or "").upper()
        if kind == "TABLE":
            return st.create_table(db, node)
        if kind == "VIEW":
            return await st.create_view(db, node, text, params)
        if kind == "INDEX":
            raise FeatureNotSupported("CREATE UNIQUE INDEX and index options are not "
                                      "supported; use CREATE INDEX [name] ON obj (cols)")
        raise FeatureNotSupported(f"CREATE {kind or node.args.get('kind')} is not supported")
    if isinstance(node, exp.Drop):
        return await st.drop(db, node)
    if isinstance(node, Subscribe):
        return await show_mod.subscribe(db, planner, node)
    if isinstance(node, Show):
        return show_mod.show(db, node)
    if isinstance(node, Explain):
        return show_mod.explain_result(db, planner, node.this)
    if isinstance(node, exp.Set):
        return show_mod.set_variable(db, node)
    if isinstance(node, exp.Transaction | exp.Commit | exp.Rollback):
        return 0  # each statement runs on its own; transactions are accepted and empty
    raise FeatureNotSupported(f"{type(node).__name__.upper()} statements are not supported")


__all__ += ["SqlSyntaxError"]
