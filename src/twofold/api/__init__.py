"""The user-facing twofold API: open a database, create tables, build relations with a
polars-like DSL, index and materialize them, and read them by peek, subscribe or copy-to.

    import twofold
    from twofold import col, count, sum

    with twofold.open() as db:
        orders = db.create_table("orders", {"id": int, "customer": int, "amount": float})
        orders.insert([(1, 10, 5.0), (2, 10, 7.5), (3, 11, 1.0)])
        revenue = orders.group_by("customer").agg(sum("amount").alias("revenue"), count())
        by_customer = db.create_index("revenue", revenue, key="customer")
        print(by_customer.lookup(10).rows)   # [(10, 12.5, 2)]

Layers: `schema` (types), `expr` (expressions), `binding` (names and types), `relation`
(relations → plans), `objects` (tables, indexes, views), `reads` (read plumbing), `session` (the
async core: opening and closing; its parts `core`, `inputs`, `definitions`, `queries`), `sync`
(the blocking wrapper), `errors`.
"""

from twofold.api.errors import (
    AuthenticationFailed,
    CatalogConflict,
    ColumnNotFound,
    ConnectError,
    ConnectionFailed,
    DatabaseClosed,
    DependencyError,
    DuplicateColumn,
    InvalidArgument,
    InvalidRows,
    InvalidSchema,
    ObjectExists,
    ObjectFailed,
    QueryFailed,
    QueryTimeout,
    ReadBeforeSince,
    StorageMismatch,
    SubscribeBacklogFull,
    SubscribeEnded,
    TwofoldError,
    TypeMismatch,
    UniqueViolation,
    UnknownObject,
)
from twofold.api.expr import (
    Agg,
    Expr,
    coalesce,
    col,
    count,
    lit,
    max,
    mean,
    min,
    n_unique,
    string_agg,
    sum,
    when,
)
from twofold.api.objects import Index, MaterializedView, Table, View, Written
from twofold.api.reads import AsyncSubscription
from twofold.api.relation import GroupBy, Relation
from twofold.api.results import Batch, Result
from twofold.api.schema import Schema
from twofold.api.session import AsyncDatabase
from twofold.api.sync import Database, SyncSubscription, open, open_async

__all__ = [
    "Agg",
    "AsyncDatabase",
    "AsyncSubscription",
    "AuthenticationFailed",
    "Batch",
    "CatalogConflict",
    "ColumnNotFound",
    "ConnectError",
    "ConnectionFailed",
    "Database",
    "DatabaseClosed",
    "DependencyError",
    "DuplicateColumn",
    "Expr",
    "GroupBy",
    "Index",
    "InvalidArgument",
    "InvalidRows",
    "InvalidSchema",
    "MaterializedView",
    "ObjectExists",
    "ObjectFailed",
    "QueryFailed",
    "QueryTimeout",
    "ReadBeforeSince",
    "Relation",
    "Result",
    "Schema",
    "StorageMismatch",
    "SubscribeBacklogFull",
    "SubscribeEnded",
    "SyncSubscription",
    "Table",
    "TwofoldError",
    "TypeMismatch",
    "UniqueViolation",
    "UnknownObject",
    "View",
    "Written",
    "coalesce",
    "col",
    "count",
    "lit",
    "max",
    "mean",
    "min",
    "n_unique",
    "open",
    "open_async",
    "string_agg",
    "sum",
    "when",
]  # fmt: skip
