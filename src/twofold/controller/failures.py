"""Telling a dataflow failure that repeats from one that does not (sans-IO).

A runtime whose dataflow step raises an unexpected error fails, and its replica with it (shared
fate, `spec/runtime.md`); the connection's error names the dataflow (`DataflowFailure`). The
controller reconnects and replays, as for any failure: a transient fault heals. A dataflow that
fails again on the replay is **deterministic** — replaying it forever would keep the replica
down and every reader waiting — so `FailureTracker` reports it once it has ended `repeats`
(default 2) consecutive connections of **every** replica (while one replica still serves it,
reads are answered there and the failing one keeps being rebuilt). The driver then fails that
dataflow's collections, and everything computed from them, with `CollectionFailed` and drops
them; the rest of the instance keeps serving.

Contract: `replica_failed(replica, error, replicas)` is called for every ended connection; it
returns the failure when it is deterministic on all `replicas` (and forgets it, so a re-created
dataflow starts afresh).
Errors that name no dataflow (a reset, a refused connection) neither count nor reset the count.
`failed_closure(failure, dependencies)` is the collections to fail, each with its message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from twofold.controller.frontiers import ReplicaId
from twofold.protocol import GlobalId
from twofold.protocol.errors import DataflowFailure


class FailureTracker:
    """Counts consecutive failures of one dataflow per replica. See the module docstring."""

    def __init__(self, repeats: int = 2) -> None:
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        self.repeats = repeats
        self._last: dict[ReplicaId, tuple[tuple[GlobalId, ...], int]] = {}
        self._sure: dict[tuple[GlobalId, ...], set[ReplicaId]] = {}
        """Per dataflow, the replicas it failed on `repeats` times in a row."""

    def replica_failed(self, replica: ReplicaId, error: BaseException,
                       replicas: Collection[ReplicaId]) -> DataflowFailure | None:
        """`replica`'s connection ended with `error`; `replicas` are all the instance's."""
        failure = DataflowFailure.find(error)
        if failure is None:
            return None
        key = tuple(sorted(failure.exports))
        previous, count = self._last.get(replica, ((), 0))
        count = count + 1 if previous == key else 1
        self._last[replica] = (key, count)
        if count < self.repeats:
            return None
        sure = self._sure.setdefault(key, set())
        sure.add(replica)
        if not sure.issuperset(replicas):
            return None  # another replica may still serve it: keep replaying here
        del self._sure[key]
        for r, (k, _) in list(self._last.items()):
            if k == key:
                del self._last[r]
        return failure


def failed_closure(failure: DataflowFailure,
                   dependencies: Mapping[GlobalId, Iterable[GlobalId]]) -> dict[GlobalId, str]:
    """The failed dataflow's exports and, transitively, every collection computed from them
    (`dependencies`: each live collection's imports), each with the message its reads get."""
    reason = f"its dataflow {failure.name!r} failed: {failure.message}"
    failed = {id: reason for id in failure.exports if id in dependencies}
    root = ", ".join(str(i) for i in failure.exports)
    grew = True
    while grew:
        grew = False
        for id, deps in dependencies.items():
            if id not in failed and any(d in failed for d in deps):
                failed[id] = (f"it is computed from {root}, whose dataflow {failure.name!r} "
                              f"failed: {failure.message}")
                grew = True
    return failed
