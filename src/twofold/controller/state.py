"""What the instance core hands back, and what it keeps per collection and per peek.

`Effects` are the output of every `InstanceState` method: commands to broadcast to every replica
in order, and events for callers waiting on the async side. `CollectionState` is everything the
controller tracks about one collection; `PendingPeek` about one peek not yet finished.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from uuid import UUID

from twofold.controller.frontiers import CollectionFrontiers
from twofold.controller.holds import ReadHolds, ReadPolicy
from twofold.controller.subscribes import SubscribeMerger
from twofold.protocol import (
    ComputeCommand,
    CopyToResult,
    Frontier,
    GlobalId,
    PeekResult,
    SubscribeBatch,
)


class CollectionKind(enum.Enum):
    INDEX = "index"
    MATERIALIZED_VIEW = "materialized view"
    SUBSCRIBE = "subscribe"
    COPY_TO = "copy-to"
    INTROSPECTION = "introspection"


# Events for callers waiting on the async side.
@dataclass(frozen=True)
class PeekAnswered:
    uuid: UUID
    result: PeekResult


@dataclass(frozen=True)
class SubscribeDelivered:
    """`batch` to deliver (may be `None` when only the end is news); `ended` once at the end."""

    id: GlobalId
    batch: SubscribeBatch | None
    ended: bool
    error: str | None = None
    dropped_at: Frontier | None = None


@dataclass(frozen=True)
class CopyToDone:
    id: GlobalId
    result: CopyToResult


@dataclass(frozen=True)
class FrontierAdvanced:
    id: GlobalId
    frontier: Frontier


@dataclass(frozen=True)
class CollectionForgotten:
    """`id` was dropped and every replica reported it gone; nothing about it will change."""

    id: GlobalId


Event = PeekAnswered | SubscribeDelivered | CopyToDone | FrontierAdvanced | CollectionForgotten


@dataclass
class Effects:
    """What a state change asks of the world: commands for every replica (in order), events for
    callers."""

    commands: list[ComputeCommand] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(eq=False)
class CollectionState:
    """One collection the instance maintains (an export of a dataflow, or an introspection
    index)."""

    id: GlobalId
    kind: CollectionKind
    as_of: Frontier
    frontiers: CollectionFrontiers
    holds: ReadHolds
    policy: ReadPolicy
    implied: Frontier
    dependencies: list[GlobalId] = field(default_factory=list)
    input_holds: dict[GlobalId, Frontier] = field(default_factory=dict)
    scheduled: bool = False
    dropped: bool = False
    subscribe: SubscribeMerger | None = None
    copy_to_done: bool = False

    @property
    def since(self) -> Frontier:
        return self.holds.since

    @property
    def write_frontier(self) -> Frontier:
        return self.frontiers.write_frontier


@dataclass(frozen=True)
class PendingPeek:
    uuid: UUID
    target: GlobalId
    timestamp: int
    held: bool
    """Whether the peek holds a compute collection (storage peeks hold nothing here)."""
