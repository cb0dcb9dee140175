"""`twofold.testing.strategies`: every variant is generated, and generated values keep the
invariants the strategies promise (so later property tests can rely on them)."""

import math
from typing import Any, TypeVar, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import (
    FUNCTION_ARITY,
    MAX_TIME,
    Call,
    Column,
    ComputeCommand,
    ComputeResponse,
    CopyToResult,
    Expr,
    GlobalId,
    IdKind,
    Literal,
    PeekResult,
    Plan,
    RelationDesc,
    SinkConnection,
    SubscribeBatch,
    SubscribeEvent,
    plan_children,
)
from twofold.testing import strategies as s
from twofold.testing.profiles import examples

T = TypeVar("T")

# Coverage checks sample a fixed, derandomized set of examples (no shrinking, no flakiness):
# a sample of a stated size, not a search, so the hypothesis profile does not scale it.
SAMPLE = settings(max_examples=150, derandomize=True, database=None)


def sample(strategy: st.SearchStrategy[T], n: int = 150) -> list[T]:
    """A deterministic sample of `n` values from `strategy`."""
    out: list[T] = []

    @settings(SAMPLE, max_examples=n)
    @given(strategy)
    def collect(value: T) -> None:
        out.append(value)

    collect()
    return out


@pytest.mark.parametrize(
    ("strategy", "union"),
    [
        (s.commands(), ComputeCommand),
        (s.responses(), ComputeResponse),
        (s.plans(), Plan),
        (s.exprs(), Expr),
        (s.sink_connections(), SinkConnection),
        (s.peek_results(), PeekResult),
        (s.subscribe_events(), SubscribeEvent),
        (s.copy_to_results(), CopyToResult),
    ],
    ids=[
        "commands",
        "responses",
        "plans",
        "exprs",
        "sink_connections",
        "peek_results",
        "subscribe_events",
        "copy_to_results",
    ],
)
def test_every_variant_is_generated(strategy: st.SearchStrategy[Any], union: Any) -> None:
    # 300: with ~40 functions, 150 derandomized draws of `exprs` held no top-level Literal.
    assert {type(v) for v in sample(strategy, 300)} == set(get_args(union))


@pytest.mark.parametrize("kind", list(IdKind))
def test_every_id_kind_is_generated(kind: IdKind) -> None:
    assert any(g.kind is kind for g in sample(s.global_ids()))


def test_every_scalar_type_is_generated() -> None:
    seen = {type(v) for v in sample(s.scalars())}
    assert seen == {type(None), bool, int, float, str, bytes}


@given(s.scalars())
def test_floats_are_never_nan(v: object) -> None:
    assert not (isinstance(v, float) and math.isnan(v))


def _expr_depth(e: Expr) -> int:
    return 1 + max(map(_expr_depth, e.args)) if isinstance(e, Call) and e.args else 0


@given(s.exprs(max_depth=3, max_column=2))
def test_exprs_have_correct_arities_and_bounded_depth(e: Expr) -> None:
    assert _expr_depth(e) <= 3
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Call):
            arity = FUNCTION_ARITY[x.func]
            assert len(x.args) == arity if arity is not None else len(x.args) >= 1
            stack.extend(x.args)
        elif isinstance(x, Column):
            assert 0 <= x.index <= 2
        else:
            assert isinstance(x, Literal)


def _plan_depth(p: Plan) -> int:
    children = plan_children(p)
    return 1 + max(map(_plan_depth, children)) if children else 0


@given(s.plans(max_depth=2))
def test_plans_have_bounded_depth(p: Plan) -> None:
    assert _plan_depth(p) <= 2


def test_deep_plans_are_generated() -> None:
    assert max(map(_plan_depth, sample(s.plans(max_depth=3), 60))) == 3


@given(s.plans(ids=st.just(GlobalId.user(5))))
def test_plans_get_only_the_given_ids(p: Plan) -> None:
    from twofold.protocol import plan_gets

    assert plan_gets(p) <= {GlobalId.user(5)}


@given(s.relation_descs(min_arity=1, max_arity=3).flatmap(lambda d: st.tuples(st.just(d),
       s.rows(desc=d))))  # fmt: skip
def test_typed_rows_match_their_desc(case: tuple[RelationDesc, list[Any]]) -> None:
    desc, row = case
    py = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes}
    assert len(row) == desc.arity
    for v, ct in zip(row, desc.types, strict=True):
        assert (v is None and ct.nullable) or type(v) is py[ct.scalar]


@given(s.subscribe_batches())
def test_subscribe_batches_are_within_their_bounds(b: SubscribeBatch) -> None:
    assert b.lower <= b.upper
    assert (b.updates is None) != (b.error is None)
    for t, _, diff in b.updates or []:
        assert b.lower.contains(t) and not b.upper.contains(t) and diff != 0


