"""The twofold compute protocol: identity, time, relations, plans, dataflows, commands and
responses (`spec/protocol.md` §1-6). Every name here is public API.

All values are immutable (frozen `msgspec.Struct`s, or slotted classes for `GlobalId` and
`Frontier`), compare by value, and round-trip exactly through `twofold.protocol.codec`.
"""

from twofold.protocol.base import Row, Scalar
from twofold.protocol.commands import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    CreateDataflow,
    CreateInstance,
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
from twofold.protocol.dataflow import (
    BuildDesc,
    CopyToSink,
    DataflowDescription,
    IndexDesc,
    IndexImport,
    MaterializedViewSink,
    SinkConnection,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)
from twofold.protocol.errors import DecodeError, FrameTooLarge
from twofold.protocol.expr import FUNCTION_ARITY, Call, Column, Expr, Literal
from twofold.protocol.frontier import MAX_TIME, Frontier
from twofold.protocol.ids import GlobalId, IdKind
from twofold.protocol.plan import (
    Aggregate,
    Constant,
    Distinct,
    Get,
    Join,
    MapFilterProject,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    RowSetFinishing,
    Threshold,
    TopK,
    UnionAll,
    plan_children,
    plan_gets,
)
from twofold.protocol.relation import SCALAR_TYPES, ColumnType, RelationDesc, ScalarType
from twofold.protocol.responses import (
    ComputeResponse,
    CopyToDropped,
    CopyToError,
    CopyToResponse,
    CopyToResult,
    CopyToRowCount,
    Frontiers,
    PeekCanceled,
    PeekError,
    PeekResponse,
    PeekResult,
    PeekRows,
    Status,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeEvent,
    SubscribeResponse,
)

__all__ = [
    "FUNCTION_ARITY", "MAX_TIME", "SCALAR_TYPES",
    "Aggregate", "AllowCompaction", "AllowWrites", "BuildDesc", "Call", "CancelPeek", "Column",
    "ColumnType", "ComputeCommand", "ComputeParameters", "ComputeResponse", "Constant",
    "CopyToDropped", "CopyToError", "CopyToResponse", "CopyToResult", "CopyToRowCount",
    "CopyToSink", "CreateDataflow", "CreateInstance", "DataflowDescription", "DecodeError",
    "Distinct", "Expr", "FrameTooLarge", "Frontier", "Frontiers", "Get", "GlobalId", "Hello",
    "IdKind", "IndexDesc", "IndexImport", "IndexTarget", "InitializationComplete",
    "InstanceConfig", "Join", "Literal", "LoggingConfig", "MapFilterProject",
    "MaterializedViewSink", "Mfp", "Negate", "OrderKey", "Peek", "PeekCanceled", "PeekError",
    "PeekResponse", "PeekResult", "PeekRows", "PeekTarget", "Plan", "Reduce", "RelationDesc", "Row",
    "RowSetFinishing", "Scalar", "ScalarType", "Schedule", "SinkConnection", "SinkDesc",
    "SourceImport", "Status", "StorageTarget", "SubscribeBatch", "SubscribeDroppedAt",
    "SubscribeEvent", "SubscribeResponse", "SubscribeSink", "Threshold", "TopK", "UnionAll",
    "UpdateConfiguration", "plan_children", "plan_gets",
]  # fmt: skip
