"""Strategies for the replica-to-controller responses (`protocol/responses.py`); `responses()`
is their union."""

from __future__ import annotations

from typing import cast

from hypothesis import strategies as st

from twofold.protocol import (
    MAX_TIME,
    ComputeResponse,
    CopyToDropped,
    CopyToError,
    CopyToResponse,
    CopyToResult,
    CopyToRowCount,
    Frontier,
    Frontiers,
    GlobalId,
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
from twofold.testing.strategies._common import (
    S,
    _memo,
    _small_lists,
)
from twofold.testing.strategies.values import (
    _ids,
    diffs,
    frontiers,
    rows,
    timestamps,
    transient_ids,
    updates,
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
