"""Dataflow descriptions and the predicates the multiplexer and runtimes route by."""

from __future__ import annotations

from typing import Literal as TypeLiteral

import msgspec

from twofold.protocol.base import Tagged, Value
from twofold.protocol.frontier import MAX_TIME, Frontier
from twofold.protocol.ids import GlobalId
from twofold.protocol.plan import Plan
from twofold.protocol.relation import RelationDesc


class IndexDesc(Value, frozen=True):
    """An arrangement of collection `on_id` by the `key` columns."""

    on_id: GlobalId
    key: list[int]


class SourceImport(Value, frozen=True):
    """A durable storage collection, identified by its shard id."""

    shard: str
    desc: RelationDesc
    upper: Frontier = msgspec.field(default_factory=Frontier.minimum)


class IndexImport(Value, frozen=True):
    """An index created earlier on this replica."""

    desc: IndexDesc
    relation: RelationDesc


class BuildDesc(Value, frozen=True):
    """Build `plan` as collection `id`."""

    id: GlobalId
    plan: Plan


class SubscribeSink(Tagged, frozen=True):
    """Stream the collection's updates to the controller as `SubscribeResponse`s."""


class MaterializedViewSink(Tagged, frozen=True):
    """Write the collection into storage shard `shard` (only after `AllowWrites`)."""

    shard: str


class CopyToSink(Tagged, frozen=True):
    """Write the collection once to a file at `path`."""

    path: str
    format: TypeLiteral["parquet", "csv"] = "parquet"


SinkConnection = SubscribeSink | MaterializedViewSink | CopyToSink


class SinkDesc(Value, frozen=True):
    """A sink export reading collection `from_id`."""

    from_id: GlobalId
    from_desc: RelationDesc
    connection: SinkConnection
    with_snapshot: bool = True
    up_to: Frontier = msgspec.field(default_factory=Frontier.empty)


class DataflowDescription(Value, frozen=True):
    """A dataflow: what it imports, what it builds (in order) and what it exports."""

    debug_name: str
    source_imports: dict[GlobalId, SourceImport] = msgspec.field(default_factory=dict)
    index_imports: dict[GlobalId, IndexImport] = msgspec.field(default_factory=dict)
    objects_to_build: list[BuildDesc] = msgspec.field(default_factory=list)
    index_exports: dict[GlobalId, tuple[IndexDesc, RelationDesc]] = msgspec.field(
        default_factory=dict
    )
    sink_exports: dict[GlobalId, SinkDesc] = msgspec.field(default_factory=dict)
    as_of: Frontier | None = None
    until: Frontier = msgspec.field(default_factory=Frontier.empty)

    def __post_init__(self) -> None:
        exports = list(self.index_exports) + list(self.sink_exports)
        if len(set(exports)) != len(exports):
            raise ValueError(f"dataflow {self.debug_name!r} exports an id twice: {exports}")

    def export_ids(self) -> list[GlobalId]:
        """Index exports, then sink exports."""
        return [*self.index_exports, *self.sink_exports]

    def import_ids(self) -> list[GlobalId]:
        """Index imports, then source imports."""
        return [*self.index_imports, *self.source_imports]

    def _sink_ids(self, kind: type) -> list[GlobalId]:
        return [i for i, s in self.sink_exports.items() if isinstance(s.connection, kind)]

    def subscribe_ids(self) -> list[GlobalId]:
        return self._sink_ids(SubscribeSink)

    def copy_to_ids(self) -> list[GlobalId]:
        return self._sink_ids(CopyToSink)

    def persist_sink_ids(self) -> list[GlobalId]:
        return self._sink_ids(MaterializedViewSink)

    def is_transient(self) -> bool:
        """Every export id is transient (vacuously true with no exports)."""
        return all(i.is_transient for i in self.export_ids())

    def is_single_time(self) -> bool:
        """`as_of == at(t)` and `until == at(t + 1)`, or `as_of == at(MAX_TIME)` and `until`
        empty."""
        if self.as_of is None or self.as_of.is_empty:
            return False
        t = self.as_of.time
        assert t is not None
        if t == MAX_TIME:
            return self.until.is_empty
        return self.until == Frontier.at(t + 1)

    def is_peek_dataflow(self) -> bool:
        """Transient, single-time, and no subscribe or copy-to sink: interactive's work."""
        return (
            self.is_transient()
            and self.is_single_time()
            and not self.subscribe_ids()
            and not self.copy_to_ids()
        )
