"""Strategies for the controller-to-replica commands (`protocol/commands.py`); `commands()` is
their union."""

from __future__ import annotations

from typing import cast

from hypothesis import strategies as st

from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    LoggingConfig,
    Peek,
    PeekTarget,
    Schedule,
    StorageTarget,
    UpdateConfiguration,
)
from twofold.testing.strategies._common import (
    INT64_MAX,
    INT64_MIN,
    S,
    _memo,
    _names,
    _small_lists,
)
from twofold.testing.strategies.dataflows import (
    dataflow_descriptions,
)
from twofold.testing.strategies.plans import (
    map_filter_projects,
    row_set_finishings,
)
from twofold.testing.strategies.values import (
    _ids,
    frontiers,
    introspection_ids,
    relation_descs,
    rows,
    timestamps,
)

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
