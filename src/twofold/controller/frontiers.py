"""Per-collection frontier tracking across replicas.

Contract: for one collection, `CollectionFrontiers` keeps each replica's reported write, input
and output frontiers, and the collection's **global write frontier** — the maximum over
replicas' write frontiers, which is what readers may rely on (any replica that has sealed a time
has the definite contents up to it).

Invariants protected:
- a report that would move a (replica, kind) frontier backwards is a **regression**: it is
  logged and counted, and never applied — the frontier stays where it was;
- the global write frontier never regresses, whatever replicas report, including after a
  replica reconnects and restarts its per-replica frontiers from scratch.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import NamedTuple

from twofold.protocol import Frontier, GlobalId

log = logging.getLogger(__name__)

ReplicaId = int


class FrontierKind(enum.Enum):
    WRITE = "write"
    INPUT = "input"
    OUTPUT = "output"


class Regression(NamedTuple):
    """A rejected report: `new` is below the `old` frontier of `kind` on `replica`."""

    id: GlobalId
    replica: ReplicaId
    kind: FrontierKind
    old: Frontier
    new: Frontier


@dataclass
class ReplicaFrontiers:
    """What one replica has reported for one collection."""

    write: Frontier = field(default_factory=Frontier.minimum)
    input: Frontier = field(default_factory=Frontier.minimum)
    output: Frontier = field(default_factory=Frontier.minimum)

    def get(self, kind: FrontierKind) -> Frontier:
        return getattr(self, kind.value)  # type: ignore[no-any-return]

    def set(self, kind: FrontierKind, value: Frontier) -> None:
        setattr(self, kind.value, value)

    @property
    def all_empty(self) -> bool:
        return self.write.is_empty and self.input.is_empty and self.output.is_empty


class CollectionFrontiers:
    """Reported frontiers of one collection, per replica, and its global write frontier."""

    __slots__ = ("_replicas", "id", "regressions", "write_frontier")

    def __init__(self, id: GlobalId, initial: Frontier) -> None:
        self.id = id
        self.write_frontier = initial
        """Maximum over replicas of the reported write frontiers; starts at the `as_of`."""
        self._replicas: dict[ReplicaId, ReplicaFrontiers] = {}
        self.regressions: list[Regression] = []

    def add_replica(self, replica: ReplicaId, initial: Frontier | None = None) -> None:
        """Start (or restart, after a reconnect) tracking `replica` at `initial` (default: the
        minimum, so no early report of a freshly replayed replica looks like a regression)."""
        f = Frontier.minimum() if initial is None else initial
        self._replicas[replica] = ReplicaFrontiers(f, f, f)

    def remove_replica(self, replica: ReplicaId) -> None:
        self._replicas.pop(replica, None)

    def replica(self, replica: ReplicaId) -> ReplicaFrontiers | None:
        return self._replicas.get(replica)

    @property
    def replicas(self) -> list[ReplicaId]:
        return sorted(self._replicas)

    def all_replicas_empty(self) -> bool:
        """Every tracked replica has reported all three frontiers empty."""
        return all(r.all_empty for r in self._replicas.values())

    def observe(
        self,
        replica: ReplicaId,
        write: Frontier | None = None,
        input: Frontier | None = None,
        output: Frontier | None = None,
    ) -> Frontier | None:
        """Apply one report. Returns the new global write frontier if it advanced, else `None`.

        Unknown replicas are tracked from the minimum. Regressions are recorded and skipped.
        """
        state = self._replicas.get(replica)
        if state is None:
            state = self._replicas[replica] = ReplicaFrontiers()
        for kind, new in (
            (FrontierKind.INPUT, input),
            (FrontierKind.OUTPUT, output),
            (FrontierKind.WRITE, write),
        ):
            if new is None:
                continue
            old = state.get(kind)
            if new < old:
                reg = Regression(self.id, replica, kind, old, new)
                self.regressions.append(reg)
                log.warning(
                    "replica %s reported a %s frontier regression for %s: %r -> %r",
                    replica, kind.value, self.id, old, new,
                )  # fmt: skip
                continue
            state.set(kind, new)
        if self.write_frontier < state.write:
            self.write_frontier = state.write
            return state.write
        return None
