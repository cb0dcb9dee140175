"""Merging one subscribe's batches from several replicas and connection epochs.

Contract: each source (a replica in one epoch) produces contiguous batches `[lower, upper)`; a
source that (re)starts may begin at or below what was already delivered. `SubscribeMerger`
turns the interleaving of all sources into one stream that is **contiguous, gap-free and
exactly-once**: every delivered batch starts at the previous delivered `upper`, and no update is
delivered twice.

How: the merger keeps the delivered `upper`. A batch ending at or before it is a duplicate and is
discarded; a batch straddling it is trimmed to `[upper, batch.upper)` (updates at times before
`upper` were already delivered); a batch starting beyond it would leave a gap, so it is refused
and counted (a correct source never does that — a replayed subscribe restarts at most one step
behind what was delivered). The first accepted batch defines the start. An error batch or
`DroppedAt` ends the stream exactly once; nothing follows the end.
"""

from __future__ import annotations

from twofold.protocol import Frontier, GlobalId, SubscribeBatch, SubscribeDroppedAt, SubscribeEvent


class SubscribeMerger:
    """Exactly-once, contiguous delivery for one subscribe. Sans-IO."""

    __slots__ = ("dropped_at", "duplicates", "error", "finished", "gaps", "id", "upper")

    def __init__(self, id: GlobalId) -> None:
        self.id = id
        self.upper: Frontier | None = None
        """The delivered upper; `None` before the first delivery."""
        self.finished = False
        self.error: str | None = None
        self.dropped_at: Frontier | None = None
        self.duplicates = 0
        self.gaps = 0

    def absorb(self, event: SubscribeEvent) -> SubscribeBatch | None:
        """The batch to deliver for `event`, if any. After the end, everything is ignored."""
        if self.finished:
            return None
        if isinstance(event, SubscribeDroppedAt):
            self.finished = True
            self.dropped_at = event.frontier
            return None
        upper = self.upper
        if upper is not None:
            if event.upper <= upper:
                self.duplicates += 1
                return None
            if upper < event.lower:
                self.gaps += 1
                return None
        lower = event.lower if upper is None else upper
        self.upper = event.upper
        if event.error is not None:
            self.finished = True
            self.error = event.error
            return SubscribeBatch(lower=lower, upper=event.upper, error=event.error)
        if event.upper.is_empty:
            self.finished = True
        updates = event.updates or []
        if lower != event.lower and updates:
            t = lower.time
            assert t is not None  # lower < event.upper, so it is not empty
            # Only when trimming an overlap: the common, contiguous case passes the list through.
            updates = [u for u in updates if u[0] >= t]
        return SubscribeBatch(lower=lower, upper=event.upper, updates=updates)
