"""Commands: controller → replica (`ComputeCommand`)."""

from __future__ import annotations

from uuid import UUID

import msgspec

from twofold.protocol.base import Row, Tagged, Value, check_rows
from twofold.protocol.dataflow import DataflowDescription
from twofold.protocol.frontier import Frontier
from twofold.protocol.ids import GlobalId
from twofold.protocol.plan import MapFilterProject, RowSetFinishing
from twofold.protocol.relation import RelationDesc

ConfigValue = bool | int | float | str


class LoggingConfig(Value, frozen=True):
    """Introspection settings; `index_logs` maps log variant names to the ids of the
    introspection indexes the replica creates by itself."""

    interval_ms: int = 1000
    enable_logging: bool = False
    index_logs: dict[str, GlobalId] = msgspec.field(default_factory=dict)


class InstanceConfig(Value, frozen=True):
    """`storage`: the storage URL for source shards and materialized views (`None`: the
    replica's own)."""

    storage: str | None = None
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    max_result_size: int | None = None


class ComputeParameters(Value, frozen=True):
    """Global configuration; `None` leaves a setting unchanged."""

    max_result_size: int | None = None
    dyncfg: dict[str, ConfigValue] = msgspec.field(default_factory=dict)


class IndexTarget(Tagged, frozen=True):
    """Peek an index maintained on the replica."""

    id: GlobalId


class StorageTarget(Tagged, frozen=True):
    """Peek a storage collection directly from its shard."""

    id: GlobalId
    shard: str


PeekTarget = IndexTarget | StorageTarget


class Hello(Tagged, frozen=True):
    """First command of every connection; starts a new protocol iteration."""

    nonce: UUID


class CreateInstance(Tagged, frozen=True):
    config: InstanceConfig = msgspec.field(default_factory=InstanceConfig)


class InitializationComplete(Tagged, frozen=True):
    """The controller has replayed the state it wants."""


class UpdateConfiguration(Tagged, frozen=True):
    params: ComputeParameters = msgspec.field(default_factory=ComputeParameters)


class CreateDataflow(Tagged, frozen=True):
    dataflow: DataflowDescription


class Schedule(Tagged, frozen=True):
    id: GlobalId


class AllowWrites(Tagged, frozen=True):
    id: GlobalId


class AllowCompaction(Tagged, frozen=True):
    """Readers no longer need times before `frontier`; `Frontier.empty()` drops `id`."""

    id: GlobalId
    frontier: Frontier


class Peek(Tagged, frozen=True):
    """Read `target` at `timestamp`; exactly one `PeekResponse` answers it."""

    uuid: UUID
    target: PeekTarget
    timestamp: int
    literal_constraints: list[Row] | None = None
    mfp: MapFilterProject = msgspec.field(default_factory=MapFilterProject)
    finishing: RowSetFinishing = msgspec.field(default_factory=RowSetFinishing)
    result_desc: RelationDesc | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.timestamp < 2**64:
            raise ValueError(f"Peek timestamp must lie in [0, 2**64), got {self.timestamp}")
        if self.literal_constraints is not None and not self.literal_constraints:
            raise ValueError("Peek literal_constraints must be None or non-empty")
        if self.literal_constraints is not None:
            check_rows(self.literal_constraints, "Peek.literal_constraints")


class CancelPeek(Tagged, frozen=True):
    uuid: UUID


ComputeCommand = (
    Hello
    | CreateInstance
    | InitializationComplete
    | UpdateConfiguration
    | CreateDataflow
    | Schedule
    | AllowWrites
    | AllowCompaction
    | Peek
    | CancelPeek
)
