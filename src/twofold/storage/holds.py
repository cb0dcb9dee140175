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

Holding before choosing (`ControllerHolds.hold`): a new dataflow's `as_of` is chosen from its
source shards' sinces, but `step` reads the controller's needs (the live dataflows) at one
moment and moves the readers a little later, on the ticker's thread. A dataflow chosen at a
since in between would be missed by the step and its since passed before the dataflow is in the
history (its replica's source then fails with `SinceViolation`). So the caller first takes a
`SinceHold` on the shards — under the same lock that guards each reader's move, at each shard's
since as it is at that moment (the controller's own reader's since when it has one, which is
what the shard is held at) — chooses its `as_of` at or after those sinces, creates the
dataflow, and then releases the hold. A released hold keeps holding until the next `step` has
read the needs again (which then include the dataflow), so no step can use needs read before
the dataflow existed once the hold is gone. On memory and SQLite storage a hold only reports
the since (nothing but an explicit `downgrade_since` moves it there).

Fencing: the reader is `controller`, with a token fresh per `ControllerHolds`; registering takes
the hold over from any earlier controller, whose next move fails as fenced (it then stops moving
the hold, logging it once). A controller that stops leaves its hold where it was: history is kept
until a controller runs again, never released early.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
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


class SinceHold:
    """Shards held at their sinces as they were when the hold was taken (`since`), until
    `release` and the next `ControllerHolds.step` after it. A context manager: leaving it
    releases."""

    __slots__ = ("_owner", "released", "since")

    def __init__(self, owner: ControllerHolds, since: dict[str, Frontier]) -> None:
        self._owner = owner
        self.since = since
        """Per shard, the since it is held at: an `as_of` at or after it stays readable."""
        self.released = False

    def release(self) -> None:
        """Stop holding (idempotent); the next step still honours it once (module docstring)."""
        with self._owner._lock:
            self.released = True

    def __enter__(self) -> SinceHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


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
        self._lock = threading.Lock()
        """Guards `_holds` and each reader's move (the ticker's thread and the event loop's)."""
        self._holds: list[SinceHold] = []

    def hold(self, shards: Iterable[str]) -> SinceHold:
        """Hold `shards` where their sinces are now (see the module docstring); raises the
        storage's error (`UnknownShard`, ...) for a shard that cannot be read."""
        with self._lock:
            since: dict[str, Frontier] = {}
            for shard_id in shards:
                held = self.storage.shard(shard_id).since
                reader = self._readers.get(shard_id)
                if reader is not None and not self.fenced:
                    # The shard's since may be lower (a listener holds it), but that listener
                    # may go at any time: the controller's own reader is what holds it.
                    held = held.join(reader.since)
                since[shard_id] = held
            hold = SinceHold(self, since)
            self._holds.append(hold)
            return hold

    def _held(self, shard_id: str) -> Frontier | None:
        """The earliest since a live (or released, not yet stepped past) hold keeps on
        `shard_id`; call with `_lock` held."""
        out: Frontier | None = None
        for h in self._holds:
            f = h.since.get(shard_id)
            if f is not None:
                out = f if out is None else out.meet(f)
        return out

    def step(self) -> dict[str, Frontier]:
        """Move every hold once; returns the shards' sinces after it (of the shards held)."""
        if not self.enabled or self.fenced:
            return {}
        from twofold.storage.persist.readers import CriticalReader, ReaderFenced

        backend = self.storage.backend
        with self._lock:
            # Released holds go before the needs are read: their dataflows are in them.
            self._holds = [h for h in self._holds if not h.released]
        needs = dict(self.needs())
        shards = {s for s in self.storage.list_shards() if s.startswith(TABLE_PREFIX)}
        out: dict[str, Frontier] = {}
        for shard_id in sorted(shards):
            try:
                upper = backend.state(shard_id).upper
                with self._lock:  # a hold taken meanwhile is seen here, before the move
                    need = needs.get(shard_id)
                    held = self._held(shard_id)
                    if held is not None:
                        need = held if need is None else need.meet(held)
                    target = hold_target(upper, need, self.window)
                    if target is None:
                        continue
                    reader = self._readers.get(shard_id)
                    if reader is None:
                        # Registers at the shard's since if that is later: never below it.
                        reader = CriticalReader(backend, shard_id,  # type: ignore[arg-type]
                                                READER_ID, self.token, target)
                        self._readers[shard_id] = reader
                    moved = reader.since < target
                    if moved:
                        out[shard_id] = reader.compare_and_downgrade_since(
                            self.token, self.token, target)
                if moved:
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
