"""Introspection: replica metrics and the logging indexes named in `CreateInstance`.

`ReplicaMetrics` is shared by a replica's runtimes (thread-safe): peek latency and step duration
histograms per runtime, with power-of-two microsecond buckets. `Introspection` maintains one
arrangement per log variant the controller named in `LoggingConfig.index_logs`, updated every
`interval_ms` at wall-clock millisecond timestamps by retracting the previous contents and
inserting the new — so the logs are ordinary indexes: peekable, with frontiers, and published by
the maintenance runtime like any other index.

Variants (columns): `frontiers` (collection, write_frontier), `arrangement_sizes` (collection,
records, batches, bytes), `peek_durations` (runtime, le_us, count), `step_durations` (runtime,
le_us, count). An unknown variant is an empty `(key, value)` index, so its frontiers still advance.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from twofold.engine import Arrangement
from twofold.protocol import ColumnType, Frontier, GlobalId, LoggingConfig, RelationDesc

_STR, _INT = ColumnType("str", nullable=False), ColumnType("int", nullable=False)
VARIANTS: dict[str, RelationDesc] = {
    "frontiers": RelationDesc(["collection", "write_frontier"], [_STR, ColumnType("int")]),
    "arrangement_sizes": RelationDesc(["collection", "records", "batches", "bytes"],
                                      [_STR, _INT, _INT, _INT]),
    "peek_durations": RelationDesc(["runtime", "le_us", "count"], [_STR, _INT, _INT]),
    "step_durations": RelationDesc(["runtime", "le_us", "count"], [_STR, _INT, _INT]),
}
GENERIC = RelationDesc(["key", "value"], [_STR, _INT])


def bucket_us(seconds: float) -> int:
    """The power-of-two microsecond bucket (upper bound) of a duration."""
    us = max(1, int(seconds * 1e6))
    return 1 << (us - 1).bit_length()


_RECENT_MAX, _RECENT_KEEP = 4096, 2048
"""The recent samples kept per runtime: past `_RECENT_MAX`, the latest `_RECENT_KEEP`."""
_FOLD_AT = 256
"""Samples `record` leaves unfolded per runtime before it folds them itself."""


def _kept_after(n: int) -> int:
    """How many samples a recent list of `n` keeps when each one is appended in turn and the
    list is cut to its latest `_RECENT_KEEP` whenever it grows past `_RECENT_MAX`."""
    if n <= _RECENT_MAX:
        return n
    return _RECENT_KEEP + (n - _RECENT_MAX - 1) % (_RECENT_MAX - _RECENT_KEEP + 1)


class Histogram:
    """Counts per (runtime, bucket); thread-safe.

    `record` is on the read path (once per point lookup), so it only appends the sample to its
    runtime's pending list — no lock, no bucket, no counter: `list.append` is atomic under the
    interpreter lock. Every reader folds the pending samples into the counts first, under the
    lock (and `record` does once `_FOLD_AT` are pending, so they stay bounded), taking each
    list's first `n` with one slice and one `del` — both atomic, so a sample appended by
    another thread meanwhile stays for the next fold. What a reader sees is what recording
    each sample in turn would have left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, int]] = Counter()
        self._recent: dict[str, list[float]] = {}
        self._total: Counter[str] = Counter()  # samples ever recorded, per runtime
        self._pending: dict[str, list[float]] = {}  # recorded, not yet folded

    def record(self, runtime: str, seconds: float) -> None:
        pending = self._pending.get(runtime)
        if pending is None:
            with self._lock:
                pending = self._pending.setdefault(runtime, [])
        pending.append(seconds)
        if len(pending) >= _FOLD_AT:
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        """Fold the pending samples into counts, totals and recent lists (lock held)."""
        counts = self._counts
        for runtime, pending in self._pending.items():
            n = len(pending)
            if not n:
                continue
            samples = pending[:n]
            del pending[:n]
            # `bucket_us` per distinct whole microsecond (what it depends on), not per sample.
            for us, k in Counter([int(x * 1e6) for x in samples]).items():
                key = (runtime, 1 << (max(1, us) - 1).bit_length())
                counts[key] = counts.get(key, 0) + k
            self._total[runtime] += n
            recent = self._recent.get(runtime)
            if recent is None:
                recent = self._recent[runtime] = []
            recent.extend(samples)  # it held at most _RECENT_MAX: as if appended in turn
            cut = len(recent) - _kept_after(len(recent))
            if cut:
                del recent[:cut]

    def _keep(self, runtime: str, samples: list[float]) -> None:
        recent = self._recent.setdefault(runtime, [])
        recent.extend(samples)
        self._total[runtime] += len(samples)
        if len(recent) > _RECENT_MAX:
            del recent[: len(recent) - _RECENT_KEEP]

    def export(self, runtime: str, since: int) -> tuple[list[tuple[int, int]], list[float], int]:
        """One runtime's bucket counts, the samples recorded after the first `since` of them
        (as far as they are kept), and the new total — for another process's copy."""
        with self._lock:
            self._fold()
            counts = sorted((le, n) for (rt, le), n in self._counts.items() if rt == runtime)
            total = self._total[runtime]
            recent = self._recent.get(runtime, [])
            return counts, recent[max(0, len(recent) - (total - since)):], total

    def absorb(self, runtime: str, counts: list[tuple[int, int]], samples: list[float]) -> None:
        """Replace one runtime's counts by another process's (`export`), adding its samples."""
        with self._lock:
            self._fold()
            for key in [k for k in self._counts if k[0] == runtime]:
                del self._counts[key]
            for le, n in counts:
                self._counts[(runtime, le)] = n
            self._keep(runtime, samples)

    def counts(self) -> dict[tuple[str, int], int]:
        with self._lock:
            self._fold()
            return dict(self._counts)

    def recent(self, runtime: str) -> list[float]:
        """The latest samples (up to a few thousand) of one runtime, oldest first."""
        with self._lock:
            self._fold()
            return list(self._recent.get(runtime, []))


