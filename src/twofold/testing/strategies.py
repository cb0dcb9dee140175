"""Hypothesis strategies for every value of the compute protocol (`spec/protocol.md`).

**Test-only**: this module imports `hypothesis`, which is a test dependency (the `test` extra),
never a runtime one; no runtime package may import `twofold.testing`.

Contract: every strategy here generates only values that the protocol's constructors accept and
that round-trip exactly through `twofold.protocol.codec` (`decode(encode(x)) == x`). To keep
equality meaningful, generated floats are **never NaN** (NaN != NaN would make equal values
compare unequal); infinities and `-0.0` are allowed. Strings never hold surrogates (they could
not be encoded as UTF-8).

Structural invariants are respected (function arities, equal join-key lengths, aggregate columns,
unique export ids, non-empty `literal_constraints`, non-zero diffs, timestamps in `[0, 2**64)`),
but values are not type-checked against each other: a generated `Plan` is well-formed, not
necessarily well-typed for its inputs. Recursive values (`Expr`, `Plan`) have a bounded depth.
Sizes are kept small so property tests stay fast.

Naming: a strategy is named after the value it produces, in the plural (`frontiers()`,
`global_ids()`, `peeks()`); the union strategies are `commands()` and `responses()`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from hypothesis import strategies as st

from twofold.protocol import (
    FUNCTION_ARITY,
    MAX_TIME,
    SCALAR_TYPES,
    Aggregate,
    AllowCompaction,
    AllowWrites,
    BuildDesc,
    Call,
    CancelPeek,
    Column,
    ColumnType,
    ComputeCommand,
    ComputeParameters,
    ComputeResponse,
    Constant,
    CopyToDropped,
    CopyToError,
    CopyToResponse,
    CopyToResult,
    CopyToRowCount,
    CopyToSink,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Distinct,
    Expr,
    Frontier,
    Frontiers,
    Get,
    GlobalId,
    Hello,
    IdKind,
    IndexDesc,
    IndexImport,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    Join,
    Literal,
    LoggingConfig,
    MapFilterProject,
    MaterializedViewSink,
    Mfp,
    Negate,
    OrderKey,
    Peek,
    PeekCanceled,
    PeekError,
    PeekResponse,
    PeekResult,
    PeekRows,
    PeekTarget,
    Plan,
    Reduce,
    RelationDesc,
    Row,
    RowSetFinishing,
    Scalar,
    ScalarType,
    Schedule,
    SinkConnection,
    SinkDesc,
    SourceImport,
    Status,
    StorageTarget,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeEvent,
    SubscribeResponse,
    SubscribeSink,
    Threshold,
    TopK,
    UnionAll,
    UpdateConfiguration,
)

T = TypeVar("T")
P = ParamSpec("P")
S = st.SearchStrategy


def _memo(factory: Callable[P, T]) -> Callable[P, T]:
    """Build each strategy once per distinct arguments.

    Hypothesis validates a strategy object on first draw, and for `st.builds` over msgspec
    classes that means resolving type hints; a strategy rebuilt inside every composite draw
    pays that each time (it made dataflow generation ~5x slower). Strategies are immutable,
    so sharing one object is safe. Arguments must be hashable (strategies hash by identity);
    the cache is bounded, since callers may pass a fresh strategy object on every call.
    """
    cached: Callable[..., T] = functools.lru_cache(maxsize=256)(factory)

    @functools.wraps(factory)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return cached(*args, **kwargs)

    return wrapper


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_COLUMN = 7
"""Column indexes are drawn from `[0, MAX_COLUMN]`: structural, not checked against arity."""

_names = st.text(min_size=1, max_size=8)


def _small_lists(elements: S[T], max_size: int = 3, *, min_size: int = 0) -> S[list[T]]:
    return st.lists(elements, min_size=min_size, max_size=max_size)


@_memo
def _columns(max_column: int = MAX_COLUMN) -> S[int]:
    return st.integers(0, max_column)


# --- identity and time -----------------------------------------------------------------------


@_memo
def timestamps(min_value: int = 0, max_value: int = MAX_TIME) -> S[int]:
    """Timestamps in `[min_value, max_value]` (within `[0, 2**64)`), biased towards small values
    and the edges of the range, where off-by-one bugs live."""
    if not 0 <= min_value <= max_value <= MAX_TIME:
        raise ValueError(f"timestamps: need 0 <= {min_value} <= {max_value} <= 2**64 - 1")
    return st.one_of(
        st.integers(min_value, min(max_value, min_value + 16)),
        st.integers(min_value, max_value),
        st.sampled_from(sorted({min_value, max_value, max(min_value, max_value - 1)})),
    )


@_memo
def frontiers(
    min_time: int = 0, max_time: int = MAX_TIME, *, allow_empty: bool = True
) -> S[Frontier]:
    """`Frontier.at(t)` for `t` in `[min_time, max_time]`, and `Frontier.empty()` if allowed."""
    at = timestamps(min_time, max_time).map(Frontier.at)
    return st.one_of(st.just(Frontier.empty()), at) if allow_empty else at


@_memo
def id_numbers() -> S[int]:
    """Numbers of `GlobalId`s, in `[0, 2**64)`, biased towards small ones (so ids collide)."""
    return st.one_of(st.integers(0, 20), st.integers(0, 2**64 - 1))


def global_ids(kinds: Sequence[IdKind] | None = None) -> S[GlobalId]:
    """`GlobalId`s of the given kinds (all four when `None`)."""
    chosen = tuple(IdKind) if kinds is None else tuple(kinds)
    if not chosen:
        raise ValueError("global_ids: need at least one kind")
    return _global_ids(chosen)


@_memo
def _global_ids(kinds: tuple[IdKind, ...]) -> S[GlobalId]:
    return st.builds(GlobalId, st.sampled_from(kinds), id_numbers())


@_memo
def _ids(ids: S[GlobalId] | None) -> S[GlobalId]:
    return global_ids() if ids is None else ids


@_memo
def system_ids() -> S[GlobalId]:
    return global_ids([IdKind.SYSTEM])


@_memo
def introspection_ids() -> S[GlobalId]:
    return global_ids([IdKind.INTROSPECTION])


@_memo
def user_ids() -> S[GlobalId]:
    return global_ids([IdKind.USER])


@_memo
def transient_ids() -> S[GlobalId]:
    return global_ids([IdKind.TRANSIENT])


@_memo
def durable_ids() -> S[GlobalId]:
    """Ids of every kind except transient."""
    return global_ids([IdKind.SYSTEM, IdKind.INTROSPECTION, IdKind.USER])


# --- scalars, rows and relation types ------------------------------------------------------


@_memo
def scalars_of(scalar: ScalarType, *, nullable: bool = True) -> S[Scalar]:
    """Scalars of one `ColumnType` (NULL included when `nullable`). Floats are never NaN."""
    base: S[Any]
    if scalar == "bool":
        base = st.booleans()
    elif scalar == "int":
        base = st.integers(INT64_MIN, INT64_MAX)
    elif scalar == "float":
        base = st.floats(allow_nan=False)
    elif scalar == "str":
        base = st.text(max_size=10)
    elif scalar == "bytes":
        base = st.binary(max_size=10)
    else:
        raise ValueError(f"scalars_of: unknown scalar type {scalar!r}")
    return st.one_of(st.none(), base) if nullable else base


@_memo
def scalars(*, allow_null: bool = True) -> S[Scalar]:
    """Any protocol scalar: `None`, `bool`, 64-bit `int`, non-NaN `float`, `str`, `bytes`."""
    return st.one_of([scalars_of(t, nullable=allow_null) for t in SCALAR_TYPES])


def rows(arity: int | None = None, *, desc: RelationDesc | None = None) -> S[Row]:
    """Rows (lists of scalars): typed by `desc` when given, else of `arity` (0..4 when `None`)
    with columns of any scalar type."""
    if desc is not None:
        return st.tuples(*(scalars_of(c.scalar, nullable=c.nullable) for c in desc.types)).map(list)
    return _untyped_rows(arity)


@_memo
def _untyped_rows(arity: int | None) -> S[Row]:
    if arity is None:
        return _small_lists(scalars(), 4)
    return st.lists(scalars(), min_size=arity, max_size=arity)


@_memo
def diffs() -> S[int]:
    """Non-zero diffs, mostly small."""
    return st.one_of(st.integers(-3, 3), st.integers(INT64_MIN, INT64_MAX)).filter(bool)


@_memo
def updates(arity: int | None = None) -> S[tuple[Row, int]]:
    """`(row, diff)` pairs with a non-zero diff."""
    return st.tuples(rows(arity), diffs())


@_memo
def column_types() -> S[ColumnType]:
    return st.builds(ColumnType, st.sampled_from(SCALAR_TYPES), st.booleans())


def _relation_desc(columns: list[tuple[str, ColumnType]]) -> RelationDesc:
    return RelationDesc(names=[n for n, _ in columns], types=[t for _, t in columns])


@_memo
def relation_descs(min_arity: int = 0, max_arity: int = 4) -> S[RelationDesc]:
    """`RelationDesc`s with `names` and `types` of equal length."""
    columns = st.lists(st.tuples(_names, column_types()), min_size=min_arity, max_size=max_arity)
    return columns.map(_relation_desc)


# --- expressions ---------------------------------------------------------------------------

_FUNCTIONS = sorted(FUNCTION_ARITY)


def _call_of(func: str) -> Callable[[list[Expr]], Expr]:
    return lambda args: Call(func=func, args=args)  # type: ignore[arg-type]


@_memo
def columns(max_column: int = MAX_COLUMN) -> S[Column]:
    """`Column` references to indexes in `[0, max_column]`."""
    return st.builds(Column, _columns(max_column))


@_memo
def literals() -> S[Literal]:
    return st.builds(Literal, scalars())


@_memo
def calls(args: S[Expr] | None = None) -> S[Call]:
    """A `Call` of every function with arguments from `args` (leaves when `None`), each with
    its arity (`coalesce`: one to three arguments)."""
    arg = st.one_of(columns(), literals()) if args is None else args
    by_func = []
    for func in _FUNCTIONS:
        arity = FUNCTION_ARITY[func]
        lo, hi = (1, 3) if arity is None else (arity, arity)
        by_func.append(st.lists(arg, min_size=lo, max_size=hi).map(_call_of(func)))
    return cast(S[Call], st.one_of(by_func))


@_memo
def exprs(max_depth: int = 3, *, max_column: int = MAX_COLUMN) -> S[Expr]:
    """Scalar expressions of depth at most `max_depth` (a leaf has depth 0); every `Call` has
    the arity `FUNCTION_ARITY` gives its function (`coalesce`: one to three arguments)."""
    leaves: S[Expr] = st.one_of(columns(max_column), literals())
    levels = [leaves]
    for _ in range(max_depth):
        levels.append(st.one_of(leaves, calls(levels[-1])))
    # The depth is drawn first: with one `one_of(leaves, calls)` per level, Hypothesis's draws
    # went to `Call` 298 times in 300 once there were ~60 functions, so top-level leaves
    # (and the shrinks toward them) were almost never tried.
    return st.integers(0, max_depth).flatmap(lambda d: levels[d])


# --- plans ---------------------------------------------------------------------------------


@_memo
def order_keys(max_column: int = MAX_COLUMN) -> S[OrderKey]:
    return st.builds(OrderKey, _columns(max_column), st.booleans(), st.booleans())


@_memo
def aggregates(max_column: int = MAX_COLUMN) -> S[Aggregate]:
    """`Aggregate`s; only `count` goes without a column."""
    funcs = st.sampled_from(["count", "sum", "min", "max"])
    return st.one_of(
        st.builds(Aggregate, st.just("count"), st.none(), st.booleans()),
        st.builds(Aggregate, funcs, _columns(max_column), st.booleans()),
    )


@_memo
def _projects(max_column: int) -> S[list[int] | None]:
    return st.one_of(st.none(), _small_lists(_columns(max_column), 4))


@_memo
def map_filter_projects(max_column: int = MAX_COLUMN, expr_depth: int = 2) -> S[MapFilterProject]:
    e = exprs(expr_depth, max_column=max_column)
    return st.builds(
        MapFilterProject, _small_lists(e, 2), _small_lists(e, 2), _projects(max_column)
    )


@_memo
def row_set_finishings(max_column: int = MAX_COLUMN) -> S[RowSetFinishing]:
    return st.builds(
        RowSetFinishing,
        _small_lists(order_keys(max_column), 3),
        st.one_of(st.none(), st.integers(0, 10)),
        st.integers(0, 10),
        _projects(max_column),
    )


# Every plan-node strategy takes the strategy of its inputs (`plan_leaves()` when `None`), so
# `plans()` can stack them level by level into a tree of bounded depth.


@_memo
def gets(ids: S[GlobalId] | None = None) -> S[Get]:
    return st.builds(Get, global_ids() if ids is None else ids)


@_memo
def constants() -> S[Constant]:
    return st.builds(Constant, _small_lists(updates(), 3))


@_memo
def plan_leaves(ids: S[GlobalId] | None = None) -> S[Plan]:
    """`Get` (of `ids`, any id when `None`) and `Constant` plans."""
    return st.one_of(gets(ids), constants())


@_memo
def mfps(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Mfp]:
    e = exprs(2, max_column=max_column)
    return st.builds(
        Mfp,
        plan_leaves() if inputs is None else inputs,
        _small_lists(e, 2),
        _small_lists(e, 2),
        _projects(max_column),
    )


def _join(left: Plan, right: Plan, keys: list[tuple[int, int]]) -> Join:
    return Join(left, right, [k for k, _ in keys], [k for _, k in keys])


@_memo
def joins(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Join]:
    """`Join`s of two `inputs` on keys of equal length."""
    i = plan_leaves() if inputs is None else inputs
    cols = _columns(max_column)
    return st.builds(_join, i, i, _small_lists(st.tuples(cols, cols), 3))


@_memo
def reduces(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[Reduce]:
    return st.builds(
        Reduce,
        plan_leaves() if inputs is None else inputs,
        _small_lists(_columns(max_column), 3),
        _small_lists(aggregates(max_column), 3),
    )


@_memo
def top_ks(inputs: S[Plan] | None = None, max_column: int = MAX_COLUMN) -> S[TopK]:
    return st.builds(
        TopK,
        plan_leaves() if inputs is None else inputs,
        _small_lists(_columns(max_column), 2),
        _small_lists(order_keys(max_column), 2),
        st.one_of(st.none(), st.integers(0, 10)),
        st.integers(0, 5),
    )


@_memo
def union_alls(inputs: S[Plan] | None = None) -> S[UnionAll]:
    """`UnionAll`s of one to three inputs."""
    i = plan_leaves() if inputs is None else inputs
    return st.builds(UnionAll, _small_lists(i, 3, min_size=1))


@_memo
def negates(inputs: S[Plan] | None = None) -> S[Negate]:
    return st.builds(Negate, plan_leaves() if inputs is None else inputs)


@_memo
def thresholds(inputs: S[Plan] | None = None) -> S[Threshold]:
    return st.builds(Threshold, plan_leaves() if inputs is None else inputs)


@_memo
def distincts(inputs: S[Plan] | None = None) -> S[Distinct]:
    return st.builds(Distinct, plan_leaves() if inputs is None else inputs)


@_memo
def _plan_nodes(inputs: S[Plan], max_column: int) -> S[Plan]:
    return st.one_of(
        mfps(inputs, max_column),
        joins(inputs, max_column),
        reduces(inputs, max_column),
        top_ks(inputs, max_column),
        union_alls(inputs),
        negates(inputs),
        thresholds(inputs),
        distincts(inputs),
    )


@_memo
def plans(
    max_depth: int = 3, *, ids: S[GlobalId] | None = None, max_column: int = MAX_COLUMN
) -> S[Plan]:
    """Plans of every node type, of depth at most `max_depth` (a leaf has depth 0). `Get`s name
    ids drawn from `ids` (any id when `None`)."""
    leaves = plan_leaves(ids)
    level = leaves
    for _ in range(max_depth):
        level = st.one_of(leaves, _plan_nodes(level, max_column))
    return level


# --- dataflows -----------------------------------------------------------------------------


@_memo
def index_descs() -> S[IndexDesc]:
    return st.builds(IndexDesc, global_ids(), _small_lists(_columns(), 3))


@_memo
def source_imports() -> S[SourceImport]:
    return st.builds(SourceImport, _names, relation_descs(), frontiers())


@_memo
def index_imports() -> S[IndexImport]:
    return st.builds(IndexImport, index_descs(), relation_descs())


@_memo
def build_descs(max_depth: int = 2) -> S[BuildDesc]:
    return st.builds(BuildDesc, global_ids(), plans(max_depth))


@_memo
def subscribe_sinks() -> S[SubscribeSink]:
    return st.just(SubscribeSink())


@_memo
def materialized_view_sinks() -> S[MaterializedViewSink]:
    return st.builds(MaterializedViewSink, _names)


@_memo
def copy_to_sinks() -> S[CopyToSink]:
    return st.builds(CopyToSink, _names, st.sampled_from(["parquet", "csv"]))


@_memo
def sink_connections() -> S[SinkConnection]:
    return st.one_of(subscribe_sinks(), materialized_view_sinks(), copy_to_sinks())


@_memo
def sink_descs(connections: S[SinkConnection] | None = None) -> S[SinkDesc]:
    return st.builds(
        SinkDesc,
        global_ids(),
        relation_descs(),
        sink_connections() if connections is None else connections,
        st.booleans(),
        frontiers(),
    )


@_memo
def _index_export() -> S[tuple[IndexDesc, RelationDesc]]:
    return st.tuples(index_descs(), relation_descs())


def _single_time_at(t: int) -> tuple[Frontier | None, Frontier]:
    return Frontier.at(t), Frontier.empty() if t == MAX_TIME else Frontier.at(t + 1)


@_memo
def _single_time() -> S[tuple[Frontier | None, Frontier]]:
    return timestamps().map(_single_time_at)


@_memo
def _as_of_until() -> S[tuple[Frontier | None, Frontier]]:
    return st.one_of(_single_time(), st.tuples(st.one_of(st.none(), frontiers()), frontiers()))


@_memo
def dataflow_descriptions(
    *,
    export_ids: S[GlobalId] | None = None,
    sinks: S[SinkConnection] | None = None,
    as_of_until: S[tuple[Frontier | None, Frontier]] | None = None,
    max_plan_depth: int = 2,
) -> S[DataflowDescription]:
    """Any `DataflowDescription`: peek dataflows and maintained ones alike. Export ids are
    unique and drawn from `export_ids`; sink connections from `sinks` (every kind when `None`,
    no sink exports at all when `st.nothing()`); `as_of`/`until` from `as_of_until` (by
    default single-time half of the time, arbitrary otherwise)."""
    exports_s = st.lists(
        global_ids() if export_ids is None else export_ids, max_size=4, unique=True
    )
    no_sinks = sinks is not None and sinks.is_empty
    n_index_s = st.just(4) if no_sinks else st.integers(0, 4)
    times_s = _as_of_until() if as_of_until is None else as_of_until
    sources_s = st.dictionaries(global_ids(), source_imports(), max_size=2)
    indexes_s = st.dictionaries(global_ids(), index_imports(), max_size=2)
    builds_s = _small_lists(build_descs(max_plan_depth), 2)
    index_export_s = _index_export()
    sink_s = sink_descs(sinks)

    @st.composite
    def dataflow(draw: st.DrawFn) -> DataflowDescription:
        exports = draw(exports_s)
        n_index = draw(n_index_s)
        as_of, until = draw(times_s)
        return DataflowDescription(
            debug_name=draw(_names),
            source_imports=draw(sources_s),
            index_imports=draw(indexes_s),
            objects_to_build=draw(builds_s),
            index_exports={i: draw(index_export_s) for i in exports[:n_index]},
            sink_exports={i: draw(sink_s) for i in exports[n_index:]},
            as_of=as_of,
            until=until,
        )

    return dataflow()


@_memo
def peek_dataflows() -> S[DataflowDescription]:
    """Dataflows the interactive runtime serves (`is_peek_dataflow()` holds): transient index
    exports only, at a single time."""
    return dataflow_descriptions(
        export_ids=transient_ids(), sinks=st.nothing(), as_of_until=_single_time()
    )


@_memo
def non_peek_dataflows() -> S[DataflowDescription]:
    """Dataflows for which `is_peek_dataflow()` is false (maintained ones)."""
    return dataflow_descriptions().filter(lambda d: not d.is_peek_dataflow())


# --- commands ------------------------------------------------------------------------------


@_memo
def _config_values() -> S[bool | int | float | str]:
    return st.one_of(
        st.booleans(), st.integers(INT64_MIN, INT64_MAX), st.floats(allow_nan=False), _names
    )


@_memo
def logging_configs() -> S[LoggingConfig]:
    return st.builds(
        LoggingConfig,
        st.integers(1, 60_000),
        st.booleans(),
        st.dictionaries(_names, introspection_ids(), max_size=3),
    )


@_memo
def instance_configs() -> S[InstanceConfig]:
    return st.builds(
        InstanceConfig,
        st.one_of(st.none(), st.just("file:///tmp/twofold-storage"), _names),
        logging_configs(),
        st.one_of(st.none(), st.integers(0, 2**40)),
    )


@_memo
def compute_parameters() -> S[ComputeParameters]:
    return st.builds(
        ComputeParameters,
        st.one_of(st.none(), st.integers(0, 2**40)),
        st.dictionaries(_names, _config_values(), max_size=3),
    )


@_memo
def hellos() -> S[Hello]:
    return st.builds(Hello, st.uuids())


@_memo
def create_instances() -> S[CreateInstance]:
    return st.builds(CreateInstance, instance_configs())


@_memo
def initialization_completes() -> S[InitializationComplete]:
    return st.just(InitializationComplete())


@_memo
def update_configurations() -> S[UpdateConfiguration]:
    return st.builds(UpdateConfiguration, compute_parameters())


@_memo
def create_dataflows(dataflows: S[DataflowDescription] | None = None) -> S[CreateDataflow]:
    return st.builds(CreateDataflow, dataflow_descriptions() if dataflows is None else dataflows)


@_memo
def schedules(ids: S[GlobalId] | None = None) -> S[Schedule]:
    return st.builds(Schedule, _ids(ids))


@_memo
def allow_writes(ids: S[GlobalId] | None = None) -> S[AllowWrites]:
    return st.builds(AllowWrites, _ids(ids))


@_memo
def allow_compactions(ids: S[GlobalId] | None = None) -> S[AllowCompaction]:
    return st.builds(AllowCompaction, _ids(ids), frontiers())


@_memo
def index_targets(ids: S[GlobalId] | None = None) -> S[IndexTarget]:
    return st.builds(IndexTarget, _ids(ids))


@_memo
def storage_targets(ids: S[GlobalId] | None = None) -> S[StorageTarget]:
    return st.builds(StorageTarget, _ids(ids), _names)


@_memo
def peek_targets(ids: S[GlobalId] | None = None) -> S[PeekTarget]:
    return st.one_of(index_targets(ids), storage_targets(ids))


@_memo
def peeks(ids: S[GlobalId] | None = None) -> S[Peek]:
    """`Peek`s (of targets named by `ids`); `literal_constraints` is `None` or a non-empty
    list of key rows."""
    return st.builds(
        Peek,
        uuid=st.uuids(),
        target=peek_targets(ids),
        timestamp=timestamps(),
        literal_constraints=st.one_of(st.none(), _small_lists(rows(), 3, min_size=1)),
        mfp=map_filter_projects(),
        finishing=row_set_finishings(),
        result_desc=st.one_of(st.none(), relation_descs()),
    )


@_memo
def cancel_peeks() -> S[CancelPeek]:
    return st.builds(CancelPeek, st.uuids())


@_memo
def commands(ids: S[GlobalId] | None = None) -> S[ComputeCommand]:
    """Every `ComputeCommand` variant. With `ids`, every id a command names (dataflow exports,
    `Schedule`, `AllowWrites`, `AllowCompaction`, peek targets) is drawn from it, so a small
    pool makes commands refer to each other."""
    dataflows = None if ids is None else dataflow_descriptions(export_ids=ids)
    return cast(
        S[ComputeCommand],
        st.one_of(
            hellos(),
            create_instances(),
            initialization_completes(),
            update_configurations(),
            create_dataflows(dataflows),
            schedules(ids),
            allow_writes(ids),
            allow_compactions(ids),
            peeks(ids),
            cancel_peeks(),
        ),
    )


# --- responses -----------------------------------------------------------------------------


@_memo
def frontiers_responses(ids: S[GlobalId] | None = None) -> S[Frontiers]:
    """`Frontiers` reports (each kind `None` = unchanged, or a frontier)."""
    maybe = st.one_of(st.none(), frontiers())
    return st.builds(Frontiers, _ids(ids), maybe, maybe, maybe)


@_memo
def peek_rows() -> S[PeekRows]:
    return st.builds(PeekRows, _small_lists(updates(), 4))


@_memo
def peek_errors() -> S[PeekError]:
    return st.builds(PeekError, st.text(max_size=20))


@_memo
def peek_canceleds() -> S[PeekCanceled]:
    return st.just(PeekCanceled())


@_memo
def peek_results() -> S[PeekResult]:
    return st.one_of(peek_rows(), peek_errors(), peek_canceleds())


@_memo
def peek_responses() -> S[PeekResponse]:
    return st.builds(PeekResponse, st.uuids(), peek_results())


# Offsets from a time: mostly small, sometimes anywhere in the time domain.
_offsets = st.one_of(st.integers(0, 4), st.integers(0, MAX_TIME))


@_memo
def subscribe_batches() -> S[SubscribeBatch]:
    """Batches with `lower <= upper`, `lower` not empty; either `(time, row, diff)` updates
    with times in `[lower, upper)` and non-zero diffs, or an error."""
    lower_s = timestamps(0, MAX_TIME - 1)
    upper_s = st.one_of(st.none(), _offsets)  # None: the empty frontier
    updates_s = _small_lists(st.tuples(_offsets, rows(), diffs()), 4)
    error_s = st.one_of(st.none(), st.text(max_size=20))

    @st.composite
    def batch(draw: st.DrawFn) -> SubscribeBatch:
        lo = draw(lower_s)
        delta = draw(upper_s)
        upper = Frontier.empty() if delta is None else Frontier.at(min(lo + delta, MAX_TIME))
        error = draw(error_s)
        if error is not None:
            return SubscribeBatch(Frontier.at(lo), upper, error=error)
        hi = MAX_TIME if upper.time is None else upper.time - 1  # the last time in the batch
        if hi < lo:  # lower == upper: an empty batch that only says "nothing changed"
            return SubscribeBatch(Frontier.at(lo), upper, updates=[])
        ups = [(lo + off % (hi - lo + 1), row, d) for off, row, d in draw(updates_s)]
        return SubscribeBatch(Frontier.at(lo), upper, updates=ups)

    return batch()


@_memo
def subscribe_dropped_ats() -> S[SubscribeDroppedAt]:
    return st.builds(SubscribeDroppedAt, frontiers())


@_memo
def subscribe_events() -> S[SubscribeEvent]:
    return st.one_of(subscribe_batches(), subscribe_dropped_ats())


@_memo
def subscribe_responses(ids: S[GlobalId] | None = None) -> S[SubscribeResponse]:
    """Subscribe responses for `ids` (transient ids when `None`)."""
    return st.builds(SubscribeResponse, transient_ids() if ids is None else ids, subscribe_events())


@_memo
def copy_to_row_counts() -> S[CopyToRowCount]:
    return st.builds(CopyToRowCount, st.integers(0, 2**63 - 1))


@_memo
def copy_to_errors() -> S[CopyToError]:
    return st.builds(CopyToError, st.text(max_size=20))


@_memo
def copy_to_droppeds() -> S[CopyToDropped]:
    return st.just(CopyToDropped())


@_memo
def copy_to_results() -> S[CopyToResult]:
    return st.one_of(copy_to_row_counts(), copy_to_errors(), copy_to_droppeds())


@_memo
def copy_to_responses(ids: S[GlobalId] | None = None) -> S[CopyToResponse]:
    """Copy-to responses for `ids` (transient ids when `None`)."""
    return st.builds(CopyToResponse, transient_ids() if ids is None else ids, copy_to_results())


@_memo
def statuses() -> S[Status]:
    return st.builds(Status, st.text(max_size=20))


@_memo
def responses(ids: S[GlobalId] | None = None) -> S[ComputeResponse]:
    """Every `ComputeResponse` variant; with `ids`, every id a response names is drawn from
    it (by default subscribe and copy-to responses name transient ids)."""
    return cast(
        S[ComputeResponse],
        st.one_of(
            frontiers_responses(ids),
            peek_responses(),
            subscribe_responses(ids),
            copy_to_responses(ids),
            statuses(),
        ),
    )
