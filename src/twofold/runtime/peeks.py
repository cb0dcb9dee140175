"""Pending peeks: readiness, execution and the exactly-one-response rule.

A peek waits until its target can answer at its timestamp (`since <= t < upper`), then is
answered from an immutable snapshot on the calling runtime's thread. `PeekBook` holds the pending
peeks by uuid; a uuid leaves the book exactly once — answered, errored, or cancelled — which is
what makes "exactly one `PeekResponse` per `Peek`" hold under `CancelPeek` races.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

import polars as pl

from twofold.engine import Arrangement, ArrangementSnapshot, peek
from twofold.protocol import (
    Frontier,
    IndexTarget,
    Peek,
    PeekCanceled,
    PeekError,
    PeekResponse,
    StorageTarget,
)
from twofold.protocol.responses import engine_peek_rows
from twofold.runtime.sources import error_frame
from twofold.storage import Storage
from twofold.storage.view_errors import error_part

log = logging.getLogger(__name__)


class Waiting(Exception):
    """The peek's target cannot answer yet (not published, or upper not past the time)."""


@dataclass
class PendingPeek:
    peek: Peek
    received: float = field(default_factory=time.perf_counter)


def answer_from_snapshot(p: Peek, snap: ArrangementSnapshot, max_result_size: int | None,
                         since: Frontier | None = None) -> PeekResponse:
    """Answer `p` from `snap`, or raise `Waiting` if `snap` is not complete at its time.

    `since` is the compaction the runtime has applied from its command stream; it may run
    ahead of the snapshot's own `since` (compaction is lazy), and a peek before either fails.
    """
    t = p.timestamp
    effective = snap.since if since is None else snap.since.join(since)
    if not effective.contains(t):
        return PeekResponse(p.uuid, PeekError(
            f"peek at {t} on {p.target.id} is before its since {effective}"))
    if snap.upper.contains(t):
        raise Waiting
    rows = peek(snap, t, literal_constraints=p.literal_constraints, mfp=p.mfp,
                finishing=p.finishing, max_result_size=max_result_size)
    return PeekResponse(p.uuid, engine_peek_rows(rows))


def storage_snapshot(p: Peek, target: StorageTarget, storage: Storage) -> ArrangementSnapshot:
    """The shard behind a storage peek as a one-time snapshot, or raise `Waiting`."""
    shard = storage.shard(target.shard)
    errors = error_part(storage, target.shard)
    t = p.timestamp
    if shard.upper.contains(t) or (errors is not None and errors.upper.contains(t)):
        raise Waiting
    arr = Arrangement(shard.desc, [], since=Frontier.at(0))
    data = shard.snapshot(t)  # raises SinceViolation before since
    # A view's evaluation errors at t: the peek fails with them.
    errs = error_frame(errors.snapshot(t)) if errors is not None else None
    arr.insert(data, Frontier.at(t + 1), errors=errs)
    return arr.snapshot()


class PeekBook:
    """Pending peeks by uuid, indexed by target id for targeted re-checks."""

    def __init__(self) -> None:
        self._pending: dict[UUID, PendingPeek] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, uuid: UUID) -> bool:
        return uuid in self._pending

    def add(self, p: Peek) -> PeekResponse | None:
        if p.uuid in self._pending:
            # uuids are unique per iteration; a duplicate is a controller bug we answer loudly
            return PeekResponse(p.uuid, PeekError(f"duplicate peek uuid {p.uuid}"))
        self._pending[p.uuid] = PendingPeek(p)
        return None

    def cancel(self, uuid: UUID) -> PeekResponse | None:
        if self._pending.pop(uuid, None) is None:
            return None  # already answered: the answer was its one response
        return PeekResponse(uuid, PeekCanceled())

    def pending(self) -> list[PendingPeek]:
        return list(self._pending.values())

    def has_storage_peeks(self) -> bool:
        return any(isinstance(pp.peek.target, StorageTarget) for pp in self._pending.values())

    def clear(self) -> None:
        self._pending.clear()

    def try_answer(
        self, pp: PendingPeek, attempt: Callable[[Peek], PeekResponse],
        on_done: Callable[[PendingPeek, PeekResponse], None],
    ) -> PeekResponse | None:
        """Run `attempt`; on an answer (or error) remove the peek and return its response."""
        p = pp.peek
        try:
            response = attempt(p)
        except Waiting:
            return None
        except Exception as e:  # bad input must not crash the runtime; it answers the peek
            log.debug("peek %s failed", p.uuid, exc_info=True)
            message = str(e) or type(e).__name__
            if isinstance(e, pl.exceptions.PolarsError):
                message = f"peek could not be evaluated: {message}"
            response = PeekResponse(p.uuid, PeekError(message))
        if self._pending.pop(p.uuid, None) is None:
            return None
        on_done(pp, response)
        return response


def target_id(p: Peek) -> object:
    t = p.target
    return t.id if isinstance(t, IndexTarget | StorageTarget) else None