class ReplicaMetrics:
    """Metrics shared by a replica's runtimes."""

    def __init__(self) -> None:
        self.peek_durations = Histogram()
        self.step_durations = Histogram()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Introspection:
    """The logging indexes of one runtime. See the module docstring."""

    def __init__(self, config: LoggingConfig, metrics: ReplicaMetrics) -> None:
        self.interval = max(config.interval_ms, 1) / 1000.0
        self.metrics = metrics
        self.ids: dict[GlobalId, str] = {gid: name for name, gid in config.index_logs.items()}
        t0 = _now_ms()
        self._time = t0
        self.arrangements: dict[GlobalId, Arrangement] = {
            gid: Arrangement(VARIANTS.get(name, GENERIC), [0], since=Frontier.at(t0))
            for gid, name in self.ids.items()
        }
        self._contents: dict[GlobalId, Counter[tuple[Any, ...]]] = {
            gid: Counter() for gid in self.ids
        }
        self._next = 0.0
        for arr in self.arrangements.values():
            arr.advance_upper(Frontier.at(t0))

    def due(self) -> bool:
        return bool(self.ids) and time.perf_counter() >= self._next

    def wait_timeout(self) -> float | None:
        if not self.ids:
            return None
        return max(0.0, self._next - time.perf_counter())

    def update(self, frontiers: dict[GlobalId, Frontier],
               sizes: dict[GlobalId, tuple[int, int, int]]) -> list[GlobalId]:
        """Bring every log up to now; returns the ids whose arrangements advanced."""
        self._next = time.perf_counter() + self.interval
        t = max(_now_ms(), self._time + 1)
        self._time = t
        for gid, name in self.ids.items():
            rows: Counter[tuple[Any, ...]] = Counter()
            if name == "frontiers":
                for cid, f in frontiers.items():
                    rows[(str(cid), f.time)] += 1
            elif name == "arrangement_sizes":
                for cid, (records, batches, nbytes) in sizes.items():
                    rows[(str(cid), records, batches, nbytes)] += 1
            elif name in ("peek_durations", "step_durations"):
                hist = getattr(self.metrics, name)
                for (runtime, le), n in hist.counts().items():
                    rows[(runtime, le, n)] += 1
            old = self._contents[gid]
            delta = Counter(rows)
            delta.subtract(old)
            updates = [(list(r), t, d) for r, d in delta.items() if d != 0]
            arr = self.arrangements[gid]
            arr.insert(updates, Frontier.at(t + 1))
            self._contents[gid] = rows
        return list(self.ids)
