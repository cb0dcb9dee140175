"""The compute controller: command history, collection frontiers and read holds, peeks,
subscribes and copy-tos, and the async `Controller` driving several replicas of one instance.

Decisions live in sans-IO state machines (`history`, `frontiers`, `holds`, `subscribes`,
`instance` over `responses` over `tracking`, with its values in `state`, `backoff`); asyncio
lives only in `replica` (one connection), `driver` (the replicas, availability), `controller`
(reads), `delivery` (waiting callers) and `subscription`. `availability` decides when to give
up on replicas; `dataflows` builds peek, subscribe and copy-to dataflows.
"""

from twofold.controller.backoff import Backoff
from twofold.controller.controller import Controller
from twofold.controller.dataflows import copy_to_dataflow, peek_dataflow, subscribe_dataflow
from twofold.controller.errors import (
    CollectionExists,
    CollectionFailed,
    ControllerClosed,
    ControllerError,
    CopyToFailed,
    HistoryError,
    InvalidDataflow,
    InvalidRead,
    PeekCancelled,
    PeekFailed,
    PeekTimeout,
    ReplicaUnavailable,
    SinceViolation,
    SubscribeBacklogExceeded,
    SubscribeFailed,
    UnknownCollection,
)
from twofold.controller.frontiers import CollectionFrontiers, Regression
from twofold.controller.history import CommandHistory
from twofold.controller.holds import (
    DEFAULT_READ_POLICY,
    LagWindow,
    NoCompaction,
    ReadHolds,
    ReadPolicy,
    WriteOnly,
)
from twofold.controller.instance import Effects, InstanceState
from twofold.controller.replica import ConnectFactory, ReplicaConnection
from twofold.controller.subscribes import SubscribeMerger
from twofold.controller.subscription import Subscription

__all__ = [
    "DEFAULT_READ_POLICY",
    "Backoff",
    "CollectionExists",
    "CollectionFailed",
    "CollectionFrontiers",
    "CommandHistory",
    "ConnectFactory",
    "Controller",
    "ControllerClosed",
    "ControllerError",
    "CopyToFailed",
    "Effects",
    "HistoryError",
    "InstanceState",
    "InvalidDataflow",
    "InvalidRead",
    "LagWindow",
    "NoCompaction",
    "PeekCancelled",
    "PeekFailed",
    "PeekTimeout",
    "ReadHolds",
    "ReadPolicy",
    "Regression",
    "ReplicaConnection",
    "ReplicaUnavailable",
    "SinceViolation",
    "SubscribeBacklogExceeded",
    "SubscribeFailed",
    "SubscribeMerger",
    "Subscription",
    "UnknownCollection",
    "WriteOnly",
    "copy_to_dataflow",
    "peek_dataflow",
    "subscribe_dataflow",
]