@given(s.timestamps(5, 9))
def test_timestamps_respect_bounds(t: int) -> None:
    assert 5 <= t <= 9


def test_timestamps_reach_the_edges() -> None:
    assert MAX_TIME in sample(s.timestamps())
    assert any(f.is_empty for f in sample(s.frontiers()))


def test_dataflows_of_both_kinds_are_generated() -> None:
    dataflows = sample(s.dataflow_descriptions(), 100)
    assert any(d.is_peek_dataflow() for d in dataflows)
    assert any(not d.is_peek_dataflow() for d in dataflows)
    assert any(len(d.export_ids()) >= 3 for d in dataflows)
    assert any(d.subscribe_ids() and d.copy_to_ids() for d in dataflows)
    peeks = sample(s.peek_dataflows(), 60)
    assert any(d.as_of is not None and d.as_of.time == MAX_TIME for d in peeks)
    assert any(d.export_ids() for d in peeks)


SINGLE_CLASS = {
    "columns": "Column", "literals": "Literal", "calls": "Call", "gets": "Get",
    "constants": "Constant", "mfps": "Mfp", "joins": "Join", "reduces": "Reduce",
    "top_ks": "TopK", "union_alls": "UnionAll", "negates": "Negate", "thresholds": "Threshold",
    "distincts": "Distinct", "order_keys": "OrderKey", "aggregates": "Aggregate",
    "map_filter_projects": "MapFilterProject", "row_set_finishings": "RowSetFinishing",
    "column_types": "ColumnType", "relation_descs": "RelationDesc", "index_descs": "IndexDesc",
    "source_imports": "SourceImport", "index_imports": "IndexImport",
    "build_descs": "BuildDesc", "subscribe_sinks": "SubscribeSink",
    "materialized_view_sinks": "MaterializedViewSink", "copy_to_sinks": "CopyToSink",
    "sink_descs": "SinkDesc", "dataflow_descriptions": "DataflowDescription",
    "logging_configs": "LoggingConfig", "instance_configs": "InstanceConfig",
    "compute_parameters": "ComputeParameters", "hellos": "Hello",
    "create_instances": "CreateInstance", "initialization_completes": "InitializationComplete",
    "update_configurations": "UpdateConfiguration", "create_dataflows": "CreateDataflow",
    "schedules": "Schedule", "allow_writes": "AllowWrites",
    "allow_compactions": "AllowCompaction", "index_targets": "IndexTarget",
    "storage_targets": "StorageTarget", "peeks": "Peek", "cancel_peeks": "CancelPeek",
    "frontiers_responses": "Frontiers", "peek_rows": "PeekRows", "peek_errors": "PeekError",
    "peek_canceleds": "PeekCanceled", "peek_responses": "PeekResponse",
    "subscribe_batches": "SubscribeBatch", "subscribe_dropped_ats": "SubscribeDroppedAt",
    "subscribe_responses": "SubscribeResponse", "copy_to_row_counts": "CopyToRowCount",
    "copy_to_errors": "CopyToError", "copy_to_droppeds": "CopyToDropped",
    "copy_to_responses": "CopyToResponse", "statuses": "Status",
    "frontiers": "Frontier", "global_ids": "GlobalId",
}  # fmt: skip


@pytest.mark.parametrize(("name", "cls_name"), sorted(SINGLE_CLASS.items()))
def test_single_class_strategies(name: str, cls_name: str) -> None:
    import twofold.protocol as protocol

    cls = getattr(protocol, cls_name)
    values = sample(getattr(s, name)(), 10)
    assert values and all(type(v) is cls for v in values)


@pytest.mark.parametrize(
    ("factory", "kind"),
    [
        (s.system_ids, IdKind.SYSTEM),
        (s.introspection_ids, IdKind.INTROSPECTION),
        (s.user_ids, IdKind.USER),
        (s.transient_ids, IdKind.TRANSIENT),
    ],
)
def test_id_strategies_of_one_kind(factory: Any, kind: IdKind) -> None:
    assert {g.kind for g in sample(factory(), 20)} == {kind}
    assert all(not g.is_transient for g in sample(s.durable_ids(), 20))


POOL = [GlobalId.user(1), GlobalId.transient(2)]


def _named_ids(msg: Any) -> list[GlobalId]:
    from twofold.protocol import CreateDataflow, Peek

    if isinstance(msg, CreateDataflow):
        return msg.dataflow.export_ids()
    if isinstance(msg, Peek):
        return [msg.target.id]
    return [msg.id] if isinstance(getattr(msg, "id", None), GlobalId) else []


@settings(max_examples=examples(60))
@given(st.one_of(s.commands(st.sampled_from(POOL)), s.responses(st.sampled_from(POOL))))
def test_messages_name_only_ids_from_the_pool(msg: Any) -> None:
    assert set(_named_ids(msg)) <= set(POOL)
