"""The controller's critical reader: how far each shard's `since` may advance.

`spec/controller.md`: dataflows hold their inputs at their `as_of` (a replica rebuilt by replay
reads each source shard from the dataflow's `as_of`, advanced to its exports' compaction
frontiers), and reads use recent times (by default the latest complete one). So the controller
needs, of each shard, the times from the earliest such `as_of` on, and from a window behind the
upper (its read policy's lag) on. `hold_target` is that decision, pure; `ControllerHolds` keeps
one critical reader per table shard at it, on backends whose readers drive since (PostgreSQL: see
`persist/state.py`), and compacts what it releases. Everything else still holding the shard —
listeners in any process, under leases — keeps since back too: since is the meet of them all.

On memory and SQLite storage nothing advances since but an explicit `downgrade_since`: their
listeners hold no leases, so compacting behind them could fail a listener in another process
(a replica) that lags. `ControllerHolds.step` does nothing there.

Fencing: the reader is `controller`, with a token fresh per `ControllerHolds`; registering takes
the hold over from any earlier controller, whose next move fails as fenced (it then stops moving
the hold, logging it once). A controller that stops leaves its hold where it was: history is kept
until a controller runs again, never released early.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twofold.protocol import Frontier
from twofold.storage.errors import StorageError, UnknownShard
from twofold.storage.table import TABLE_PREFIX

if TYPE_CHECKING:
    from twofold.storage.persist.readers import CriticalReader
    from twofold.storage.storage import Storage

_log = logging.getLogger(__name__)

READER_ID = "controller"


def hold_target(upper: Frontier, need: Frontier | None, window: int) -> Frontier | None:
    """Where the controller's hold on a shard may move: no later than `window` time units
    behind `upper` (its last complete time, for a closed shard) and no later than `need` (the
    earliest time a dataflow of the controller still reads; `None`: none does). `None` when
    no time is complete yet (nothing to release)."""
    last = upper.step_back()
    if last is None:
        return None
    target = Frontier.at(max(0, last - window))
    return target if need is None else target.meet(need)


class ControllerHolds:
    """The controller's critical reader on each table shard; `step()` moves each one to
    `hold_target` and compacts behind it (see the module docstring). Call it from one thread
    (the ticker's).

    Only tables: a materialized view's shard is written by the sinks of every replica, and a
    sink that falls behind (a replica restarting) corrects the shard by reading it from where
    it last wrote, however long ago; so view shards keep their history."""

    def __init__(self, storage: Storage, needs: Callable[[], Mapping[str, Frontier]], *,
                 window: int, every: float = 1.0) -> None:
        self.storage = storage
        self.needs = needs
        self.window = window
        self.every = every
        """Seconds between steps when run from a `Ticker`."""
        self.token = uuid.uuid4().hex
        self.fenced = False
        self._readers: dict[str, CriticalReader] = {}
        self.enabled = hasattr(storage.backend, "register_reader")

    def step(self) -> dict[str, Frontier]:
        """Move every hold once; returns the shards' sinces after it (of the shards held)."""
        if not self.enabled or self.fenced:
            return {}
        from twofold.storage.persist.readers import CriticalReader, ReaderFenced

        backend = self.storage.backend
        needs = dict(self.needs())
        shards = {s for s in self.storage.list_shards() if s.startswith(TABLE_PREFIX)}
        out: dict[str, Frontier] = {}
        for shard_id in sorted(shards):
            try:
                upper = backend.state(shard_id).upper
                target = hold_target(upper, needs.get(shard_id), self.window)
                if target is None:
                    continue
                reader = self._readers.get(shard_id)
                if reader is None:
                    # Registers at the shard's since if that is later: never below it.
                    reader = CriticalReader(backend, shard_id, READER_ID,  # type: ignore[arg-type]
                                            self.token, target)
                    self._readers[shard_id] = reader
                if reader.since < target:
                    out[shard_id] = reader.compare_and_downgrade_since(self.token, self.token,
                                                                       target)
                    self.storage.shard(shard_id).compact()
            except UnknownShard:
                self._readers.pop(shard_id, None)
            except ReaderFenced as e:
                self.fenced = True
                _log.warning("controller holds: another controller took over (%s); this one "
                             "no longer moves since", e)
                return out
            except StorageError as e:
                _log.warning("controller holds: shard %r: %s", shard_id, e)
        return out
