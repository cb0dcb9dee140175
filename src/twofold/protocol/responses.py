"""Responses: replica → controller (`ComputeResponse`)."""

from __future__ import annotations

from uuid import UUID

from twofold.protocol.base import Row, Tagged, check_rows
from twofold.protocol.frontier import Frontier
from twofold.protocol.ids import GlobalId


class Frontiers(Tagged, frozen=True):
    """Frontier reports for one collection; `None` means unchanged."""

    id: GlobalId
    write_frontier: Frontier | None = None
    input_frontier: Frontier | None = None
    output_frontier: Frontier | None = None


class PeekRows(Tagged, frozen=True):
    rows: list[tuple[Row, int]]

    def __post_init__(self) -> None:
        check_rows((r for r, _ in self.rows), "PeekRows.rows")


class PeekError(Tagged, frozen=True):
    message: str


class PeekCanceled(Tagged, frozen=True):
    pass


PeekResult = PeekRows | PeekError | PeekCanceled


class PeekResponse(Tagged, frozen=True):
    uuid: UUID
    result: PeekResult


class SubscribeBatch(Tagged, frozen=True):
    """Updates `(time, row, diff)` within `[lower, upper)`, or an error."""

    lower: Frontier
    upper: Frontier
    updates: list[tuple[int, Row, int]] | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.updates is not None:
            check_rows((r for _, r, _ in self.updates), "SubscribeBatch.updates")


class SubscribeDroppedAt(Tagged, frozen=True):
    frontier: Frontier


SubscribeEvent = SubscribeBatch | SubscribeDroppedAt


class SubscribeResponse(Tagged, frozen=True):
    id: GlobalId
    event: SubscribeEvent


class CopyToRowCount(Tagged, frozen=True):
    count: int


class CopyToError(Tagged, frozen=True):
    message: str


class CopyToDropped(Tagged, frozen=True):
    pass


CopyToResult = CopyToRowCount | CopyToError | CopyToDropped


class CopyToResponse(Tagged, frozen=True):
    id: GlobalId
    result: CopyToResult


class Status(Tagged, frozen=True):
    """Introspection only; nothing may depend on it."""

    message: str


ComputeResponse = Frontiers | PeekResponse | SubscribeResponse | CopyToResponse | Status
