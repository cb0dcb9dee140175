"""Responses: replica → controller (`ComputeResponse`)."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Final
from uuid import UUID

from msgspec.structs import force_setattr

from twofold.protocol.base import Row, Tagged, check_rows
from twofold.protocol.frontier import MAX_TIME, Frontier
from twofold.protocol.ids import GlobalId

# C-level accessors: validation must not run Python code per update.
_TIME = _FIRST = itemgetter(0)
_ROW = itemgetter(1)


class Frontiers(Tagged, frozen=True):
    """Frontier reports for one collection; `None` means unchanged."""

    id: GlobalId
    write_frontier: Frontier | None = None
    input_frontier: Frontier | None = None
    output_frontier: Frontier | None = None


class PeekRows(Tagged, frozen=True):
    rows: list[tuple[Row, int]]

    def __post_init__(self) -> None:
        check_rows(list(map(_FIRST, self.rows)), "PeekRows.rows")


_copy_no_rows: Final[Callable[[], PeekRows]] = PeekRows([]).__copy__  # type: ignore[attr-defined]


def engine_peek_rows(rows: list[tuple[Row, int]]) -> PeekRows:
    """`PeekRows(rows)` without `check_rows`, for rows the engine has just read out of its own
    columns (int64, float64, bool, str, bytes, or null: protocol scalars by construction), as
    a replica's peek answers are. Rows from anywhere else — decoded from the wire, built by a
    caller — go through `PeekRows(...)`, which checks them; decoding always does."""
    result: PeekRows = _copy_no_rows()  # a Struct's copy does not run `__post_init__`
    force_setattr(result, "rows", rows)
    return result


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
            check_rows(list(map(_ROW, self.updates)), "SubscribeBatch.updates")
            if self.updates:
                lo, hi = min(map(_TIME, self.updates)), max(map(_TIME, self.updates))
                if lo < 0 or hi > MAX_TIME:
                    bad = lo if lo < 0 else hi
                    raise ValueError(f"SubscribeBatch.updates: time {bad} is outside [0, 2**64)")


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
